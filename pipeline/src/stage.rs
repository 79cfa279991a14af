//! What a pipeline stage is: a named step that writes its artifacts into a fresh directory and
//! says whether a failure is worth retrying.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use futures_util::future::BoxFuture;

use harch_jobs::config::Settings;
use harch_jobs::record::{AgentUsage, JobRecord};

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

/// Everything a stage may look at. A stage writes only under `out_dir`; the runner moves that
/// directory into place when the stage completes, so a rerun after a crash never sees (or
/// duplicates) a half-written result.
pub struct StageContext {
    /// The job as it stood when the stage started.
    pub job: JobRecord,
    pub job_dir: PathBuf,
    pub out_dir: PathBuf,
    /// The part after `:` in the stage name (`sleep:2000` → `2000`).
    pub arg: Option<String>,
    /// 1 on the first attempt, counted across deliveries.
    pub attempt: u32,
    pub settings: Arc<Settings>,
    /// Becomes true when the worker is asked to stop. Short stages may ignore it (the runner
    /// lets them finish); long ones (agent runs) stop at once and return an error, and the
    /// runner checkpoints the job instead of counting a failure.
    pub shutdown: tokio::sync::watch::Receiver<bool>,
}

impl StageContext {
    /// The committed artifacts of an earlier stage of this job.
    pub fn stage_dir(&self, stage: &str) -> PathBuf {
        self.job_dir.join(stage)
    }

    pub fn out(&self, file: &str) -> PathBuf {
        self.out_dir.join(file)
    }
}

/// A pipeline stage. Implementations are registered by name in a
/// [`StageRegistry`](super::registry::StageRegistry).
pub trait Stage: Send + Sync {
    /// Runs the stage once. Must be safe to run again after a crash: it starts from an empty
    /// `out_dir`, and any effect outside it must be idempotent (look before you create).
    fn run<'a>(&'a self, cx: &'a StageContext) -> BoxFuture<'a, Result<StageOutput, StageError>>;
}

/// Splits `name:arg` into its parts.
pub fn split_stage_name(spec: &str) -> (&str, Option<&str>) {
    match spec.split_once(':') {
        Some((name, arg)) => (name, Some(arg)),
        None => (spec, None),
    }
}

/// The directory a stage's artifacts live in once committed (`sleep:20` → `sleep-20`).
pub fn stage_dir_name(spec: &str) -> String {
    spec.replace([':', '/'], "-")
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
