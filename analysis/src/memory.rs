//! Memory per GPU: weights from the checkpoint-anchored bytes under the layout, the KV budget
//! what usable memory leaves, cache per request by each cache's growth law, how many requests
//! decode can hold and how large a prefill batch activations allow.

use harch_engine::q::Q;
use serde::Serialize;

use crate::hardware::{Gpu, Missing};
use crate::shard::{Place, Plan};
use crate::traffic::{Activations, Logits, Step};

/// Which weights and caches are resident.
#[derive(Clone, Copy, Debug, Serialize)]
pub struct Residency {
    /// Multi-token-prediction layers are loaded (their weights and caches count).
    pub mtp: bool,
}

#[derive(Clone, Debug, Serialize)]
pub struct MemoryPlan {
    /// HBM capacity per GPU.
    pub memory_bytes: i128,
    pub usable_fraction: f64,
    pub usable_bytes: i128,
    /// The largest stage's weights per GPU (every GPU of a stage holds the same).
    pub weights_bytes_per_gpu: i128,
    pub weights_bytes_per_gpu_by_stage: Vec<i128>,
    /// Usable memory minus weights, on the tightest stage (negative: the weights do not fit).
    pub kv_budget_bytes: i128,
    /// Context each request reaches (input + output).
    pub context: i128,
    /// Cache of one request at that context, whole (all layers, all heads).
    pub kv_bytes_per_request: i128,
    /// The same on one GPU of the tightest stage (attention TP splits head caches; latent
    /// caches are replicated).
    pub kv_bytes_per_request_per_gpu: i128,
    /// Requests one attention replica can hold at decode (KV-bound).
    pub max_decode_requests: i128,
    /// The same over all attention replicas.
    pub max_decode_requests_total: i128,
    pub fits: bool,
    /// Prompt tokens of a prefill request.
    pub prefill_tokens: i128,
    /// Live activation bytes per prompt token on one GPU at the op that needs the most, plus
    /// the stream carried between layers.
    pub prefill_activation_bytes_per_token: i128,
    /// Live activation bytes of the logits ops of one request at prefill (their input and
    /// output at the last position; 0 with `--logits all`, where they count per token above).
    pub prefill_logits_bytes_per_request: i128,
    /// Requests one attention replica can prefill at once before activations and the
    /// prompt's cache exhaust the budget.
    pub prefill_batch_cap: i128,
}

impl<'m, 'a> Plan<'m, 'a> {
    fn resident(&self, place: &Place, main: bool, r: Residency) -> bool {
        main || (r.mtp && matches!(place, Place::Mtp))
    }

    /// Weight bytes on one GPU of stage `s`.
    pub fn weights_on_stage(&self, s: usize, r: Residency) -> i128 {
        let a = self.model.a;
        let mut bytes = 0i128;
        for (w, wi) in self.model.weights.iter().enumerate() {
            if !self.resident(&wi.place, a.is_main_row(wi.node), r) {
                continue;
            }
            let share = self.weight_share[w] * wi.place.stage_share(s, &self.bounds);
            if share.num == 0 {
                continue;
            }
            bytes += share.of(wi.bytes);
        }
        bytes
    }

    /// Weight bytes on GPU `g` (GPUs are numbered stage by stage).
    pub fn weights_on_gpu(&self, g: u32, r: Residency) -> i128 {
        self.weights_on_stage((g / self.layout.stage_gpus()) as usize, r)
    }

    /// Cache bytes one request keeps at `ctx` on one GPU of stage `s`.
    pub fn kv_request_on_stage(&self, s: usize, ctx: i128, r: Residency) -> i128 {
        let a = self.model.a;
        let c_q = Q::lit(ctx);
        self.model
            .caches
            .iter()
            .filter(|c| self.resident(&c.place, c.main, r))
            .map(|c| {
                let share = self.cache_share[c.cache] * c.place.stage_share(s, &self.bounds);
                share.of(a.cache_row_bytes_at(&a.caches[c.cache], &c_q).v)
            })
            .sum()
    }

