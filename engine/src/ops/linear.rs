//! Dense projections and tables: embedding, linear, grouped (expert) linear.

use super::*;

pub(super) static OPS: &[OpSpec] = &[
    op!(
        "embedding",
        Source,
        Some(1),
        ["vocab", "dim"],
        "Look up one row of a table per token id.",
        "[] -> [dim]",
        "weight [vocab, dim] (table)",
        "vocab*dim",
        "0 (a gather)"
    ),
    op!(
        "linear",
        AxisReplace,
        Some(1),
        ["in", "out", "bias?", "tied?"],
        "y = x W^T (+ b). `tied: true` reuses another node's table and owns no weight.",
        "[..., in] -> [..., out]",
        "weight [out, in] (matrix); bias [out] when bias",
        "in*out (+out)",
        "2*in*out per leading element"
    ),
    op!(
        "grouped_linear",
        AxisReplace,
        Some(1),
        ["experts", "active", "in", "out", "bias?"],
        "All experts' weights in one tensor [experts, out, in]; `active` of them run per token.",
        "[..., in] -> [..., out]",
        "weight [experts, out, in] (matrix); bias [experts, out] when bias",
        "experts*in*out (active: active*in*out)",
        "2*active*in*out"
    ),
    op!(
        "block_diagonal_linear",
        AxisReplace,
        Some(1),
        ["groups", "in", "out"],
        "Block-diagonal (grouped) projection: each of `groups` groups of `in` channels is projected by its own [out, in] block; input [..., groups, in] -> [..., groups, out]. Stored as one matrix [groups*out, in] (DeepSeek-V4's o_a_proj with o_groups). It multiplies only its blocks: 2*groups*in*out, not the dense (groups*in) x (groups*out).",
        "[..., groups, in] -> [..., groups, out]",
        "weight [groups*out, in] (matrix)",
        "groups*in*out",
        "2*groups*in*out per leading element"
    ),
];

pub(super) fn apply(op: &str, inputs: &[Shape], a: &dyn Args) -> Result<OpOut, OpError> {
    let x0 = || inputs.first().cloned().unwrap_or_default();
    match op {
        "embedding" => {
            if !x0().is_empty() {
                return err(
                    code::SHAPE_RANK,
                    format!(
                        "embedding takes token ids (shape []), got {}",
                        show_shape(&x0())
                    ),
                );
            }
            let (v, d) = (a.int("vocab")?, a.int("dim")?);
            Ok(
                OpOut::shape(vec![Axis::Dim(d.clone())]).leaf(
                    "weight",
                    LeafKind::Table,
                    vec![v, d],
                ),
            )
        }
        "linear" => {
            let (i, o) = (a.int("in")?, a.int("out")?);
            let s = x0();
            expect_last(&s, &i, "linear")?;
            let mut shape = s.clone();
            *shape.last_mut().expect("checked non-empty") = Axis::Dim(o.clone());
            let mut out = OpOut::shape(shape).flops(&(&(&lit(2) * &i) * &o) * &lead(&s));
            if !a.flag("tied")? {
                out = out.leaf("weight", LeafKind::Matrix, vec![o.clone(), i]);
                if a.flag("bias")? {
                    out = out.leaf("bias", LeafKind::Vector, vec![o]);
                }
            }
            Ok(out)
        }
        "grouped_linear" => {
            let (e, k, i, o) = (
                a.int("experts")?,
                a.int("active")?,
                a.int("in")?,
                a.int("out")?,
            );
            let s = x0();
            expect_last(&s, &i, "grouped_linear")?;
            let mut shape = s.clone();
            *shape.last_mut().expect("checked non-empty") = Axis::Dim(o.clone());
            let per = &i * &o;
            let mut out = OpOut::shape(shape)
                .flops(&(&(&lit(2) * &k) * &per) * &lead(&s))
                .leaf("weight", LeafKind::Matrix, vec![e.clone(), o.clone(), i]);
            let mut active = &k * &per;
            if a.flag("bias")? {
                out = out.leaf("bias", LeafKind::Vector, vec![e, o.clone()]);
                active = &active + &(&k * &o);
            }
            out.params_active = Some(active);
            Ok(out)
        }
        "block_diagonal_linear" => {
            let (g, i, o) = (a.int("groups")?, a.int("in")?, a.int("out")?);
            if g.v < 1 {
                return err(
                    code::SHAPE_AXIS,
                    format!("block_diagonal_linear: groups = {} must be at least 1", g.v),
                );
            }
            let s = x0();
            let groups_ok = s.len() >= 2 && s[s.len() - 2].dim().is_some_and(|q| q.v == g.v);
            if !groups_ok {
                return Err(OpError {
                    code: code::SHAPE_HEADS,
                    message: format!(
                        "block_diagonal_linear: input {} is not [..., groups = {}, in = {}]",
                        show_shape(&s),
                        g.v,
                        i.v
                    ),
                    hint: Some("split the channels into their groups first (head_split with heads: groups); a flat axis that does not divide has no groups".into()),
                });
            }
            expect_last(&s, &i, "block_diagonal_linear")?;
            let mut shape = s.clone();
            *shape.last_mut().expect("checked non-empty") = Axis::Dim(o.clone());
            // `lead` counts the groups axis: 2*in*out per group per leading element.
            Ok(OpOut::shape(shape)
                .flops(&(&(&lit(2) * &i) * &o) * &lead(&s))
                .leaf("weight", LeafKind::Matrix, vec![&g * &o, i]))
        }
        other => err(code::SHAPE_ARITY, format!("no such op `{other}`")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ops::test_args::args;

    #[test]
    fn a_block_diagonal_projection_counts_its_blocks_only() {
        // DeepSeek-V4-Flash o_a_proj: 8 groups of 64*512/8 = 4096 channels, each to 1024.
        let x = vec![Axis::Dim(lit(8)), Axis::Dim(lit(4096))];
        let o = apply(
            "block_diagonal_linear",
            &[x],
            &args(&[("groups", 8), ("in", 4096), ("out", 1024)]),
        )
        .unwrap();
        assert_eq!(o.shape, vec![Axis::Dim(lit(8)), Axis::Dim(lit(1024))]);
        assert_eq!(o.flops_fixed.v, 2 * 8 * 4096 * 1024);
        // A dense projection of the same 32768 -> 8192 would be 8x that.
        assert_eq!(o.flops_fixed.v * 8, 2 * 32768 * 8192);
        assert_eq!(
            o.leaves[0].shape.iter().map(|q| q.v).collect::<Vec<_>>(),
            [8192, 4096]
        );
        let bad = |shape: Vec<i128>, g: i128| {
            let s: Shape = shape.into_iter().map(|d| Axis::Dim(lit(d))).collect();
            apply(
                "block_diagonal_linear",
                &[s],
                &args(&[("groups", g), ("in", 4096), ("out", 1024)]),
            )
            .unwrap_err()
            .code
        };
        assert_eq!(bad(vec![32768], 8), "S003");
        assert_eq!(bad(vec![4, 4096], 8), "S003");
        assert_eq!(bad(vec![8, 4096], 0), "S002");
        assert_eq!(bad(vec![8, 2048], 8), "S002");
    }
}
