//! Ground truth about a checkpoint, and the guards that check a spec against it.
//!
//! This crate does no I/O: truth arrives as bytes and values (the worker reads files and
//! the network), and [`validate`] returns structured errors with stable codes, locations and
//! hints. `validate` is the only gate to publication.
//!
//! ```text
//! validate(repo, model, truth, guards) = load once → evaluate once → every enabled guard
//! ```

pub mod axiom;
pub mod config_spelling;
pub mod config_view;
pub mod conversion;
#[cfg(test)]
mod pinned;
pub mod pysrc;
pub mod quant_config;
pub mod report;
pub mod schedule;
pub mod semantic;
pub mod source;
pub mod structural;
pub mod tiers;
pub mod truth;
pub mod warnings;
pub mod weight;
pub mod window_anchor;

use harch_engine::{Analysis, EvalOptions, Repo, evaluate};

pub use report::{Diagnostic, Report, Summary};
pub use tiers::GuardSet;
use truth::Truth;

/// Load the spec, evaluate it once against the truth's config, and run the enabled guards.
/// Returns the analysis too when the spec loaded, so callers never evaluate twice.
pub fn validate(
    repo: &Repo,
    model: &str,
    truth: &Truth,
    guards: &GuardSet,
) -> (Report, Option<Analysis>) {
    // Every guard and the evaluation read config as transformers does: an `attribute_map`
    // alias of the configuration class reads its target, and a behaviour key config.json
    // leaves out reads the class's default.
    let aliased;
    let mapped = config_spelling::effective_config(
        &truth.config,
        &config_spelling::attribute_map(&truth.sources),
    );
    let defaulted = config_spelling::with_class_defaults(
        mapped.as_ref().unwrap_or(&truth.config),
        &truth.sources,
    );
    let truth = match defaulted.or(mapped) {
        Some(config) => {
            aliased = Truth {
                config,
                ..truth.clone()
            };
            &aliased
        }
        None => truth,
    };
    let mut report = Report {
        guards: guards.names().to_vec(),
        truth: truth.model_id.as_ref().map(|id| match &truth.revision {
            Some(rev) => format!("{id}@{rev}"),
            None => id.clone(),
        }),
        ..Default::default()
    };
    // The load-time renames, compiled once for the guards that look modules up by them.
    let renames = conversion::Renames::of(&truth.sources);
    let mut clock = std::time::Instant::now();
    let ir = match repo.load_model(model) {
        Ok(ir) => {
            report.spec = Some(ir.file.clone());
            ir
        }
        Err(errs) => {
            report.errors = errs
                .iter()
                .map(|e| Diagnostic::from_spec_error("load", e))
                .collect();
            // Nothing ran: every guard asked for waits for a spec that loads.
            report.not_run = std::mem::take(&mut report.guards);
            report.stopped_at = Some("load");
            return (report.finish(), None);
        }
    };
    report.lap("load", &mut clock);
    let a = evaluate(&ir, &truth.config, EvalOptions::default());
    // The guards hold the text model to its settings wherever a composite config nests them.
    let text_config = config_view::text(&truth.config);
    report.lap("evaluate", &mut clock);
    let mut complete = true;
    for e in &a.errors {
        let guard = if e.code.starts_with('S') {
            "shape"
        } else {
            "analysis"
        };
        complete = false;
        if guards.has(guard) {
            report.errors.push(Diagnostic::from_spec_error(guard, e));
        }
    }
    let overrides: Vec<(String, harch_engine::diag::Location)> = ir
        .quant
        .overrides
        .iter()
        .map(|o| (o.leaf.clone(), o.loc.clone()))
        .collect();
    // Guards that compare an evaluation with the truth wait for a complete evaluation, so that
    // one shape error does not read as a thousand missing tensors.
    if complete {
        let w = weight::check(&a, truth, &ir.schemes, &overrides);
        report.summary = w.summary;
        report.lap("weight+packing", &mut clock);
        if guards.has("weight") {
            report.errors.extend(w.weight);
        }
        if guards.has("packing") {
            report.errors.extend(w.packing);
            report
                .errors
                .extend(quant_config::check(&ir, &a, &text_config));
        }
        if guards.has("schedule") {
            report
                .errors
                .extend(schedule::check(&ir, &a, &text_config, &repo.config_keys));
            report.lap("schedule", &mut clock);
        }
        // A cache window the source keeps otherwise than its attention attends, anchored once
        // for the three guards that compare the two (X002, M053, R005).
        let (anchored, anchor_faults) = window_anchor::read(&a, &truth.sources, &text_config);
        if guards.has("structural") {
            report
                .errors
                .extend(structural::check(&ir, &a, &text_config, &anchored));
            report.lap("structural", &mut clock);
        }
        if guards.has("axiom") {
            report.errors.extend(axiom::check(&a, &anchored));
            report.lap("axiom", &mut clock);
        }
        if guards.has("semantic") {
            report.errors.extend(semantic::check(
                &ir,
                &a,
                truth,
                &repo.config_keys,
                &anchored,
                &renames,
            ));
            report.errors.extend(anchor_faults);
            report.lap("semantic", &mut clock);
        }
        report
            .warnings
            .extend(warnings::check(repo, &ir, &a, &text_config));
        report.lap("warnings", &mut clock);
    } else {
        let skipped: Vec<&str> = [
            "weight",
            "packing",
            "schedule",
            "structural",
            "axiom",
            "semantic",
        ]
        .into_iter()
        .filter(|g| guards.has(g))
        .collect();
        report.guards.retain(|g| !skipped.contains(g));
        report.stopped_at = Some("evaluation");
        if !skipped.is_empty() {
            report.not_run = skipped.clone();
            report.warnings.push(Diagnostic::new(
                "warning",
                "V000",
                format!(
                    "evaluation incomplete: {} not run until the errors above are fixed",
                    skipped.join(", ")
                ),
                Default::default(),
            ));
        }
    }
    if guards.has("source") {
        let checked = source::check(&ir, &truth.sources, &renames);
        report.errors.extend(checked.errors);
        report.unverified = checked.unverified;
        report.lap("source", &mut clock);
    }
    (report.finish(), Some(a))
}
