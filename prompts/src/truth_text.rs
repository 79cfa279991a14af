//! This model's truth as prompt text: config.json, the forward source, and the tensor list
//! compressed into ranges (DeepSeek-V3's 91,991 tensors are a few dozen lines).

use harch_guards::truth::{Truth, ranges};
use serde::Serialize;

/// Forward source beyond this many bytes stays in the workspace (the prompt names the files);
/// the largest real modeling files are ~100 KB.
pub const DEFAULT_SOURCE_BUDGET: usize = 240 * 1024;

#[derive(Clone, Debug, Default, PartialEq, Serialize)]
pub struct SourceFile {
    pub name: String,
    pub text: String,
}

#[derive(Clone, Debug, Default, PartialEq, Serialize)]
pub struct TruthText {
    pub config: String,
    /// Source files inlined, modeling files first.
    pub sources: Vec<SourceFile>,
    /// Source files left out of the prompt for size; the agent reads them in `truth/source/`.
    pub sources_not_inlined: Vec<String>,
    /// `ranges::compress` lines.
    pub tensors: String,
    pub tensor_count: usize,
    pub total_bytes: String,
}

/// Renders `truth`, inlining source files in order (modeling, configuration, others; then by
/// name) while they fit in `source_budget` bytes.
pub fn truth_text(truth: &Truth, source_budget: usize) -> TruthText {
    let config = serde_json::to_string_pretty(&truth.config).unwrap_or_else(|_| "{}".into());
    let mut names: Vec<&String> = truth.sources.keys().collect();
    names.sort_by_key(|n| {
        let rank = if n.starts_with("modeling_") {
            0
        } else if n.starts_with("configuration_") {
            1
        } else {
            2
        };
        (rank, n.as_str())
    });
    let mut used = 0usize;
    let mut sources = Vec::new();
    let mut left = Vec::new();
    for name in names {
        let text = &truth.sources[name];
        if used + text.len() <= source_budget {
            used += text.len();
            sources.push(SourceFile {
                name: name.clone(),
                text: text.clone(),
            });
        } else {
            left.push(name.clone());
        }
    }
    TruthText {
        config,
        sources,
        sources_not_inlined: left,
        tensors: ranges::compress(truth.inventory.iter()),
        tensor_count: truth.inventory.len(),
        total_bytes: truth.inventory.total_bytes().to_string(),
    }
}
