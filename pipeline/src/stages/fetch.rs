//! The fetch stage: writes the model's truth dir (config, tensor inventory, forward source) into
//! `fetch/truth/` of the job dir, from the Hub or, offline, from the bundled snapshots. The
//! fetcher sorts its errors into transient and permanent; the stage passes that on.

use crate::stage::{StageContext, StageError, StageOutput};
use crate::summary::FetchSummary;
use harch_hub::{FetchOptions, fetch_truth};

/// Runs the fetch stage.
pub async fn run(cx: &StageContext) -> Result<StageOutput, StageError> {
    let req = &cx.job.request;
    let mut opts = FetchOptions::from_env(&req.model_id, cx.out("truth"));
    opts.revision = req.revision.clone();
    opts.offline |= req.offline;
    // Retries happen in one place, the runner (with queue.toml's backoff): the fetcher
    // gives up at the first transient error instead of retrying inside each of the
    // runner's attempts (5 × 5 waits on a DNS failure).
    opts.retry.max_retries = 0;
    match fetch_truth(&opts).await {
        Ok(report) => StageOutput::with_summary(&FetchSummary::of(&report)),
        Err(e) if e.is_transient() => Err(StageError::transient(e.to_string())),
        Err(e) => Err(StageError::permanent(e.to_string())),
    }
}
