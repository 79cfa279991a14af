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
        "decay_gate",
        Preserve,
        None,
        ["heads"],
        "Log-decay g = -exp(A_log) * softplus(a + dt_bias), per head ([heads]) or per key channel ([heads, dk], KDA). Inputs [a, A_log, dt_bias?]: A_log and dt_bias are `parameter` nodes; A_log holds one rate per head (any shape with `heads` elements, e.g. [1, 1, heads, 1]), dt_bias one bias per element of a.",
        "[heads] or [heads, dk] -> same",
        "none (its rates are parameter nodes)",
        "0",
        "8*numel"
    ),
    op!(
        "gated_delta_rule",
        Explicit,
        Some(5),
        [],
        "Recurrent update of linear attention with a delta rule (Gated DeltaNet, Kimi Delta Attention). Inputs [q, k, v, g, beta] with q,k [hk, dk], v [hv, dv], beta [hv], and the decay g per head [hv] or per key channel [hv, dk]; keeps state [hv, dk, dv] per sequence.",
        "-> [hv, dv]; state [hv, dk, dv]",
        "none",
        "0",
        "8*hv*dk*dv"
    ),
    op!(
        "linear_attention",
        Explicit,
        None,
        ["fixed_decay?"],
        "Recurrent linear attention without a delta rule: S = decay * S + k^T v, out = q S (Mamba-2/SSD with q=C, k=B, v=x; GLA; RetNet). Inputs [q, k, v, decay?] with q,k [hk, dk], v [hv, dv] (hv a multiple of hk), decay per head [hv] (Mamba-2) or per key channel [hv, dk] (GLA); fixed_decay: a constant per-head decay and no decay input (RetNet). Keeps state [hv, dk, dv] per sequence.",
        "-> [hv, dv]; state [hv, dk, dv]",
        "none",
        "0",
        "4*hv*dk*dv (+hv*dk*dv with a decay)"
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
        "decay_gate" => decay_gate(inputs, a),
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
            let (hv, dk, dv) = qkv(op, inputs)?;
            decay_shape(op, "g", &inputs[3], &hv, &dk)?;
            let b = dims(op, &inputs[4], "beta")?;
            if b.len() != 1 || b[0].v != hv.v {
                return err(
                    code::SHAPE_HEADS,
                    format!(
                        "gated_delta_rule: beta is {} but must be one value per head [{}]",
                        show_shape(&inputs[4]),
                        hv.v
                    ),
                );
            }
            let mut out = OpOut::shape(vec![Axis::Dim(hv.clone()), Axis::Dim(dv.clone())])
                .flops(&(&(&lit(8) * &hv) * &dk) * &dv);
            out.state = Some(vec![hv, dk, dv]);
            Ok(out)
        }
        "linear_attention" => {
            let fixed = a.flag("fixed_decay")?;
            // A fixed decay takes no decay input; otherwise the decay input is optional.
            let ok = if fixed {
                inputs.len() == 3
            } else {
                (3..=4).contains(&inputs.len())
            };
            if !ok {
                return err(
                    code::SHAPE_ARITY,
                    format!(
                        "linear_attention takes [q, k, v] or [q, k, v, decay] ([q, k, v] with fixed_decay), got {} inputs",
                        inputs.len()
                    ),
                );
            }
            let (hv, dk, dv) = qkv(op, inputs)?;
            let decays = fixed || inputs.len() == 4;
            if let Some(d) = inputs.get(3) {
                decay_shape(op, "decay", d, &hv, &dk)?;
            }
            let per = &(&hv * &dk) * &dv;
            let k = if decays { 5 } else { 4 };
            let mut out = OpOut::shape(vec![Axis::Dim(hv.clone()), Axis::Dim(dv.clone())])
                .flops(&lit(k) * &per);
            out.state = Some(vec![hv, dk, dv]);
            Ok(out)
        }
        other => err(code::SHAPE_ARITY, format!("no such op `{other}`")),
    }
}

