//! Image inputs in the walk: an input's patches (its resolution cut by the patch sizes), the
//! encoder rows they flow through (each carries its positions per image), the spatial merge
//! that joins a square of patches into one position, and the join (`masked_scatter`) where an
//! image's features enter the token stream.

use std::collections::HashMap;
use std::rc::Rc;

use super::{Flow, Walker};
use crate::analysis::{ImageRow, PerImage};
use crate::diag::{Location, code};
use crate::ir::{InputIr, NodeIr, NodeKind};
use crate::ops::{ADD_OP, Axis, JOIN_OP, MERGE_OP, PATCH_OP};
use crate::q::Q;

impl<'a> Walker<'a> {
    /// The flow of an image input: one patch's pixel values per position, `patches` positions
    /// per image.
    pub(super) fn image_input(
        &mut self,
        input: &InputIr,
        env: &HashMap<String, Q>,
    ) -> Option<Flow> {
        let loc = &input.loc;
        let name = &input.name;
        let what = |k: &str| format!("input `{name}` {k}");
        let (mut height, mut width) = (
            self.eval_int(&input.height, env, loc, &what("height"))?,
            self.eval_int(&input.width, env, loc, &what("width"))?,
        );
        let mut video_frames = None;
        if let Some(size) = self.image {
            height = Q::lit(size.height);
            width = Q::lit(size.width);
            video_frames = size.frames;
        }
        let channels = self.eval_int(&input.channels, env, loc, &what("channels"))?;
        let patch = self.eval_int(&input.patch, env, loc, &what("patch"))?;
        let opt = |w: &mut Self, e: &Option<crate::expr::Expr>, k: &str, d: Q| match e {
            Some(e) => w.eval_int(e, env, loc, &what(k)),
            None => Some(d),
        };
        let temporal = opt(self, &input.temporal_patch, "temporal_patch", Q::one())?;
        let mut frames = opt(self, &input.frames, "frames", temporal.clone())?;
        if let Some(f) = video_frames {
            if !input.video {
                self.error(
                    code::EVAL,
                    format!("input `{name}` takes no video: the spec does not say that its tower encodes a video's temporal patches as one sequence"),
                    loc,
                    Some("count an image (`--image HxW`), or declare `video: true` on the input where the source attends across a video's frames at once".into()),
                );
                return None;
            }
            frames = Q::lit(f);
        }
        let merge = opt(self, &input.merge, "merge", Q::one())?;
        for (k, q) in [
            ("height", &height),
            ("width", &width),
            ("channels", &channels),
            ("patch", &patch),
            ("temporal_patch", &temporal),
            ("frames", &frames),
            ("merge", &merge),
        ] {
            if q.v <= 0 {
                self.error(
                    code::EVAL,
                    format!("input `{name}`: {k} is {}, not a positive size", q.v),
                    loc,
                    None,
                );
                return None;
            }
        }
        if height.v % patch.v != 0 || width.v % patch.v != 0 {
            self.error(
                code::EVAL,
                format!(
                    "input `{name}`: an image of {}x{} pixels is not a whole number of {}-pixel patches",
                    height.v, width.v, patch.v
                ),
                loc,
                Some(format!(
                    "give a resolution that is a multiple of the patch size {} (the processor resizes to one), e.g. {}x{}",
                    patch.v,
                    height.v / patch.v * patch.v,
                    width.v / patch.v * patch.v
                )),
            );
            return None;
        }
        if frames.v % temporal.v != 0 {
            self.error(
                code::EVAL,
                format!(
                    "input `{name}`: {} frames are not a whole number of {}-frame patches",
                    frames.v, temporal.v
                ),
                loc,
                Some(format!(
                    "give a frame count that is a multiple of the temporal patch size {} (the processor pads to one), e.g. {}",
                    temporal.v,
                    (frames.v / temporal.v).saturating_add(1).saturating_mul(temporal.v)
                )),
            );
            return None;
        }
        let (grid_h, grid_w) = (height.v / patch.v, width.v / patch.v);
        if grid_h % merge.v != 0 || grid_w % merge.v != 0 {
            self.error(
                code::EVAL,
                format!(
                    "input `{name}`: a spatial merge of {m}x{m} patches does not divide the {grid_h}x{grid_w} patch grid of a {}x{} image",
                    height.v,
                    width.v,
                    m = merge.v
                ),
                loc,
                Some(format!(
                    "the resolution must be a multiple of patch x merge = {} pixels",
                    patch.v.saturating_mul(merge.v)
                )),
            );
            return None;
        }
        let patches = grid_h
            .saturating_mul(grid_w)
            .saturating_mul(frames.v / temporal.v);
        self.out.images.push(ImageRow {
            input: name.clone(),
            kind: input.kind.clone(),
            height: height.v,
            width: width.v,
            frames: frames.v,
            patch: patch.v,
            temporal_patch: temporal.v,
            merge: merge.v,
            patches,
            tokens: 0,
        });
        let pixels = &(&(&channels * &temporal) * &patch) * &patch;
        Some(Flow {
            shape: vec![Axis::Dim(pixels)],
            window: None,
            selection: None,
            selected: None,
            compressed: None,
            stride: None,
            joint: vec![],
            from: Rc::from([]),
            image: Some(Rc::new(PerImage {
                input: name.clone(),
                positions: Q::atom(&format!("patches({name})"), patches, self.symbolic),
            })),
        })
    }

