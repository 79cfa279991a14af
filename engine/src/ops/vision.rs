//! Image encoders' ops: the patch embedding as stored (a convolution whose kernel is its
//! stride, so one matmul per patch), learned position grids interpolated to the image's patch
//! grid, the spatial merge of a square of patches into one position, and the join that puts
//! an image's features into the token embeddings.
//!
//! Shapes are per position of the value they run on: per patch inside an encoder, per token
//! in the token stream. The walk tracks which positions a value has (`eval/images.rs`).

use super::*;

/// The op where an image's features join the token stream.
pub const JOIN_OP: &str = "masked_scatter";
/// The op that adds an image's features to the token positions it already fills.
pub const ADD_OP: &str = "masked_add";
/// The op that joins `merge x merge` patches into one position.
pub const MERGE_OP: &str = "spatial_merge";
/// The op that embeds one patch of an image input.
pub const PATCH_OP: &str = "patch_embed";

pub(super) static OPS: &[OpSpec] = &[
    op!(
        "patch_embed",
        AxisReplace,
        Some(1),
        ["channels", "out", "patch", "temporal_patch?", "bias?"],
        "Embed one patch of an image input: a Conv2d (or, with temporal_patch, a Conv3d) whose kernel equals its stride, stored as the convolution's weight. Input: the patch's pixel values (channels*temporal_patch*patch*patch).",
        "[channels*temporal_patch*patch*patch] -> [out]",
        "weight [out, channels, temporal_patch, patch, patch] with temporal_patch, else [out, channels, patch, patch] (matrix); bias [out] when bias",
        "out*channels*temporal_patch*patch^2 (+out)",
        "2*out*channels*temporal_patch*patch^2 per patch"
    ),
    op!(
        "position_embedding",
        Preserve,
        Some(1),
        ["dim", "rows", "cols?", "taps?"],
        "Add a learned grid of position embeddings, interpolated to the image's patch grid, to x: `taps` weighted grid points per position (4 bilinear, the default; 16 bicubic).",
        "[dim] -> [dim]",
        "weight [rows, dim], or [rows, cols, dim] with cols (table)",
        "rows*dim (rows*cols*dim)",
        "(2*taps+1)*dim per position (the weighted taps and the add; 9*dim bilinear)"
    ),
    op!(
        "spatial_merge",
        Reshape,
        Some(1),
        ["merge"],
        "Join each square of merge x merge neighbouring patches into one position (a reshape): an image then has merge^2 times fewer positions.",
        "[d] -> [merge*merge*d]",
        "none",
        "0",
        "0"
    ),
    op!(
        "masked_scatter",
        Preserve,
        Some(2),
        [],
        "Put an image's features into the token embeddings at its placeholder tokens (`inputs_embeds.masked_scatter(image_mask, image_embeds)`). Inputs [token embeddings, features]; the image then fills as many token positions as its features have.",
        "[d], [d] -> [d]",
        "none",
        "0",
        "0"
    ),
    op!(
        "masked_add",
        Preserve,
        Some(2),
        [],
        "Add an image's features to the token stream at the positions the image already fills (DeepStack: `hidden_states[visual_pos_masks, :] + visual_embeds` after an early decoder layer). Inputs [token stream, features]; unlike `masked_scatter` it fills no new positions. Its adds touch the image's positions only: no per-token FLOPs.",
        "[d], [d] -> [d]",
        "none",
        "0",
        "0"
    ),
];

pub(super) fn apply(op: &str, inputs: &[Shape], a: &dyn Args) -> Result<OpOut, OpError> {
    match op {
        "patch_embed" => {
            let c = a.int("channels")?;
            let out = a.int("out")?;
            let p = a.int("patch")?;
            let t = a.opt_int("temporal_patch")?;
            let t_or_1 = t.clone().unwrap_or_else(Q::one);
            let pixels = &(&(&c * &t_or_1) * &p) * &p;
            let x = &inputs[0];
            let (n, ctx) = numel(x);
            if ctx || n.v != pixels.v {
                return err(
                    code::SHAPE_AXIS,
                    format!(
                        "patch_embed: its input holds {} values per position, but a patch of {} channels, {} frames and {}x{} pixels has {}",
                        n.v, c.v, t_or_1.v, p.v, p.v, pixels.v
                    ),
                );
            }
            let mut shape = vec![out.clone(), c.clone()];
            shape.extend(t.iter().cloned());
            shape.extend([p.clone(), p.clone()]);
            let mut o = OpOut::shape(vec![Axis::Dim(out.clone())])
                .flops(&(&lit(2) * &out) * &pixels)
                .leaf("weight", LeafKind::Matrix, shape);
            if a.flag("bias")? {
                o = o.leaf("bias", LeafKind::Vector, vec![out]);
            }
            Ok(o)
        }
        "position_embedding" => {
            let dim = a.int("dim")?;
            expect_last(&inputs[0], &dim, "position_embedding")?;
            let mut table = vec![a.int("rows")?];
            table.extend(a.opt_int("cols")?);
            table.push(dim.clone());
            let per_channel = match a.opt_int("taps")? {
                None => lit(9),
                Some(taps) if taps.v > 0 => &(&lit(2) * &taps) + &lit(1),
                Some(taps) => {
                    return err(
                        code::SHAPE_AXIS,
                        format!(
                            "position_embedding: taps {} is not a positive count of grid points",
                            taps.v
                        ),
                    );
                }
            };
            Ok(OpOut::shape(inputs[0].clone())
                .flops(&per_channel * &dim)
                .leaf("weight", LeafKind::Table, table))
        }
        "spatial_merge" => {
            let m = a.int("merge")?;
            if m.v <= 0 {
                return err(
                    code::SHAPE_AXIS,
                    format!("spatial_merge: merge {} is not a positive size", m.v),
                );
            }
            let d = last(&inputs[0], "spatial_merge")?.clone();
            let mut shape = inputs[0].clone();
            if let Some(l) = shape.last_mut() {
                *l = Axis::Dim(&(&m * &m) * &d);
            }
            Ok(OpOut::shape(shape))
        }
        "masked_scatter" | "masked_add" => {
            if inputs[0] != inputs[1] {
                return err(
                    code::SHAPE_AXIS,
                    format!(
                        "{op}: the features {} must have the token stream's shape {}",
                        show_shape(&inputs[1]),
                        show_shape(&inputs[0])
                    ),
                );
            }
            Ok(OpOut::shape(inputs[0].clone()))
        }
        _ => err(code::SHAPE_ARITY, format!("no such op `{op}`")),
    }
}
