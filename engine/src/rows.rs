//! Per-row figures: each quantity the totals of [`Analysis`] sum, for one row. The totals are
//! these sums; deployment analysis (harch-analysis) reads the same rows under a layout, so a
//! figure per GPU and the model's total come from one formula.

use crate::analysis::{
    Analysis, CacheRow, GroupRow, KeySpan, NodeRow, WeightRow, attended_entries, attended_positions,
};
use crate::ir::Growth;
use crate::ops::Axis;
use crate::q::Q;

/// The scope segment under which a component's decode variant is walked: the variant's row
/// `P.decode.x` stands for the main graph's row `P.x`.
pub const DECODE_SCOPE: &str = "decode";

impl Analysis {
    /// Whether a node row belongs to the main model (not under a `role: mtp` top-level node).
    pub fn is_main_row(&self, row: usize) -> bool {
        self.nodes[row].top_role.as_deref() != Some("mtp")
    }

    /// Stored bytes of one weight row: every stored tensor (main and scales) of every copy.
    pub fn weight_row_bytes(&self, w: &WeightRow) -> Q {
        let per_copy: Vec<Q> = w
            .stored
            .iter()
            .map(|s| &Q::product(&s.shape) * &Q::lit(s.dtype_bytes as i128))
            .collect();
        &Q::sum(&per_copy) * &w.count
    }

    /// Bytes one cache row holds per token (per_token, window) or per sequence (constant),
    /// over all its layers.
    pub fn cache_row_unit_bytes(&self, c: &CacheRow) -> Q {
        &(&c.elements * &Q::lit(c.dtype_bytes as i128)) * &c.count
    }

    /// Entries a cache row holds for a context, before any window: one per token, or one per
    /// `ratio` tokens for a compressor's output (the source emits an entry per closed window).
    pub fn cache_row_entries_at(&self, c: &CacheRow, ctx: &Q) -> Q {
        entries(ctx, c.ratio.as_ref())
    }

    /// Bytes one cache row adds per token over all its layers: its unit, or for a compressed
    /// row the unit over its ratio (exact when the ratio divides the unit, else rounded down;
    /// `cache_row_bytes_at` counts whole entries either way).
    pub fn cache_row_token_bytes(&self, c: &CacheRow) -> Q {
        let unit = self.cache_row_unit_bytes(c);
        match &c.ratio {
            Some(r) if r.v > 0 => unit
                .div_exact(r)
                .unwrap_or_else(|| Q::call("per_ratio", &[unit.clone(), r.clone()], unit.v / r.v)),
            _ => unit,
        }
    }

    /// Bytes one sequence keeps in a cache row at a context length, by the row's growth law:
    /// every token (per_token; one entry per `ratio` tokens for a compressor's output), at most
    /// `window` tokens (window), or once (constant).
    pub fn cache_row_bytes_at(&self, c: &CacheRow, ctx: &Q) -> Q {
        let unit = self.cache_row_unit_bytes(c);
        match c.growth {
            Growth::PerToken => &unit * &self.cache_row_entries_at(c, ctx),
            Growth::Window => {
                let w = match &c.window {
                    Some(w) if w.v < ctx.v => w,
                    _ => ctx,
                };
                &unit * w
            }
            Growth::Constant => unit,
        }
    }

    /// Bytes a decode step at a context reads from one cache row: what it holds by its growth
    /// law, or, when a selection caps every attention reading it, the selected entries.
    pub fn cache_row_read_bytes_at(&self, c: &CacheRow, ctx: &Q) -> Q {
        if c.growth == Growth::Constant {
            return self.cache_row_unit_bytes(c);
        }
        let held = match c.growth {
            Growth::Window => match &c.window {
                Some(w) if w.v < ctx.v => w.clone(),
                _ => ctx.clone(),
            },
            _ => self.cache_row_entries_at(c, ctx),
        };
        match &c.read_cap {
            Some(k) if k.v < held.v => &self.cache_row_unit_bytes(c) * k,
            _ => &self.cache_row_unit_bytes(c) * &held,
        }
    }

