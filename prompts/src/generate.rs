//! The generate prompt: everything an agent needs to write a model's spec in one go, and, on a
//! retry, the errors the worker's validation found in the previous attempt.

use harch_engine::Repo;
use harch_guards::truth::Truth;
use serde::Serialize;

use crate::errors::PriorErrors;
use crate::examples::{Example, choose_examples};
use crate::manifest::{component_manifest, manifest_text};
use crate::render::{Prompt, PromptError, render};
use crate::truth_text::{DEFAULT_SOURCE_BUDGET, TruthText, truth_text};

pub struct GenerateInput<'a> {
    pub model_id: &'a str,
    pub truth: &'a Truth,
    /// The spec library as the agent sees it (the target's own spec removed when asked).
    pub repo: &'a Repo,
    /// Where the spec goes, relative to the workspace (`specs/models/llama.yaml`).
    pub spec_path: &'a str,
    /// The previous attempt's rejection, on a retry.
    pub previous: Option<&'a PriorErrors>,
    /// Operator notes appended verbatim.
    pub notes: Option<&'a str>,
    /// Bytes of forward source inlined; the rest is named and left in the workspace.
    pub source_budget: usize,
}

impl<'a> GenerateInput<'a> {
    pub fn new(model_id: &'a str, truth: &'a Truth, repo: &'a Repo, spec_path: &'a str) -> Self {
        GenerateInput {
            model_id,
            truth,
            repo,
            spec_path,
            previous: None,
            notes: None,
            source_budget: DEFAULT_SOURCE_BUDGET,
        }
    }
}

#[derive(Serialize)]
struct Context<'a> {
    model_id: &'a str,
    spec_path: &'a str,
    previous: Option<&'a PriorErrors>,
    notes: Option<&'a str>,
    examples: &'a [Example],
    manifest: &'a str,
    ops: &'a str,
    dsl: &'a str,
    truth: &'a TruthText,
}

pub fn render_generate(input: &GenerateInput<'_>) -> Result<Prompt, PromptError> {
    let examples = choose_examples(input.repo, input.truth);
    let manifest = manifest_text(&component_manifest(input.repo));
    let ops = harch_engine::ops::registry_text();
    let truth = truth_text(input.truth, input.source_budget);
    let mut fragments = vec![
        (
            "examples".to_string(),
            examples.iter().map(|e| e.text.len()).sum(),
        ),
        ("component manifest".to_string(), manifest.len()),
        ("op registry".to_string(), ops.len()),
        ("dsl reference".to_string(), crate::DSL_REFERENCE.len()),
        ("config".to_string(), truth.config.len()),
        ("tensor ranges".to_string(), truth.tensors.len()),
        (
            "forward source".to_string(),
            truth.sources.iter().map(|s| s.text.len()).sum(),
        ),
    ];
    if let Some(p) = input.previous {
        fragments.push((
            "previous errors".to_string(),
            p.lines.iter().map(String::len).sum(),
        ));
    }
    render(
        "generate",
        Context {
            model_id: input.model_id,
            spec_path: input.spec_path,
            previous: input.previous,
            notes: input.notes,
            examples: &examples,
            manifest: &manifest,
            ops: &ops,
            dsl: crate::DSL_REFERENCE,
            truth: &truth,
        },
        fragments,
    )
}
