//! Reductions and mixing of activations: a sum over an axis, a product of two activations,
//! Sinkhorn normalisation, copies along a new axis, a transpose, and scaling by or adding a
//! constant. Hyper-connections
//! (DeepSeek-V4: a residual of `hc_mult` streams) are written with these: the streams are
//! expanded at the entry, collapsed by a weighted sum before each block, mixed by a learned
//! doubly stochastic matrix, and collapsed at the head.

use super::*;

pub(super) static OPS: &[OpSpec] = &[
    op!(
        "sum",
        AxisReplace,
        Some(1),
        ["axis"],
        "Sum over one axis (`axis`: its index, negative from the end), which is removed: a weighted collapse of streams is `mul` then `sum`.",
        "[..., n, ...] -> [..., ...]",
        "none",
        "0",
        "numel(in) - numel(out)"
    ),
    op!(
        "matmul",
        Contract,
        Some(2),
        [],
        "Product of two activations over their shared axis: [..., m, k] x [..., k, n] -> [..., m, n] (a hyper-connection's mixing matrix applied to its streams). Both operands are values of this token, not weights.",
        "[..., m, k], [..., k, n] -> [..., m, n]",
        "none",
        "0",
        "2*m*k*n per leading element"
    ),
    op!(
        "sinkhorn",
        Preserve,
        Some(1),
        ["iters"],
        "Sinkhorn-Knopp normalisation of a square matrix towards doubly stochastic: one column normalisation, then `iters - 1` rounds of row and column normalisation (`iters` from config, e.g. hc_sinkhorn_iters).",
        "[..., n, n] -> same",
        "none",
        "0",
        "2*n*n per normalisation (a sum and a divide), 2*iters - 1 normalisations"
    ),
    op!(
        "expand",
        Reshape,
        Some(1),
        ["copies"],
        "`copies` copies of the input along a new leading axis (a residual stream of [hc_mult, d_model] from one embedding).",
        "[...] -> [copies, ...]",
        "none",
        "0",
        "0 (a view)"
    ),
    op!(
        "transpose",
        Reshape,
        Some(1),
        [],
        "Swap the last two axes (a mixing matrix consumed transposed: DeepSeek-V4's `comb.transpose(-1, -2)` before its matmul).",
        "[..., m, n] -> [..., n, m]",
        "none",
        "0",
        "0 (a view)"
    ),
    op!(
        "shift",
        Preserve,
        Some(1),
        ["by"],
        "Add a constant, written as the source computes it (`by: config.hc_eps`, a sigmoid's `+ self.hc_eps`).",
        "same",
        "none",
        "0",
        "numel"
    ),
    op!(
        "scale",
        Preserve,
        Some(1),
        ["factor"],
        "Multiply by a constant factor, written as the source computes it (`factor: \"config.index_n_heads ** -0.5\"`, `\"sqrt(d_model)\"`, a softcap's `1 / 30`).",
        "same",
        "none",
        "0",
        "numel"
    ),
];

