//! One ablation run's record, `jobs/<id>/ablation.json`: what the agent claimed, what its tier
//! said, what the full validate says, and what the run cost. Written by the generate stage when
//! its loop ends (accepted or out of budget), outside the staging dir like the ledger, so a
//! failed run keeps it.

use std::collections::BTreeMap;
use std::path::Path;

use harch_guards::Report;
use serde::{Deserialize, Serialize};

use crate::ablation::decontaminate::Removed;
use crate::agent_stage::Attempt;

pub const FILE: &str = "ablation.json";

#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct RunRecord {
    pub model_id: String,
    pub tier: String,
    /// The tier's guards: what the agent's `validate` and the stage's own check ran.
    pub guards: Vec<String>,
    pub seed: u32,
    pub agent: String,
    pub agent_model: Option<String>,
    pub job_id: String,
    /// The agent said it succeeded, in its last run.
    pub claimed_success: bool,
    /// The tier's verdict on the last spec the agent wrote.
    pub tier_valid: bool,
    /// Every guard's verdict on the same spec (false when none was written).
    pub full_valid: bool,
    /// The full validate's error codes, grouped by guard, with counts.
    pub full_errors: BTreeMap<String, BTreeMap<String, usize>>,
    /// Spec bytes minus checkpoint bytes, from the full validate (None: nothing written).
    pub byte_gap: Option<i64>,
    pub written: bool,
    pub attempts: u32,
    pub turns: u64,
    pub input_tokens: u64,
    pub output_tokens: u64,
    pub cost_usd: f64,
    pub wall_ms: u64,
    /// Size of the first prompt.
    pub prompt_bytes: usize,
    pub prompt_est_tokens: usize,
    /// What the decontaminated workspace and prompt left out.
    pub removed: Vec<Removed>,
    /// Why the stage ended without an accepted spec, when it did.
    pub stage_error: Option<String>,
}

impl RunRecord {
    /// Fills the accounting and the claims from the stage's ledger.
    pub fn account(&mut self, attempts: &[Attempt]) {
        let ran: Vec<&Attempt> = attempts.iter().filter(|a| a.counted).collect();
        self.attempts = ran.len() as u32;
        for a in attempts {
            self.turns += a.turns.unwrap_or(0) as u64;
            self.input_tokens += a.input_tokens.unwrap_or(0);
            self.output_tokens += a.output_tokens.unwrap_or(0);
            self.cost_usd += a.cost_usd.unwrap_or(0.0);
            self.wall_ms += a.wall_ms;
        }
        if let Some(first) = attempts.first() {
            self.prompt_bytes = first.prompt_bytes;
            self.prompt_est_tokens = first.prompt_est_tokens;
        }
        if let Some(last) = attempts.last() {
            self.claimed_success = last.claimed_success;
        }
        let checked = attempts.iter().rev().find(|a| a.valid.is_some());
        self.tier_valid = checked.and_then(|a| a.valid).unwrap_or(false);
    }

    /// Records the full validate of the last spec written.
    pub fn full(&mut self, report: &Report) {
        self.written = true;
        self.full_valid = report.valid;
        self.byte_gap = i64::try_from(report.summary.byte_diff).ok();
        self.full_errors.clear();
        for d in &report.errors {
            *self
                .full_errors
                .entry(d.guard.to_string())
                .or_default()
                .entry(d.code.to_string())
                .or_default() += 1;
        }
    }

    /// The agent and its tier both said valid; every guard said no.
    pub fn false_self_pass(&self) -> bool {
        self.claimed_success && self.tier_valid && !self.full_valid
    }

    pub fn read(path: &Path) -> anyhow::Result<RunRecord> {
        let bytes = std::fs::read(path)?;
        serde_json::from_slice(&bytes)
            .map_err(|e| anyhow::anyhow!("{}: not an ablation record: {e}", path.display()))
    }

    pub fn write(&self, path: &Path) -> anyhow::Result<()> {
        harch_jobs::store::write_atomic(path, &serde_json::to_vec_pretty(self)?)
    }
}
