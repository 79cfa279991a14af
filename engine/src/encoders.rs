//! Encoders: the rows an image input feeds before its features join the token stream. They
//! are part of the model (their weights count in the totals and the bytes) but not of the
//! per-token forward pass: an encoder runs once per image, bidirectionally over that image's
//! positions, so its cost is a prefill of those positions, counted per image.

use crate::analysis::{Analysis, NodeRow};
use crate::q::Q;

/// One encoder's figures, for `show` and `analyze`.
#[derive(Clone, Debug, serde::Serialize)]
pub struct EncoderSummary {
    /// The image input it encodes.
    pub input: String,
    pub height: i128,
    pub width: i128,
    /// Frames of one input (a video's; an image is one temporal patch).
    pub frames: i128,
    pub patches: i128,
    /// Token positions one image's features fill in the token stream.
    pub tokens_per_image: i128,
    pub params: i128,
    pub weight_bytes: i128,
    pub flops_per_image: i128,
}

impl Analysis {
    fn in_encoder<'a>(&'a self, input: &'a str) -> impl Iterator<Item = &'a NodeRow> + 'a {
        self.nodes
            .iter()
            .filter(move |n| n.per_image.as_ref().is_some_and(|p| p.input == input))
    }

    /// Parameters of the encoder of image input `input`.
    pub fn params_encoder(&self, input: &str) -> Q {
        let terms: Vec<Q> = self
            .in_encoder(input)
            .map(|n| &n.params * &n.count)
            .collect();
        Q::sum(&terms)
    }

    /// Parameters of the text model: every parameter outside the encoders (MTP included).
    pub fn params_text(&self) -> Q {
        let terms: Vec<Q> = self
            .nodes
            .iter()
            .filter(|n| n.per_image.is_none())
            .map(|n| &n.params * &n.count)
            .collect();
        Q::sum(&terms)
    }

    /// Stored bytes of the encoder of `input`.
    pub fn weight_bytes_encoder(&self, input: &str) -> Q {
        let terms: Vec<Q> = self
            .weights
            .iter()
            .filter(|w| {
                self.nodes[w.node]
                    .per_image
                    .as_ref()
                    .is_some_and(|p| p.input == input)
            })
            .map(|w| self.weight_row_bytes(w))
            .collect();
        Q::sum(&terms)
    }

    /// FLOPs of one row for one image: every position once, and each attending op over all of
    /// the image's positions (bidirectional; within its window where it has one).
    pub fn node_image_flops(&self, n: &NodeRow) -> Q {
        let Some(p) = &n.per_image else {
            return Q::zero();
        };
        let pos = &p.positions;
        let attended = crate::rows::over_spans(n, |s| match &s.window {
            Some(w) if w.v < pos.v => pos * w,
            _ => pos * pos,
        });
        &n.active * &(&(&n.flops_fixed * pos) + &(&n.flops_per_ctx * &attended))
    }

    /// FLOPs of the encoder of `input` for one image at the evaluated resolution.
    pub fn encoder_flops_per_image(&self, input: &str) -> Q {
        let terms: Vec<Q> = self
            .in_encoder(input)
            .map(|n| self.node_image_flops(n))
            .collect();
        Q::sum(&terms)
    }

    /// Token positions `images` images of every input take in the context, and the FLOPs of
    /// encoding them.
    pub fn images_in_context(&self, images: i128) -> (i128, Q) {
        let tokens = self
            .images
            .iter()
            .map(|i| i.tokens.saturating_mul(images))
            .fold(0, i128::saturating_add);
        let flops: Vec<Q> = self
            .images
            .iter()
            .map(|i| &self.encoder_flops_per_image(&i.input) * &Q::lit(images))
            .collect();
        (tokens, Q::sum(&flops))
    }

    /// FLOPs of prefilling `seq` token positions of which the images' features fill some, plus
    /// encoding those images: the text model's causal prefill over the whole context and each
    /// encoder's per-image cost.
    pub fn prefill_flops_with_images(&self, text_tokens: &Q, images: i128) -> Q {
        let (tokens, encode) = self.images_in_context(images);
        let seq = text_tokens + &Q::lit(tokens);
        &self.prefill_flops(&seq) + &encode
    }

    pub fn encoder_summaries(&self) -> Vec<EncoderSummary> {
        self.images
            .iter()
            .map(|i| EncoderSummary {
                input: i.input.clone(),
                height: i.height,
                width: i.width,
                frames: i.frames,
                patches: i.patches,
                tokens_per_image: i.tokens,
                params: self.params_encoder(&i.input).v,
                weight_bytes: self.weight_bytes_encoder(&i.input).v,
                flops_per_image: self.encoder_flops_per_image(&i.input).v,
            })
            .collect()
    }
}
