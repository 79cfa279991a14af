//! Guard-tier ablations ([docs/ablation.md](../../../docs/ablation.md)): one generate job per
//! (model, tier, seed) in a decontaminated workspace whose `validate` runs only the tier's
//! guards; each run's record (`run.rs`, `ablation.json`), written by the generate stage with
//! the full validate of what the agent left; the plan of an experiment and its resumption
//! (`plan.rs`); and the report over the records (`report.rs`: CSV, Markdown, SVG).

pub mod decontaminate;
pub mod experiment;
pub mod plan;
pub mod report;
pub mod run;

pub use run::RunRecord;
