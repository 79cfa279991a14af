//! What a pipeline stage's work is: a step that writes its artifacts into a fresh directory and
//! says whether a failure is worth retrying. Which stages exist is [`harch_jobs::stage::Stage`];
//! which function runs each is [`StageRegistry::run`](super::registry::StageRegistry::run).

use std::path::{Path, PathBuf};

use harch_jobs::record::{AgentUsage, JobRecord};
use harch_jobs::stage::Stage;
use harch_jobs::store::JobStore;

/// Why a stage did not complete.
#[derive(Debug, Clone, PartialEq)]
pub enum StageError {
    /// May succeed later (network, HTTP 429/5xx, agent rate limit): retried with backoff.
    Transient(String),
    /// Will fail again (no such repo, gated without token, invalid input): fails the job at once.
    Permanent(String),
}

impl StageError {
    pub fn transient(msg: impl Into<String>) -> StageError {
        StageError::Transient(msg.into())
    }
    pub fn permanent(msg: impl Into<String>) -> StageError {
        StageError::Permanent(msg.into())
    }
}

impl std::fmt::Display for StageError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            StageError::Transient(m) => write!(f, "transient: {m}"),
            StageError::Permanent(m) => write!(f, "permanent: {m}"),
        }
    }
}

/// What a completed stage reports besides its files.
#[derive(Debug, Clone, Default)]
pub struct StageOutput {
    pub usage: AgentUsage,
    /// Shown by `status` and read by later stages and summaries (e.g. verify: valid, errors).
    pub summary: serde_json::Value,
}

impl StageOutput {
    /// A completed stage's output with its summary (one of [`crate::summary`]'s types).
    pub fn with_summary<T: serde::Serialize>(summary: &T) -> Result<StageOutput, StageError> {
        Ok(StageOutput {
            summary: to_json(summary)?,
            ..StageOutput::default()
        })
    }
}

/// A summary or a part of one as the JSON the job record keeps.
pub fn to_json<T: serde::Serialize>(summary: &T) -> Result<serde_json::Value, StageError> {
    serde_json::to_value(summary)
        .map_err(|e| StageError::permanent(format!("the stage's summary is not JSON: {e}")))
}

/// The fields of a summary part, to merge into the record's summary object.
pub fn fields_of<T: serde::Serialize>(part: &T) -> serde_json::Map<String, serde_json::Value> {
    match serde_json::to_value(part) {
        Ok(serde_json::Value::Object(m)) => m,
        _ => unreachable!("summary parts are structs, which serialize to objects"),
    }
}

/// Everything a stage may look at. A stage writes only under `out_dir`; the runner moves that
/// directory into place when the stage completes, so a rerun after a crash never sees (or
/// duplicates) a half-written result.
pub struct StageContext {
    /// The job as it stood when the stage started.
    pub job: JobRecord,
    pub job_dir: PathBuf,
    pub out_dir: PathBuf,
    /// 1 on the first attempt, counted across deliveries.
    pub attempt: u32,
    /// The job store: stages log to the job's event log and agent stages mirror their runs
    /// into its record as they go. The settings a stage reads come with its dispatch
    /// ([`StageRegistry::run`](super::registry::StageRegistry::run)), section by section.
    pub store: JobStore,
    /// Becomes true when the worker is asked to stop. Short stages may ignore it (the runner
    /// lets them finish); long ones (agent runs) stop at once and return an error, and the
    /// runner checkpoints the job instead of counting a failure.
    pub shutdown: tokio::sync::watch::Receiver<bool>,
}

impl StageContext {
    /// The committed artifacts of an earlier stage of this job.
    pub fn stage_dir(&self, stage: Stage) -> PathBuf {
        self.job_dir.join(stage.dir_name())
    }

    pub fn out(&self, file: &str) -> PathBuf {
        self.out_dir.join(file)
    }
}

/// Lists files under `dir`, relative to `base`, sorted.
pub fn list_files(dir: &Path, base: &Path) -> Vec<String> {
    fn walk(dir: &Path, base: &Path, out: &mut Vec<String>) {
        let Ok(entries) = std::fs::read_dir(dir) else {
            return;
        };
        for e in entries.filter_map(Result::ok) {
            let p = e.path();
            if p.is_dir() {
                walk(&p, base, out);
            } else if let Ok(rel) = p.strip_prefix(base) {
                out.push(rel.to_string_lossy().into_owned());
            }
        }
    }
    let mut out = Vec::new();
    walk(dir, base, &mut out);
    out.sort();
    out
}
