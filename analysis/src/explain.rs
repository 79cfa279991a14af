//! `explain` for deployment figures: a figure's formula with the values of its terms, so every
//! number of a report can be traced to the rows of the engine's evaluation it sums.

use harch_engine::q::Q;
use harch_engine::text::group_digits as digits;

use crate::cost::{CostRow, PhaseCost, Resource};
use crate::memory::Residency;
use crate::report::{Report, Request, label_of};
use crate::shard::{Place, Plan};
use crate::traffic::Step;

#[derive(Clone, Debug)]
pub struct Explanation {
    pub name: String,
    pub label: &'static str,
    pub formula: String,
    pub value: String,
    /// Terms, largest first: (what, value).
    pub terms: Vec<(String, String)>,
    /// Terms left out of `terms` and what they add up to.
    pub more: Option<(usize, String)>,
}

/// Names `explain` accepts besides the engine's quantities.
pub const NAMES: &[&str] = &[
    "weights_bytes_per_gpu",
    "kv_bytes_per_request",
    "kv_bytes_per_request_per_gpu",
    "kv_budget_bytes",
    "max_decode_requests",
    "prefill_activation_bytes_per_token",
    "prefill_batch_cap",
    "prefill.bound_s",
    "prefill.estimate_s",
    "decode.bound_s",
    "decode.estimate_s",
    "ttft_bound_s",
    "ttft_estimate_s",
    "tpot_bound_s",
    "tpot_estimate_s",
    "tokens_per_s_per_gpu_bound",
    "tokens_per_s_per_gpu_estimate",
];

const SHOWN: usize = 15;

fn bytes(v: f64) -> String {
    format!("{} B", digits(v.round() as i128))
}

pub fn seconds(v: f64) -> String {
    if v >= 1.0 {
        format!("{v:.3} s")
    } else if v >= 1e-3 {
        format!("{:.3} ms", v * 1e3)
    } else {
        format!("{:.3} µs", v * 1e6)
    }
}

fn sci(v: f64) -> String {
    format!("{v:.3e}")
}

/// Terms shown (largest first), and how many more there are with their sum.
type Ranked = (Vec<(String, String)>, Option<(usize, f64)>);

fn ranked(mut terms: Vec<(f64, String, String)>) -> Ranked {
    terms.sort_by(|a, b| b.0.total_cmp(&a.0));
    let rest: f64 = terms.iter().skip(SHOWN).map(|t| t.0).sum();
    let more = (terms.len() > SHOWN).then(|| (terms.len() - SHOWN, rest));
    (
        terms
            .into_iter()
            .take(SHOWN)
            .map(|(_, a, b)| (a, b))
            .collect(),
        more,
    )
}

fn row_terms(c: &PhaseCost, gpu: &crate::hardware::Gpu) -> Vec<(f64, String, String)> {
    c.rows
        .iter()
        .map(|r: &CostRow| {
            let (res, t) = r.seconds();
            let mut parts = Vec::new();
            if r.flops > 0.0 {
                let p = r.precision.clone().unwrap_or_default();
                let peak = gpu.peak_flops(&p).unwrap_or(f64::NAN);
                parts.push(format!(
                    "compute {} = {} FLOP / {} FLOP/s ({p})",
                    seconds(r.terms.compute_s),
                    sci(r.flops),
                    sci(peak)
                ));
            }
            if r.memory_bytes() > 0.0 {
                parts.push(format!(
                    "memory {} = ({} weights + {} activations + {} cache) / HBM",
                    seconds(r.terms.memory_s),
                    bytes(r.weight_bytes),
                    bytes(r.activation_bytes),
                    bytes(r.cache_bytes)
                ));
            }
            if let Some(cm) = &r.comm {
                parts.push(format!(
                    "communication {} = {} {} over {} GPUs ({:?}, {})",
                    seconds(r.terms.communication_s),
                    bytes(cm.bytes),
                    cm.kind.name(),
                    cm.group,
                    cm.link,
                    cm.why
                ));
            }
            let stage = if r.stage > 0 {
                format!(" [stage {}]", r.stage)
            } else {
                String::new()
            };
            (
                t,
                format!("{}{stage}", r.id),
                format!(
                    "{} = max({}) → {}",
                    seconds(t),
                    parts.join("; "),
                    res.name()
                ),
            )
        })
        .collect()
}

