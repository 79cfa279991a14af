//! One deployment's figures, each labelled: `exact` (follows from the checkpoint, the layout
//! and the hardware's memory), `bound` (no implementation can do better) or `estimate` (a
//! model of one implementation: per-op serial composition, fused attention, uniform routing).

use std::collections::BTreeMap;

use serde::Serialize;

use crate::comm::{CommKind, Link};
use crate::cost::{ComputePrecision, PhaseCost};
use crate::encode::EncodeCost;
use crate::hardware::{Gpu, Missing};
use crate::layout::{Layout, LayoutError};
use crate::memory::{MemoryPlan, Residency};
use crate::shard::{Model, Plan};
use crate::traffic::{Activations, Logits, Step};
use crate::verdict::{Fit, Overflow, overflows};

/// The most tokens per request and requests per replica a run may ask for.
pub const MAX_TOKENS: i128 = 1 << 34;
pub const MAX_REQUESTS: i128 = 1 << 30;

/// What a run asks: a GPU, a layout, a workload and the assumptions to state.
#[derive(Clone, Debug)]
pub struct Request {
    pub gpu: Gpu,
    pub layout: Layout,
    /// Prompt tokens per request.
    pub input: i128,
    /// Generated tokens per request.
    pub output: i128,
    /// Context each request reaches, if not `input + output` (sizes KV and the decode step).
    pub context: Option<i128>,
    pub usable_fraction: f64,
    pub mtp: bool,
    pub activations: Activations,
    pub compute: ComputePrecision,
    /// Requests per attention replica in a decode step (default: as many as fit).
    pub decode_batch: Option<i128>,
    /// Requests per attention replica in a prefill step (TTFT).
    pub prefill_batch: i128,
    /// Where prefill computes logits (the last position, as servers do, unless `All`).
    pub logits: Logits,
    /// Cost the phases even where the deployment does not fit (a what-if: one request's
    /// compute and cache reads with memory unchecked, as a single-GPU comparison is stated);
    /// the verdict still says what overflows.
    pub ignore_memory: bool,
    /// Images per request, encoded before its prefill (their tokens are in `input`).
    pub images: i128,
}

impl Request {
    pub fn new(gpu: Gpu, layout: Layout, input: i128, output: i128) -> Request {
        Request {
            gpu,
            layout,
            input,
            output,
            context: None,
            usable_fraction: 0.9,
            mtp: false,
            activations: Activations {
                bytes: 2,
                precision: "bf16",
            },
            compute: ComputePrecision::Weights,
            decode_batch: None,
            prefill_batch: 1,
            logits: Logits::Last,
            ignore_memory: false,
            images: 0,
        }
    }
    pub fn context(&self) -> i128 {
        self.context.unwrap_or(self.input + self.output)
    }

    /// Token and request counts within what the arithmetic is exact for.
    pub fn check(&self) -> Result<(), LayoutError> {
        let bad = |what: &str, v: i128, lo: i128, hi: i128| -> Result<(), LayoutError> {
            if (lo..=hi).contains(&v) {
                Ok(())
            } else {
                Err(LayoutError {
                    message: format!("{what} {v} is not {lo} to {hi}"),
                    hint: None,
                })
            }
        };
        bad("input", self.input, 1, MAX_TOKENS)?;
        bad("output", self.output, 0, MAX_TOKENS)?;
        bad("context", self.context(), 1, MAX_TOKENS)?;
        bad("prefill batch", self.prefill_batch, 1, MAX_REQUESTS)?;
        bad("images per request", self.images, 0, MAX_REQUESTS)?;
        if let Some(b) = self.decode_batch {
            bad("decode batch", b, 1, MAX_REQUESTS)?;
        }
        if !(self.usable_fraction > 0.0 && self.usable_fraction <= 1.0) {
            return Err(LayoutError {
                message: format!("usable fraction {} is not in (0, 1]", self.usable_fraction),
                hint: None,
            });
        }
        Ok(())
    }
}

