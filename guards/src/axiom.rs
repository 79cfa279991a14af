//! The axiom guard: invariants that component authors declare (cache growth, windows, read
//! pattern) hold in the evaluation, and caches agree with the attention that reads them.

use harch_engine::Analysis;
use harch_engine::ir::Growth;

use crate::report::Diagnostic;

pub mod code {
    pub const DECLARED: &str = "X001";
    pub const CACHE_VS_ATTENTION: &str = "X002";
}

fn parent(id: &str) -> &str {
    id.rsplit_once('.').map(|(p, _)| p).unwrap_or("")
}

pub fn check(a: &Analysis, anchored: &crate::window_anchor::Anchored) -> Vec<Diagnostic> {
    // One finding per declared invariant and message: a component instantiated in every layer
    // group (or every expert) fails the same way in each, and says so once.
    let mut grouped: Vec<(&harch_engine::analysis::AxiomResult, usize)> = Vec::new();
    for f in &a.axiom_failures {
        let same = |g: &harch_engine::analysis::AxiomResult| {
            g.component == f.component
                && g.message == f.message
                && g.loc.file == f.loc.file
                && g.loc.line == f.loc.line
        };
        match grouped.iter_mut().find(|(g, _)| same(g)) {
            Some((_, n)) => *n += 1,
            None => grouped.push((f, 1)),
        }
    }
    let mut out: Vec<Diagnostic> = grouped
        .into_iter()
        .map(|(f, n)| {
            let also = if n > 1 {
                format!(" (in {n} instances; the first is `{}`)", f.node)
            } else {
                String::new()
            };
            Diagnostic::new("axiom", code::DECLARED, format!("{}{also}", f.message), f.loc.clone()).hint("the evaluation contradicts an invariant the component declares: fix the graph or the cache declaration")
        })
        .collect();
    for (k, c) in a.caches.iter().enumerate() {
        if c.growth == Growth::Constant {
            continue;
        }
        let inst = parent(&a.nodes[c.node].id);
        let scores: Vec<&harch_engine::analysis::NodeRow> = a
            .nodes
            .iter()
            .filter(|n| n.op == "attention_score" && parent(&n.id) == inst)
            .collect();
        // The scores whose keys are this cache (an instance may hold a sliding attention beside
        // one over compressed entries); a cache no score reads (values) answers to them all.
        let keyed: Vec<&harch_engine::analysis::NodeRow> = scores
            .iter()
            .copied()
            .filter(|n| {
                n.inputs.get(1).is_some_and(|rows| {
                    rows.iter()
                        .any(|&r| r == c.node || a.through_views(r).contains(&c.node))
                })
            })
            .collect();
        let readers = if keyed.is_empty() { scores } else { keyed };
        for n in readers {
            let attn_window = n.window.as_ref().map(|w| w.v).filter(|w| *w > 0);
            let cache_window = if c.growth == Growth::Window {
                c.window.as_ref().map(|w| w.v)
            } else {
                None
            };
            if attn_window != cache_window && !anchored.serves(k, attn_window) {
                out.push(
                    Diagnostic::new(
                        "axiom",
                        code::CACHE_VS_ATTENTION,
                        format!("cache of `{}` grows {} but attention `{}` attends {}", a.nodes[c.node].id, match cache_window { Some(w) => format!("up to a window of {w}"), None => "per token without a cap".into() }, n.id, match attn_window { Some(w) => format!("a window of {w}"), None => "the whole context".into() }),
                        c.loc.clone(),
                    )
                    .hint("a window-capped attention keeps a window-capped cache (growth: window) and a full attention a per-token one"),
                );
                break;
            }
        }
    }
    out
}
