//! What one agent run produced, in the same shape for every backend.

use std::path::PathBuf;

use serde::{Deserialize, Serialize};

/// Token counts as the agent reported them.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Usage {
    pub input_tokens: u64,
    pub output_tokens: u64,
    /// Input tokens served from the provider's cache (included in `input_tokens` or not,
    /// exactly as the provider counts them).
    pub cached_input_tokens: u64,
}

impl Usage {
    pub fn add(&mut self, other: Usage) {
        self.input_tokens += other.input_tokens;
        self.output_tokens += other.output_tokens;
        self.cached_input_tokens += other.cached_input_tokens;
    }

    pub fn total(&self) -> u64 {
        self.input_tokens + self.output_tokens
    }
}

/// Why a run did not end the way the agent says it should.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum FailureKind {
    /// Killed at the wall-clock limit.
    Timeout,
    /// stdout or stderr exceeded its cap; the process group was killed.
    OutputLimit,
    /// The provider said 429 / rate limit / overloaded.
    RateLimited,
    /// A failure the agent itself marks as temporary (Kimi exit 75, HTTP 5xx, network errors).
    Transient,
    /// The turn (step) limit ended the run.
    MaxTurns,
    /// The token or cost cap ended the run.
    BudgetExceeded,
    /// The agent exited without the final event its format promises (a crash or a kill).
    NoResult,
    /// Credentials rejected (HTTP 401/403 or the CLI said so).
    Auth,
    /// The provider's API cannot be reached or has nothing at the URL: connection refused,
    /// a name that does not resolve, a failed TLS handshake, no answer to connect, HTTP 404.
    /// Another run will not fare better until someone fixes the endpoint or the network.
    Unreachable,
    /// The agent reported an error of its own.
    AgentError,
    /// Non-zero exit with nothing more specific to say.
    ExitStatus,
}

impl FailureKind {
    /// Whether running the same attempt again may succeed without changing anything.
    pub fn retryable(self) -> bool {
        matches!(
            self,
            FailureKind::Timeout
                | FailureKind::RateLimited
                | FailureKind::Transient
                | FailureKind::NoResult
        )
    }
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Failure {
    pub kind: FailureKind,
    pub message: String,
}

impl Failure {
    pub fn new(kind: FailureKind, message: impl Into<String>) -> Self {
        Failure {
            kind,
            message: message.into(),
        }
    }
}

/// The record of one run. The agent's claim is recorded, never trusted: the worker validates.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct AgentOutcome {
    pub backend: String,
    pub model: Option<String>,
    /// The process's exit code; `None` when it was killed by a signal or there is no process
    /// (the OpenAI loop).
    pub exit_code: Option<i32>,
    /// The agent said it finished successfully.
    pub claimed_success: bool,
    pub turns: Option<u32>,
    /// `None` when the backend does not report tokens.
    pub usage: Option<Usage>,
    pub cost_usd: Option<f64>,
    pub wall_ms: u64,
    /// The agent's own event stream (JSONL where the agent speaks JSON).
    pub transcript: PathBuf,
    pub stderr_log: Option<PathBuf>,
    /// Files the run created, changed or removed in the writable area (workspace-relative).
    pub files_changed: Vec<PathBuf>,
    /// The agent's last message, if any.
    pub final_message: Option<String>,
    pub failure: Option<Failure>,
}

impl AgentOutcome {
    pub fn wrote_nothing(&self) -> bool {
        self.files_changed.is_empty()
    }

    pub fn retryable(&self) -> bool {
        self.failure.as_ref().is_some_and(|f| f.kind.retryable())
    }
}