#[derive(Clone, Debug, Serialize)]
pub struct Assumptions {
    pub usable_fraction: f64,
    pub mtp_loaded: bool,
    /// Phases costed with memory unchecked (`Request::ignore_memory`).
    pub memory_ignored: bool,
    pub activation_precision: &'static str,
    pub activation_bytes: i128,
    pub compute_precision: ComputePrecision,
    pub decode_context: i128,
    pub decode_batch: i128,
    pub prefill_batch: i128,
    pub attention: &'static str,
    pub routing: &'static str,
    pub composition: &'static str,
    /// Where prefill computes logits: `last` (the last prompt position) or `all`.
    pub logits: Logits,
    /// Weights' precisions the GPU has no rate for, and the precision they run at instead.
    pub precision_fallbacks: BTreeMap<String, String>,
}

#[derive(Clone, Debug, Serialize)]
pub struct PhaseResult {
    pub status: &'static str,
    /// Always an array (empty when nothing is missing), as every list in the JSON is.
    pub missing: Vec<String>,
    #[serde(flatten)]
    pub cost: Option<PhaseCost>,
}

impl PhaseResult {
    fn from(r: Result<PhaseCost, Vec<Missing>>) -> PhaseResult {
        match r {
            Ok(c) => PhaseResult {
                status: "ok",
                missing: vec![],
                cost: Some(c),
            },
            Err(m) => PhaseResult {
                status: INSUFFICIENT_EVIDENCE,
                missing: m.iter().map(Missing::to_string).collect(),
                cost: None,
            },
        }
    }
}

pub const INSUFFICIENT_EVIDENCE: &str = "INSUFFICIENT_EVIDENCE";
/// The status of a deployment (and of its phases) whose weights or caches overflow a GPU.
pub const DOES_NOT_FIT: &str = "DOES_NOT_FIT";

/// Derived collectives of one phase, summed by what they do and where they run.
#[derive(Clone, Debug, Serialize)]
pub struct CommSummary {
    pub phase: &'static str,
    pub why: &'static str,
    pub kind: CommKind,
    pub link: Link,
    pub group: u32,
    /// Edges of the dataflow graph it occurs on (each for all its layers).
    pub edges: usize,
    #[serde(serialize_with = "crate::json::count")]
    pub bytes_per_gpu: f64,
    pub seconds: f64,
}

#[derive(Clone, Debug, Serialize)]
pub struct Report {
    pub model: String,
    pub gpu: String,
    pub gpus: u32,
    pub layout: String,
    pub degrees: Layout,
    /// `FITS` or `DOES_NOT_FIT` (null when the memory figure is missing).
    pub verdict: Option<Fit>,
    /// What overflows one GPU, by how much (empty when it fits).
    pub overflows: Vec<Overflow>,
    pub status: &'static str,
    /// Always an array (empty when nothing is missing), as every list in the JSON is.
    pub missing: Vec<String>,
    pub assumptions: Assumptions,
    pub hardware: Gpu,
    #[serde(flatten)]
    pub memory: Option<MemoryPlan>,
    pub prefill: PhaseResult,
    pub decode: PhaseResult,
    /// Encoding the prefill step's images (absent without images): part of the TTFT.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub encode: Option<EncodeCost>,
    /// Prefill plus encoding, when there are images.
    pub ttft_bound_s: Option<f64>,
    pub ttft_estimate_s: Option<f64>,
    pub tpot_bound_s: Option<f64>,
    pub tpot_estimate_s: Option<f64>,
    /// Decode tokens per second per GPU at the bound (a ceiling) and at the estimate.
    pub tokens_per_s_per_gpu_bound: Option<f64>,
    pub tokens_per_s_per_gpu_estimate: Option<f64>,
    pub context_limit: Option<i128>,
    /// The context is past the model's published limit: an extrapolation.
    pub extrapolated: bool,
    pub communication: Vec<CommSummary>,
    pub labels: BTreeMap<&'static str, &'static str>,
}

