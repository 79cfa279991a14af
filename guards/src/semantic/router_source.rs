//! Where config is silent, the router's behaviour is the forward source's (codes M024–M025):
//! GLM-4.5's config has no `scoring_func`, but its router scores with `router_logits.sigmoid()`;
//! MiniMax-M2 has no `norm_topk_prob`, but its router divides the kept weights by their sum.
//!
//! Read from the function bodies of the classes that select experts (a method calls `topk`),
//! never from names: the scoring is the sigmoid, softmax or softplus applied to the router's
//! logits (a value named `*logits*`), or a softmax over the values `topk` kept
//! (`softmax_topk`); renormalization is a statement that takes the kept weights' sum with
//! `keepdim=True`, unconditional or under an `if` that reads `norm_topk_prob`. A source whose
//! routers disagree, or that the reader cannot follow, concludes nothing.

use std::collections::BTreeSet;

use crate::source::Forward;
use harch_engine::Analysis;

use crate::pysrc::expr::{Call, calls};
use crate::pysrc::{Kind, Module, Sources};
use crate::report::Diagnostic;
use crate::truth::Truth;

pub mod code {
    /// A router that scores experts otherwise than the forward source, where config is silent.
    pub const ROUTER_SCORING_SOURCE: &str = "M024";
    /// A router that renormalizes the kept weights where the forward source does not, or the
    /// other way round, where config is silent.
    pub const ROUTER_RENORM_SOURCE: &str = "M025";
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RouterFacts {
    /// `softmax`, `sigmoid`, `softmax_topk` (or `sqrtsoftplus`), with the statement that says so.
    pub scoring: Option<(String, String)>,
    /// How the kept weights are renormalized.
    pub renorm: Renorm,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Renorm {
    /// No statement renormalizes them.
    Never,
    /// Always, by this statement.
    Always(String),
    /// Under a condition on a config key (`if self.norm_topk_prob:`): config decides.
    Conditional,
    /// The routers disagree.
    Unknown,
}

fn scoring_of(c: &Call) -> Option<&'static str> {
    match c.method() {
        "sigmoid" => Some("sigmoid"),
        "softmax" => Some("softmax"),
        "softplus" => Some("sqrtsoftplus"),
        _ => None,
    }
}

/// Statements read to find the routers: nested methods re-read their enclosing bodies, so
/// hostile source is cut off here.
const MAX_SCANNED: usize = 200_000;

/// Statements of the classes that select experts, per class: (module, class statement).
pub(super) fn router_classes(src: &Sources) -> Vec<(usize, usize)> {
    let mut out = BTreeSet::new();
    let mut scanned = 0usize;
    for (mi, m) in src.modules.iter().enumerate() {
        for (def, _, class) in m.defs() {
            if class.is_none() {
                continue;
            }
            let body = m.body(def);
            scanned += body.len();
            if scanned > MAX_SCANNED {
                return out.into_iter().collect();
            }
            let selects = body.into_iter().any(|k| {
                calls(m, m.stmts[k].tokens.clone())
                    .iter()
                    .any(|c| c.method() == "topk")
            });
            // A sparse attention's indexer selects positions with `topk` too; a router selects
            // among experts, so its class reads an expert count (`num_experts_per_tok`,
            // `n_routed_experts`, `self.num_experts`).
            if selects
                && let Some(p) = m.stmts[def].parent
                && !out.contains(&(mi, p))
                && m.body(p)
                    .any(|k| m.stmt_text(k).to_ascii_lowercase().contains("expert"))
            {
                out.insert((mi, p));
            }
        }
    }
    out.into_iter().collect()
}

/// The router facts the forward source shows, if it has routers.
pub fn router_facts(src: &Sources) -> Option<RouterFacts> {
    let classes = router_classes(src);
    if classes.is_empty() {
        return None;
    }
    let mut scorings: BTreeSet<(String, String)> = BTreeSet::new();
    let mut renorms: Vec<Renorm> = Vec::new();
    for (mi, class) in classes {
        let (s, r) = class_facts(src, mi, class);
        scorings.extend(s);
        renorms.push(r);
    }
    let kinds: BTreeSet<&String> = scorings.iter().map(|(k, _)| k).collect();
    let scoring = if kinds.len() == 1 {
        scorings.into_iter().next()
    } else {
        None
    };
    let renorm = if renorms.iter().all(|r| r == &renorms[0]) {
        renorms.swap_remove(0)
    } else if renorms.iter().all(|r| !matches!(r, Renorm::Always(_))) {
        // Some routers renormalize under config's condition, others never: config decides.
        Renorm::Conditional
    } else {
        Renorm::Unknown
    };
    Some(RouterFacts { scoring, renorm })
}

fn class_facts(src: &Sources, mi: usize, class: usize) -> (Vec<(String, String)>, Renorm) {
    let m: &Module = &src.modules[mi];
    let mut scorings = Vec::new();
    let mut renorm = Renorm::Never;
    for k in m.body(class) {
        let st = &m.stmts[k];
        let cs = calls(m, st.tokens.clone());
        // A softmax over what `topk` kept: `topk(router_logits, …)` then softmax of a target.
        let topk_of_logits = cs.iter().any(|c| {
            c.method() == "topk"
                && c.positional()
                    .next()
                    .is_some_and(|a| m.span(a.value.clone()).contains("logits"))
        });
        if topk_of_logits && let Kind::Assign { targets, .. } = &st.kind {
            let kept = m.targets(targets.clone());
            for j in k + 1..m.body(class).end.min(k + 8) {
                for c in calls(m, m.stmts[j].tokens.clone()) {
                    if c.method() == "softmax"
                        && c.positional()
                            .next()
                            .is_some_and(|a| kept.contains(&m.span(a.value.clone())))
                    {
                        scorings.push(("softmax_topk".to_string(), src.describe((mi, j))));
                    }
                }
            }
        }
        for c in &cs {
            let Some(kind) = scoring_of(c) else { continue };
            let operand = c
                .positional()
                .next()
                .map(|a| m.span(a.value.clone()))
                .unwrap_or_else(|| c.receiver());
            if operand.contains("logits") {
                scorings.push((kind.to_string(), src.describe((mi, k))));
            }
        }
        let sums_kept = cs.iter().any(|c| {
            c.method() == "sum"
                && c.keyword("keepdim")
                    .is_some_and(|a| m.span(a.value.clone()) == "True")
        });
        if sums_kept {
            let conditional = std::iter::successors(st.parent, |p| m.stmts[*p].parent)
                .take(16)
                .take_while(|p| *p != class)
                .any(|p| {
                    m.stmts[p].kind == Kind::Block && m.stmt_text(p).contains("norm_topk_prob")
                });
            renorm = match (renorm, conditional) {
                (Renorm::Always(s), _) => Renorm::Always(s),
                (_, true) => Renorm::Conditional,
                (_, false) => Renorm::Always(src.describe((mi, k))),
            };
        }
    }
    (scorings, renorm)
}

pub fn check(a: &Analysis, truth: &Truth, forward: &Forward) -> Vec<Diagnostic> {
    let routers: Vec<_> = a.nodes.iter().filter(|n| n.op == "router").collect();
    let config = crate::config_view::text(&truth.config);
    let silent_scoring = config.get("scoring_func").is_none_or(|v| v.is_null());
    let silent_renorm = config.get("norm_topk_prob").is_none_or(|v| v.is_null());
    if routers.is_empty() || (!silent_scoring && !silent_renorm) {
        return Vec::new();
    }
    let Some(facts) = router_facts(forward.sources()) else {
        return Vec::new();
    };
    let mut out = Vec::new();
    let mut seen = BTreeSet::new();
    for n in routers {
        let mut push = |code: &'static str, msg: String, hint: String| {
            if seen.insert((code, n.component.clone())) {
                out.push(
                    Diagnostic::new(
                        "semantic",
                        code,
                        format!("router `{}`: {msg}", n.id),
                        n.loc.clone(),
                    )
                    .hint(hint),
                );
            }
        };
        if silent_scoring && let Some((want, stmt)) = &facts.scoring {
            let got = n
                .args
                .get("scoring")
                .map(|v| v.text.clone())
                .unwrap_or_else(|| "softmax".into());
            if &got != want {
                push(
                    code::ROUTER_SCORING_SOURCE,
                    format!(
                        "scores experts with {got}, but config has no `scoring_func` and the forward source scores them with {want}: {stmt}"
                    ),
                    format!(
                        "set `scoring: {want}` (the source's function body is the fact where config is silent)"
                    ),
                );
            }
        }
        if silent_renorm {
            let got = n
                .args
                .get("norm_topk_prob")
                .and_then(|v| v.int)
                .unwrap_or(0)
                != 0;
            match &facts.renorm {
                Renorm::Always(stmt) if !got => push(
                    code::ROUTER_RENORM_SOURCE,
                    format!("does not renormalize the kept weights, but config has no `norm_topk_prob` and the forward source always does: {stmt}"),
                    "set `norm_topk_prob: 1` on the router".into(),
                ),
                Renorm::Never if got => push(
                    code::ROUTER_RENORM_SOURCE,
                    "renormalizes the kept weights, but config has no `norm_topk_prob` and no statement of the forward source's routers takes their sum".into(),
                    "drop `norm_topk_prob:` from the router".into(),
                ),
                _ => {}
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn facts(version: &str, model_type: &str) -> RouterFacts {
        let (name, text) = crate::pinned::file(version, model_type, "modeling");
        router_facts(&Sources::read(&[(&name, &text)])).expect("routers")
    }

    fn scoring(f: &RouterFacts) -> &str {
        f.scoring.as_ref().map(|(k, _)| k.as_str()).unwrap_or("?")
    }

    proptest::proptest! {
        /// Hostile source: read without a panic.
        #[test]
        fn any_text_is_read(lines in proptest::collection::vec(
            "[ ]{0,8}(class A:|def f\\(self\\):|if self.norm_topk_prob:|x = |torch.topk\\(|router_logits|\\.sigmoid\\(\\)|softmax\\(|\\.sum\\(dim=-1, keepdim=True\\)|/=|\\(|\\)|,){0,8}",
            0..30,
        )) {
            let text = lines.join("\n");
            let n = "modeling_x.py".to_string();
            let _ = router_facts(&Sources::read(&[(&n, &text)]));
        }
    }

    #[test]
    fn scoring_and_renormalization_are_read_from_the_bodies() {
        // GLM-4.5: `scores = router_logits.sigmoid()`, renormalized under `if self.norm_topk_prob:`.
        let glm = facts("4.57.6", "glm4_moe");
        assert_eq!(scoring(&glm), "sigmoid");
        assert!(
            glm.scoring
                .as_ref()
                .unwrap()
                .1
                .contains("router_logits.sigmoid()")
        );
        assert_eq!(glm.renorm, Renorm::Conditional);
        // MiniMax-M2: sigmoid, and always renormalized.
        let mm = facts("5.23.0", "minimax_m2");
        assert_eq!(scoring(&mm), "sigmoid");
        assert!(
            matches!(&mm.renorm, Renorm::Always(s) if s.contains("top_k_weights.sum(dim=-1, keepdim=True)")),
            "{:?}",
            mm.renorm
        );
        // Qwen3-MoE: softmax before top-k; gpt-oss: softmax over the kept logits, never renormalized.
        assert_eq!(scoring(&facts("4.57.6", "qwen3_moe")), "softmax");
        let oss = facts("4.57.6", "gpt_oss");
        assert_eq!(scoring(&oss), "softmax_topk");
        assert_eq!(oss.renorm, Renorm::Never);
        // DeepSeek-V3 (sigmoid in its MoE's route_tokens_to_experts).
        assert_eq!(scoring(&facts("4.57.6", "deepseek_v3")), "sigmoid");
        // MiniMax-M3: its sparse attention's indexer also calls `topk` (over blocks of
        // positions) and takes no sum; the router is the one that always renormalizes.
        let m3 = facts("5.23.0", "minimax_m3_vl");
        assert!(matches!(&m3.renorm, Renorm::Always(_)), "{:?}", m3.renorm);
        assert_eq!(scoring(&m3), "sigmoid");
    }
}
