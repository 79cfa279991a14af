//! Normalizations over the last axis.

use super::*;

pub(super) static OPS: &[OpSpec] = &[
    op!(
        "rmsnorm",
        Preserve,
        Some(1),
        ["dim", "weight?", "unit_offset?"],
        "RMS normalization over the last axis with a learned scale (weight: false for none); unit_offset: true scales by (1 + weight), a zero-centred weight, as Qwen3-Next and Gemma do.",
        "[..., dim] -> same",
        "weight [dim] (vector)",
        "dim",
        "4*numel"
    ),
    op!(
        "layernorm",
        Preserve,
        Some(1),
        ["dim", "bias?"],
        "Layer normalization over the last axis.",
        "[..., dim] -> same",
        "weight [dim]; bias [dim] when bias (default true)",
        "dim (+dim)",
        "5*numel"
    ),
    op!(
        "l2norm",
        Preserve,
        Some(1),
        ["dim"],
        "L2 normalization over the last axis, no weight.",
        "[..., dim] -> same",
        "none",
        "0",
        "3*numel"
    ),
];

pub(super) fn apply(op: &str, inputs: &[Shape], a: &dyn Args) -> Result<OpOut, OpError> {
    let x0 = || inputs.first().cloned().unwrap_or_default();
    match op {
        "rmsnorm" | "layernorm" | "l2norm" => {
            let d = a.int("dim")?;
            let s = x0();
            expect_last(&s, &d, op)?;
            let k = match op {
                "rmsnorm" => 4,
                "layernorm" => 5,
                _ => 3,
            };
            let mut out = elementwise(OpOut::shape(s.clone()), &s, k);
            let has_weight = match op {
                "rmsnorm" => a.text("weight")?.is_none() || a.flag("weight")?,
                "layernorm" => true,
                _ => false,
            };
            if has_weight {
                out = out.leaf("weight", LeafKind::Vector, vec![d.clone()]);
            }
            // `unit_offset` changes no shape or count, but must be a condition: the semantic
            // guard compares it with the source's norm class.
            if op == "rmsnorm" {
                a.flag("unit_offset")?;
            }
            if op == "layernorm" && (a.text("bias")?.is_none() || a.flag("bias")?) {
                out = out.leaf("bias", LeafKind::Vector, vec![d]);
            }
            Ok(out)
        }
        other => err(code::SHAPE_ARITY, format!("no such op `{other}`")),
    }
}
