//! The verify stage: the worker runs the full validation itself (an agent's "done" proves
//! nothing) and keeps the report. An invalid spec is a result, not a stage failure: later
//! stages (fix, publish) and the re-validation summary read it.

use crate::stage::{StageContext, StageError, StageOutput};
use crate::summary::VerifySummary;
use harch_jobs::stage::Stage;
use harch_jobs::store::write_atomic;

/// Runs the verify stage.
pub async fn run(cx: &StageContext) -> Result<StageOutput, StageError> {
    let truth = cx.stage_dir(Stage::Fetch).join("truth");
    if !truth.is_dir() {
        return Err(StageError::permanent(format!(
            "verify needs the fetch stage's truth dir ({} is missing): select fetch before verify",
            truth.display()
        )));
    }
    let model = cx.job.request.model_id.clone();
    let tier = cx.job.request.guards.clone();
    // A spec the generate stage produced is checked again; otherwise the library's.
    let generated = cx.stage_dir(Stage::Generate).join("spec");
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
    let report = &outcome.report_json;
    let count = |p: &str| report.pointer(p).and_then(serde_json::Value::as_u64);
    StageOutput::with_summary(&VerifySummary {
        valid: outcome.valid,
        errors: outcome.errors as u64,
        warnings: outcome.warnings as u64,
        bytes_diff: bytes_diff(report),
        // What was checked, for the re-validation table.
        spec: outcome.spec.clone(),
        declared_gap: outcome.declared_gap.clone(),
        guards: report
            .get("guards")
            .and_then(|g| serde_json::from_value(g.clone()).ok()),
        matched_tensors: count("/summary/matched_tensors"),
        checkpoint_tensors: count("/summary/checkpoint_tensors"),
    })
}

/// The spec's total weight bytes minus the checkpoint's, when the report carries it.
fn bytes_diff(report: &serde_json::Value) -> Option<i64> {
    ["/summary/byte_diff", "/bytes_diff"]
        .iter()
        .find_map(|p| report.pointer(p).and_then(serde_json::Value::as_i64))
}
