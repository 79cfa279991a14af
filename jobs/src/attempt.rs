//! One agent run as the job records it (`attempts.json` of an agent stage, and the `attempts` of
//! its summary in the job record): what it was asked, what it spent, how it ended and what the
//! worker's check found. The ledger that numbers and saves these is the pipeline's
//! (`harch_pipeline::agent_stage::ledger`); the record type lives here, with the job records, so
//! every reader of a job (publish, the commands) reads it as this type.

use serde::{Deserialize, Serialize};

use crate::record::{AgentUsage, now_ms};
use crate::stage::Stage;

/// Where a run stands. A ledger found with a `Running` record belongs to a worker that died
/// during the run; one with a `Ran` record, to a worker that died before checking the result.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Phase {
    /// Started; nothing known yet.
    #[default]
    Running,
    /// The agent returned; its outcome is recorded, the worker has not yet checked its files.
    Ran,
    /// The worker read back and checked what the agent left.
    Checked,
    /// The run was stopped from outside (worker shutdown, cancel, stage timeout, a crash).
    Interrupted,
}

#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct Attempt {
    /// 1, 2, … over the whole job: runs are never renumbered, so labels and kept files are unique.
    pub n: u32,
    /// Names the run's transcripts (`generate-3.claude.jsonl`).
    pub label: String,
    /// Operator retries of the job before this run: the attempt and cost budgets count only
    /// runs of the current round.
    pub round: u32,
    /// The review round the run served (0 for a stage's own runs; k for the fix stage's round
    /// k): the attempt budget counts per cycle.
    #[serde(skip_serializing_if = "is_zero_u32")]
    pub cycle: u32,
    pub phase: Phase,
    pub started_ms: u64,
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
    /// `timeout`, `output_limit`, `interrupted`, … how the run ended when not on its own.
    pub failure: Option<String>,
    pub failure_message: Option<String>,
    /// The file the stage asks for was there.
    pub written: bool,
    /// Why the worker refused to read what the agent left (a link, a FIFO, an oversize file).
    pub rejected: Option<String>,
    /// The worker's check of what was read (None when nothing was checked).
    pub valid: Option<bool>,
    pub errors: usize,
    /// The first error codes, for one-line summaries.
    pub error_codes: Vec<String>,
    /// What the next prompt tells the agent about this attempt, one finding per line.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub feedback: Vec<String>,
    /// Findings beyond `feedback`.
    #[serde(skip_serializing_if = "is_zero")]
    pub feedback_more: usize,
    pub prompt_bytes: usize,
    pub prompt_est_tokens: usize,
    /// Whether the run uses up one of the round's attempts: every run does except those that
    /// ended on a provider hiccup (rate limit, 5xx) and those the operator's SIGTERM stopped.
    pub counted: bool,
    /// Where its prompt, transcripts, report and files are kept, relative to the job dir.
    pub dir: String,
}

fn is_zero(n: &usize) -> bool {
    *n == 0
}

fn is_zero_u32(n: &u32) -> bool {
    *n == 0
}

impl Attempt {
    pub fn started(stage: Stage, n: u32, round: u32, backend: &str) -> Attempt {
        Attempt {
            n,
            label: format!("{stage}-{n}"),
            round,
            started_ms: now_ms(),
            backend: backend.to_string(),
            counted: true,
            dir: format!("{}/{n}", stage_dir(stage)),
            ..Attempt::default()
        }
    }

    /// Marks a run stopped from outside.
    pub fn interrupt(&mut self, counted: bool, why: &str) {
        self.phase = Phase::Interrupted;
        self.failure = Some("interrupted".into());
        self.failure_message = Some(why.to_string());
        self.wall_ms = now_ms().saturating_sub(self.started_ms);
        self.counted = counted;
    }

    /// The run ended on the provider's trouble, not the agent's (rate limit, 5xx).
    pub fn provider_hiccup(&self) -> bool {
        matches!(self.failure.as_deref(), Some("rate_limited" | "transient"))
            && self.valid != Some(true)
    }

