//! Recurrent (linear-attention) layers: short convolutions, decay gates, state updates.

use super::*;

pub(super) static OPS: &[OpSpec] = &[
    op!(
        "conv1d",
        Preserve,
        Some(1),
        ["channels", "kernel", "bias?"],
        "Causal depthwise 1-D convolution over time.",
        "[channels] -> same",
        "weight [channels, 1, kernel] (matrix); bias [channels]",
        "channels*kernel",
        "2*channels*kernel"
    ),
    op!(
        "delta_gate",
        Preserve,
        Some(1),
        ["heads"],
        "Gated DeltaNet decay g = -exp(A_log) * softplus(a + dt_bias), per value head.",
        "[heads] -> same",
        "A_log [heads] (vector); dt_bias [heads] (vector)",
        "2*heads",
        "8*heads"
    ),
    op!(
        "gated_delta_rule",
        Explicit,
        Some(5),
        [],
        "Recurrent update of linear attention (Gated DeltaNet). Inputs [q, k, v, g, beta] with q,k [hk, dk], v [hv, dv], g and beta [hv]; keeps state [hv, dk, dv] per sequence.",
        "-> [hv, dv]; state [hv, dk, dv]",
        "none",
        "0",
        "8*hv*dk*dv"
    ),
];

pub(super) fn apply(op: &str, inputs: &[Shape], a: &dyn Args) -> Result<OpOut, OpError> {
    let x0 = || inputs.first().cloned().unwrap_or_default();
    match op {
        "conv1d" => {
            let (c, k) = (a.int("channels")?, a.int("kernel")?);
            let s = x0();
            expect_last(&s, &c, "conv1d")?;
            let mut out = OpOut::shape(s).flops(&(&lit(2) * &c) * &k).leaf(
                "weight",
                LeafKind::Matrix,
                vec![c.clone(), lit(1), k],
            );
            if a.flag("bias")? {
                out = out.leaf("bias", LeafKind::Vector, vec![c]);
            }
            Ok(out)
        }
        "delta_gate" => {
            let h = a.int("heads")?;
            let s = x0();
            expect_last(&s, &h, "delta_gate")?;
            Ok(OpOut::shape(s)
                .flops(&lit(8) * &h)
                .leaf("A_log", LeafKind::Vector, vec![h.clone()])
                .leaf("dt_bias", LeafKind::Vector, vec![h]))
        }
        "gated_delta_rule" => {
            if inputs.len() != 5 {
                return err(
                    code::SHAPE_ARITY,
                    format!(
                        "gated_delta_rule takes [q, k, v, g, beta], got {} inputs",
                        inputs.len()
                    ),
                );
            }
            let dims = |s: &Shape, what: &str| -> Result<Vec<Q>, OpError> {
                s.iter()
                    .map(|a| {
                        a.dim().cloned().ok_or_else(|| OpError {
                            code: code::SHAPE_AXIS,
                            message: format!("gated_delta_rule: {what} has a context axis"),
                            hint: None,
                        })
                    })
                    .collect()
            };
            let (q, k, v, g, b) = (
                dims(&inputs[0], "q")?,
                dims(&inputs[1], "k")?,
                dims(&inputs[2], "v")?,
                dims(&inputs[3], "g")?,
                dims(&inputs[4], "beta")?,
            );
            if q.len() != 2 || k.len() != 2 || v.len() != 2 || g.len() != 1 || b.len() != 1 {
                return err(
                    code::SHAPE_RANK,
                    "gated_delta_rule: q, k, v must be [heads, dim]; g and beta [heads]".into(),
                );
            }
            if q[0].v != k[0].v || q[1].v != k[1].v {
                return err(
                    code::SHAPE_HEADS,
                    format!(
                        "gated_delta_rule: q [{}, {}] and k [{}, {}] differ",
                        q[0].v, q[1].v, k[0].v, k[1].v
                    ),
                );
            }
            let (hv, dk, dv) = (v[0].clone(), k[1].clone(), v[1].clone());
            if hv.v % k[0].v != 0 || g[0].v != hv.v || b[0].v != hv.v {
                return err(
                    code::SHAPE_HEADS,
                    format!(
                        "gated_delta_rule: {} value heads must be a multiple of {} key heads and match g ({}) and beta ({})",
                        hv.v, k[0].v, g[0].v, b[0].v
                    ),
                );
            }
            let mut out = OpOut::shape(vec![Axis::Dim(hv.clone()), Axis::Dim(dv.clone())])
                .flops(&(&(&lit(8) * &hv) * &dk) * &dv);
            out.state = Some(vec![hv, dk, dv]);
            Ok(out)
        }
        other => err(code::SHAPE_ARITY, format!("no such op `{other}`")),
    }
}