    /// Cache bytes one decode step at a context reads, over the main model's caches.
    pub fn kv_bytes_read_at(&self, ctx: &Q) -> Q {
        let terms: Vec<Q> = self
            .caches
            .iter()
            .filter(|c| self.is_main_row(c.node))
            .map(|c| self.cache_row_read_bytes_at(c, ctx))
            .collect();
        Q::sum(&terms)
    }

    /// FLOPs of a node row (all its active copies) for one sequence's decode step at a context.
    pub fn node_decode_flops(&self, n: &NodeRow, ctx: &Q) -> Q {
        let attended = over_spans(n, |s| {
            let spanned = entries(ctx, s.stride.as_ref());
            match s.cap() {
                Some(w) if w.v < spanned.v => w.clone(),
                _ => spanned,
            }
        });
        &n.active * &(&n.flops_fixed + &(&n.flops_per_ctx * &attended))
    }

    /// FLOPs of a node row (all its active copies) for one sequence's causal prefill of `seq`
    /// tokens.
    pub fn node_prefill_flops(&self, n: &NodeRow, seq: &Q) -> Q {
        let attended = over_spans(n, |s| match &s.stride {
            Some(r) if r.v > 0 => attended_entries(seq, s.cap(), r),
            _ => attended_positions(seq, s.cap()),
        });
        &n.active * &(&(&n.flops_fixed * seq) + &(&n.flops_per_ctx * &attended))
    }

    /// Elements per token of a row's output, and whether the output has a context axis (the
    /// attended positions of attention scores, which a fused attention kernel keeps on chip).
    pub fn output_elements(&self, row: usize) -> (Q, bool) {
        let mut q = Q::one();
        let mut ctx = false;
        for a in &self.nodes[row].shape {
            match a {
                Axis::Dim(d) => q = &q * d,
                Axis::Ctx => ctx = true,
            }
        }
        (q, ctx)
    }

    /// The id of the main-graph row a decode-variant row stands for (same id without the
    /// variant's scope), if the row is in a decode variant.
    pub fn decode_counterpart_id(&self, row: usize) -> Option<String> {
        let id = &self.nodes[row].id;
        let seg = format!(".{DECODE_SCOPE}.");
        let at = id.rfind(&seg)?;
        Some(format!("{}.{}", &id[..at], &id[at + seg.len()..]))
    }

    /// The layer group (stack and block) a row was walked in.
    pub fn group_of(&self, row: usize) -> Option<&GroupRow> {
        let id = &self.nodes[row].id;
        self.groups.iter().find(|g| {
            let head = format!("{}[{}]", g.stack, g.block);
            id.strip_prefix(&head)
                .is_some_and(|rest| rest.is_empty() || rest.starts_with('.'))
        })
    }
}

/// Entries of one per `ratio` tokens at a context (`entries(ctx, ratio)`, whole ones only), or
/// every position where there is no ratio: what a compressed cache holds and what an
/// attention over its entries spans.
fn entries(ctx: &Q, ratio: Option<&Q>) -> Q {
    match ratio {
        Some(r) if r.v > 0 => Q::call("entries", &[ctx.clone(), r.clone()], ctx.v / r.v),
        _ => ctx.clone(),
    }
}

/// The sum over a node's key sets of what `f` counts for each.
pub(crate) fn over_spans(n: &NodeRow, f: impl FnMut(KeySpan) -> Q) -> Q {
    Q::sum(&n.spans().map(f).collect::<Vec<_>>())
}

/// `min(cap, ctx)` as one formula: a capped row's attended or held positions at every context,
/// not only on the side of the cap the evaluated context falls.
fn capped_positions(cap: &Q, ctx: &Q) -> Q {
    Q::call("min", &[cap.clone(), ctx.clone()], cap.v.min(ctx.v))
}

