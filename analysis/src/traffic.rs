//! What one GPU computes and moves for one op in one step: FLOPs, weight bytes, activation
//! bytes and cache bytes, read from the engine's per-row figures under a [`Plan`].

use harch_engine::analysis::Phase as EnginePhase;
use harch_engine::q::Q;
use serde::Serialize;

use crate::shard::{Plan, Share};

#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Phase {
    Prefill,
    Decode,
}

impl Phase {
    pub fn name(self) -> &'static str {
        match self {
            Phase::Prefill => "prefill",
            Phase::Decode => "decode",
        }
    }
    /// Whether an engine row runs in this phase.
    pub fn runs(self, p: EnginePhase) -> bool {
        match self {
            Phase::Prefill => p != EnginePhase::Decode,
            Phase::Decode => p != EnginePhase::Prefill,
        }
    }
}

/// Where prefill computes logits: at the last prompt position only (what serving engines do:
/// the next token needs one row of logits), or at every prompt position (the engine's
/// `prefill_flops` convention, a training-style forward).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Logits {
    #[default]
    Last,
    All,
}

/// One step of a phase: `requests` per attention replica, each with `seq` new tokens (the
/// prompt for prefill, 1 for decode), attending `ctx` positions at decode.
#[derive(Clone, Copy, Debug, PartialEq, Serialize)]
pub struct Step {
    pub phase: Phase,
    pub requests: i128,
    pub seq: i128,
    pub ctx: i128,
    pub logits: Logits,
}

impl Step {
    pub fn prefill(requests: i128, seq: i128) -> Step {
        Step {
            phase: Phase::Prefill,
            requests,
            seq,
            ctx: seq,
            logits: Logits::Last,
        }
    }
    pub fn decode(requests: i128, ctx: i128) -> Step {
        Step {
            phase: Phase::Decode,
            requests,
            seq: 1,
            ctx,
            logits: Logits::Last,
        }
    }
}

/// Activation storage: bytes per element (BF16 unless a run says otherwise).
#[derive(Clone, Copy, Debug, Serialize)]
pub struct Activations {
    pub bytes: i128,
    pub precision: &'static str,
}

impl<'m, 'a> Plan<'m, 'a> {
    /// Requests of the step across the whole deployment (every attention replica).
    pub fn requests_total(&self, step: &Step) -> f64 {
        step.requests as f64 * self.layout.attn.dp as f64
    }

    /// Tokens every stage processes in the step.
    pub fn stage_tokens(&self, step: &Step) -> f64 {
        self.requests_total(step) * step.seq as f64
    }

    /// Tokens a row processes in the step on its stage: a logits row at prefill with
    /// [`Logits::Last`] sees one position per request.
    pub fn row_tokens(&self, r: usize, step: &Step) -> f64 {
        if self.last_position_only(r, step) {
            self.requests_total(step)
        } else {
            self.stage_tokens(step)
        }
    }

    /// Whether a row runs at the last prompt position only in this step.
    pub fn last_position_only(&self, r: usize, step: &Step) -> bool {
        step.phase == Phase::Prefill && step.logits == Logits::Last && self.model.rows[r].logits
    }

    pub fn row_stage_share(&self, r: usize, s: usize) -> Share {
        self.model.rows[r].place.stage_share(s, &self.bounds)
    }

    /// Copies of a row one GPU of stage `s` processes in the step (token copies: layers ×
    /// tokens, × top_k for experts), before TP.
    pub fn gpu_copies(&self, r: usize, s: usize, step: &Step) -> f64 {
        let n = &self.model.a.nodes[r];
        n.active.v as f64 * self.row_stage_share(r, s).f() * self.row_tokens(r, step)
            / self.token_split(r) as f64
    }

    /// FLOPs of a row on one GPU of stage `s`.
    pub fn flops(&self, r: usize, s: usize, step: &Step) -> f64 {
        let a = self.model.a;
        let n = &a.nodes[r];
        let seq = if self.last_position_only(r, step) {
            1
        } else {
            step.seq
        };
        let per_seq = match step.phase {
            Phase::Prefill => a.node_prefill_flops(n, &Q::lit(seq)).v,
            Phase::Decode => a.node_decode_flops(n, &Q::lit(step.ctx)).v,
        } as f64;
        per_seq * self.requests_total(step) * self.row_stage_share(r, s).f()
            / self.token_split(r) as f64
            * self.tp_share[r].f()
    }

