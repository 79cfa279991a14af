//! The verify stage: the worker runs the full validation itself (an agent's "done" proves
//! nothing) and keeps the report. An invalid spec is a result, not a stage failure: later
//! stages (fix, publish) and the re-validation summary read it.

use futures_util::future::BoxFuture;

use crate::stage::{Stage, StageContext, StageError, StageOutput};
use harch_jobs::store::write_atomic;

pub struct VerifyStage;

impl Stage for VerifyStage {
    fn run<'a>(&'a self, cx: &'a StageContext) -> BoxFuture<'a, Result<StageOutput, StageError>> {
        Box::pin(async move {
            let truth = cx.stage_dir("fetch").join("truth");
            if !truth.is_dir() {
                return Err(StageError::permanent(format!(
                    "verify needs the fetch stage's truth dir ({} is missing): select fetch before verify",
                    truth.display()
                )));
            }
            let model = cx.job.request.model_id.clone();
            let tier = cx.job.request.guards.clone();
            // A spec the generate stage produced is checked again; otherwise the library's.
            let generated = cx.stage_dir("generate").join("spec");
            // Validation is CPU work: keep it off the async threads that drive the queue.
            let outcome = tokio::task::spawn_blocking(move || {
                if generated.join("models").is_dir() {
                    return harch_library::candidate::verify_generated(&generated, &truth, &tier);
                }
                harch_library::verify::validate_truth_dir(&model, &truth, &tier)
            })
            .await
            .map_err(|e| StageError::permanent(format!("validation crashed: {e}")))?
            .map_err(|e| StageError::permanent(format!("{e:#}")))?;
            let report = serde_json::to_vec_pretty(&outcome.report_json)
                .map_err(|e| StageError::permanent(format!("report is not JSON: {e}")))?;
            write_atomic(&cx.out("report.json"), &report)
                .map_err(|e| StageError::transient(format!("{e:#}")))?;
            Ok(StageOutput {
                summary: serde_json::json!({
                    "valid": outcome.valid,
                    "errors": outcome.errors,
                    "warnings": outcome.warnings,
                    "bytes_diff": bytes_diff(&outcome.report_json),
                    // What was checked, for the re-validation table.
                    "spec": outcome.spec,
                    "declared_gap": outcome.declared_gap,
                    "guards": outcome.report_json.get("guards"),
                    "matched_tensors": outcome.report_json.pointer("/summary/matched_tensors"),
                    "checkpoint_tensors": outcome.report_json.pointer("/summary/checkpoint_tensors"),
                }),
                ..StageOutput::default()
            })
        })
    }
}

/// The spec's total weight bytes minus the checkpoint's, when the report carries it.
fn bytes_diff(report: &serde_json::Value) -> serde_json::Value {
    ["/summary/byte_diff", "/bytes_diff"]
        .iter()
        .find_map(|p| report.pointer(p).filter(|v| v.is_number()).cloned())
        .unwrap_or(serde_json::Value::Null)
}