/// The axes of an input, none of which may be the context axis.
fn dims(op: &str, s: &Shape, what: &str) -> Result<Vec<Q>, OpError> {
    s.iter()
        .map(|a| {
            a.dim().cloned().ok_or_else(|| OpError {
                code: code::SHAPE_AXIS,
                message: format!("{op}: {what} has a context axis"),
                hint: None,
            })
        })
        .collect()
}

/// q, k [hk, dk] and v [hv, dv] of a recurrent op, hv a multiple of hk: (hv, dk, dv).
fn qkv(op: &str, inputs: &[Shape]) -> Result<(Q, Q, Q), OpError> {
    let (q, k, v) = (
        dims(op, &inputs[0], "q")?,
        dims(op, &inputs[1], "k")?,
        dims(op, &inputs[2], "v")?,
    );
    if q.len() != 2 || k.len() != 2 || v.len() != 2 {
        return Err(OpError {
            code: code::SHAPE_RANK,
            message: format!("{op}: q, k, v must be [heads, dim]"),
            hint: Some("split heads first (head_split)".into()),
        });
    }
    if q[0].v != k[0].v || q[1].v != k[1].v {
        return err(
            code::SHAPE_HEADS,
            format!(
                "{op}: q [{}, {}] and k [{}, {}] differ",
                q[0].v, q[1].v, k[0].v, k[1].v
            ),
        );
    }
    if k[0].v <= 0 || v[0].v % k[0].v != 0 {
        return err(
            code::SHAPE_HEADS,
            format!(
                "{op}: {} value heads are not a multiple of {} key heads",
                v[0].v, k[0].v
            ),
        );
    }
    Ok((v[0].clone(), k[1].clone(), v[1].clone()))
}

/// A decay is one value per head [hv] or one per key channel [hv, dk].
fn decay_shape(op: &str, what: &str, s: &Shape, hv: &Q, dk: &Q) -> Result<(), OpError> {
    let d = dims(op, s, what)?;
    let ok = match d.as_slice() {
        [h] => h.v == hv.v,
        [h, c] => h.v == hv.v && c.v == dk.v,
        _ => false,
    };
    if ok {
        return Ok(());
    }
    Err(OpError {
        code: code::SHAPE_HEADS,
        message: format!(
            "{op}: {what} is {} but a decay is per head [{}] or per key channel [{}, {}]",
            show_shape(s),
            hv.v,
            hv.v,
            dk.v
        ),
        hint: Some("a per-channel decay (KDA, GLA) is split into heads like k (head_split)".into()),
    })
}

