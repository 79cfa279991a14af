//! `plan`: the layouts a model can be served with on one GPU type, each analysed over the same
//! [`Model`] (one evaluation per model), and the ones worth naming: the smallest that fits,
//! the most tokens per second per GPU, the lowest cost per million tokens.
//!
//! Candidates are every layout of TP, EP and PP degrees (powers of two) that the GPU counts
//! 1, 2, 4, … up to a node and then whole nodes up to `max_gpus` allow; attention TP stays
//! inside a node, data parallelism takes the rest of a stage, the dense FFN and the vocabulary
//! follow attention, and the experts take every EP degree of the stage with TP on the rest. A
//! degree that does not divide a dim of the model is not a candidate (counted in
//! `rejected_by_dims`).

use serde::Serialize;

use crate::layout::{GivenDegrees, Layout, LayoutSpec};
use crate::report::{Report, Request, analyze_plan};
use crate::shard::{Model, Plan};
use crate::verdict::Fit;

/// What a search may try and how it prices a GPU.
#[derive(Clone, Debug)]
pub struct SearchSpec {
    /// GPUs per node (the hardware table's `node_size`).
    pub node: u32,
    /// The most GPUs a candidate may use.
    pub max_gpus: u32,
    /// The most pipeline stages a candidate may have.
    pub max_pp: u32,
    /// Price of one GPU for an hour, in dollars.
    pub usd_per_gpu_hour: Option<f64>,
    /// A decode step (TPOT) longer than this, at the estimate, does not qualify.
    pub max_tpot_s: Option<f64>,
}

/// One layout's figures, as `analyze` of that layout gives them.
#[derive(Clone, Debug, Serialize)]
pub struct Candidate {
    pub layout: String,
    pub gpus: u32,
    pub nodes: u32,
    pub verdict: Option<Fit>,
    pub weights_bytes_per_gpu: Option<i128>,
    pub kv_budget_bytes: Option<i128>,
    pub max_decode_requests: Option<i128>,
    pub decode_batch: i128,
    pub ttft_bound_s: Option<f64>,
    pub ttft_estimate_s: Option<f64>,
    pub tpot_bound_s: Option<f64>,
    pub tpot_estimate_s: Option<f64>,
    pub tokens_per_s_per_gpu_bound: Option<f64>,
    pub tokens_per_s_per_gpu_estimate: Option<f64>,
    /// Dollars per million generated tokens at the estimate's and at the bound's throughput.
    pub usd_per_million_tokens_estimate: Option<f64>,
    pub usd_per_million_tokens_bound: Option<f64>,
    /// Meets the latency target (true when none was given).
    pub meets_tpot: bool,
}

impl Candidate {
    fn of(r: &Report, node: u32, spec: &SearchSpec) -> Candidate {
        let m = r.memory.as_ref();
        let usd = |tps: Option<f64>| {
            let price = spec.usd_per_gpu_hour?;
            let tps = tps.filter(|t| *t > 0.0)?;
            Some(price / 3600.0 / tps * 1e6)
        };
        Candidate {
            layout: r.layout.clone(),
            gpus: r.gpus,
            nodes: r.gpus.div_ceil(node.max(1)),
            verdict: r.verdict,
            weights_bytes_per_gpu: m.map(|m| m.weights_bytes_per_gpu),
            kv_budget_bytes: m.map(|m| m.kv_budget_bytes),
            max_decode_requests: m.map(|m| m.max_decode_requests),
            decode_batch: r.assumptions.decode_batch,
            ttft_bound_s: r.ttft_bound_s,
            ttft_estimate_s: r.ttft_estimate_s,
            tpot_bound_s: r.tpot_bound_s,
            tpot_estimate_s: r.tpot_estimate_s,
            tokens_per_s_per_gpu_bound: r.tokens_per_s_per_gpu_bound,
            tokens_per_s_per_gpu_estimate: r.tokens_per_s_per_gpu_estimate,
            usd_per_million_tokens_estimate: usd(r.tokens_per_s_per_gpu_estimate),
            usd_per_million_tokens_bound: usd(r.tokens_per_s_per_gpu_bound),
            meets_tpot: match (spec.max_tpot_s, r.tpot_estimate_s) {
                (None, _) => true,
                (Some(max), Some(t)) => t <= max,
                (Some(_), None) => false,
            },
        }
    }

    /// Fits, has its throughput, and meets the latency target.
    pub fn qualifies(&self) -> bool {
        self.verdict == Some(Fit::Fits)
            && self.tokens_per_s_per_gpu_estimate.is_some()
            && self.meets_tpot
    }
}

#[derive(Clone, Debug, Serialize)]
pub struct Search {
    /// Layouts analysed.
    pub evaluated: usize,
    /// Layouts whose degrees do not divide a dim of the model.
    pub rejected_by_dims: usize,
    pub candidates: Vec<Candidate>,
    /// Indices into `candidates`: the fewest GPUs that fit (ties: the most tokens/s per GPU).
    pub smallest: Option<usize>,
    /// The most tokens per second per GPU at the estimate.
    pub best_tokens_per_s_per_gpu: Option<usize>,
    /// The fewest dollars per million tokens at the estimate (with a price).
    pub best_usd_per_million_tokens: Option<usize>,
    /// Per GPU count tried: how many layouts were analysed and how many of them fit (a count
    /// none of whose layouts fits is too small for the model).
    pub by_gpus: Vec<GpuCount>,
}

