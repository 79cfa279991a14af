//! Compression in time: a compressor pools every `ratio` consecutive tokens into one entry
//! (DeepSeek-V4's CSA and HCA). What it emits is one value per `ratio` tokens, so a cache of it
//! grows by one entry per `ratio` tokens, and an attention over it attends floor(t / ratio)
//! entries at position t. While a window fills, the compressor keeps the tokens it has not
//! pooled yet: constant state.

use super::*;

pub(super) static OPS: &[OpSpec] = &[op!(
    "compress",
    Explicit,
    Some(2),
    ["ratio", "dim", "overlap?"],
    "Pool every `ratio` tokens into one entry: softmax over the window of (gate + position_bias), times kv, summed over the window. Inputs [kv [c*dim], gate [c*dim]] with c = 2 when `overlap` (two series, entry w pools window w-1's first half with window w's second half, CSA) else 1 (HCA). The output is one entry per `ratio` tokens: a cache of it grows by one entry per `ratio` tokens, an attention over it attends floor(t/ratio) entries. Decode: the tokens of the window not yet pooled (ratio-1 of kv and gate) and, with overlap, the last window's first series (ratio of kv and gate) are constant state.",
    "[c*dim], [c*dim] -> [dim] (one entry per ratio tokens)",
    "position_bias [ratio, c*dim] (vector)",
    "ratio*c*dim",
    "8*c*dim per token (bias add, softmax over the window, weighted sum)"
)];

pub(super) fn apply(op: &str, inputs: &[Shape], a: &dyn Args) -> Result<OpOut, OpError> {
    match op {
        "compress" => {
            let (r, d) = (a.int("ratio")?, a.int("dim")?);
            if r.v <= 0 || d.v <= 0 {
                return Err(OpError {
                    code: code::SHAPE_AXIS,
                    message: format!(
                        "compress: ratio = {} and dim = {} must both be positive (a ratio of 0 compresses nothing: such a layer has no compressor)",
                        r.v, d.v
                    ),
                    hint: Some(
                        "bind ratio to the config's ratio for this layer kind, and give layers whose ratio is 0 a block without a compressor".into(),
                    ),
                });
            }
            let c = if a.flag("overlap")? { lit(2) } else { lit(1) };
            let width = &c * &d;
            for (n, s) in inputs.iter().enumerate() {
                if s.contains(&Axis::Ctx) {
                    return err(
                        code::SHAPE_AXIS,
                        format!(
                            "compress: input {} has a context axis; compress the per-token projections",
                            n + 1
                        ),
                    );
                }
                expect_last(s, &width, "compress")?;
            }
            if inputs[0] != inputs[1] {
                return err(
                    code::SHAPE_AXIS,
                    format!(
                        "compress: kv {} and gate {} differ",
                        show_shape(&inputs[0]),
                        show_shape(&inputs[1])
                    ),
                );
            }
            let mut shape = inputs[0].clone();
            *shape.last_mut().expect("checked non-empty") = Axis::Dim(d.clone());
            let lead = lead(&inputs[0]);
            let mut out = OpOut::shape(shape).flops(&(&lit(8) * &width) * &lead).leaf(
                "position_bias",
                LeafKind::Vector,
                vec![r.clone(), width.clone()],
            );
            // Pending tokens: kv and gate of up to ratio-1 tokens; with overlap, the last
            // window's first series (kv and gate, ratio rows of dim).
            let pending = &(&(&r - &lit(1)) * &(&lit(2) * &width)) * &lead;
            let carried = if c.v == 2 {
                &(&(&lit(2) * &r) * &d) * &lead
            } else {
                Q::zero()
            };
            out.state = Some(vec![&pending + &carried]);
            out.compressed = Some(r);
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
    fn a_compressor_emits_one_entry_per_ratio_tokens_and_keeps_its_window_as_state() {
        // CSA (DeepSeek-V4-Flash): ratio 4, head_dim 512, two overlapping series.
        let x = vec![Axis::Dim(lit(1024))];
        let o = apply(
            "compress",
            &[x.clone(), x.clone()],
            &args(&[("ratio", 4), ("dim", 512), ("overlap", 1)]),
        )
        .unwrap();
        assert_eq!(o.shape, vec![Axis::Dim(lit(512))]);
        assert_eq!(o.compressed.as_ref().map(|q| q.v), Some(4));
        assert_eq!(
            o.leaves[0].shape.iter().map(|q| q.v).collect::<Vec<_>>(),
            [4, 1024]
        );
        assert_eq!(o.flops_fixed.v, 8 * 1024);
        // 3 pending tokens of kv and gate (1024 each) + the last window's first series (4 x 512, kv and gate).
        assert_eq!(
            o.state.unwrap().iter().map(|q| q.v).collect::<Vec<_>>(),
            [3 * 2 * 1024 + 2 * 4 * 512]
        );
        // HCA: ratio 128, one series.
        let y = vec![Axis::Dim(lit(512))];
        let h = apply(
            "compress",
            &[y.clone(), y],
            &args(&[("ratio", 128), ("dim", 512)]),
        )
        .unwrap();
        assert_eq!(h.state.unwrap()[0].v, 127 * 2 * 512);
        assert_eq!(h.compressed.map(|q| q.v), Some(128));
    }

    #[test]
    fn bad_compressors_are_located_errors() {
        let x = vec![Axis::Dim(lit(512))];
        let code = |inputs: &[Shape], a: &[(&'static str, i128)]| {
            apply("compress", inputs, &args(a)).unwrap_err().code
        };
        let two = [x.clone(), x.clone()];
        assert_eq!(code(&two, &[("ratio", 0), ("dim", 512)]), "S002");
        assert_eq!(code(&two, &[("ratio", -4), ("dim", 512)]), "S002");
        // With overlap the projections must be 2*dim wide.
        assert_eq!(
            code(&two, &[("ratio", 4), ("dim", 512), ("overlap", 1)]),
            "S002"
        );
        let ctx = vec![Axis::Dim(lit(1)), Axis::Ctx];
        assert_eq!(
            code(&[ctx.clone(), ctx], &[("ratio", 4), ("dim", 512)]),
            "S002"
        );
        let other = vec![Axis::Dim(lit(2)), Axis::Dim(lit(512))];
        assert_eq!(code(&[x, other], &[("ratio", 4), ("dim", 512)]), "S002");
    }
}
