//! The publish stage: proposes the job's verified spec to the spec repository as a pull request
//! (`harch_publish`), or, without `[publish] repo`, writes the bundle, commit message and body
//! into `publish/` as a dry run. The token is read here, in the worker, from the variable
//! `publish.token_env` names; agents never run in this stage and the sandbox refuses that
//! variable by name.

use futures_util::future::BoxFuture;

use crate::stage::{Stage, StageContext, StageError, StageOutput};
use harch_jobs::store::JobStore;
use harch_publish::{PublishError, PublishRequest, config, publish};

pub struct PublishStage;

impl Stage for PublishStage {
    fn run<'a>(&'a self, cx: &'a StageContext) -> BoxFuture<'a, Result<StageOutput, StageError>> {
        Box::pin(async move {
            let settings = &cx.settings.publish;
            let env = |k: &str| std::env::var(k).ok();
            let target =
                config::resolve(settings, cx.settings.data_dir(), env).map_err(stage_error)?;
            let report = publish(PublishRequest {
                job: cx.job.clone(),
                job_dir: cx.job_dir.clone(),
                out_dir: cx.out_dir.clone(),
                spec_root: harch_library::specs::root(),
                settings: settings.clone(),
                target,
            })
            .await
            .map_err(stage_error)?;
            if let Ok(store) = JobStore::open(cx.settings.data_dir()) {
                for wait in &report.rate_limit_waits {
                    store.log(&cx.job.id, &format!("publish: {wait}")).ok();
                }
                store.log(&cx.job.id, &report.message).ok();
            }
            tracing::info!(message = %report.message, "publish");
            let summary = serde_json::to_value(&report)
                .map_err(|e| StageError::permanent(format!("publish report: {e}")))?;
            Ok(StageOutput {
                summary,
                ..StageOutput::default()
            })
        })
    }
}

fn stage_error(e: PublishError) -> StageError {
    match e {
        PublishError::Transient(m) => StageError::transient(m),
        PublishError::Permanent(m) => StageError::permanent(m),
    }
}
