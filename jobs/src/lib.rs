//! What a job is, on disk: settings (`config`: `queue.toml`, `HARCH_*` overrides, flags), model
//! id checks (`model_id`), job records (`record`: `job.json`) and the job store (`store`:
//! records replaced atomically under a per-job lock, the dedupe index, the event log), plus the
//! small text formatting commands and stages share (`text`).
//!
//! No queue backend, no network, no stage: the queue runtime and the pipeline build on this.

pub mod attempt;
pub mod config;
pub mod model_id;
pub mod record;
pub mod stage;
pub mod store;
pub mod summary;
pub mod text;
