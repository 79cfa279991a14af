//! Time per phase: every op on one GPU as three terms (compute at the rated peak of its
//! precision, memory at the rated HBM bandwidth, communication at the rated link), composed
//! two ways. The **bound** is each resource's total over its peak, the largest of them, summed
//! over pipeline stages, for the fused graph: every FLOP, the weights and caches through HBM
//! (activations may stay on chip), every byte that leaves the GPU: no implementation can beat
//! it. The **estimate** sums each op's largest
//! term, with no overlap between ops. Only the bound may reject a measured result.

use std::collections::BTreeSet;

use serde::Serialize;

use crate::comm::CommRow;
use crate::hardware::{Gpu, Missing};
use crate::shard::Plan;
use crate::traffic::{Activations, Phase, Step};

#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Resource {
    Compute,
    Memory,
    Communication,
}

impl Resource {
    pub fn name(self) -> &'static str {
        match self {
            Resource::Compute => "compute",
            Resource::Memory => "memory",
            Resource::Communication => "communication",
        }
    }
}

/// Which precision matmuls run at.
#[derive(Clone, Debug, PartialEq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum ComputePrecision {
    /// A matmul runs at its weights' stored precision (FP8 weights on FP8 tensor cores);
    /// everything else at the activations' precision.
    Weights,
    /// Every op at one precision.
    Fixed(String),
}

/// Seconds per resource.
#[derive(Clone, Copy, Debug, Default, PartialEq, Serialize)]
pub struct Terms {
    pub compute_s: f64,
    pub memory_s: f64,
    pub communication_s: f64,
}

impl Terms {
    pub fn get(&self, r: Resource) -> f64 {
        match r {
            Resource::Compute => self.compute_s,
            Resource::Memory => self.memory_s,
            Resource::Communication => self.communication_s,
        }
    }
    fn add(&mut self, r: Resource, t: f64) {
        match r {
            Resource::Compute => self.compute_s += t,
            Resource::Memory => self.memory_s += t,
            Resource::Communication => self.communication_s += t,
        }
    }
    /// The largest term and which resource it is (ties go to compute, then memory).
    pub fn max(&self) -> (Resource, f64) {
        let mut best = (Resource::Compute, self.compute_s);
        for r in [Resource::Memory, Resource::Communication] {
            if self.get(r) > best.1 {
                best = (r, self.get(r));
            }
        }
        best
    }
}

/// Fractions of a time per resource (they sum to 1 for a non-empty phase).
#[derive(Clone, Copy, Debug, Default, PartialEq, Serialize)]
pub struct Split {
    pub compute_fraction: f64,
    pub memory_fraction: f64,
    pub communication_fraction: f64,
}

impl Split {
    pub fn get(&self, r: Resource) -> f64 {
        match r {
            Resource::Compute => self.compute_fraction,
            Resource::Memory => self.memory_fraction,
            Resource::Communication => self.communication_fraction,
        }
    }
}

/// One row of a phase's cost table: an op, a derived collective, or weights a decode variant
/// reads without an op of its own.
#[derive(Clone, Debug, Serialize)]
pub struct CostRow {
    pub stage: usize,
    pub id: String,
    /// Op name, `comm:<kind>` or `weights`.
    pub op: String,
    #[serde(serialize_with = "crate::json::count")]
    pub flops: f64,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub precision: Option<String>,
    #[serde(serialize_with = "crate::json::count")]
    pub weight_bytes: f64,
    #[serde(serialize_with = "crate::json::count")]
    pub activation_bytes: f64,
    #[serde(serialize_with = "crate::json::count")]
    pub cache_bytes: f64,
    #[serde(serialize_with = "crate::json::count")]
    pub comm_bytes: f64,
    pub terms: Terms,
    /// The row's share of the bound's memory total: the bytes a fully fused graph must still
    /// move through HBM (weights and caches; its activations can stay on chip).
    pub floor_memory_s: f64,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub comm: Option<CommRow>,
}

