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
        other => err(code::SHAPE_ARITY, format!("no such op `{other}`")),
    }
}