pub(super) fn apply(op: &str, inputs: &[Shape], a: &dyn Args) -> Result<OpOut, OpError> {
    let x0 = || inputs.first().cloned().unwrap_or_default();
    match op {
        "sum" => {
            let s = x0();
            let rank = s.len() as i128;
            let axis = a.int("axis")?.v;
            let ax = if axis < 0 { rank + axis } else { axis };
            if rank == 0 || ax < 0 || ax >= rank {
                return err(
                    code::SHAPE_RANK,
                    format!("sum: axis {axis} is outside rank {rank}"),
                );
            }
            if s[ax as usize] == Axis::Ctx {
                return Err(OpError {
                    code: code::SHAPE_AXIS,
                    message: "sum over the context axis: that is attention_apply's (or head_weighted_sum's) reduction".into(),
                    hint: Some("sum over a per-token axis (streams, heads)".into()),
                });
            }
            let (n_in, ctx) = numel(&s);
            let mut shape = s.clone();
            shape.remove(ax as usize);
            let (n_out, _) = numel(&shape);
            let mut out = OpOut::shape(shape);
            let f = &n_in - &n_out;
            if ctx {
                out.flops_per_ctx = f;
            } else {
                out.flops_fixed = f;
            }
            Ok(out)
        }
        "matmul" => {
            let (x, y) = (&inputs[0], &inputs[1]);
            if x.len() < 2 || y.len() < 2 || x.len() != y.len() {
                return err(
                    code::SHAPE_RANK,
                    format!(
                        "matmul takes [..., m, k] and [..., k, n] of the same rank, got {} and {}",
                        show_shape(x),
                        show_shape(y)
                    ),
                );
            }
            let r = x.len();
            let dims =
                |s: &Shape| -> Option<Vec<Q>> { s.iter().map(|a| a.dim().cloned()).collect() };
            let (Some(xd), Some(yd)) = (dims(x), dims(y)) else {
                return err(
                    code::SHAPE_AXIS,
                    "matmul: an operand has a context axis; attention_score and attention_apply contract over positions".into(),
                );
            };
            if xd[..r - 2] != yd[..r - 2] || xd[r - 1].v != yd[r - 2].v {
                return Err(OpError {
                    code: code::SHAPE_AXIS,
                    message: format!(
                        "matmul: {} x {} do not share their inner axis",
                        show_shape(x),
                        show_shape(y)
                    ),
                    hint: Some("the first operand's last axis must equal the second's next-to-last; leading axes must agree".into()),
                });
            }
            let (m, k, n) = (&xd[r - 2], &xd[r - 1], &yd[r - 1]);
            let mut shape = x.clone();
            shape[r - 1] = Axis::Dim(n.clone());
            let lead = Q::product(&xd[..r - 2]);
            Ok(OpOut::shape(shape).flops(&(&(&(&lit(2) * m) * k) * n) * &lead))
        }
        "sinkhorn" => {
            let s = x0();
            let iters = a.int("iters")?;
            let r = s.len();
            let square = r >= 2
                && matches!((&s[r - 2], &s[r - 1]), (Axis::Dim(p), Axis::Dim(q)) if p.v == q.v);
            if !square {
                return err(
                    code::SHAPE_AXIS,
                    format!(
                        "sinkhorn normalises a square matrix [..., n, n], got {}",
                        show_shape(&s)
                    ),
                );
            }
            if iters.v < 1 {
                return err(
                    code::SHAPE_AXIS,
                    format!("sinkhorn: iters = {} must be at least 1", iters.v),
                );
            }
            let (n, _) = numel(&s);
            let passes = &(&lit(2) * &iters) - &lit(1);
            Ok(OpOut::shape(s).flops(&(&lit(2) * &n) * &passes))
        }
        "expand" => {
            let copies = a.int("copies")?;
            if copies.v < 1 {
                return err(
                    code::SHAPE_AXIS,
                    format!("expand: copies = {} must be at least 1", copies.v),
                );
            }
            let mut shape = vec![Axis::Dim(copies)];
            shape.extend(x0());
            Ok(OpOut::shape(shape))
        }
        "scale" | "shift" => {
            let arg = if op == "scale" { "factor" } else { "by" };
            match a.text(arg)? {
                Some(t) if !t.trim().is_empty() => {}
                _ => {
                    return err(
                        code::SHAPE_AXIS,
                        format!("{op}: `{arg}` names the constant, as the source computes it"),
                    );
                }
            }
            let s = x0();
            Ok(elementwise(OpOut::shape(s.clone()), &s, 1))
        }
        "transpose" => {
            let mut s = x0();
            let r = s.len();
            if r < 2 || s[r - 2..].iter().any(|a| a.dim().is_none()) {
                return err(
                    code::SHAPE_RANK,
                    format!(
                        "transpose swaps the last two axes of a [..., m, n] value, got {}",
                        show_shape(&s)
                    ),
                );
            }
            s.swap(r - 2, r - 1);
            Ok(OpOut::shape(s))
        }
        other => err(code::SHAPE_ARITY, format!("no such op `{other}`")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ops::test_args::args;

    fn dims(v: &[i128]) -> Shape {
        v.iter().map(|&d| Axis::Dim(lit(d))).collect()
    }

    #[test]
    fn hyper_connection_streams_expand_collapse_and_mix() {
        // Four streams of 4096 from one embedding, whatever hc_mult is: nothing counts 4.
        for hc in [2, 4, 6] {
            let e = apply("expand", &[dims(&[4096])], &args(&[("copies", hc)])).unwrap();
            assert_eq!(e.shape, dims(&[hc, 4096]));
            // Collapse: pre [hc, 1] * streams [hc, d] summed over the streams.
            let s = apply("sum", &[dims(&[hc, 4096])], &args(&[("axis", 0)])).unwrap();
            assert_eq!(s.shape, dims(&[4096]));
            assert_eq!(s.flops_fixed.v, (hc - 1) * 4096);
            // Mix: comb [hc, hc] x streams [hc, d].
            let m = apply("matmul", &[dims(&[hc, hc]), dims(&[hc, 4096])], &args(&[])).unwrap();
            assert_eq!(m.shape, dims(&[hc, 4096]));
            assert_eq!(m.flops_fixed.v, 2 * hc * hc * 4096);
            let k = apply("sinkhorn", &[dims(&[hc, hc])], &args(&[("iters", 20)])).unwrap();
            assert_eq!(k.flops_fixed.v, 2 * hc * hc * 39);
        }
        let neg = apply("sum", &[dims(&[3, 4, 5])], &args(&[("axis", -2)])).unwrap();
        assert_eq!(neg.shape, dims(&[3, 5]));
    }

    #[test]
    fn bad_reductions_are_errors_not_panics() {
        let code = |op: &str, inputs: &[Shape], a: &[(&'static str, i128)]| {
            apply(op, inputs, &args(a)).unwrap_err().code
        };
        assert_eq!(code("sum", &[dims(&[4, 8])], &[("axis", 2)]), "S001");
        assert_eq!(code("sum", &[dims(&[4, 8])], &[("axis", -3)]), "S001");
        assert_eq!(code("sum", &[vec![]], &[("axis", 0)]), "S001");
        assert_eq!(
            code("sum", &[vec![Axis::Dim(lit(4)), Axis::Ctx]], &[("axis", 1)]),
            "S002"
        );
        assert_eq!(code("sinkhorn", &[dims(&[4, 5])], &[("iters", 20)]), "S002");
        assert_eq!(code("sinkhorn", &[dims(&[4, 4])], &[("iters", 0)]), "S002");
        assert_eq!(code("sinkhorn", &[dims(&[4])], &[("iters", 3)]), "S002");
        assert_eq!(code("matmul", &[dims(&[4, 4]), dims(&[5, 8])], &[]), "S002");
        assert_eq!(code("matmul", &[dims(&[4]), dims(&[4, 8])], &[]), "S001");
        assert_eq!(code("expand", &[dims(&[8])], &[("copies", 0)]), "S002");
        assert_eq!(code("scale", &[dims(&[8])], &[]), "S002");
    }
}
