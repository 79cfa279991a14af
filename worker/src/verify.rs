//! LEAD'S FILE (placeholder written by the queue work, issue 5): the lead replaces this body with
//! the real full validation of a library spec against a truth dir. Only the signature is fixed;
//! the verify stage (`pipeline/stages/verify.rs`) calls it.

use std::path::Path;

/// The result of validating one model's spec against its truth.
#[derive(Debug, Clone)]
pub struct VerifyOutcome {
    pub valid: bool,
    pub errors: usize,
    pub warnings: usize,
    pub report_json: serde_json::Value,
}

/// Validates the library spec of `model_id` against the truth in `truth_dir` with guard `tier`.
pub fn validate_truth_dir(
    model_id: &str,
    truth_dir: &Path,
    tier: &str,
) -> anyhow::Result<VerifyOutcome> {
    let _ = (model_id, truth_dir, tier);
    Err(anyhow::anyhow!("validate is not available yet"))
}
