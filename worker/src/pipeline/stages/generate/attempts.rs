//! One record per agent run: what the agent did and what the worker's validation made of it.
//! Kept in the stage's scratch dir so a stage restarted after a crash or a transient failure
//! continues the count (the attempt budget is per job), and mirrored into the job record so
//! `status` shows turns, tokens, cost and time per attempt while the job runs.

use std::path::Path;

use harch_agents::AgentOutcome;
use serde::{Deserialize, Serialize};

use crate::queue::record::AgentUsage;

#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct Attempt {
    pub n: u32,
    pub backend: String,
    pub exit_code: Option<i32>,
    /// The agent said it succeeded (recorded, never trusted).
    pub claimed_success: bool,
    pub turns: Option<u32>,
    pub input_tokens: Option<u64>,
    pub output_tokens: Option<u64>,
    pub cached_input_tokens: Option<u64>,
    pub cost_usd: Option<f64>,
    pub wall_ms: u64,
    /// `timeout`, `output_limit`, … as the agent backend classified the run's end.
    pub failure: Option<String>,
    pub failure_message: Option<String>,
    pub spec_written: bool,
    /// The worker's validation of the spec (None when there was no spec to validate).
    pub valid: Option<bool>,
    pub errors: usize,
    /// The first error codes, for the summary line.
    pub error_codes: Vec<String>,
    pub prompt_bytes: usize,
    pub prompt_est_tokens: usize,
    /// False for runs that ended on a provider hiccup (rate limit, 5xx): they do not use up the
    /// job's attempts.
    pub counted: bool,
}

impl Attempt {
    pub fn from_outcome(n: u32, o: &AgentOutcome) -> Attempt {
        Attempt {
            n,
            backend: o.backend.clone(),
            exit_code: o.exit_code,
            claimed_success: o.claimed_success,
            turns: o.turns,
            input_tokens: o.usage.map(|u| u.input_tokens),
            output_tokens: o.usage.map(|u| u.output_tokens),
            cached_input_tokens: o.usage.map(|u| u.cached_input_tokens),
            cost_usd: o.cost_usd,
            wall_ms: o.wall_ms,
            failure: o.failure.as_ref().map(|f| {
                serde_json::to_value(f.kind)
                    .ok()
                    .and_then(|v| v.as_str().map(str::to_string))
                    .unwrap_or_default()
            }),
            failure_message: o.failure.as_ref().map(|f| f.message.clone()),
            counted: true,
            ..Attempt::default()
        }
    }

    pub fn usage(&self) -> AgentUsage {
        AgentUsage {
            turns: self.turns.unwrap_or(0) as u64,
            input_tokens: self.input_tokens.unwrap_or(0),
            output_tokens: self.output_tokens.unwrap_or(0),
            cost_usd: self.cost_usd.unwrap_or(0.0),
        }
    }
}

const FILE: &str = "attempts.json";

pub fn load(work: &Path) -> Vec<Attempt> {
    std::fs::read(work.join(FILE))
        .ok()
        .and_then(|b| serde_json::from_slice(&b).ok())
        .unwrap_or_default()
}

pub fn save(work: &Path, attempts: &[Attempt]) -> anyhow::Result<()> {
    let bytes = serde_json::to_vec_pretty(attempts)?;
    crate::queue::store::write_atomic(&work.join(FILE), &bytes)
}

pub fn total_usage(attempts: &[Attempt]) -> AgentUsage {
    let mut u = AgentUsage::default();
    for a in attempts {
        u.add(&a.usage());
    }
    u
}

pub fn counted(attempts: &[Attempt]) -> u32 {
    attempts.iter().filter(|a| a.counted).count() as u32
}
