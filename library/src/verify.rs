//! Full validation of a library spec against a truth directory: what the verify stage and the
//! re-validation job run. The worker never takes an agent's word for it.

use std::path::Path;

use anyhow::{Context, bail};
use harch_guards::GuardSet;

use crate::{specs, subject};
use harch_truth::{source, truth_dir};

/// The result of validating one model's spec against its truth.
#[derive(Debug, Clone)]
pub struct VerifyOutcome {
    /// The model spec checked (its `model:` name, or the generated file).
    pub spec: String,
    pub valid: bool,
    pub errors: usize,
    pub warnings: usize,
    pub report_json: serde_json::Value,
    /// A valid spec's declared gap, as one line (what it leaves unverified).
    pub declared_gap: Option<String>,
}

impl VerifyOutcome {
    pub fn of(
        spec: String,
        report: &harch_guards::Report,
        gap: Option<&harch_review::gap::Gap>,
    ) -> anyhow::Result<VerifyOutcome> {
        let mut report_json = serde_json::to_value(report)?;
        report_json["declared_gap"] = serde_json::to_value(gap)?;
        Ok(VerifyOutcome {
            spec,
            valid: report.valid,
            errors: report.errors.len(),
            warnings: report.warnings.len(),
            report_json,
            declared_gap: gap.filter(|_| report.valid).map(crate::declared_gap::line),
        })
    }
}

/// A guard selection as jobs carry it: a tier (`all`, `3`, `packing`) or a list of guards.
pub fn guard_set(tier: &str) -> anyhow::Result<GuardSet> {
    let t = if tier.is_empty() { "all" } else { tier };
    GuardSet::tier(t)
        .or_else(|_| GuardSet::list(t))
        .map_err(|e| anyhow::anyhow!(e))
}

/// Validates the library spec serving `model_id`'s architecture against the truth in
/// `truth_dir` with guard `tier`.
pub fn validate_truth_dir(
    model_id: &str,
    truth_dir: &Path,
    tier: &str,
) -> anyhow::Result<VerifyOutcome> {
    let mut truth = truth_dir::load_truth_dir(truth_dir)
        .with_context(|| format!("reading the truth of {model_id}"))?;
    if truth.sources.is_empty()
        && let Some(set) = source::resolve_native(&truth.config)
    {
        truth.sources = set.files;
    }
    let repo = specs::read_repo(&specs::root(), &[])?;
    let Some(model) = subject::library_model(&repo, &truth.config).map(str::to_string) else {
        bail!(
            "no library spec serves the architectures {:?} of {model_id}",
            subject::architectures(&truth.config)
        );
    };
    let (mut report, _) = harch_guards::validate(&repo, &model, &truth, &guard_set(tier)?);
    let gap = crate::declared_gap::validate_with_gap(&repo, &model, &truth, &mut report);
    VerifyOutcome::of(model, &report, gap.as_ref())
}
