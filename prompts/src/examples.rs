//! Verified examples for a prompt: the library model spec closest to the target, and one or two
//! of the components it uses.
//!
//! "Closest" is measured on the truth, not on names: how much of the target's tensor-name
//! vocabulary (`self_attn`, `kv_a_proj_with_mqa`, `experts`, …) the spec and its components
//! mention, plus how many of the config keys the spec binds exist in the target's config. A
//! spec of the same architecture family covers both; a MoE or MLA spec offered to a dense GQA
//! model binds keys the target does not have.

use std::collections::BTreeSet;

use harch_engine::Repo;
use harch_guards::truth::Truth;
use serde::Serialize;

#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Example {
    /// `model` or `component`.
    pub kind: &'static str,
    pub name: String,
    /// Path in the spec repository (`specs/models/llama.yaml`).
    pub file: String,
    pub text: String,
    /// Why it was chosen, for the prompt and the logs.
    pub why: String,
}

/// Components taken from the chosen model spec.
const COMPONENTS_PER_EXAMPLE: usize = 2;

/// The closest model spec in `repo` and up to two of its components; empty when the repo has no
/// model spec.
pub fn choose_examples(repo: &Repo, truth: &Truth) -> Vec<Example> {
    let target_vocab = tensor_vocabulary(truth);
    let config_keys = config_keys(&truth.config);
    let mut scored: Vec<(f64, String, String, Vec<String>, String)> = Vec::new();
    for name in repo.model_names() {
        let Some(file) = repo.model_file(name) else {
            continue;
        };
        let Some(text) = repo.files.get(file) else {
            continue;
        };
        let comps = components_used(repo, text);
        let mut vocab = identifiers(text);
        for c in &comps {
            if let Some(t) = component_text(repo, c) {
                vocab.extend(identifiers(t));
            }
        }
        let covered = target_vocab.intersection(&vocab).count();
        let tensor_cov = ratio(covered, target_vocab.len());
        let bound = bound_config_keys(text);
        let present = bound.iter().filter(|k| config_keys.contains(*k)).count();
        let config_fit = ratio(present, bound.len());
        let why = format!(
            "closest library spec to this checkpoint: mentions {covered} of {} tensor-name parts, binds {present} of {} config keys present here",
            target_vocab.len(),
            bound.len()
        );
        scored.push((
            tensor_cov + config_fit,
            name.to_string(),
            file.to_string(),
            comps,
            why,
        ));
    }
    scored.sort_by(|a, b| b.0.total_cmp(&a.0).then_with(|| a.1.cmp(&b.1)));
    let Some((_, name, file, comps, why)) = scored.into_iter().next() else {
        return Vec::new();
    };
    let mut out = vec![Example {
        kind: "model",
        text: repo.files.get(&file).cloned().unwrap_or_default(),
        name: name.clone(),
        file,
        why,
    }];
    let plain = comps.iter().filter(|c| {
        repo.component_def(c)
            .is_some_and(|(d, draft)| d.slots.is_empty() && !draft)
    });
    for c in plain.take(COMPONENTS_PER_EXAMPLE) {
        if let (Some(file), Some(text)) = (component_file(repo, c), component_text(repo, c)) {
            out.push(Example {
                kind: "component",
                name: c.clone(),
                file,
                text: text.to_string(),
                why: format!("used by the {name} example"),
            });
        }
    }
    out
}

fn ratio(a: usize, b: usize) -> f64 {
    if b == 0 { 0.0 } else { a as f64 / b as f64 }
}

/// Library components a spec text names, in order of first mention.
fn components_used(repo: &Repo, text: &str) -> Vec<String> {
    let names: BTreeSet<&str> = repo.component_names().into_iter().collect();
    let mut out: Vec<String> = Vec::new();
    for id in identifier_list(text) {
        if names.contains(id.as_str()) && !out.contains(&id) {
            out.push(id);
        }
    }
    out
}

fn component_file(repo: &Repo, name: &str) -> Option<String> {
    repo.files
        .iter()
        .find(|(path, text)| {
            path.contains("/components/")
                && text.lines().any(|l| {
                    l.strip_prefix("component:")
                        .is_some_and(|v| v.trim().trim_matches(['"', '\'']) == name)
                })
        })
        .map(|(p, _)| p.clone())
}

fn component_text<'a>(repo: &'a Repo, name: &str) -> Option<&'a str> {
    component_file(repo, name).and_then(|f| repo.files.get(&f).map(String::as_str))
}

/// Non-numeric dotted parts of the checkpoint's tensor names (`weight`, `bias` and `model`
/// say nothing about the architecture and are left out).
fn tensor_vocabulary(truth: &Truth) -> BTreeSet<String> {
    let mut out = BTreeSet::new();
    for t in truth.inventory.iter() {
        for part in t.name.split('.') {
            if part.is_empty()
                || part.chars().all(|c| c.is_ascii_digit())
                || matches!(part, "weight" | "bias" | "model")
            {
                continue;
            }
            out.insert(part.to_string());
        }
    }
    out
}

fn identifier_list(text: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut cur = String::new();
    for c in text.chars() {
        if c.is_ascii_alphanumeric() || c == '_' {
            cur.push(c);
        } else if !cur.is_empty() {
            out.push(std::mem::take(&mut cur));
        }
    }
    if !cur.is_empty() {
        out.push(cur);
    }
    out
}

fn identifiers(text: &str) -> BTreeSet<String> {
    identifier_list(text).into_iter().collect()
}

/// Config keys a spec binds: the first key after each `config.`.
fn bound_config_keys(text: &str) -> BTreeSet<String> {
    let mut out = BTreeSet::new();
    for (i, _) in text.match_indices("config.") {
        let before = text[..i].chars().next_back();
        if before.is_some_and(|c| c.is_ascii_alphanumeric() || c == '_') {
            continue;
        }
        let key: String = text[i + "config.".len()..]
            .chars()
            .take_while(|c| c.is_ascii_alphanumeric() || *c == '_')
            .collect();
        if !key.is_empty() {
            out.insert(key);
        }
    }
    out
}

/// Top-level config keys, and those of a nested `text_config`.
fn config_keys(config: &serde_json::Value) -> BTreeSet<String> {
    let mut out = BTreeSet::new();
    if let Some(o) = config.as_object() {
        out.extend(o.keys().cloned());
        if let Some(t) = o.get("text_config").and_then(|t| t.as_object()) {
            out.extend(t.keys().cloned());
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bound_keys_skip_longer_names() {
        let keys = bound_config_keys(
            "a: config.hidden_size\nb: \"text_config.x ?? config.rope_scaling.type\"",
        );
        assert_eq!(
            keys.into_iter().collect::<Vec<_>>(),
            vec!["hidden_size", "rope_scaling"]
        );
    }
}
