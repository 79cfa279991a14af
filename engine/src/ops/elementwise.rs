//! Axis selection and concatenation, elementwise arithmetic, activations and gated units.

use super::*;

pub(super) static OPS: &[OpSpec] = &[
    op!(
        "slice",
        AxisSelect,
        Some(1),
        ["out", "start?"],
        "Take `out` channels of the last axis starting at `start` (default 0).",
        "[..., n] -> [..., out]",
        "none",
        "0",
        "0"
    ),
    op!(
        "concat",
        AxisConcat,
        None,
        ["axis?"],
        "Concatenate along an axis (default the last); other axes must agree. Scores [h, ctx] of one query against several key sets, concatenated along ctx, are one softmax over all of them (DeepSeek-V4's window and compressed entries: `torch.cat([kv, compressed_kv], dim=2)`); each set keeps its own window, selection or compression, and attention_apply takes one value input per set.",
        "[..., a], [..., b] -> [..., a+b]; [h, ctx], [h, ctx] -> [h, ctx]",
        "none",
        "0",
        "0"
    ),
    op!(
        "add",
        Broadcast,
        None,
        [],
        "Elementwise sum of two or more inputs of the same shape (a residual add).",
        "[s], [s] -> [s]",
        "none",
        "0",
        "numel per extra input"
    ),
    op!(
        "mul",
        Broadcast,
        None,
        [],
        "Elementwise product; trailing axes broadcast (a gate [h, 1] times [h, d]).",
        "[s], [s] -> [s]",
        "none",
        "0",
        "numel per extra input"
    ),
    op!(
        "silu",
        Preserve,
        Some(1),
        [],
        "x*sigmoid(x).",
        "same",
        "none",
        "0",
        "4*numel"
    ),
    op!(
        "gelu",
        Preserve,
        Some(1),
        [],
        "GELU.",
        "same",
        "none",
        "0",
        "8*numel"
    ),
    op!(
        "relu",
        Preserve,
        Some(1),
        [],
        "max(x, 0).",
        "same",
        "none",
        "0",
        "numel"
    ),
    op!(
        "sigmoid",
        Preserve,
        Some(1),
        [],
        "Logistic sigmoid.",
        "same",
        "none",
        "0",
        "4*numel"
    ),
    op!(
        "softplus",
        Preserve,
        Some(1),
        [],
        "log(1+exp(x)).",
        "same",
        "none",
        "0",
        "4*numel"
    ),
    op!(
        "tanh",
        Preserve,
        Some(1),
        [],
        "tanh.",
        "same",
        "none",
        "0",
        "4*numel"
    ),
    op!(
        "exp",
        Preserve,
        Some(1),
        [],
        "exp.",
        "same",
        "none",
        "0",
        "numel"
    ),
    op!(
        "glu",
        AxisReplace,
        Some(1),
        ["act", "interleaved?"],
        "Gated linear unit on a fused [gate|up] axis: act(gate) * up. act: silu or clamped_swiglu (gpt-oss).",
        "[..., 2n] -> [..., n]",
        "none",
        "0",
        "6*n"
    ),
];

