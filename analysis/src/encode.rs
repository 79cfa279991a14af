//! Encoding a request's images before its prefill: each encoder (a vision tower) runs once per
//! image over that image's positions (`Analysis::node_image_flops`), reading its weights once
//! per step. Its time adds to the prefill's in the TTFT; decode never runs it.
//!
//! Where it runs (one stated assumption): on the GPUs of the request's attention replica
//! (`gpus / attn.dp`), its FLOPs and weights split evenly among them. The bound is the larger
//! of the encoder's FLOPs over rated peak and its weights through HBM; the estimate composes
//! its ops one after another, each at the slowest of its compute and its weights and output
//! activations through HBM (as the phase estimate does).

use serde::Serialize;

use crate::cost::ComputePrecision;
use crate::hardware::{Gpu, Missing};
use crate::shard::Plan;
use crate::traffic::Activations;

pub const ASSUMPTION: &str = "each request's images are encoded on the GPUs of its attention replica, FLOPs and weights split evenly among them, before its prefill";

/// The encoding of one prefill step's images.
#[derive(Clone, Debug, Serialize)]
pub struct EncodeCost {
    /// Images per request.
    pub images_per_request: i128,
    /// Requests per attention replica whose images the step encodes.
    pub requests: i128,
    /// GPUs one replica's encoding is spread over.
    pub gpus: i128,
    #[serde(serialize_with = "crate::json::count")]
    pub flops_per_gpu: f64,
    #[serde(serialize_with = "crate::json::count")]
    pub weight_bytes_per_gpu: f64,
    #[serde(serialize_with = "crate::json::count")]
    pub activation_bytes_per_gpu: f64,
    pub bound_s: f64,
    pub estimate_s: f64,
    pub assumption: &'static str,
}

impl Plan<'_, '_> {
    /// The encoding of `images` images for each of `requests` requests per attention replica;
    /// `None` when the model has no encoder or no image is asked for.
    pub fn encode_cost(
        &self,
        gpu: &Gpu,
        requests: i128,
        images: i128,
        act: &Activations,
        compute: &ComputePrecision,
    ) -> Option<Result<EncodeCost, Vec<Missing>>> {
        let m = self.model;
        let a = m.a;
        if images <= 0 || a.images.is_empty() {
            return None;
        }
        let replica_gpus = (i128::from(self.layout.gpus) / i128::from(self.layout.attn.dp)).max(1);
        let split = replica_gpus as f64;
        let per_gpu_images = (requests * images) as f64 / split;
        let mut missing = Vec::new();
        let mut note = |r: Result<f64, Missing>| {
            r.unwrap_or_else(|e| {
                if !missing.contains(&e) {
                    missing.push(e);
                }
                f64::NAN
            })
        };
        let hbm = note(gpu.hbm_bytes_per_s());
        let (mut flops, mut weights, mut acts) = (0.0, 0.0, 0.0);
        let (mut compute_s, mut estimate_s) = (0.0, 0.0);
        for (r, info) in m.rows.iter().enumerate() {
            let n = &a.nodes[r];
            let Some(p) = &n.per_image else { continue };
            let row_weights: f64 = info
                .weights
                .iter()
                .map(|&w| m.weights[w].bytes as f64 / split)
                .sum();
            let row_flops = a.node_image_flops(n).v as f64 * per_gpu_images;
            let row_acts = if info.is_op && !info.view && !info.out_ctx {
                (info.out_elements * p.positions.v * act.bytes) as f64 * per_gpu_images
            } else {
                0.0
            };
            let precision = match compute {
                ComputePrecision::Fixed(p) => p.clone(),
                ComputePrecision::Weights => {
                    let p = info.weight_precision.unwrap_or(act.precision);
                    gpu.runs_at(p).unwrap_or(p).to_string()
                }
            };
            let row_compute = if row_flops > 0.0 {
                row_flops / note(gpu.peak_flops(&precision))
            } else {
                0.0
            };
            flops += row_flops;
            weights += row_weights;
            acts += row_acts;
            compute_s += row_compute;
            estimate_s += row_compute.max((row_weights + row_acts) / hbm);
        }
        if !missing.is_empty() {
            return Some(Err(missing));
        }
        Some(Ok(EncodeCost {
            images_per_request: images,
            requests,
            gpus: replica_gpus,
            flops_per_gpu: flops,
            weight_bytes_per_gpu: weights,
            activation_bytes_per_gpu: acts,
            bound_s: compute_s.max(weights / hbm),
            estimate_s,
            assumption: ASSUMPTION,
        }))
    }
}
