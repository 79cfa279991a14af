//! The review and fix prompts. Review asks for a report whose every conclusion cites checkable
//! evidence (the grammar the review crate checks); fix gets only work orders derived from
//! verified defects and fresh validation errors, never a review's unchecked suggestions.

use harch_guards::truth::Truth;
use serde::Serialize;

use crate::errors::PriorErrors;
use crate::render::{Prompt, PromptError, render};
use crate::truth_text::{DEFAULT_SOURCE_BUDGET, SourceFile, truth_text};

pub struct ReviewInput<'a> {
    pub model_id: &'a str,
    pub spec_path: &'a str,
    pub spec_text: &'a str,
    /// Draft components the spec lists: (name, text).
    pub drafts: &'a [(String, String)],
    pub truth: &'a Truth,
    /// Where the agent writes its report, relative to the workspace.
    pub report_path: &'a str,
}

pub struct FixInput<'a> {
    pub model_id: &'a str,
    pub spec_path: &'a str,
    pub spec_text: &'a str,
    /// One line each, as the review crate words them.
    pub work_orders: &'a [String],
    /// A fresh validation's errors, when the spec does not validate.
    pub errors: Option<&'a PriorErrors>,
    pub truth: &'a Truth,
}

pub fn render_review(input: &ReviewInput<'_>) -> Result<Prompt, PromptError> {
    let truth = truth_text(input.truth, DEFAULT_SOURCE_BUDGET);
    let drafts: Vec<SourceFile> = input
        .drafts
        .iter()
        .map(|(n, t)| SourceFile {
            name: n.clone(),
            text: t.clone(),
        })
        .collect();
    let fragments = vec![
        ("spec".to_string(), input.spec_text.len()),
        ("tensor ranges".to_string(), truth.tensors.len()),
        (
            "forward source".to_string(),
            truth.sources.iter().map(|s| s.text.len()).sum(),
        ),
    ];
    #[derive(Serialize)]
    struct Ctx<'a> {
        model_id: &'a str,
        spec_path: &'a str,
        spec_text: &'a str,
        drafts: Vec<SourceFile>,
        report_path: &'a str,
        truth: crate::TruthText,
    }
    render(
        "review",
        Ctx {
            model_id: input.model_id,
            spec_path: input.spec_path,
            spec_text: input.spec_text,
            drafts,
            report_path: input.report_path,
            truth,
        },
        fragments,
    )
}

pub fn render_fix(input: &FixInput<'_>) -> Result<Prompt, PromptError> {
    // The fix agent reads the source in the workspace: the prompt stays small.
    let truth = truth_text(input.truth, 0);
    let ops = harch_engine::ops::registry_text();
    let source_names = truth.sources_not_inlined.clone();
    let fragments = vec![
        ("spec".to_string(), input.spec_text.len()),
        ("op registry".to_string(), ops.len()),
        ("tensor ranges".to_string(), truth.tensors.len()),
    ];
    #[derive(Serialize)]
    struct Ctx<'a> {
        model_id: &'a str,
        spec_path: &'a str,
        spec_text: &'a str,
        work_orders: &'a [String],
        errors: Option<&'a PriorErrors>,
        ops: String,
        truth: crate::TruthText,
        source_names: Vec<String>,
    }
    render(
        "fix",
        Ctx {
            model_id: input.model_id,
            spec_path: input.spec_path,
            spec_text: input.spec_text,
            work_orders: input.work_orders,
            errors: input.errors,
            ops,
            truth,
            source_names,
        },
        fragments,
    )
}
