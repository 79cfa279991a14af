//! The trait every agent backend implements, and what a caller hands it.

use std::collections::BTreeMap;
use std::time::Duration;

use harch_sandbox::Workspace;

use crate::{AgentError, AgentOutcome};

/// Caps on one run. CLI agents get `max_turns` where their CLI has such a flag; the wall-clock
/// and output caps hold for all.
#[derive(Clone, Debug, PartialEq)]
pub struct AgentLimits {
    pub max_turns: u32,
    pub wall_time: Duration,
    /// Cap on the agent's stdout (its transcript); stderr gets a tenth.
    pub max_output_bytes: u64,
    /// Total tokens (input + output) for backends that count them as they go (openai).
    pub max_tokens: u64,
    /// Dollars this run may spend, enforced inside the run: Claude Code's `--max-budget-usd`,
    /// checked after every response by the openai loop when it knows its prices. `None`: no cap
    /// (Codex and Kimi report no cost; their runs are bounded by turns and wall time).
    pub max_cost_usd: Option<f64>,
    /// Between TERM and KILL when a run is stopped.
    pub term_grace: Duration,
}

impl Default for AgentLimits {
    fn default() -> Self {
        AgentLimits {
            max_turns: 60,
            wall_time: Duration::from_secs(45 * 60),
            max_output_bytes: 64 << 20,
            max_tokens: 4_000_000,
            max_cost_usd: None,
            term_grace: Duration::from_secs(5),
        }
    }
}

pub struct AgentRequest<'a> {
    pub prompt: &'a str,
    pub workspace: &'a Workspace,
    pub limits: &'a AgentLimits,
    /// Model name passed to the agent; `None` lets it use its own default.
    pub model: Option<&'a str>,
    /// Names the transcript files (`logs/<label>.<backend>.jsonl`), e.g. `generate-2`.
    pub label: &'a str,
}

#[async_trait::async_trait]
pub trait AgentBackend: Send + Sync {
    /// Short name recorded in outcomes: `claude`, `codex`, `kimi`, `openai`.
    fn name(&self) -> &'static str;

    /// Runs the agent once, to its end or its limits. `Err` only when the run could not happen
    /// (sandbox, binary, log files); everything the agent did wrong is in the outcome.
    async fn run(&self, req: &AgentRequest<'_>) -> Result<AgentOutcome, AgentError>;
}

/// The worker's credentials, from which each backend takes only its own variables.
#[derive(Clone, Debug, Default)]
pub struct Credentials(BTreeMap<String, String>);

impl Credentials {
    /// A snapshot of the worker's environment.
    pub fn from_env() -> Self {
        Credentials(std::env::vars().collect())
    }

    pub fn from_pairs<I: IntoIterator<Item = (K, V)>, K: Into<String>, V: Into<String>>(
        pairs: I,
    ) -> Self {
        Credentials(
            pairs
                .into_iter()
                .map(|(k, v)| (k.into(), v.into()))
                .collect(),
        )
    }

    pub fn get(&self, name: &str) -> Option<&str> {
        self.0.get(name).map(String::as_str)
    }

    /// The subset named by `names` that is present.
    pub(crate) fn select(&self, names: &[&str]) -> Vec<(String, String)> {
        names
            .iter()
            .filter_map(|n| self.0.get(*n).map(|v| (n.to_string(), v.clone())))
            .collect()
    }
}