#[derive(Clone, Debug, Serialize)]
pub struct GpuCount {
    pub gpus: u32,
    pub layouts: usize,
    pub fitting: usize,
}

fn powers_of_two_dividing(n: u32, max: u32) -> Vec<u32> {
    (0..32)
        .map(|k| 1u32 << k)
        .take_while(|&d| d <= n && d <= max)
        .filter(|d| n.is_multiple_of(*d))
        .collect()
}

/// The GPU counts a search tries: 1, 2, 4, … up to a node, then 2, 4, … nodes.
pub fn gpu_counts(node: u32, max_gpus: u32) -> Vec<u32> {
    let node = node.max(1);
    let mut v: Vec<u32> = (0..32)
        .map(|k| 1u32 << k)
        .take_while(|&g| g < node && g <= max_gpus)
        .collect();
    let mut g = node;
    while g <= max_gpus {
        v.push(g);
        g = g.saturating_mul(2);
        if g == u32::MAX {
            break;
        }
    }
    v
}

/// Every candidate layout for `model` (before checking the model's dims).
pub fn layouts(model: &Model, spec: &SearchSpec) -> Vec<Layout> {
    let experts = model.rows.iter().any(|r| r.expert);
    let mut out = Vec::new();
    for gpus in gpu_counts(spec.node, spec.max_gpus) {
        let max_pp = spec
            .max_pp
            .min(model.main_layers.max(1).min(u32::MAX as i128) as u32);
        for pp in powers_of_two_dividing(gpus, max_pp) {
            let stage = gpus / pp;
            for tp in powers_of_two_dividing(stage, spec.node) {
                let attn = GivenDegrees {
                    tp: Some(tp),
                    dp: Some(stage / tp),
                    ep: None,
                };
                let moes: Vec<Option<GivenDegrees>> = if experts {
                    powers_of_two_dividing(stage, stage)
                        .into_iter()
                        .filter(|ep| stage / ep <= spec.node)
                        .map(|ep| {
                            Some(GivenDegrees {
                                tp: Some(stage / ep),
                                dp: Some(1),
                                ep: Some(ep),
                            })
                        })
                        .collect()
                } else {
                    vec![None]
                };
                for moe in moes {
                    let s = LayoutSpec {
                        gpus: Some(gpus),
                        pp: Some(pp),
                        attn: Some(attn),
                        moe,
                        ..LayoutSpec::default()
                    };
                    if let Ok(l) = s.resolve(None)
                        && !out.contains(&l)
                    {
                        out.push(l);
                    }
                }
            }
        }
    }
    out
}

/// Analyses every candidate layout under `base` (its GPU and workload; its layout is
/// replaced) and names the best.
pub fn search(model: &Model, base: &Request, spec: &SearchSpec) -> Search {
    let mut candidates = Vec::new();
    let mut rejected = 0;
    let all = layouts(model, spec);
    for layout in &all {
        let Ok(plan) = Plan::new(model, layout) else {
            rejected += 1;
            continue;
        };
        let mut req = base.clone();
        req.layout = layout.clone();
        let report = analyze_plan(&plan, &req);
        candidates.push(Candidate::of(&report, spec.node, spec));
    }
    let tps = |c: &Candidate| c.tokens_per_s_per_gpu_estimate.unwrap_or(0.0);
    let best_by = |key: &dyn Fn(&Candidate) -> f64| -> Option<usize> {
        candidates
            .iter()
            .enumerate()
            .filter(|(_, c)| c.qualifies())
            .max_by(|(_, a), (_, b)| key(a).total_cmp(&key(b)))
            .map(|(i, _)| i)
    };
    let smallest = candidates
        .iter()
        .enumerate()
        .filter(|(_, c)| c.qualifies())
        .min_by(|(_, a), (_, b)| a.gpus.cmp(&b.gpus).then(tps(b).total_cmp(&tps(a))))
        .map(|(i, _)| i);
    let best_tokens = best_by(&tps);
    let best_usd = if spec.usd_per_gpu_hour.is_some() {
        best_by(&|c| -c.usd_per_million_tokens_estimate.unwrap_or(f64::INFINITY))
    } else {
        None
    };
    let mut by_gpus: Vec<GpuCount> = Vec::new();
    for c in &candidates {
        let fits = (c.verdict == Some(Fit::Fits)) as usize;
        match by_gpus.iter_mut().find(|g| g.gpus == c.gpus) {
            Some(g) => {
                g.layouts += 1;
                g.fitting += fits;
            }
            None => by_gpus.push(GpuCount {
                gpus: c.gpus,
                layouts: 1,
                fitting: fits,
            }),
        }
    }
    Search {
        evaluated: candidates.len(),
        rejected_by_dims: rejected,
        candidates,
        smallest,
        best_tokens_per_s_per_gpu: best_tokens,
        best_usd_per_million_tokens: best_usd,
        by_gpus,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn gpu_counts_grow_to_a_node_then_by_nodes() {
        assert_eq!(gpu_counts(8, 64), vec![1, 2, 4, 8, 16, 32, 64]);
        assert_eq!(gpu_counts(8, 1), vec![1]);
        assert_eq!(gpu_counts(4, 12), vec![1, 2, 4, 8]);
        assert_eq!(powers_of_two_dividing(12, 12), vec![1, 2, 4]);
    }
}