impl CostRow {
    pub fn seconds(&self) -> (Resource, f64) {
        self.terms.max()
    }
    pub fn memory_bytes(&self) -> f64 {
        self.weight_bytes + self.activation_bytes + self.cache_bytes
    }
}

#[derive(Clone, Debug, Serialize)]
pub struct PhaseCost {
    pub step: Step,
    /// Tokens the step processes over the whole deployment.
    #[serde(serialize_with = "crate::json::count")]
    pub tokens: f64,
    pub bound_s: f64,
    pub estimate_s: f64,
    /// The resource whose total sets the bound.
    pub bound_by: Resource,
    /// Per-resource totals over peaks of the fused graph (summed over stages): every FLOP,
    /// the weights and caches read and written, every byte communicated.
    pub bound_terms: Terms,
    /// Weights stored at a precision the GPU has no rate for, and the precision they run at
    /// instead (the next wider one it has).
    #[serde(skip_serializing_if = "std::collections::BTreeMap::is_empty")]
    pub precision_fallbacks: std::collections::BTreeMap<String, String>,
    /// Share of the estimate spent in ops bounded by each resource.
    pub estimate_split: Split,
    /// Per GPU totals (summed over stages).
    #[serde(serialize_with = "crate::json::count")]
    pub flops_per_gpu: f64,
    #[serde(serialize_with = "crate::json::count")]
    pub memory_bytes_per_gpu: f64,
    #[serde(serialize_with = "crate::json::count")]
    pub comm_bytes_per_gpu: f64,
    #[serde(skip)]
    pub rows: Vec<CostRow>,
}

impl<'m, 'a> Plan<'m, 'a> {
    /// The cost table of one step and its bound and estimate. Every figure a row needs must be
    /// in the hardware table; all that are missing are returned together.
    pub fn phase_cost(
        &self,
        gpu: &Gpu,
        step: &Step,
        act: &Activations,
        compute: &ComputePrecision,
    ) -> Result<PhaseCost, Vec<Missing>> {
        let m = self.model;
        let a = m.a;
        let mut missing: BTreeSet<Missing> = BTreeSet::new();
        let mut note = |r: Result<f64, Missing>| -> f64 {
            r.unwrap_or_else(|e| {
                missing.insert(e);
                f64::NAN
            })
        };
        let hbm = note(gpu.hbm_bytes_per_s());
        let mut fallbacks = std::collections::BTreeMap::new();
        let mut rows = Vec::new();
        for s in 0..self.stages() {
            for (r, info) in m.rows.iter().enumerate() {
                if !info.is_op || !info.main || !step.phase.runs(info.phase) {
                    continue;
                }
                if self.row_stage_share(r, s).num == 0 {
                    continue;
                }
                let flops = self.flops(r, s, step);
                let weight_bytes = self.weight_bytes(r, s, step);
                let activation_bytes = self.activation_bytes(r, s, step, act, false);
                let cache_bytes = self.cache_bytes(r, s, step);
                let precision = match compute {
                    ComputePrecision::Fixed(p) => p.clone(),
                    ComputePrecision::Weights => {
                        let p = info.weight_precision.unwrap_or(act.precision);
                        match gpu.runs_at(p) {
                            Some(q) if q != p && flops > 0.0 => {
                                fallbacks.insert(p.to_string(), q.to_string());
                                q.to_string()
                            }
                            _ => p.to_string(),
                        }
                    }
                };
                let compute_s = if flops > 0.0 {
                    flops / note(gpu.peak_flops(&precision))
                } else {
                    0.0
                };
                let bytes = weight_bytes + activation_bytes + cache_bytes;
                rows.push(CostRow {
                    stage: s,
                    id: a.nodes[r].id.clone(),
                    op: a.nodes[r].op.clone(),
                    flops,
                    precision: (flops > 0.0).then_some(precision),
                    weight_bytes,
                    activation_bytes,
                    cache_bytes,
                    comm_bytes: 0.0,
                    terms: Terms {
                        compute_s,
                        memory_s: bytes / hbm,
                        communication_s: 0.0,
                    },
                    floor_memory_s: (weight_bytes + cache_bytes) / hbm,
                    comm: None,
                });
            }
            if step.phase == Phase::Decode {
                for (inst, ws) in &m.decode_orphans {
                    let bytes: f64 = ws.iter().map(|&w| self.weight_gpu_bytes(w, s)).sum();
                    if bytes > 0.0 {
                        rows.push(CostRow {
                            stage: s,
                            id: format!("{inst} (weights its decode variant reads)"),
                            op: "weights".into(),
                            flops: 0.0,
                            precision: None,
                            weight_bytes: bytes,
                            activation_bytes: 0.0,
                            cache_bytes: 0.0,
                            comm_bytes: 0.0,
                            terms: Terms {
                                memory_s: bytes / hbm,
                                ..Terms::default()
                            },
                            floor_memory_s: bytes / hbm,
                            comm: None,
                        });
                    }
                }
            }
        }
        let mut comm = self.communication(step, act);
        if let Err(e) = self.route(&mut comm, gpu) {
            missing.insert(e);
        }
        for c in comm {
            let t = match self.comm_seconds(&c, gpu) {
                Ok(t) => t,
                Err(e) => {
                    missing.insert(e);
                    f64::NAN
                }
            };
            rows.push(CostRow {
                stage: c.stage,
                id: format!("{} ← {}", c.at, c.from),
                op: format!("comm:{}", c.kind.name()),
                flops: 0.0,
                precision: None,
                weight_bytes: 0.0,
                activation_bytes: 0.0,
                cache_bytes: 0.0,
                comm_bytes: c.bytes,
                terms: Terms {
                    communication_s: t,
                    ..Terms::default()
                },
                floor_memory_s: 0.0,
                comm: Some(c),
            });
        }
        if !missing.is_empty() {
            return Err(missing.into_iter().collect());
        }
        let mut cost = compose(self, step, rows);
        cost.precision_fallbacks = fallbacks;
        Ok(cost)
    }
}

