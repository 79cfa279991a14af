//! Selection: an indexer scores every earlier position, keeps the top k (or the top k blocks of
//! positions), and the main attention attends only those. The selection caps the positions the
//! attention reads (its FLOPs and cache reads count min(k, context) per query), never what is
//! stored: the attention's caches still grow per token.

use super::*;

pub(super) static OPS: &[OpSpec] = &[
    op!(
        "head_weighted_sum",
        Contract,
        Some(2),
        [],
        "Sum of per-head scores over the heads, each head weighted by a per-token weight (an indexer's score: index_score[t] = sum_h w[h] * s[h, t]). Inputs [scores [h, ctx], weights [h]].",
        "[h, ctx], [h] -> [ctx]",
        "none",
        "0",
        "2*h*L"
    ),
    op!(
        "topk_select",
        AxisSelect,
        Some(1),
        ["k", "block?"],
        "The k highest-scoring positions (with `block`: the k highest-scoring blocks of `block` positions), one selection per leading row: scores [ctx] give one selection [k] shared by every head, scores [g, ctx] (an indexer head per KV group) give [g, k]. Feed it to attention_score as a third input: that attention then attends min(k*block, context) positions per query and head; its caches still grow per token.",
        "[..., ctx] -> [..., k]",
        "none",
        "0",
        "0 (a selection compares, it does not multiply)"
    ),
];