/// `-exp(A_log) * softplus(a + dt_bias)`: A_log one rate per head, dt_bias one bias per element.
fn decay_gate(inputs: &[Shape], a: &dyn Args) -> Result<OpOut, OpError> {
    if !(2..=3).contains(&inputs.len()) {
        return err(
            code::SHAPE_ARITY,
            format!(
                "decay_gate takes [a, A_log] or [a, A_log, dt_bias], got {} inputs",
                inputs.len()
            ),
        );
    }
    let h = a.int("heads")?;
    let x = &inputs[0];
    let heads = x.first().and_then(Axis::dim).map(|q| q.v);
    if x.is_empty() || x.len() > 2 || heads != Some(h.v) {
        return err(
            code::SHAPE_AXIS,
            format!(
                "decay_gate: input is {} but must be [{}] (per head) or [{}, dk] (per key channel)",
                show_shape(x),
                h.v,
                h.v
            ),
        );
    }
    let (n, _) = numel(x);
    let check = |k: usize, what: &str, want: &Q| -> Result<(), OpError> {
        let (got, ctx) = numel(&inputs[k]);
        if ctx || got.v != want.v {
            return Err(OpError {
                code: code::SHAPE_AXIS,
                message: format!(
                    "decay_gate: {what} is {} ({} elements) but must hold {} (one per {})",
                    show_shape(&inputs[k]),
                    got.v,
                    want.v,
                    if k == 1 {
                        "head"
                    } else {
                        "element of the gated input"
                    }
                ),
                hint: Some("check the parameter node's `shape:` against the checkpoint".into()),
            });
        }
        Ok(())
    };
    check(1, "A_log", &h)?;
    if inputs.len() == 3 {
        check(2, "dt_bias", &n)?;
    }
    Ok(elementwise(OpOut::shape(x.clone()), x, 8))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashMap;

    use crate::ops::test_args::Bound;

    fn s(dims: &[i128]) -> Shape {
        dims.iter().map(|d| Axis::Dim(lit(*d))).collect()
    }

    #[test]
    fn mamba2_retnet_and_gla_layers_keep_state_per_head() {
        let none = Bound(HashMap::new(), HashMap::new());
        // Mamba-2 / SSD: C and B [groups=1, d_state=16], x [heads=8, head_dim=4], dt*A per head.
        let m = apply(
            "linear_attention",
            &[s(&[1, 16]), s(&[1, 16]), s(&[8, 4]), s(&[8])],
            &none,
        )
        .unwrap();
        assert_eq!(
            m.state.as_ref().map(|st| Q::product(st).v),
            Some(8 * 16 * 4)
        );
        assert_eq!(m.flops_fixed.v, 5 * 8 * 16 * 4);
        assert_eq!(m.shape, s(&[8, 4]));
        // RetNet: a fixed per-head decay, no decay input.
        let fixed = Bound(HashMap::from([("fixed_decay", 1)]), HashMap::new());
        let r = apply(
            "linear_attention",
            &[s(&[4, 8]), s(&[4, 8]), s(&[4, 16])],
            &fixed,
        )
        .unwrap();
        assert_eq!(r.flops_fixed.v, 5 * 4 * 8 * 16);
        let no_decay = apply(
            "linear_attention",
            &[s(&[4, 8]), s(&[4, 8]), s(&[4, 16])],
            &none,
        )
        .unwrap();
        assert_eq!(no_decay.flops_fixed.v, 4 * 4 * 8 * 16);
        // GLA: a decay per key channel; a decay of another shape is refused.
        assert!(
            apply(
                "linear_attention",
                &[s(&[4, 8]), s(&[4, 8]), s(&[4, 16]), s(&[4, 8])],
                &none
            )
            .is_ok()
        );
        let bad = apply(
            "linear_attention",
            &[s(&[4, 8]), s(&[4, 8]), s(&[4, 16]), s(&[4, 16])],
            &none,
        )
        .unwrap_err();
        assert_eq!(bad.code, code::SHAPE_HEADS);
        assert!(
            apply(
                "linear_attention",
                &[s(&[4, 8]), s(&[4, 8]), s(&[4, 16]), s(&[4])],
                &fixed
            )
            .is_err()
        );
    }

    #[test]
    fn decay_gate_reads_one_rate_per_head_and_one_bias_per_element() {
        let heads = Bound(HashMap::from([("heads", 4)]), HashMap::new());
        let g = apply(
            "decay_gate",
            &[s(&[4, 8]), s(&[1, 1, 4, 1]), s(&[32])],
            &heads,
        )
        .unwrap();
        assert_eq!((g.shape.clone(), g.flops_fixed.v), (s(&[4, 8]), 8 * 32));
        assert!(g.leaves.is_empty(), "its rates are parameter nodes");
        let per_channel_rate = apply("decay_gate", &[s(&[4, 8]), s(&[1, 1, 32, 1])], &heads);
        assert_eq!(per_channel_rate.unwrap_err().code, code::SHAPE_AXIS);
        let short_bias = apply("decay_gate", &[s(&[4, 8]), s(&[4]), s(&[4])], &heads);
        assert_eq!(short_bias.unwrap_err().code, code::SHAPE_AXIS);
    }
}