const LABELS: &[(&str, &str)] = &[
    ("weights_bytes_per_gpu", "exact"),
    ("kv_bytes_per_request", "exact"),
    ("kv_bytes_per_request_per_gpu", "exact"),
    ("kv_budget_bytes", "exact"),
    ("max_decode_requests", "exact"),
    ("prefill_activation_bytes_per_token", "estimate"),
    ("prefill_batch_cap", "estimate"),
    ("prefill.bound_s", "bound"),
    ("prefill.estimate_s", "estimate"),
    ("encode.bound_s", "bound"),
    ("encode.estimate_s", "estimate"),
    ("decode.bound_s", "bound"),
    ("decode.estimate_s", "estimate"),
    ("ttft_bound_s", "bound"),
    ("ttft_estimate_s", "estimate"),
    ("tpot_bound_s", "bound"),
    ("tpot_estimate_s", "estimate"),
    ("tokens_per_s_per_gpu_bound", "bound"),
    ("tokens_per_s_per_gpu_estimate", "estimate"),
];

/// The label of a figure's name (`decode.estimate_s` → `estimate`).
pub fn label_of(name: &str) -> Option<&'static str> {
    LABELS.iter().find(|(n, _)| *n == name).map(|(_, l)| *l)
}

/// Computes every figure of a deployment. A layout the model cannot take (a degree that does
/// not divide a dim) is an error; a figure the hardware table lacks makes the figures that need
/// it `INSUFFICIENT_EVIDENCE` and leaves the rest.
pub fn analyze<'m, 'a>(
    model: &'m Model<'a>,
    req: &Request,
) -> Result<(Plan<'m, 'a>, Report), LayoutError> {
    req.check()?;
    let plan = Plan::new(model, &req.layout)?;
    let report = analyze_plan(&plan, req);
    Ok((plan, report))
}

