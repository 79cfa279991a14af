//! The stage registry as the queue drives it ([`Pipeline`]): a request is checked against the
//! stages, guards and agent backend it names, and a delivery runs through [`run_job`].

use anyhow::Context;

use super::registry::StageRegistry;
use super::runner::{WorkerState, run_job};
use harch_jobs::config::PipelineSettings;
use harch_jobs::record::JobRequest;
use harch_queue::pipeline::{Delivery, Pipeline, Run};

impl Pipeline for StageRegistry {
    fn check(&self, settings: &PipelineSettings, r: &JobRequest) -> anyhow::Result<()> {
        self.check_selection(&r.stages)
            .with_context(|| format!("{}: bad --stages", r.model_id))?;
        harch_library::verify::guard_set(&r.guards)
            .with_context(|| format!("{}: bad --guards `{}`", r.model_id, r.guards))?;
        crate::preflight::check_backend(&settings.agent, r)
    }

    fn run<'a>(&'a self, d: &'a Delivery, id: &'a str) -> Run<'a> {
        Box::pin(async move {
            let state = WorkerState {
                settings: d.settings.clone(),
                store: d.store.clone(),
                registry: self.clone(),
                worker_name: d.worker_name.clone(),
                shutdown: d.shutdown.clone(),
            };
            run_job(&state, id).await
        })
    }
}
