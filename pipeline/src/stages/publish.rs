//! The publish stage: proposes the job's verified spec to the spec repository as a pull request
//! (`harch_publish`), or, without `[publish] repo`, writes the bundle, commit message and body
//! into `publish/` as a dry run. The token is read here, in the worker, from the variable
//! `publish.token_env` names; agents never run in this stage and the sandbox refuses that
//! variable by name.

use crate::stage::{StageContext, StageError, StageOutput};
use harch_jobs::config::PublishSettings;
use harch_jobs::stage::Stage;
use harch_publish::{PublishError, PublishRequest, config, publish};

/// Runs the publish stage with `[publish]` (its default clone is under the data dir).
pub async fn run(cx: &StageContext, settings: &PublishSettings) -> Result<StageOutput, StageError> {
    let env = |k: &str| std::env::var(k).ok();
    let target = config::resolve(settings, cx.store.root(), env).map_err(stage_error)?;
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
    for wait in &report.rate_limit_waits {
        let line = format!("{}: {wait}", Stage::Publish);
        cx.store.log(&cx.job.id, &line).ok();
    }
    cx.store.log(&cx.job.id, &report.message).ok();
    tracing::info!(message = %report.message, "{}", Stage::Publish);
    StageOutput::with_summary(&report)
}

fn stage_error(e: PublishError) -> StageError {
    match e {
        PublishError::Transient(m) => StageError::transient(m),
        PublishError::Permanent(m) => StageError::permanent(m),
    }
}