    pub fn usage(&self) -> AgentUsage {
        AgentUsage {
            turns: self.turns.unwrap_or(0) as u64,
            input_tokens: self.input_tokens.unwrap_or(0),
            output_tokens: self.output_tokens.unwrap_or(0),
            cost_usd: self.cost_usd.unwrap_or(0.0),
        }
    }

    /// What happened in the run, for the next prompt, when the worker's check has nothing (or
    /// not everything) to say: the run's end, a refused file, nothing written, a false claim.
    pub fn run_note(&self, asked_for: &str) -> Option<String> {
        let mut parts = Vec::new();
        match self.failure.as_deref() {
            None => {}
            Some("timeout") => parts.push(format!(
                "The run was stopped at its time limit after {} s.",
                self.wall_ms / 1000
            )),
            Some("output_limit") => parts.push(
                "The run was stopped because its output exceeded the cap: keep command output short."
                    .into(),
            ),
            Some("max_turns") => parts.push("The run used up its turn limit.".into()),
            Some("interrupted") => parts.push(format!(
                "The run was interrupted: {}.",
                self.failure_message.as_deref().unwrap_or("stopped from outside")
            )),
            Some(other) => parts.push(format!(
                "The run ended with `{other}`: {}",
                self.failure_message.as_deref().unwrap_or("")
            )),
        }
        if let Some(r) = &self.rejected {
            parts.push(format!(
                "The worker refused to read your files: {r}. Write plain regular files only (no links, FIFOs or devices), within the size limit."
            ));
        } else if !self.written && self.phase != Phase::Interrupted {
            parts.push(format!("Nothing was written at `{asked_for}`."));
        } else if self.valid == Some(false) && self.feedback.is_empty() {
            parts.push(format!(
                "The worker's check found {} ({}).",
                crate::text::plural(self.errors as u64, "error"),
                self.error_codes.join(", ")
            ));
        }
        if self.claimed_success && self.valid != Some(true) {
            parts.push(
                "The agent reported success, but the worker's own validation did not accept the result."
                    .into(),
            );
        }
        (!parts.is_empty()).then(|| parts.join(" "))
    }

    /// One line for logs, errors and `status`.
    pub fn line(&self) -> String {
        let verdict = match (self.phase, self.valid, &self.rejected) {
            (Phase::Running, ..) => "running".to_string(),
            (Phase::Ran, ..) => "ran, not yet checked".to_string(),
            (_, Some(true), _) => "valid".to_string(),
            (_, Some(false), _) => {
                format!(
                    "invalid ({}: {})",
                    crate::text::plural(self.errors as u64, "error"),
                    self.error_codes.join(",")
                )
            }
            (_, None, Some(r)) => format!("refused: {r}"),
            (Phase::Interrupted, None, None) => "interrupted".to_string(),
            (_, None, None) => "nothing written".to_string(),
        };
        format!(
            "attempt {} ({}): {verdict}; {}, claimed {}, {} turns, {}+{} tokens, ${:.4}, {} ms{}{}",
            self.n,
            self.backend,
            crate::text::exit_status(self.exit_code, None),
            self.claimed_success,
            self.turns.map_or("?".into(), |t| t.to_string()),
            self.input_tokens.map_or("?".into(), |t| t.to_string()),
            self.output_tokens.map_or("?".into(), |t| t.to_string()),
            self.cost_usd.unwrap_or(0.0),
            self.wall_ms,
            self.failure
                .as_ref()
                .map(|f| format!(", ended: {f}"))
                .unwrap_or_default(),
            if self.counted { "" } else { " (not counted)" }
        )
    }
}

/// `attempts/<stage>`, relative to the job dir.
pub fn stage_dir(stage: Stage) -> String {
    format!("attempts/{}", stage.dir_name())
}
