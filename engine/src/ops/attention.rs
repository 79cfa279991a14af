//! Softmax attention: rotary embedding, head views, scores, softmax, weighted sum.

use super::*;

pub(super) static OPS: &[OpSpec] = &[
    op!(
        "rope",
        Preserve,
        Some(1),
        [
            "dim",
            "rotary_dim?",
            "scaling?",
            "interleaved?",
            "sections?",
            "sections_interleaved?",
            "trailing?"
        ],
        "Rotary position embedding on the first `rotary_dim` channels of the last axis (`trailing: true`: on the last ones, as DeepSeek-V4's `x[..., -rope_dim:]`). `scaling` names the rope type (default, linear, dynamic, yarn, llama3, longrope); `interleaved` pairs adjacent channels instead of halves. Multi-axis rope (mRoPE): `sections` lists how many of the rotary_dim/2 frequencies each position axis (time, height, width) drives, summing to rotary_dim/2; `sections_interleaved` takes them round-robin (t h w t h w ...) instead of one contiguous run per axis.",
        "[..., dim] -> same",
        "none",
        "0",
        "3*rotary_dim per leading element"
    ),
    op!(
        "head_split",
        Reshape,
        Some(1),
        ["heads", "head_dim"],
        "View the last axis as [heads, head_dim].",
        "[heads*head_dim] -> [heads, head_dim]",
        "none",
        "0",
        "0"
    ),
    op!(
        "head_merge",
        Reshape,
        Some(1),
        [],
        "Flatten [heads, head_dim] into one axis.",
        "[heads, head_dim] -> [heads*head_dim]",
        "none",
        "0",
        "0"
    ),
    op!(
        "broadcast_heads",
        Broadcast,
        Some(1),
        ["heads"],
        "Share one vector with every head (MLA's rope key).",
        "[d] or [1, d] -> [heads, d]",
        "none",
        "0",
        "0"
    ),
    op!(
        "attention_score",
        Contract,
        None,
        ["mask?", "window?", "chunk?"],
        "Scores q.k for every attended position. Inputs [q, k] or [q, k, selection]; q heads must be a multiple of k heads (GQA). mask: causal (default) or bidirectional; window: sliding-window length; a third input from topk_select limits the attended positions to the selection's: [k] shared by every head, or [g, k] with one selection per group of h/g query heads (an indexer head per KV group).",
        "[h, d], [hk, d] (, [k] or [g, k] selection) -> [h, ctx]",
        "none",
        "0",
        "2*h*d*L"
    ),
    op!(
        "softmax",
        Preserve,
        Some(1),
        ["sinks?"],
        "Softmax over the context axis; `sinks: <heads>` adds a learned per-head sink logit.",
        "[h, ctx] -> same",
        "sinks [heads] (vector) when sinks",
        "heads when sinks",
        "5*h*L"
    ),
    op!(
        "attention_apply",
        Contract,
        None,
        [],
        "Weighted sum of values. Inputs [probs, v]; probs heads a multiple of v heads. Probabilities over scores concatenated along ctx (several key sets in one softmax) take one value input per key set, in the concat's order: [probs, v1, v2].",
        "[h, ctx], [hk, dv] (, [hk, dv] ...) -> [h, dv]",
        "none",
        "0",
        "2*h*dv*L"
    ),
];

/// A selection is [k] (every head attends the same positions) or [g, k]: one selection per
/// group of `heads / g` consecutive query heads, as a per-KV-head indexer's is repeated onto the
/// query heads of its group.
fn selection_groups(sel: &Shape, heads: &Q) -> Result<(), OpError> {
    let groups = match sel.as_slice() {
        [_] => return Ok(()),
        [Axis::Dim(g), Axis::Dim(_)] => g,
        _ => {
            return Err(OpError {
                code: code::SHAPE_RANK,
                message: format!(
                    "attention_score: a selection is [k] or [groups, k], got {}",
                    show_shape(sel)
                ),
                hint: Some("pass the topk_select node itself as the third input".into()),
            });
        }
    };
    if groups.v <= 0 || heads.v.checked_rem(groups.v) != Some(0) {
        return Err(OpError {
            code: code::SHAPE_HEADS,
            message: format!(
                "attention_score: {} selections cannot be shared out among {} query heads",
                groups.v, heads.v
            ),
            hint: Some(
                "one selection per KV group: the indexer's heads must divide the query heads"
                    .into(),
            ),
        });
    }
    Ok(())
}