/// The formula and terms of a report figure.
pub fn explain(plan: &Plan, req: &Request, report: &Report, name: &str) -> Option<Explanation> {
    let label = label_of(name)?;
    let a = plan.model.a;
    let residency = Residency { mtp: req.mtp };
    let mem = report.memory.as_ref();
    let tight_stage = mem.map(|m| {
        m.weights_bytes_per_gpu_by_stage
            .iter()
            .enumerate()
            .max_by_key(|(_, w)| **w)
            .map(|(s, _)| s)
            .unwrap_or(0)
    });
    let mk = |formula: String,
              value: String,
              terms: Vec<(f64, String, String)>,
              unit: &dyn Fn(f64) -> String| {
        let (terms, more) = ranked(terms);
        Explanation {
            name: name.to_string(),
            label,
            formula,
            value,
            terms,
            more: more.map(|(n, v)| (n, unit(v))),
        }
    };
    let phase = |p: &str| -> Option<&PhaseCost> {
        match p {
            "prefill" => report.prefill.cost.as_ref(),
            _ => report.decode.cost.as_ref(),
        }
    };
    Some(match name {
        "weights_bytes_per_gpu" => {
            let m = mem?;
            let s = tight_stage?;
            let terms = plan
                .model
                .weights
                .iter()
                .enumerate()
                .filter(|(_, wi)| {
                    a.is_main_row(wi.node) || (req.mtp && matches!(wi.place, Place::Mtp))
                })
                .filter_map(|(w, wi)| {
                    let share = plan.weight_share[w] * wi.place.stage_share(s, &plan.bounds);
                    (share.num > 0).then(|| {
                        let held = share.of(wi.bytes);
                        let what = if plan.weight_share[w].num == plan.weight_share[w].den {
                            "replicated".to_string()
                        } else {
                            format!(
                                "{}/{} of it",
                                plan.weight_share[w].num, plan.weight_share[w].den
                            )
                        };
                        (
                            held as f64,
                            a.weights[w].name.clone(),
                            format!(
                                "{} = {} × {what}",
                                bytes(held as f64),
                                bytes(wi.bytes as f64)
                            ),
                        )
                    })
                })
                .collect();
            mk(
                format!(
                    "Σ weight rows  checkpoint bytes × share one GPU holds (stage {s} of {}; MTP {})",
                    plan.stages(),
                    if req.mtp { "loaded" } else { "not loaded" }
                ),
                bytes(m.weights_bytes_per_gpu as f64),
                terms,
                &|v| bytes(v),
            )
        }
        "kv_bytes_per_request" | "kv_bytes_per_request_per_gpu" => {
            let m = mem?;
            let s = tight_stage?;
            let per_gpu = name.ends_with("per_gpu");
            let ctx = Q::lit(m.context);
            let terms = plan
                .model
                .caches
                .iter()
                .filter(|c| c.main || (req.mtp && matches!(c.place, Place::Mtp)))
                .map(|c| {
                    let row = &a.caches[c.cache];
                    let whole = a.cache_row_bytes_at(row, &ctx).v;
                    let share = if per_gpu {
                        plan.cache_share[c.cache] * c.place.stage_share(s, &plan.bounds)
                    } else {
                        crate::shard::Share::ONE
                    };
                    let v = share.of(whole);
                    (
                        v as f64,
                        format!("{} ({})", a.nodes[c.node].id, row.kind),
                        format!(
                            "{} = {} elements × {} B × {} layers, {} at {} tokens{}",
                            bytes(v as f64),
                            row.elements.v,
                            row.dtype_bytes,
                            row.count.v,
                            row.growth.as_str(),
                            m.context,
                            if per_gpu && share.den > 1 {
                                format!(" × {}/{}", share.num, share.den)
                            } else {
                                String::new()
                            }
                        ),
                    )
                })
                .collect();
            let v = if per_gpu {
                m.kv_bytes_per_request_per_gpu
            } else {
                m.kv_bytes_per_request
            };
            mk(
                format!(
                    "Σ cache rows  bytes at context {} by the row's growth law{}",
                    m.context,
                    if per_gpu {
                        ", × the share one GPU holds"
                    } else {
                        ""
                    }
                ),
                bytes(v as f64),
                terms,
                &|v| bytes(v),
            )
        }
        "kv_budget_bytes" => {
            let m = mem?;
            mk(
                "usable_bytes − weights_bytes_per_gpu = floor(memory × usable fraction) − weights"
                    .into(),
                bytes(m.kv_budget_bytes as f64),
                vec![
                    (
                        3.0,
                        "memory".into(),
                        format!(
                            "{} ({})",
                            bytes(m.memory_bytes as f64),
                            req.gpu
                                .memory
                                .as_ref()
                                .map(|f| f.source.as_str())
                                .unwrap_or("")
                        ),
                    ),
                    (
                        2.0,
                        "usable fraction".into(),
                        format!("{}", m.usable_fraction),
                    ),
                    (
                        1.0,
                        "weights_bytes_per_gpu".into(),
                        bytes(m.weights_bytes_per_gpu as f64),
                    ),
                ],
                &|v| bytes(v),
            )
        }
        "max_decode_requests" => {
            let m = mem?;
            mk(
                "floor(kv_budget_bytes / kv_bytes_per_request_per_gpu)   (per attention replica; KV-bound)".into(),
                digits(m.max_decode_requests),
                vec![
                    (2.0, "kv_budget_bytes".into(), bytes(m.kv_budget_bytes as f64)),
                    (1.0, "kv_bytes_per_request_per_gpu".into(), format!("{} at {} tokens", bytes(m.kv_bytes_per_request_per_gpu as f64), m.context)),
                    (0.0, "attention replicas".into(), format!("{} (total {})", plan.layout.attn.dp, digits(m.max_decode_requests_total))),
                ],
                &|v| bytes(v),
            )
        }
        "prefill_activation_bytes_per_token" | "prefill_batch_cap" => {
            let m = mem?;
            let s = tight_stage?;
            let mut step = Step::prefill(1, 1);
            step.logits = req.logits;
            let terms = plan
                .model
                .rows
                .iter()
                .enumerate()
                .filter(|(r, i)| {
                    i.is_op
                        && i.main
                        && step.phase.runs(i.phase)
                        && plan.row_stage_share(*r, s).num > 0
                        && !plan.last_position_only(*r, &step)
                })
                .map(|(r, _)| {
                    let v = plan.activation_bytes(r, s, &step, &req.activations, true);
                    (
                        v,
                        a.nodes[r].id.clone(),
                        format!("{} in + out per token", bytes(v)),
                    )
                })
                .collect();
            let formula = if name == "prefill_batch_cap" {
                format!(
                    "floor(kv_budget_bytes / (max(input × activation bytes per token, logits at the last position) + KV of the prompt)) = floor({} / (max({} × {}, {}) + {}))",
                    digits(m.kv_budget_bytes),
                    m.prefill_tokens,
                    digits(m.prefill_activation_bytes_per_token),
                    digits(m.prefill_logits_bytes_per_request),
                    digits(plan.kv_request_on_stage(s, m.prefill_tokens, residency))
                )
            } else {
                format!(
                    "max over prefill ops (inputs + output per token, one layer) + carried stream ({} elements × {} B)",
                    plan.model.carried_elements, req.activations.bytes
                )
            };
            let value = if name == "prefill_batch_cap" {
                digits(m.prefill_batch_cap)
            } else {
                bytes(m.prefill_activation_bytes_per_token as f64)
            };
            mk(formula, value, terms, &|v| bytes(v))
        }
        "prefill.bound_s" | "decode.bound_s" | "ttft_bound_s" | "tpot_bound_s" => {
            let p = if name.starts_with("prefill") || name.starts_with("ttft") {
                "prefill"
            } else {
                "decode"
            };
            let c = phase(p)?;
            let t = c.bound_terms;
            mk(
                format!(
                    "Σ stages max(Σ FLOPs / peak, Σ bytes / HBM bandwidth, Σ communication bytes / link)   ({p}: {} requests per replica, {} tokens in all)",
                    c.step.requests, c.tokens
                ),
                seconds(c.bound_s),
                vec![
                    (
                        t.compute_s,
                        "compute".into(),
                        format!(
                            "{} = {} FLOP per GPU at rated peaks",
                            seconds(t.compute_s),
                            sci(c.flops_per_gpu)
                        ),
                    ),
                    (
                        t.memory_s,
                        "memory".into(),
                        format!(
                            "{} = {} / {} B/s",
                            seconds(t.memory_s),
                            bytes(c.memory_bytes_per_gpu),
                            sci(req.gpu.hbm_bytes_per_s().unwrap_or(f64::NAN))
                        ),
                    ),
                    (
                        t.communication_s,
                        "communication".into(),
                        format!(
                            "{} = {} over the links",
                            seconds(t.communication_s),
                            bytes(c.comm_bytes_per_gpu)
                        ),
                    ),
                ],
                &|v| seconds(v),
            )
        }
        "prefill.estimate_s" | "decode.estimate_s" | "ttft_estimate_s" | "tpot_estimate_s" => {
            let p = if name.starts_with("prefill") || name.starts_with("ttft") {
                "prefill"
            } else {
                "decode"
            };
            let c = phase(p)?;
            let split = c.estimate_split;
            mk(
                format!(
                    "Σ rows max(compute, memory, communication)   ({} rows; {:.0}% memory-, {:.0}% communication-, {:.0}% compute-bound time)",
                    c.rows.len(),
                    split.get(Resource::Memory) * 100.0,
                    split.get(Resource::Communication) * 100.0,
                    split.get(Resource::Compute) * 100.0
                ),
                seconds(c.estimate_s),
                row_terms(c, &req.gpu),
                &|v| seconds(v),
            )
        }
        "tokens_per_s_per_gpu_bound" | "tokens_per_s_per_gpu_estimate" => {
            let c = phase("decode")?;
            let bound = name.ends_with("bound");
            let t = if bound { c.bound_s } else { c.estimate_s };
            let v = if bound {
                report.tokens_per_s_per_gpu_bound
            } else {
                report.tokens_per_s_per_gpu_estimate
            }?;
            mk(
                format!(
                    "decode batch × attention replicas / decode.{}_s / GPUs = {} × {} / {} / {}",
                    if bound { "bound" } else { "estimate" },
                    c.step.requests,
                    plan.layout.attn.dp,
                    seconds(t),
                    plan.layout.gpus
                ),
                format!("{v:.0} tokens/s"),
                vec![],
                &|v| format!("{v}"),
            )
        }
        _ => return None,
    })
}