    /// Live activation bytes per prompt token on one GPU of stage `s`: the op whose inputs and
    /// output need the most (one layer's worth, one token per attention replica), plus the
    /// stream carried between layers.
    /// With [`Logits::Last`] the logits ops are left out: they run once per request
    /// ([`Plan::logits_peak_per_request`]).
    pub fn activation_peak_per_token(&self, s: usize, act: &Activations, logits: Logits) -> f64 {
        self.activation_peak(s, act, logits, false)
            + (self.model.carried_elements * act.bytes) as f64
    }

    /// The largest live set of a logits op run at the last position of one request (0 unless
    /// [`Logits::Last`]).
    pub fn logits_peak_per_request(&self, s: usize, act: &Activations, logits: Logits) -> f64 {
        if logits == Logits::All {
            return 0.0;
        }
        self.activation_peak(s, act, logits, true)
    }

    fn activation_peak(&self, s: usize, act: &Activations, logits: Logits, of_logits: bool) -> f64 {
        let mut step = Step::prefill(1, 1);
        step.logits = logits;
        let mut peak = 0f64;
        for (r, info) in self.model.rows.iter().enumerate() {
            if !info.is_op || !info.main || !step.phase.runs(info.phase) {
                continue;
            }
            if self.row_stage_share(r, s).num == 0 || self.last_position_only(r, &step) != of_logits
            {
                continue;
            }
            peak = peak.max(self.activation_bytes(r, s, &step, act, true));
        }
        peak
    }

    // The workload's parts, each a figure of the request: a struct would only rename them.
    #[allow(clippy::too_many_arguments)]
    pub fn memory(
        &self,
        gpu: &Gpu,
        usable_fraction: f64,
        input: i128,
        output: i128,
        act: &Activations,
        r: Residency,
        logits: Logits,
    ) -> Result<MemoryPlan, Missing> {
        let memory_bytes = gpu.memory_bytes()? as i128;
        let usable = (memory_bytes as f64 * usable_fraction).floor() as i128;
        let ctx = input + output;
        let a = self.model.a;
        let mut weights_by_stage = Vec::new();
        let mut budget = i128::MAX;
        let mut max_req = i128::MAX;
        let mut kv_gpu = 0;
        let mut cap = i128::MAX;
        let mut act_peak = 0i128;
        let mut logits_peak = 0i128;
        for s in 0..self.stages() {
            let w = self.weights_on_stage(s, r);
            weights_by_stage.push(w);
            let b = usable - w;
            budget = budget.min(b);
            let kv = self.kv_request_on_stage(s, ctx, r);
            kv_gpu = kv_gpu.max(kv);
            max_req = max_req.min(if kv > 0 { b.max(0) / kv } else { i128::MAX });
            let peak = self.activation_peak_per_token(s, act, logits).ceil() as i128;
            act_peak = act_peak.max(peak);
            let head = self.logits_peak_per_request(s, act, logits).ceil() as i128;
            logits_peak = logits_peak.max(head);
            // The logits ops run after the last layer: their live set replaces the layers'.
            let per_request = (input * peak).max(head) + self.kv_request_on_stage(s, input, r);
            cap = cap.min(if per_request > 0 {
                b.max(0) / per_request
            } else {
                i128::MAX
            });
        }
        let kv_whole: i128 = self
            .model
            .caches
            .iter()
            .filter(|c| self.resident(&c.place, c.main, r))
            .map(|c| a.cache_row_bytes_at(&a.caches[c.cache], &Q::lit(ctx)).v)
            .sum();
        let weights = weights_by_stage.iter().copied().max().unwrap_or(0);
        Ok(MemoryPlan {
            memory_bytes,
            usable_fraction,
            usable_bytes: usable,
            weights_bytes_per_gpu: weights,
            weights_bytes_per_gpu_by_stage: weights_by_stage,
            kv_budget_bytes: budget,
            context: ctx,
            kv_bytes_per_request: kv_whole,
            kv_bytes_per_request_per_gpu: kv_gpu,
            max_decode_requests: max_req,
            max_decode_requests_total: max_req.saturating_mul(self.layout.attn.dp as i128),
            fits: budget > 0 && max_req > 0,
            prefill_tokens: input,
            prefill_activation_bytes_per_token: act_peak,
            prefill_logits_bytes_per_request: logits_peak,
            prefill_batch_cap: cap,
        })
    }
}