pub fn analyze_plan(plan: &Plan, req: &Request) -> Report {
    let residency = Residency { mtp: req.mtp };
    let ctx = req.context();
    let output = ctx - req.input;
    let mut missing: Vec<String> = Vec::new();
    let memory = match plan.memory(
        &req.gpu,
        req.usable_fraction,
        req.input.min(ctx),
        output.max(0),
        &req.activations,
        residency,
        req.logits,
    ) {
        Ok(m) => Some(m),
        Err(e) => {
            missing.push(e.to_string());
            None
        }
    };
    let decode_batch = req
        .decode_batch
        .or_else(|| {
            memory
                .as_ref()
                .map(|m| m.max_decode_requests.clamp(1, MAX_REQUESTS))
        })
        .unwrap_or(1);
    let mut prefill_step = Step::prefill(req.prefill_batch, req.input);
    prefill_step.logits = req.logits;
    let decode_step = Step::decode(decode_batch, ctx);
    let over = memory
        .as_ref()
        .map(|m| overflows(m, req.decode_batch, req.prefill_batch));
    let verdict = over.as_ref().map(|o| {
        if o.is_empty() {
            Fit::Fits
        } else {
            Fit::DoesNotFit
        }
    });
    let unfit = verdict == Some(Fit::DoesNotFit) && !req.ignore_memory;
    let phase = |step: &Step| {
        if unfit {
            PhaseResult {
                status: DOES_NOT_FIT,
                missing: vec![],
                cost: None,
            }
        } else {
            PhaseResult::from(plan.phase_cost(&req.gpu, step, &req.activations, &req.compute))
        }
    };
    let prefill = phase(&prefill_step);
    let decode = phase(&decode_step);
    let encode = if unfit {
        None
    } else {
        match plan.encode_cost(
            &req.gpu,
            req.prefill_batch,
            req.images,
            &req.activations,
            &req.compute,
        ) {
            Some(Ok(e)) => Some(e),
            Some(Err(m)) => {
                for m in m.iter().map(|m| m.to_string()) {
                    if !missing.contains(&m) {
                        missing.push(m);
                    }
                }
                None
            }
            None => None,
        }
    };
    // With images to encode, the TTFT needs their encoding's time as well as the prefill's.
    let encodes = req.images > 0 && !plan.model.a.images.is_empty();
    let encode_s = |f: fn(&EncodeCost) -> f64| match &encode {
        Some(e) => Some(f(e)),
        None => (!encodes).then_some(0.0),
    };
    for m in prefill.missing.iter().chain(&decode.missing) {
        if !missing.contains(m) {
            missing.push(m.clone());
        }
    }
    let gpus = plan.layout.gpus as f64;
    let tokens_per_step = decode_batch as f64 * plan.layout.attn.dp as f64;
    let per_gpu = |t: f64| tokens_per_step / t / gpus;
    let mut communication: Vec<CommSummary> = Vec::new();
    for (phase, res) in [("prefill", &prefill), ("decode", &decode)] {
        let Some(c) = &res.cost else { continue };
        for row in &c.rows {
            let Some(cr) = &row.comm else { continue };
            let t = row.terms.communication_s;
            match communication.iter_mut().find(|s| {
                s.phase == phase
                    && s.why == cr.why
                    && s.kind == cr.kind
                    && s.link == cr.link
                    && s.group == cr.group
            }) {
                Some(s) => {
                    s.edges += 1;
                    s.bytes_per_gpu += cr.bytes;
                    s.seconds += t;
                }
                None => communication.push(CommSummary {
                    phase,
                    why: cr.why,
                    kind: cr.kind,
                    link: cr.link,
                    group: cr.group,
                    edges: 1,
                    bytes_per_gpu: cr.bytes,
                    seconds: t,
                }),
            }
        }
    }
    let context_limit = plan.model.context_limit;
    Report {
        model: plan.model.a.model.clone(),
        gpu: req.gpu.gpu.clone(),
        gpus: plan.layout.gpus,
        layout: plan.layout.to_string(),
        degrees: plan.layout.clone(),
        verdict,
        overflows: over.unwrap_or_default(),
        status: if unfit {
            DOES_NOT_FIT
        } else if missing.is_empty() {
            "ok"
        } else {
            INSUFFICIENT_EVIDENCE
        },
        missing,
        assumptions: Assumptions {
            usable_fraction: req.usable_fraction,
            mtp_loaded: req.mtp,
            memory_ignored: req.ignore_memory,
            activation_precision: req.activations.precision,
            activation_bytes: req.activations.bytes,
            compute_precision: req.compute.clone(),
            decode_context: ctx,
            decode_batch,
            prefill_batch: req.prefill_batch,
            attention: "fused: attention scores stay on chip; the cache is read once per decode step",
            routing: "uniform and balanced: every expert gets top_k/experts of the tokens",
            composition: "estimate: ops run one after another at the slowest of their three terms; bound: the fused graph's totals (FLOPs, weights and caches through HBM, bytes communicated) over rated peaks",
            logits: req.logits,
            precision_fallbacks: [&prefill, &decode]
                .iter()
                .filter_map(|p| p.cost.as_ref())
                .flat_map(|c| c.precision_fallbacks.clone())
                .collect(),
        },
        hardware: req.gpu.clone(),
        memory,
        ttft_bound_s: prefill
            .cost
            .as_ref()
            .zip(encode_s(|e| e.bound_s))
            .map(|(c, e)| c.bound_s + e),
        ttft_estimate_s: prefill
            .cost
            .as_ref()
            .zip(encode_s(|e| e.estimate_s))
            .map(|(c, e)| c.estimate_s + e),
        encode,
        tpot_bound_s: decode.cost.as_ref().map(|c| c.bound_s),
        tpot_estimate_s: decode.cost.as_ref().map(|c| c.estimate_s),
        tokens_per_s_per_gpu_bound: decode.cost.as_ref().map(|c| per_gpu(c.bound_s)),
        tokens_per_s_per_gpu_estimate: decode.cost.as_ref().map(|c| per_gpu(c.estimate_s)),
        prefill,
        decode,
        context_limit,
        extrapolated: context_limit.is_some_and(|l| ctx > l),
        communication,
        labels: LABELS.iter().copied().collect(),
    }
}
