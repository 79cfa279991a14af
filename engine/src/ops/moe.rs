//! Mixture of experts: the router and the weighted combine of active experts.

use super::*;

pub(super) static OPS: &[OpSpec] = &[
    op!(
        "router",
        Explicit,
        Some(1),
        [
            "in",
            "experts",
            "top_k",
            "bias?",
            "score_bias?",
            "scoring?",
            "n_group?",
            "topk_group?",
            "norm_topk_prob?",
            "routed_scaling_factor?"
        ],
        "Expert router: logits = x W^T, scored, then top-k. bias: a linear bias [experts]; score_bias: a selection-only bias `e_score_correction_bias` [experts]; scoring: softmax (default), sigmoid, sqrtsoftplus (sqrt of softplus), or softmax_topk (softmax over the k kept logits); n_group/topk_group: grouped top-k (experts in n_group groups, the best topk_group groups kept); norm_topk_prob: renormalize the k weights; routed_scaling_factor: a factor on them (default 1). Each is checked against config (R006-R009).",
        "[in] -> [top_k]",
        "weight [experts, in] (matrix); bias [experts]; e_score_correction_bias [experts]",
        "experts*in (+experts)",
        "2*in*experts + scoring (softmax 5*experts, sigmoid 4*experts, sqrtsoftplus 5*experts, softmax_topk 5*top_k) + experts with score_bias + experts with n_group > 1 (group scores) + 2*top_k with norm_topk_prob + top_k with a routed_scaling_factor other than 1"
    ),
    op!(
        "hash_router",
        Explicit,
        Some(2),
        [
            "in",
            "experts",
            "top_k",
            "vocab",
            "scoring?",
            "norm_topk_prob?",
            "routed_scaling_factor?"
        ],
        "Hash routing: which experts a token uses is a stored table lookup (`tid2eid` [vocab, top_k], a buffer: token id -> expert ids), not a top-k; the learned gate still scores every expert, and the k looked-up scores weight the experts. Inputs [x [in], input_ids]. No selection bias exists on such a layer. scoring, norm_topk_prob and routed_scaling_factor as for router.",
        "[in], [] -> [top_k]",
        "weight [experts, in] (matrix); tid2eid [vocab, top_k] (buffer)",
        "experts*in (tid2eid is a buffer, not parameters)",
        "2*in*experts + scoring over every expert + 2*top_k with norm_topk_prob + top_k with a routed_scaling_factor other than 1"
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
            let flops = &(&(&lit(2) * &i) * &e) + &router_selection_flops(a, &e, &k)?;
            let mut out = OpOut::shape(vec![Axis::Dim(k)]).flops(flops).leaf(
                "weight",
                LeafKind::Matrix,
                vec![e.clone(), i],
            );
            if a.flag("bias")? {
                out = out.leaf("bias", LeafKind::Vector, vec![e.clone()]);
            }
            if a.flag("score_bias")? {
                out = out.leaf("e_score_correction_bias", LeafKind::Vector, vec![e]);
            }
            Ok(out)
        }
        "hash_router" => {
            let (i, e, k, v) = (
                a.int("in")?,
                a.int("experts")?,
                a.int("top_k")?,
                a.int("vocab")?,
            );
            expect_last(&inputs[0], &i, "hash_router")?;
            if !inputs[1].is_empty() {
                return Err(OpError {
                    code: code::SHAPE_RANK,
                    message: format!(
                        "hash_router: its second input is the token ids (shape []), got {}",
                        show_shape(&inputs[1])
                    ),
                    hint: Some(
                        "pass `input_ids` (through the block's inputs) as the second input".into(),
                    ),
                });
            }
            if k.v > e.v || k.v <= 0 || v.v <= 0 {
                return err(
                    code::SHAPE_AXIS,
                    format!(
                        "hash_router: top_k {} must be in 1..={} and vocab {} positive",
                        k.v, e.v, v.v
                    ),
                );
            }
            let flops = &(&(&lit(2) * &i) * &e) + &router_selection_flops(a, &e, &k)?;
            Ok(OpOut::shape(vec![Axis::Dim(k.clone())])
                .flops(flops)
                .leaf("weight", LeafKind::Matrix, vec![e, i])
                .leaf("tid2eid", LeafKind::Buffer, vec![v, k]))
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

/// What a router computes after its logits, by its stated attributes: the scoring function over
/// every expert, the selection bias and group scores, and the renormalization and scaling of the
/// k kept weights. Top-k comparisons are not counted as FLOPs.
fn router_selection_flops(a: &dyn Args, e: &Q, k: &Q) -> Result<Q, OpError> {
    let scoring = a.text("scoring")?.unwrap_or_else(|| "softmax".into());
    let mut f = match scoring.as_str() {
        "softmax" => &lit(5) * e,
        "sigmoid" => &lit(4) * e,
        // sqrt(softplus(x)) (DeepSeek-V4 `scoring_func: sqrtsoftplus`).
        "sqrtsoftplus" => &lit(5) * e,
        // Top-k on the logits first, then a softmax over the k kept (gpt-oss).
        "softmax_topk" => &lit(5) * k,
        other => {
            return Err(OpError {
                code: code::SHAPE_AXIS,
                message: format!(
                    "router: scoring `{other}` is not softmax, sigmoid, sqrtsoftplus or softmax_topk"
                ),
                hint: Some(
                    "bind it from config through an attr, e.g. `router_scoring: \"config.scoring_func ?? 'softmax'\"`"
                        .into(),
                ),
            });
        }
    };
    if a.flag("score_bias")? {
        f = &f + e;
    }
    let groups = a.opt_int("n_group")?.map(|q| q.v).unwrap_or(1);
    let kept = a.opt_int("topk_group")?.map(|q| q.v).unwrap_or(groups);
    if groups < 1 || e.v % groups != 0 || kept < 1 || kept > groups {
        return err(
            code::SHAPE_AXIS,
            format!(
                "router: {} experts cannot form {groups} groups with {kept} kept",
                e.v
            ),
        );
    }
    if groups > 1 {
        f = &f + e;
    }
    if a.flag("norm_topk_prob")? {
        f = &f + &(&lit(2) * k);
    }
    let scale = a.text("routed_scaling_factor")?;
    let scaled = match scale.as_deref() {
        None => false,
        Some(t) => match t.parse::<f64>() {
            Ok(v) => v != 1.0,
            Err(_) => {
                return err(
                    code::SHAPE_AXIS,
                    format!("router: routed_scaling_factor `{t}` is not a number"),
                );
            }
        },
    };
    if scaled {
        f = &f + k;
    }
    Ok(f)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ops::test_args::args;

    #[test]
    fn a_hash_router_stores_its_table_as_a_buffer_and_scores_every_expert() {
        // DeepSeek-V4-Flash's first layers: 256 experts, top 6, a [129280, 6] token table.
        let kv = [
            ("in", 4096),
            ("experts", 256),
            ("top_k", 6),
            ("vocab", 129280),
            ("norm_topk_prob", 1),
        ];
        let o = apply(
            "hash_router",
            &[vec![Axis::Dim(lit(4096))], vec![]],
            &args(&kv),
        )
        .unwrap();
        assert_eq!(o.shape, vec![Axis::Dim(lit(6))]);
        let leaves: Vec<(&str, LeafKind, Vec<i128>)> = o
            .leaves
            .iter()
            .map(|l| (l.name, l.kind, l.shape.iter().map(|q| q.v).collect()))
            .collect();
        assert_eq!(
            leaves,
            [
                ("weight", LeafKind::Matrix, vec![256, 4096]),
                ("tid2eid", LeafKind::Buffer, vec![129280, 6]),
            ]
        );
        // Logits, softmax scoring over every expert (the default), renormalised weights.
        assert_eq!(o.flops_fixed.v, 2 * 4096 * 256 + 5 * 256 + 2 * 6);
        // The token ids must be the second input.
        let e = apply(
            "hash_router",
            &[vec![Axis::Dim(lit(4096))], vec![Axis::Dim(lit(4096))]],
            &args(&kv),
        )
        .unwrap_err();
        assert_eq!(e.code, "S001");
        let mut big = kv;
        big[2] = ("top_k", 300);
        let e = apply(
            "hash_router",
            &[vec![Axis::Dim(lit(4096))], vec![]],
            &args(&big),
        );
        assert_eq!(e.unwrap_err().code, "S002");
    }

    #[test]
    fn an_unknown_scoring_function_is_an_error_not_a_default() {
        struct Scoring(&'static str);
        impl Args for Scoring {
            fn int(&self, name: &str) -> Result<Q, OpError> {
                Ok(lit(match name {
                    "in" => 64,
                    "experts" => 8,
                    _ => 2,
                }))
            }
            fn opt_int(&self, _: &str) -> Result<Option<Q>, OpError> {
                Ok(None)
            }
            fn flag(&self, _: &str) -> Result<bool, OpError> {
                Ok(false)
            }
            fn text(&self, name: &str) -> Result<Option<String>, OpError> {
                Ok((name == "scoring").then(|| self.0.to_string()))
            }
            fn int_list(&self, _: &str) -> Result<Option<Vec<i128>>, OpError> {
                Ok(None)
            }
            fn shape(&self) -> Result<Option<Vec<Q>>, OpError> {
                Ok(None)
            }
        }
        let x = vec![Axis::Dim(lit(64))];
        let ok = apply("router", std::slice::from_ref(&x), &Scoring("sqrtsoftplus")).unwrap();
        assert_eq!(ok.flops_fixed.v, 2 * 64 * 8 + 5 * 8);
        let e = apply(
            "router",
            std::slice::from_ref(&x),
            &Scoring("sqrt_softplus"),
        )
        .unwrap_err();
        assert_eq!(e.code, "S002");
        assert!(e.message.contains("sqrt_softplus"), "{}", e.message);
    }
}