pub(super) fn apply(op: &str, inputs: &[Shape], a: &dyn Args) -> Result<OpOut, OpError> {
    let x0 = || inputs.first().cloned().unwrap_or_default();
    match op {
        "slice" => {
            let s = x0();
            let n = last(&s, "slice")?.clone();
            let o = a.int("out")?;
            let start = a.opt_int("start")?.map(|q| q.v).unwrap_or(0);
            let end = start.saturating_add(o.v);
            if start < 0 || o.v <= 0 || end > n.v {
                return err(
                    code::SHAPE_AXIS,
                    format!("slice: [{start}, {end}) is outside an axis of {}", n.v),
                );
            }
            let mut shape = s;
            *shape.last_mut().expect("checked non-empty") = Axis::Dim(o);
            Ok(OpOut::shape(shape))
        }
        "concat" => {
            if inputs.len() < 2 {
                return err(
                    code::SHAPE_ARITY,
                    format!("concat takes 2 or more inputs, got {}", inputs.len()),
                );
            }
            let rank = inputs[0].len();
            let axis = a.opt_int("axis")?.map(|q| q.v).unwrap_or(-1);
            let ax = if axis < 0 { rank as i128 + axis } else { axis };
            if ax < 0 || ax >= rank as i128 {
                return err(
                    code::SHAPE_RANK,
                    format!("concat: axis {axis} is outside rank {rank}"),
                );
            }
            let ax = ax as usize;
            // Scores concatenated along the context axis are one softmax over several key
            // sets; the evaluation counts each set's positions by its own law.
            if inputs.iter().any(|s| s.get(ax) == Some(&Axis::Ctx)) {
                return match inputs.iter().enumerate().find(|(_, s)| *s != &inputs[0]) {
                    None => Ok(OpOut::shape(inputs[0].clone())),
                    Some((n, s)) => Err(OpError {
                        code: code::SHAPE_AXIS,
                        message: format!(
                            "concat along the context axis: input {} is {} but input 1 is {}",
                            n + 1,
                            show_shape(s),
                            show_shape(&inputs[0])
                        ),
                        hint: Some(
                            "concat scores ([heads, ctx]) of one query against several key sets"
                                .into(),
                        ),
                    }),
                };
            }
            let mut total = Q::zero();
            for (n, s) in inputs.iter().enumerate() {
                if s.len() != rank {
                    return err(
                        code::SHAPE_RANK,
                        format!(
                            "concat: input {} has rank {} but input 1 has rank {rank}",
                            n + 1,
                            s.len()
                        ),
                    );
                }
                for (j, (p, q)) in s.iter().zip(&inputs[0]).enumerate() {
                    if j != ax && p != q {
                        return Err(OpError {
                            code: code::SHAPE_AXIS,
                            message: format!(
                                "concat: input {} is {} but input 1 is {}; only axis {ax} may differ",
                                n + 1,
                                show_shape(s),
                                show_shape(&inputs[0])
                            ),
                            hint: Some(
                                "broadcast or split heads so that every other axis agrees".into(),
                            ),
                        });
                    }
                }
                if let Some(q) = s[ax].dim() {
                    total = &total + q;
                }
            }
            let mut shape = inputs[0].clone();
            shape[ax] = Axis::Dim(total);
            Ok(OpOut::shape(shape))
        }
        "add" | "mul" => {
            if inputs.len() < 2 {
                return err(
                    code::SHAPE_ARITY,
                    format!("{op} takes 2 or more inputs, got {}", inputs.len()),
                );
            }
            let mut shape = inputs[0].clone();
            for (n, s) in inputs.iter().enumerate().skip(1) {
                shape = broadcast(&shape, s).ok_or_else(|| OpError {
                    code: code::SHAPE_AXIS,
                    message: format!(
                        "{op}: input {} is {} and cannot combine with {}",
                        n + 1,
                        show_shape(s),
                        show_shape(&shape)
                    ),
                    hint: Some(
                        "elementwise inputs must have equal shapes (or size-1 axes that broadcast)"
                            .into(),
                    ),
                })?;
            }
            let k = inputs.len() as i128 - 1;
            Ok(elementwise(OpOut::shape(shape.clone()), &shape, k))
        }
        "glu" => {
            let s = x0();
            let n = last(&s, "glu")?.clone();
            let half = n.div_exact(&lit(2)).ok_or_else(|| OpError {
                code: code::SHAPE_AXIS,
                message: format!("glu: axis {} is odd", n.v),
                hint: None,
            })?;
            match a.text("act")?.as_deref() {
                Some("silu") | Some("clamped_swiglu") | Some("gelu") => {}
                other => {
                    return err(
                        code::SHAPE_AXIS,
                        format!("glu: act must be silu, gelu or clamped_swiglu, got {other:?}"),
                    );
                }
            }
            let mut shape = s.clone();
            *shape.last_mut().expect("checked") = Axis::Dim(half.clone());
            Ok(OpOut::shape(shape).flops(&(&lit(6) * &half) * &lead(&s)))
        }
        act if ACTIVATIONS.iter().any(|(n, _)| *n == act) => {
            let k = ACTIVATIONS
                .iter()
                .find(|(n, _)| *n == act)
                .map(|(_, k)| *k)
                .unwrap_or(1);
            let s = x0();
            Ok(elementwise(OpOut::shape(s.clone()), &s, k))
        }
        other => err(code::SHAPE_ARITY, format!("no such op `{other}`")),
    }
}

/// Numpy-style trailing broadcast of two shapes.
fn broadcast(a: &Shape, b: &Shape) -> Option<Shape> {
    let n = a.len().max(b.len());
    let mut out = Vec::with_capacity(n);
    for i in 0..n {
        let x = (i + a.len()).checked_sub(n).map(|j| &a[j]);
        let y = (i + b.len()).checked_sub(n).map(|j| &b[j]);
        out.push(match (x, y) {
            (Some(x), None) => x.clone(),
            (None, Some(y)) => y.clone(),
            (Some(x), Some(y)) if x == y => x.clone(),
            (Some(Axis::Dim(q)), Some(y)) if q.v == 1 => y.clone(),
            (Some(x), Some(Axis::Dim(q))) if q.v == 1 => x.clone(),
            _ => return None,
        });
    }
    Some(out)
}
