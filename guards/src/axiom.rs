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

pub fn check(a: &Analysis) -> Vec<Diagnostic> {
    let mut out: Vec<Diagnostic> = a
        .axiom_failures
        .iter()
        .map(|f| Diagnostic::new("axiom", code::DECLARED, f.message.clone(), f.loc.clone()).hint("the evaluation contradicts an invariant the component declares: fix the graph or the cache declaration"))
        .collect();
    for c in &a.caches {
        if c.growth == Growth::Constant {
            continue;
        }
        let inst = parent(&a.nodes[c.node].id);
        let readers = a
            .nodes
            .iter()
            .filter(|n| n.op == "attention_score" && parent(&n.id) == inst);
        for n in readers {
            let attn_window = n.window.as_ref().map(|w| w.v).filter(|w| *w > 0);
            let cache_window = if c.growth == Growth::Window {
                c.window.as_ref().map(|w| w.v)
            } else {
                None
            };
            if attn_window != cache_window {
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