    /// The image a node's inputs run on; an error (and `None`) where it mixes the token stream
    /// with an image's patches anywhere but the join.
    pub(super) fn image_of(
        &mut self,
        node: &NodeIr,
        id: &str,
        inputs: &[Flow],
        loc: &Location,
    ) -> Option<Option<Rc<PerImage>>> {
        if matches!(&node.kind, NodeKind::Op(s) if s.name == JOIN_OP || s.name == ADD_OP) {
            return Some(None);
        }
        let first = inputs.iter().find_map(|f| f.image.clone());
        let Some(img) = first else {
            return Some(None);
        };
        let mixed = inputs
            .iter()
            .zip(&node.inputs)
            .find(|(f, _)| f.image.as_ref().is_none_or(|p| p.input != img.input));
        if let Some((f, from)) = mixed {
            let other = match &f.image {
                Some(p) => format!("the patches of image input `{}`", p.input),
                None => format!("the token stream (`{from}`)"),
            };
            self.error(
                code::SHAPE_AXIS,
                format!(
                    "`{id}` combines the patches of image input `{}` with {other}: an encoder's values are per patch of one image, the token stream's per token",
                    img.input
                ),
                loc,
                Some(format!("an image's features enter the token stream only through `{JOIN_OP}` (`in: [<token embeddings>, <features>]`), or are added at the positions they fill with `{ADD_OP}`")),
            );
            return None;
        }
        Some(Some(img))
    }

    /// The image an op's output runs on: its input's, with positions divided by a spatial
    /// merge, none after the join (which records the tokens an image fills).
    pub(super) fn image_after(
        &mut self,
        op: &str,
        row: usize,
        inputs: &[Flow],
        loc: &Location,
    ) -> Option<Option<Rc<PerImage>>> {
        let id = self.out.nodes[row].id.clone();
        let img = inputs.iter().find_map(|f| f.image.clone());
        match op {
            JOIN_OP | ADD_OP => {
                let (Some(tokens), Some(features)) = (inputs.first(), inputs.get(1)) else {
                    return Some(None);
                };
                let p = features.image.clone().filter(|_| tokens.image.is_none());
                let Some(p) = p else {
                    self.error(
                        code::SHAPE_AXIS,
                        format!("`{id}`: {op} puts an image's features into the token stream: its first input must be the token stream and its second an encoder's output"),
                        loc,
                        Some("`in: [<the token stream>, <the projector's output>]`".into()),
                    );
                    return None;
                };
                // The add lands on positions the join has already given the image.
                if op == JOIN_OP
                    && let Some(r) = self.out.images.iter_mut().find(|r| r.input == p.input)
                {
                    r.tokens += p.positions.v;
                }
                Some(None)
            }
            MERGE_OP | PATCH_OP if img.is_none() => {
                self.error(
                    code::SHAPE_AXIS,
                    format!("`{id}` ({op}) reads the token stream: an encoder's {} runs on the patches of an image input", if op == PATCH_OP { "patch embedding" } else { "spatial merge" }),
                    loc,
                    Some("declare the image under the model's `inputs:` and feed the patch embedding from it (`in: pixel_values`)".into()),
                );
                None
            }
            MERGE_OP => {
                let p = img?;
                let m = self.out.nodes[row]
                    .args
                    .get("merge")
                    .and_then(|a| a.int)
                    .unwrap_or(1);
                let square = Q::lit(m * m);
                let Some(positions) = p.positions.div_exact(&square).filter(|_| m > 0) else {
                    self.error(
                        code::EVAL,
                        format!(
                            "`{id}`: a spatial merge of {m}x{m} patches does not divide the {} patches of an image of `{}`",
                            p.positions.v, p.input
                        ),
                        loc,
                        Some("the merge size must divide the patch grid on both sides".into()),
                    );
                    return None;
                };
                Some(Some(Rc::new(PerImage {
                    input: p.input.clone(),
                    positions,
                })))
            }
            _ => Some(img),
        }
    }
}
