//! Selections (code M009): a sparse attention attends the positions its indexer selects, so the
//! number selected is a number config fixes (`index_topk`, or top-k blocks times the block
//! size), and a selection must cap an attention, or the count it stands for is not charged.
//!
//! What a `topk_select` selects is its bound `k` times `block`; config states it as the quantity
//! `selected_positions` of specs/arch/config_keys.yaml (every spelling, nested keys dotted).

use harch_engine::Analysis;
use harch_engine::load::ConfigKeys;

use crate::report::Diagnostic;
use crate::truth::Truth;

pub mod code {
    /// A selection selects another number of positions than config states, or caps no
    /// attention.
    pub const SELECTION: &str = "M009";
}

pub fn check(a: &Analysis, truth: &Truth, keys: &ConfigKeys) -> Vec<Diagnostic> {
    let mut out = Vec::new();
    // A composite checkpoint states its text model's selection under `text_config`.
    let config = crate::config_view::text(&truth.config);
    let stated = keys.stated("selected_positions", &config);
    let want: Option<i128> = stated.as_ref().and_then(|s| s.count());
    for (r, n) in a.nodes.iter().enumerate() {
        if n.op != "topk_select" {
            continue;
        }
        let arg = |k: &str| n.args.get(k).and_then(|v| v.int);
        let (Some(k), block) = (arg("k"), arg("block").unwrap_or(1)) else {
            continue;
        };
        let got = k.saturating_mul(block);
        match (&stated, want) {
            (Some(s), Some(w)) if w != got => out.push(
                Diagnostic::new(
                    "semantic",
                    code::SELECTION,
                    format!(
                        "{}: selects {got} positions (k = {k}, block = {block}), but config states {w}: {}",
                        n.id,
                        s.describe()
                    ),
                    n.loc.clone(),
                )
                .hint("bind k (and block) to the config keys the indexer reads, unchanged"),
            ),
            (None, _) => out.push(
                Diagnostic::new(
                    "semantic",
                    code::SELECTION,
                    format!(
                        "{}: selects {got} positions, but config states no selection size (`index_topk`, or top-k blocks and a block size)",
                        n.id
                    ),
                    n.loc.clone(),
                )
                .hint("a selection's size comes from config; a model without one attends every position"),
            ),
            _ => {}
        }
        if let Some(limit) = config
            .get("max_position_embeddings")
            .and_then(|v| v.as_i64())
            .map(i128::from)
            .filter(|&m| got > m)
        {
            out.push(
                Diagnostic::new(
                    "semantic",
                    code::SELECTION,
                    format!(
                        "{}: selects {got} positions, more than the model's context ({limit}, `max_position_embeddings`)",
                        n.id
                    ),
                    n.loc.clone(),
                )
                .hint("a selection larger than any context selects everything: check k and block"),
            );
        }
        // The selection must be what an attention attends: the third input of attention_score.
        let caps = a
            .nodes
            .iter()
            .any(|m| m.op == "attention_score" && m.inputs.get(2).is_some_and(|i| i.contains(&r)));
        if !caps {
            out.push(
                Diagnostic::new(
                    "semantic",
                    code::SELECTION,
                    format!(
                        "{}: the selection caps no attention (no attention_score takes it as its third input)",
                        n.id
                    ),
                    n.loc.clone(),
                )
                .hint("pass the selection to the main attention's scores: `in: [q, k, <selection>]`"),
            );
        }
    }
    out
}