fn compose(plan: &Plan, step: &Step, rows: Vec<CostRow>) -> PhaseCost {
    let mut bound_terms = Terms::default();
    let mut bound_s = 0.0;
    let mut by = Terms::default();
    for s in 0..plan.stages() {
        let mut t = Terms::default();
        for r in rows.iter().filter(|r| r.stage == s) {
            t.compute_s += r.terms.compute_s;
            t.memory_s += r.floor_memory_s;
            t.communication_s += r.terms.communication_s;
        }
        let (res, v) = t.max();
        bound_s += v;
        by.add(res, v);
        bound_terms.compute_s += t.compute_s;
        bound_terms.memory_s += t.memory_s;
        bound_terms.communication_s += t.communication_s;
    }
    let mut estimate_s = 0.0;
    let mut split = Terms::default();
    for r in &rows {
        let (res, v) = r.seconds();
        estimate_s += v;
        split.add(res, v);
    }
    let frac = |t: f64| {
        if estimate_s > 0.0 {
            t / estimate_s
        } else {
            0.0
        }
    };
    let split = Split {
        compute_fraction: frac(split.compute_s),
        memory_fraction: frac(split.memory_s),
        communication_fraction: frac(split.communication_s),
    };
    PhaseCost {
        step: *step,
        tokens: plan.stage_tokens(step),
        bound_s,
        estimate_s,
        bound_by: by.max().0,
        bound_terms,
        precision_fallbacks: Default::default(),
        estimate_split: split,
        flops_per_gpu: rows.iter().map(|r| r.flops).sum(),
        memory_bytes_per_gpu: rows.iter().map(CostRow::memory_bytes).sum(),
        comm_bytes_per_gpu: rows.iter().map(|r| r.comm_bytes).sum(),
        rows,
    }
}