/// mRoPE's sections split the rotary_dim/2 frequencies among the position axes: each takes a
/// positive count and together they take all of them (the source's `mrope_section`). Which
/// frequencies each axis takes changes no count; the source guard checks the layout.
/// `sections_interleaved` without sections lays out nothing (a component passes the flag to
/// every rope it builds); the source guard holds a rope's sections to the source (M026).
fn rope_sections(rotary_dim: &Q, a: &dyn Args) -> Result<(), OpError> {
    a.flag("sections_interleaved")?;
    let Some(sections) = a.int_list("sections")? else {
        return Ok(());
    };
    let half = rotary_dim.v / 2;
    let sum: i128 = sections
        .iter()
        .map(|&n| n.max(0))
        .fold(0, i128::saturating_add);
    if sections.is_empty() || sections.iter().any(|&n| n <= 0) || sum != half {
        return Err(OpError {
            code: code::SHAPE_AXIS,
            message: format!(
                "rope: sections {sections:?} must be positive and sum to rotary_dim/2 = {half} (they sum to {sum})"
            ),
            hint: Some(
                "each position axis takes some of the rotary_dim/2 frequencies and together they take all: check `rotary_dim` (partial rotary) and the config's mrope_section".into(),
            ),
        });
    }
    Ok(())
}

