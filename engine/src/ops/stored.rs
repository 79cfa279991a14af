//! Stored tensors read as values: learned parameters of an explicit shape, and buffers.
//!
//! Both take their shape from the node's `shape:` list and own one tensor named by the node's
//! path itself (`A_log`, `rotary_emb.inv_freq`), not by a leaf under it. A parameter counts in
//! parameters; a buffer (`register_buffer`) counts only in stored bytes and tensor coverage.

use super::*;

pub(super) static OPS: &[OpSpec] = &[
    op!(
        "parameter",
        Source,
        Some(0),
        [],
        "A learned tensor of an explicit shape (`shape: [1, 1, n_heads, 1]` on the node), e.g. A_log or dt_bias; its value is an input of the op that reads it.",
        "-> shape",
        "the node's own path: shape (vector kind: never packed by a matrix scheme)",
        "product(shape)",
        "0"
    ),
    op!(
        "buffer",
        Source,
        Some(0),
        [],
        "A stored tensor that is not a parameter (`register_buffer`, e.g. rotary inv_freq): `shape:` and `src:` (a quote of the register_buffer line) on the node. Counted in stored bytes and tensor coverage, never in parameters or FLOPs; nothing needs to read it.",
        "-> shape",
        "the node's own path: shape (buffer kind)",
        "0",
        "0"
    ),
];

pub(super) fn apply(op: &str, _inputs: &[Shape], a: &dyn Args) -> Result<OpOut, OpError> {
    let Some(shape) = a.shape()? else {
        return Err(OpError {
            code: code::SHAPE_RANK,
            message: format!("{op} needs an explicit `shape:` on its node"),
            hint: Some("e.g. `A_log: { op: parameter, shape: [1, 1, n_heads, 1] }`".into()),
        });
    };
    if let Some(bad) = shape.iter().find(|q| q.v <= 0) {
        return err(
            code::SHAPE_AXIS,
            format!("{op}: axis {} of `shape:` is not a positive size", bad.v),
        );
    }
    let (role, kind) = match op {
        "buffer" => ("buffer", LeafKind::Buffer),
        _ => ("weight", LeafKind::Vector),
    };
    let mut out = OpOut::shape(shape.iter().cloned().map(Axis::Dim).collect());
    out.leaves.push(Leaf {
        role,
        name: "",
        kind,
        shape,
    });
    Ok(out)
}
