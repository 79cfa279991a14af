//! What the queue runs, seen from the queue: a [`Pipeline`] checks a request before it is
//! queued and runs one delivery of a job. The queue knows nothing else about stages; the
//! pipeline crate implements this for its stage registry.

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;

use tokio::sync::watch;

use harch_jobs::config::PipelineSettings;
use harch_jobs::record::{JobRequest, JobState};
use harch_jobs::store::JobStore;

/// How a delivery ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RunOutcome {
    /// The job reached a final state in this delivery.
    Finished(JobState),
    /// Nothing to do: the job is final already, or another live worker runs it.
    Skipped(&'static str),
    /// The worker is stopping; the job is pending again and resumes on its next delivery.
    Checkpointed,
}

/// What a worker hands the pipeline with each delivery.
#[derive(Clone)]
pub struct Delivery {
    /// The pipeline's sections of the settings ([`harch_jobs::config::Settings::pipeline`]).
    pub settings: Arc<PipelineSettings>,
    pub store: JobStore,
    pub worker_name: String,
    /// Becomes true when the worker is asked to stop.
    pub shutdown: watch::Receiver<bool>,
}

pub type Run<'a> = Pin<Box<dyn Future<Output = anyhow::Result<RunOutcome>> + Send + 'a>>;

/// The pipeline as the queue drives it.
pub trait Pipeline: Send + Sync + 'static {
    /// Refuses a request this pipeline could not run (its stages, guards, agent backend), before
    /// anything is queued.
    fn check(&self, settings: &PipelineSettings, request: &JobRequest) -> anyhow::Result<()>;
    /// Runs one delivery of job `id`: at least once per job, so it must be idempotent.
    fn run<'a>(&'a self, delivery: &'a Delivery, id: &'a str) -> Run<'a>;
}