pub(super) fn apply(op: &str, inputs: &[Shape], a: &dyn Args) -> Result<OpOut, OpError> {
    let x0 = || inputs.first().cloned().unwrap_or_default();
    match op {
        "rope" => {
            let d = a.int("dim")?;
            let s = x0();
            expect_last(&s, &d, "rope")?;
            let r = a.opt_int("rotary_dim")?.unwrap_or(d.clone());
            if r.v > d.v || r.v <= 0 || r.v % 2 != 0 {
                return err(
                    code::SHAPE_AXIS,
                    format!(
                        "rope: rotary_dim {} must be even and within the head dim {}",
                        r.v, d.v
                    ),
                );
            }
            rope_sections(&r, a)?;
            Ok(OpOut::shape(s.clone()).flops(&(&lit(3) * &r) * &lead(&s)))
        }
        "head_split" => {
            let (h, d) = (a.int("heads")?, a.int("head_dim")?);
            let s = x0();
            let n = last(&s, "head_split")?;
            let hd = &h * &d;
            if hd.overflowed() {
                return err(
                    code::OVERFLOW,
                    format!("head_split: heads*head_dim = {}*{} overflows", h.v, d.v),
                );
            }
            if n.v != hd.v {
                return Err(OpError {
                    code: code::SHAPE_HEADS,
                    message: format!(
                        "head_split: last axis {} is not heads*head_dim = {}*{} = {}",
                        n.v, h.v, d.v, hd.v
                    ),
                    hint: Some("split a flat axis only when it really is heads*head_dim".into()),
                });
            }
            let mut shape = s[..s.len() - 1].to_vec();
            shape.push(Axis::Dim(h));
            shape.push(Axis::Dim(d));
            Ok(OpOut::shape(shape))
        }
        "head_merge" => {
            let s = x0();
            if s.len() < 2 {
                return err(
                    code::SHAPE_RANK,
                    format!("head_merge needs [heads, head_dim], got {}", show_shape(&s)),
                );
            }
            let (h, d) = (s[s.len() - 2].clone(), s[s.len() - 1].clone());
            let (Some(h), Some(d)) = (h.dim(), d.dim()) else {
                return err(
                    code::SHAPE_AXIS,
                    "head_merge: cannot merge the context axis".into(),
                );
            };
            let mut shape = s[..s.len() - 2].to_vec();
            shape.push(Axis::Dim(h * d));
            Ok(OpOut::shape(shape))
        }
        "broadcast_heads" => {
            let h = a.int("heads")?;
            let s = x0();
            let d = last(&s, "broadcast_heads")?.clone();
            let ok = s.len() == 1 || (s.len() == 2 && s[0].dim().map(|q| q.v) == Some(1));
            if !ok {
                return err(
                    code::SHAPE_RANK,
                    format!(
                        "broadcast_heads takes [d] or [1, d], got {}",
                        show_shape(&s)
                    ),
                );
            }
            Ok(OpOut::shape(vec![Axis::Dim(h), Axis::Dim(d)]))
        }
        "attention_score" | "attention_apply" => {
            let arity_ok = inputs.len() == 2
                || (op == "attention_score" && inputs.len() == 3)
                || (op == "attention_apply" && inputs.len() > 2);
            if !arity_ok {
                return err(
                    code::SHAPE_ARITY,
                    format!("{op} takes 2 inputs, got {}", inputs.len()),
                );
            }
            if op == "attention_apply"
                && let Some((n, v)) = inputs
                    .iter()
                    .enumerate()
                    .skip(2)
                    .find(|(_, v)| *v != &inputs[1])
            {
                return Err(OpError {
                    code: code::SHAPE_AXIS,
                    message: format!(
                        "attention_apply: value input {n} is {} but value input 1 is {}",
                        show_shape(v),
                        show_shape(&inputs[1])
                    ),
                    hint: Some("the key sets of one softmax give values of one shape: split and broadcast heads alike".into()),
                });
            }
            let (q, k) = (&inputs[0], &inputs[1]);
            if q.len() != 2 || k.len() != 2 {
                return Err(OpError {
                    code: code::SHAPE_RANK,
                    message: format!("{op}: inputs must be [heads, dim]; got {} and {}", show_shape(q), show_shape(k)),
                    hint: Some("split heads first (head_split), and broadcast a shared key (broadcast_heads)".into()),
                });
            }
            let hq = q[0]
                .dim()
                .ok_or_else(|| OpError {
                    code: code::SHAPE_AXIS,
                    message: format!("{op}: first input's heads axis is ctx"),
                    hint: None,
                })?
                .clone();
            let hk = k[0]
                .dim()
                .ok_or_else(|| OpError {
                    code: code::SHAPE_AXIS,
                    message: format!("{op}: second input's heads axis is ctx"),
                    hint: None,
                })?
                .clone();
            if hk.v <= 0 || hq.v.checked_rem(hk.v) != Some(0) {
                return Err(OpError {
                    code: code::SHAPE_HEADS,
                    message: format!(
                        "{op}: {} query heads are not a multiple of {} key/value heads",
                        hq.v, hk.v
                    ),
                    hint: Some("GQA needs n_heads % n_kv_heads == 0".into()),
                });
            }
            if op == "attention_score" {
                let (dq, dk) = (last(q, op)?, last(k, op)?);
                if dq.v != dk.v {
                    return Err(OpError {
                        code: code::SHAPE_HEADS,
                        message: format!("attention_score: query head dim {} differs from key head dim {}", dq.v, dk.v),
                        hint: Some("q and k must have the same head dim (MLA: concat nope and rope parts on both)".into()),
                    });
                }
                if let Some(sel) = inputs.get(2) {
                    selection_groups(sel, &hq)?;
                }
                let mut out = OpOut::shape(vec![Axis::Dim(hq.clone()), Axis::Ctx]);
                out.flops_per_ctx = &(&lit(2) * &hq) * dq;
                Ok(out)
            } else {
                if q[1] != Axis::Ctx {
                    return err(
                        code::SHAPE_AXIS,
                        format!(
                            "attention_apply: first input must be probabilities [h, ctx], got {}",
                            show_shape(q)
                        ),
                    );
                }
                let dv = last(k, op)?.clone();
                let mut out = OpOut::shape(vec![Axis::Dim(hq.clone()), Axis::Dim(dv.clone())]);
                out.flops_per_ctx = &(&lit(2) * &hq) * &dv;
                Ok(out)
            }
        }
        "softmax" => {
            let s = x0();
            let mut out = elementwise(OpOut::shape(s.clone()), &s, 5);
            if let Some(h) = a.opt_int("sinks")? {
                out = out.leaf("sinks", LeafKind::Vector, vec![h]);
            }
            Ok(out)
        }
        other => err(code::SHAPE_ARITY, format!("no such op `{other}`")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ops::test_args::args;

    fn rope(bound: &dyn Args) -> Result<OpOut, OpError> {
        apply(
            "rope",
            &[vec![Axis::Dim(lit(2)), Axis::Dim(lit(256))]],
            bound,
        )
    }

    #[test]
    fn mrope_sections_share_out_the_rotary_half_width() {
        // Qwen3.5: head_dim 256, partial rotary 0.25, mrope_section [11, 11, 10].
        let base = [
            ("dim", 256),
            ("rotary_dim", 64),
            ("sections_interleaved", 1),
        ];
        let plain = rope(&args(&base[..2])).unwrap();
        let ok = rope(&args(&base).list("sections", &[11, 11, 10])).unwrap();
        assert_eq!(ok.flops_fixed.v, plain.flops_fixed.v);
        assert_eq!(ok.flops_fixed.v, 3 * 64 * 2);
        for bad in [&[11, 11, 11][..], &[16, 16, 16], &[32, 0], &[]] {
            let e = rope(&args(&base).list("sections", bad)).unwrap_err();
            assert_eq!(e.code, code::SHAPE_AXIS, "{bad:?}");
            assert!(e.message.contains("rotary_dim/2 = 32"), "{}", e.message);
        }
        // Sections of the whole head dim do not fit a partial rotary.
        let e = rope(&args(&base).list("sections", &[48, 40, 40])).unwrap_err();
        assert!(e.message.contains("sum to 128"), "{}", e.message);
        // No sections: a one-axis rope, whatever the layout flag says.
        assert_eq!(
            rope(&args(&base)).unwrap().flops_fixed.v,
            plain.flops_fixed.v
        );
    }

    #[test]
    fn scores_of_several_key_sets_concatenate_along_ctx_and_apply_takes_a_value_each() {
        let d = |v| Axis::Dim(lit(v));
        let scores = vec![d(8), Axis::Ctx];
        let joint =
            crate::ops::apply("concat", &[scores.clone(), scores.clone()], &args(&[])).unwrap();
        assert_eq!(joint.shape, scores);
        // Scores of other heads, or a value beside a score, are not one softmax's key sets.
        let e = crate::ops::apply(
            "concat",
            &[scores.clone(), vec![d(4), Axis::Ctx]],
            &args(&[]),
        )
        .unwrap_err();
        assert!(
            e.message
                .contains("along the context axis: input 2 is [4, ctx]"),
            "{}",
            e.message
        );
        assert!(
            crate::ops::apply("concat", &[scores.clone(), vec![d(8), d(3)]], &args(&[])).is_err()
        );
        let v = vec![d(1), d(16)];
        let out = apply(
            "attention_apply",
            &[scores.clone(), v.clone(), v.clone()],
            &args(&[]),
        )
        .unwrap();
        assert_eq!(out.shape, vec![d(8), d(16)]);
        assert_eq!(out.flops_per_ctx.v, 2 * 8 * 16);
        let e = apply(
            "attention_apply",
            &[scores, v, vec![d(1), d(32)]],
            &args(&[]),
        )
        .unwrap_err();
        assert!(
            e.message.contains("value input 2 is [1, 32]"),
            "{}",
            e.message
        );
    }
}