impl Analysis {
    /// Cache bytes of one sequence as a formula of the context that holds at every context
    /// (`ctx` an atom): per_token rows grow with `ctx`, window rows with `min(window, ctx)`,
    /// constant rows not at all. Its value is [`Analysis::cache_bytes_at`]'s; the Inspector's
    /// context slider evaluates its text.
    pub fn cache_bytes_of_ctx(&self, ctx: &Q, keep: impl Fn(&NodeRow) -> bool) -> Q {
        let terms: Vec<Q> = self
            .caches
            .iter()
            .filter(|c| {
                let n = &self.nodes[c.node];
                n.top_role.as_deref() != Some("mtp") && n.per_image.is_none() && keep(n)
            })
            .map(|c| {
                let unit = self.cache_row_unit_bytes(c);
                match (c.growth, &c.window) {
                    // A compressor's output holds one entry per `ratio` tokens: `entries(ctx, r)`.
                    (Growth::PerToken, _) => &unit * &self.cache_row_entries_at(c, ctx),
                    (Growth::Window, None) => &unit * ctx,
                    (Growth::Window, Some(w)) => &unit * &capped_positions(w, ctx),
                    (Growth::Constant, _) => unit,
                }
            })
            .collect();
        Q::sum(&terms)
    }

    /// FLOPs of one decode step as a formula of the context that holds at every context: a
    /// windowed or selecting row attends `min(cap, ctx)` positions. Its value is
    /// [`Analysis::decode_flops`]'s for the rows `keep` admits.
    pub fn decode_flops_of_ctx(&self, ctx: &Q, keep: impl Fn(&NodeRow) -> bool) -> Q {
        let terms: Vec<Q> = self
            .nodes
            .iter()
            .filter(|n| {
                n.top_role.as_deref() != Some("mtp")
                    && n.per_image.is_none()
                    && n.phase != crate::analysis::Phase::Prefill
                    && keep(n)
            })
            .map(|n| {
                let attended = over_spans(n, |s| {
                    let spanned = entries(ctx, s.stride.as_ref());
                    match s.cap() {
                        Some(cap) => capped_positions(cap, &spanned),
                        None => spanned,
                    }
                });
                &n.active * &(&n.flops_fixed + &(&n.flops_per_ctx * &attended))
            })
            .collect();
        Q::sum(&terms)
    }
}

#[cfg(test)]
mod of_ctx_tests {
    use super::*;
    use crate::analysis::{DtypeOrigin, Phase};

    fn row(window: Option<i128>) -> NodeRow {
        NodeRow {
            id: "a".into(),
            op: "attention".into(),
            role: "attention".into(),
            top_role: None,
            component: String::new(),
            stack_group: None,
            shape: vec![],
            count: Q::lit(2),
            active: Q::lit(2),
            params: Q::zero(),
            params_active: Q::zero(),
            flops_fixed: Q::lit(10),
            flops_per_ctx: Q::lit(3),
            window: window.map(Q::lit),
            selected: None,
            compressed: None,
            stride: None,
            joint: vec![],
            phase: Phase::Both,
            args: Default::default(),
            inputs: vec![],
            twin: None,
            per_image: None,
            loc: Default::default(),
        }
    }

    #[test]
    fn formulas_of_the_context_agree_with_the_figures_on_both_sides_of_a_window() {
        let mut a = Analysis {
            nodes: vec![row(None), row(Some(100))],
            ..Default::default()
        };
        for (node, growth, window) in [
            (0, Growth::PerToken, None),
            (1, Growth::Window, Some(Q::lit(100))),
            (1, Growth::Constant, None),
        ] {
            a.caches.push(CacheRow {
                node,
                kind: "kv".into(),
                growth,
                window,
                window_src: None,
                ratio: None,
                elements: Q::lit(8),
                read_cap: None,
                dtype: "BF16".into(),
                dtype_bytes: 2,
                dtype_origin: DtypeOrigin::Fallback,
                dtype_src: None,
                count: Q::lit(3),
                loc: Default::default(),
            });
        }
        for ctx in [1, 99, 100, 101, 5000] {
            let c = Q::atom("ctx", ctx, true);
            assert_eq!(a.cache_bytes_of_ctx(&c, |_| true).v, a.cache_bytes_at(ctx));
            assert_eq!(
                a.decode_flops_of_ctx(&c, |_| true).v,
                a.decode_flops(&Q::lit(ctx)).v
            );
        }
        let f = a.cache_bytes_of_ctx(&Q::atom("ctx", 7, true), |_| true);
        assert!(f.formula().contains("min(100, ctx)"), "{}", f.formula());
    }
}