    /// Weight bytes a row reads on one GPU of stage `s`: its share of each weight it reads,
    /// for experts only those the step's tokens reach (uniform routing), for an embedding
    /// only the rows its tokens look up.
    pub fn weight_bytes(&self, r: usize, s: usize, step: &Step) -> f64 {
        let info = &self.model.rows[r];
        let mut touched = 1.0;
        if info.expert && info.usage < 1.0 {
            let tokens = self.stage_tokens(step) / self.layout.moe.dp as f64;
            touched = 1.0 - (1.0 - info.usage).powf(tokens);
        }
        if let Some(rows) = info.gather_rows
            && rows > 0
        {
            let per_layer = self.gpu_copies(r, s, step);
            touched = (per_layer / rows as f64).min(1.0);
        }
        info.weights
            .iter()
            .map(|&w| self.weight_gpu_bytes(w, s) * touched)
            .sum()
    }

    /// Bytes of a weight row one GPU of stage `s` holds.
    pub fn weight_gpu_bytes(&self, w: usize, s: usize) -> f64 {
        let wi = &self.model.weights[w];
        wi.bytes as f64 * self.weight_share[w].f() * wi.place.stage_share(s, &self.bounds).f()
    }

    /// Activation bytes a row reads and writes on one GPU of stage `s`. Tensors with the
    /// context axis (attention scores) stay on chip in a fused attention kernel and count
    /// nothing. `per_layer` gives one layer's worth (the live set, for memory) instead of the
    /// stage's.
    pub fn activation_bytes(
        &self,
        r: usize,
        s: usize,
        step: &Step,
        act: &Activations,
        per_layer: bool,
    ) -> f64 {
        let m = self.model;
        let a = m.a;
        let info = &m.rows[r];
        let copies = if per_layer {
            a.nodes[r].active.v as f64 / info.group_layers as f64 * self.stage_tokens(step)
                / self.token_split(r) as f64
        } else {
            self.gpu_copies(r, s, step)
        };
        if info.view {
            return 0.0;
        }
        let b = act.bytes as f64;
        let mut bytes = 0.0;
        if !info.out_ctx {
            bytes += copies * info.out_elements as f64 * self.out_share[r].f() * b;
        }
        for (i, &p) in a.op_inputs(r).iter().enumerate() {
            let pi = &m.rows[p];
            if pi.out_ctx {
                continue;
            }
            // A consumer of several copies per layer (the top_k expert outputs a combine sums)
            // reads each of them.
            let mult = (m.per_layer_copies(p) / m.per_layer_copies(r)).max(1.0);
            bytes += copies * mult * pi.out_elements as f64 * self.in_share[r][i].f() * b;
        }
        bytes
    }

    /// Cache bytes a row reads and writes on one GPU of stage `s`: at decode the cache of each
    /// request as the step attends it (by its growth law, capped by a selection) and one new
    /// token; at prefill the prompt's cache.
    pub fn cache_bytes(&self, r: usize, s: usize, step: &Step) -> f64 {
        let m = self.model;
        let a = m.a;
        let slot = match step.phase {
            Phase::Prefill => 0,
            Phase::Decode => 1,
        };
        let mut bytes = 0.0;
        for c in m
            .caches
            .iter()
            .filter(|c| c.main && c.reader[slot] == Some(r))
        {
            let row = &a.caches[c.cache];
            let per_request = match step.phase {
                Phase::Prefill => a.cache_row_bytes_at(row, &Q::lit(step.seq)).v,
                Phase::Decode => {
                    // What the step attends (a selection reads only the selected positions).
                    a.cache_row_read_bytes_at(row, &Q::lit(step.ctx)).v
                        + a.cache_row_unit_bytes(row).v
                }
            };
            bytes += step.requests as f64
                * per_request as f64
                * self.cache_share[c.cache].f()
                * c.place.stage_share(s, &self.bounds).f();
        }
        bytes
    }
}
