//! The fetch stage: writes the model's truth dir (config, tensor inventory, forward source) into
//! `fetch/truth/` of the job dir, from the Hub or, offline, from the bundled snapshots. The
//! fetcher sorts its errors into transient and permanent; the stage passes that on.

use futures_util::future::BoxFuture;

use crate::stage::{Stage, StageContext, StageError, StageOutput};
use harch_hub::{FetchOptions, fetch_truth};

pub struct FetchStage;

impl Stage for FetchStage {
    fn run<'a>(&'a self, cx: &'a StageContext) -> BoxFuture<'a, Result<StageOutput, StageError>> {
        Box::pin(async move {
            let req = &cx.job.request;
            let mut opts = FetchOptions::from_env(&req.model_id, cx.out("truth"));
            opts.revision = req.revision.clone();
            opts.offline |= req.offline;
            // Retries happen in one place, the runner (with queue.toml's backoff): the fetcher
            // gives up at the first transient error instead of retrying inside each of the
            // runner's attempts (5 × 5 waits on a DNS failure).
            opts.retry.max_retries = 0;
            match fetch_truth(&opts).await {
                Ok(report) => Ok(StageOutput {
                    summary: serde_json::json!({
                        "origin": report.origin,
                        "revision": report.revision,
                        "shards": report.shards,
                        "tensors": report.tensors,
                        "total_bytes": report.total_bytes,
                        "requests": report.requests,
                        "retries": report.retries,
                        "warnings": report.warnings,
                        "timings": report.timings,
                    }),
                    ..StageOutput::default()
                }),
                Err(e) if e.is_transient() => Err(StageError::transient(e.to_string())),
                Err(e) => Err(StageError::permanent(e.to_string())),
            }
        })
    }
}
