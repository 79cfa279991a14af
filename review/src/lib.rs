//! The review stage's pure core: the review report (`review.yaml`), the evidence grammar
//! (`src:`, `cfg:`, `ckpt:`, `count:`) and its checker, and the work orders Agent Fix gets.
//!
//! A review agent reads a valid spec against the forward source and writes a report whose every
//! conclusion cites evidence. The agent can be confidently wrong (a window from the model card,
//! an MTP layer count the checkpoint does not have), so nothing it concludes is taken on its
//! word: each claim is checked against this job's config, tensor inventory and staged source,
//! and each conclusion sorted into verified, unverified or contradicted. Only verified defects
//! reach Agent Fix with their fix text.
//!
//! ```text
//! parse_report(file, text, &SpecNodes) ─► Report          (or located E0xx diagnostics)
//! check(&Report, &Facts)               ─► Checked         (every claim, every standing, PASS?)
//! work_orders(Some(&Checked), errors)  ─► Vec<WorkOrder>  (what the fix agent may act on)
//! ```
//!
//! Architecture invariant: no I/O. The report arrives as text, the truth as values, the spec's
//! node paths as a set.

mod check;
mod claim;
mod facts;
pub mod gap;
mod numbers;
mod orders;
mod report;
mod summary;

pub use check::{
    Checked, CheckedClaim, CheckedDefect, CheckedRow, DefectView, Judgement, RowView, Standing,
    Tally, check,
};
pub use claim::{
    ANY_INDEX, Claim, ConfigKey, EXAMPLES, GRAMMAR, GrammarError, KeyPart, MAX_SRC_LINES,
    parse_claim,
};
pub use facts::{ClaimCheck, Facts, SOURCE_DIRS, json_eq, normalize};
pub use numbers::{Num, numbers_in};
pub use orders::{WorkOrder, work_orders};
pub use report::{
    Decision, Defect, Evidence, GUARD, MAX_CLAIMS, MAX_ITEMS, MAX_REPORT_BYTES, Report, Row,
    SpecNodes, Status, code, parse_report,
};
pub use summary::{ReviewRound, ReviewSummary};

/// Parses and checks a report in one call: the stage's and `harch-worker evidence`'s entry
/// point. `Err` is a malformed report, to hand back to the agent like validate errors.
pub fn review(
    file: &str,
    text: &str,
    nodes: &SpecNodes,
    facts: &Facts<'_>,
) -> Result<Checked, Vec<harch_guards::Diagnostic>> {
    parse_report(file, text, nodes).map(|r| check(&r, facts))
}
