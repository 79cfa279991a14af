//! Non-blocking diagnostics: feedback for the agent that does not gate publication.

use harch_engine::ir::ModelIr;
use harch_engine::{Analysis, Repo};

use crate::report::Diagnostic;

pub mod code {
    pub const ACTIVATION: &str = "V001";
    pub const MODEL_CARD_PARAMS: &str = "V002";
    pub const DUPLICATE_DRAFT: &str = "V003";
}

/// Activation names that realize a config `hidden_act`.
fn realizations(act: &str) -> &'static [&'static str] {
    match act {
        "silu" | "swish" => &["silu", "clamped_swiglu"],
        "gelu" | "gelu_new" | "gelu_pytorch_tanh" | "gelu_fast" => &["gelu"],
        "relu" => &["relu"],
        _ => &[],
    }
}

fn graph_signature(def: &harch_engine::schema::ComponentDef) -> Vec<String> {
    let mut sig: Vec<String> = def
        .graph
        .iter()
        .map(|(id, n)| {
            let n = &n.value;
            let kind =
                n.op.clone()
                    .or_else(|| n.component.clone())
                    .or_else(|| n.slot.clone())
                    .unwrap_or_default();
            let args: Vec<String> = n
                .args
                .iter()
                .map(|(k, v)| format!("{k}={}", v.as_expr_text()))
                .collect();
            format!("{id}:{kind}({})", args.join(","))
        })
        .collect();
    sig.sort();
    sig
}

pub fn check(
    repo: &Repo,
    ir: &ModelIr,
    a: &Analysis,
    config: &serde_json::Value,
) -> Vec<Diagnostic> {
    let mut out = Vec::new();
    let file = harch_engine::diag::Location::in_file(&ir.file);
    if let Some(act) = config.get("hidden_act").and_then(|v| v.as_str()) {
        let want = realizations(act);
        let used: Vec<String> = a
            .nodes
            .iter()
            .filter_map(|n| match n.op.as_str() {
                "silu" | "gelu" | "relu" => Some(n.op.clone()),
                "glu" => n.args.get("act").map(|v| v.text.clone()),
                _ => None,
            })
            .collect();
        if !want.is_empty() && !used.iter().any(|u| want.contains(&u.as_str())) {
            out.push(
                Diagnostic::new(
                    "warning",
                    code::ACTIVATION,
                    format!(
                        "config hidden_act is `{act}` but the spec uses {}",
                        if used.is_empty() {
                            "no activation".to_string()
                        } else {
                            used.join(", ")
                        }
                    ),
                    file.clone(),
                )
                .hint("the MLP's activation op should realize config.hidden_act"),
            );
        }
    }
    if let Some(card) = ir.model_card.as_ref().and_then(|c| c.params_total) {
        let ours = a.params_total().v as f64;
        if card > 0.0 && ((ours - card) / card).abs() > 0.02 {
            out.push(Diagnostic::new("warning", code::MODEL_CARD_PARAMS, format!("the spec counts {ours:.0} parameters but the model card says {card:.0} ({:+.1}%)", (ours - card) / card * 100.0), file.clone()));
        }
    }
    for d in &ir.drafts {
        let Some((draft, _)) = repo.component_def(d) else {
            continue;
        };
        let sig = graph_signature(draft);
        for name in repo.component_names() {
            if let Some((lib, false)) = repo.component_def(name)
                && graph_signature(lib) == sig
            {
                out.push(
                    Diagnostic::new(
                        "warning",
                        code::DUPLICATE_DRAFT,
                        format!("draft `{d}` has the same graph as library component `{name}`"),
                        harch_engine::diag::Location::in_file(&ir.file),
                    )
                    .hint(format!("use `{name}` instead of a draft")),
                );
            }
        }
    }
    out
}