pub(super) fn apply(op: &str, inputs: &[Shape], a: &dyn Args) -> Result<OpOut, OpError> {
    match op {
        "head_weighted_sum" => {
            let (s, w) = (&inputs[0], &inputs[1]);
            let ok = s.len() == 2 && s[1] == Axis::Ctx && s[0].dim().is_some() && w.len() == 1;
            if !ok {
                return Err(OpError {
                    code: code::SHAPE_RANK,
                    message: format!(
                        "head_weighted_sum takes scores [h, ctx] and weights [h], got {} and {}",
                        show_shape(s),
                        show_shape(w)
                    ),
                    hint: Some(
                        "score with attention_score first; the weights are one per head".into(),
                    ),
                });
            }
            let h = s[0].dim().cloned().unwrap_or_else(Q::zero);
            let wh = last(w, "head_weighted_sum weights")?;
            if wh.v != h.v {
                return err(
                    code::SHAPE_HEADS,
                    format!(
                        "head_weighted_sum: {} weights for {} heads of scores",
                        wh.v, h.v
                    ),
                );
            }
            let mut out = OpOut::shape(vec![Axis::Ctx]);
            out.flops_per_ctx = &lit(2) * &h;
            Ok(out)
        }
        "topk_select" => {
            let s = &inputs[0];
            if s.last() != Some(&Axis::Ctx) {
                return Err(OpError {
                    code: code::SHAPE_AXIS,
                    message: format!(
                        "topk_select selects positions: its input's last axis must be the context, got {}",
                        show_shape(s)
                    ),
                    hint: Some("select over an indexer's scores [ctx] (head_weighted_sum)".into()),
                });
            }
            let k = a.int("k")?;
            let block = a.opt_int("block")?.unwrap_or_else(Q::one);
            if k.v <= 0 || block.v <= 0 {
                return err(
                    code::SHAPE_AXIS,
                    format!(
                        "topk_select: k = {} and block = {} must both be positive",
                        k.v, block.v
                    ),
                );
            }
            let positions = &k * &block;
            if positions.overflowed() {
                return err(
                    code::OVERFLOW,
                    format!("topk_select: k*block = {}*{} overflows", k.v, block.v),
                );
            }
            // Each leading row (an indexer head) selects its own k: [g, ctx] -> [g, k].
            let mut shape = s[..s.len() - 1].to_vec();
            shape.push(Axis::Dim(k));
            let mut out = OpOut::shape(shape);
            out.selection = Some(positions);
            Ok(out)
        }
        other => err(code::SHAPE_ARITY, format!("no such op `{other}`")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ops::test_args::args;

    #[test]
    fn an_indexer_scores_over_heads_and_selects_positions_or_blocks() {
        let scores = vec![Axis::Dim(lit(64)), Axis::Ctx];
        let w = apply(
            "head_weighted_sum",
            &[scores.clone(), vec![Axis::Dim(lit(64))]],
            &args(&[]),
        )
        .unwrap();
        assert_eq!((w.shape.clone(), w.flops_per_ctx.v), (vec![Axis::Ctx], 128));
        let t = apply(
            "topk_select",
            std::slice::from_ref(&w.shape),
            &args(&[("k", 2048)]),
        )
        .unwrap();
        assert_eq!(t.selection.map(|q| q.v), Some(2048));
        // Top 16 blocks of 128 positions select 2048 positions.
        let b = apply(
            "topk_select",
            &[vec![Axis::Ctx]],
            &args(&[("k", 16), ("block", 128)]),
        )
        .unwrap();
        assert_eq!(b.selection.map(|q| q.v), Some(2048));
    }

    #[test]
    fn a_per_kv_head_indexer_selects_per_head_and_caps_its_query_heads() {
        // MiniMax-M3: 4 indexer heads (one per KV group) score [4, ctx]; each keeps its own
        // top 16 blocks of 128 positions.
        let t = apply(
            "topk_select",
            &[vec![Axis::Dim(lit(4)), Axis::Ctx]],
            &args(&[("k", 16), ("block", 128)]),
        )
        .unwrap();
        assert_eq!(t.shape, vec![Axis::Dim(lit(4)), Axis::Dim(lit(16))]);
        assert_eq!(t.selection.map(|q| q.v), Some(2048));
        let score = |sel: Shape| {
            super::super::attention::apply(
                "attention_score",
                &[
                    vec![Axis::Dim(lit(64)), Axis::Dim(lit(128))],
                    vec![Axis::Dim(lit(4)), Axis::Dim(lit(128))],
                    sel,
                ],
                &args(&[]),
            )
        };
        // 64 query heads share out 4 selections, 16 heads each; FLOPs per attended position
        // are those of a dense attention.
        let s = score(t.shape.clone()).unwrap();
        assert_eq!(s.flops_per_ctx.v, 2 * 64 * 128);
        // 3 selections do not divide 64 heads; a selection of rank 3 is no selection.
        let bad = vec![Axis::Dim(lit(3)), Axis::Dim(lit(16))];
        assert_eq!(score(bad).unwrap_err().code, "S003");
        let deep = vec![Axis::Dim(lit(2)), Axis::Dim(lit(2)), Axis::Dim(lit(16))];
        assert_eq!(score(deep).unwrap_err().code, "S001");
    }

    #[test]
    fn bad_selections_are_errors_not_panics() {
        let code = |op: &str, inputs: &[Shape], a: &[(&'static str, i128)]| {
            apply(op, inputs, &args(a)).unwrap_err().code
        };
        let ctx = vec![Axis::Ctx];
        assert_eq!(
            code("topk_select", std::slice::from_ref(&ctx), &[("k", 0)]),
            "S002"
        );
        assert_eq!(
            code(
                "topk_select",
                std::slice::from_ref(&ctx),
                &[("k", 8), ("block", -1)]
            ),
            "S002"
        );
        assert_eq!(
            code(
                "topk_select",
                std::slice::from_ref(&ctx),
                &[("k", i128::MAX), ("block", 2)]
            ),
            "A003"
        );
        // Selecting over a per-token vector, not over positions.
        assert_eq!(
            code("topk_select", &[vec![Axis::Dim(lit(8))]], &[("k", 2)]),
            "S002"
        );
        assert_eq!(code("topk_select", &[vec![]], &[("k", 2)]), "S002");
        // Weights that do not match the heads, scores without a context axis.
        let scores = vec![Axis::Dim(lit(64)), Axis::Ctx];
        assert_eq!(
            code(
                "head_weighted_sum",
                &[scores, vec![Axis::Dim(lit(32))]],
                &[]
            ),
            "S003"
        );
        assert_eq!(
            code(
                "head_weighted_sum",
                &[vec![Axis::Dim(lit(64))], vec![Axis::Dim(lit(64))]],
                &[]
            ),
            "S001"
        );
    }
}
