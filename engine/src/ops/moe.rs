//! Mixture of experts: the router and the weighted combine of active experts.

use super::*;

pub(super) static OPS: &[OpSpec] = &[
    op!(
        "router",
        Explicit,
        Some(1),
        ["in", "experts", "top_k", "bias?", "score_bias?"],
        "Expert router: logits = x W^T, then top-k. bias: a linear bias [experts]; score_bias: a selection-only bias `e_score_correction_bias` [experts].",
        "[in] -> [top_k]",
        "weight [experts, in] (matrix); bias [experts]; e_score_correction_bias [experts]",
        "experts*in (+experts)",
        "2*in*experts"
    ),
    op!(
        "moe_combine",
        Explicit,
        Some(2),
        ["top_k"],
        "Weighted sum of the active experts' outputs. Inputs [experts, router].",
        "[d], [top_k] -> [d]",
        "none",
        "0",
        "2*top_k*d"
    ),
];

pub(super) fn apply(op: &str, inputs: &[Shape], a: &dyn Args) -> Result<OpOut, OpError> {
    let x0 = || inputs.first().cloned().unwrap_or_default();
    match op {
        "router" => {
            let (i, e, k) = (a.int("in")?, a.int("experts")?, a.int("top_k")?);
            let s = x0();
            expect_last(&s, &i, "router")?;
            if k.v > e.v || k.v <= 0 {
                return err(
                    code::SHAPE_AXIS,
                    format!("router: top_k {} must be in 1..={}", k.v, e.v),
                );
            }
            let mut out = OpOut::shape(vec![Axis::Dim(k)])
                .flops(&(&lit(2) * &i) * &e)
                .leaf("weight", LeafKind::Matrix, vec![e.clone(), i]);
            if a.flag("bias")? {
                out = out.leaf("bias", LeafKind::Vector, vec![e.clone()]);
            }
            if a.flag("score_bias")? {
                out = out.leaf("e_score_correction_bias", LeafKind::Vector, vec![e]);
            }
            Ok(out)
        }
        "moe_combine" => {
            if inputs.len() != 2 {
                return err(
                    code::SHAPE_ARITY,
                    format!(
                        "moe_combine takes [experts, router], got {} inputs",
                        inputs.len()
                    ),
                );
            }
            let k = a.int("top_k")?;
            let r = last(&inputs[1], "moe_combine")?;
            if r.v != k.v {
                return err(
                    code::SHAPE_AXIS,
                    format!(
                        "moe_combine: router gives {} weights but top_k is {}",
                        r.v, k.v
                    ),
                );
            }
            let (n, _) = numel(&inputs[0]);
            Ok(OpOut::shape(inputs[0].clone()).flops(&(&lit(2) * &k) * &n))
        }
        other => err(code::SHAPE_ARITY, format!("no such op `{other}`")),
    }
}
