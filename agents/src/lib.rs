//! harch-agents: one trait, [`AgentBackend`], and its backends: the Claude Code, Codex and Kimi
//! CLIs, and [`OpenAiBackend`], our own tool-calling loop over any OpenAI-compatible API.
//! Each run returns an [`AgentOutcome`]: exit status, the agent's own claim of success, turns,
//! tokens, cost where known, wall time, the transcript file, the files it changed, and a failure
//! classified as retryable or not.
//!
//! Every process starts through `harch-sandbox` (cleared environment plus the backend's own
//! credentials, private config dir, Landlock, rlimits, capped output, process-group kill on
//! timeout). This crate must not decide whether a spec is valid: an agent's claim is recorded
//! here and re-checked by the worker. It renders no prompts and knows no queue.
//!
//! ```no_run
//! # async fn demo(ws: &harch_sandbox::Workspace) -> Result<(), harch_agents::AgentError> {
//! use harch_agents::{AgentBackend, AgentLimits, AgentRequest, ClaudeBackend, Credentials};
//! let backend = ClaudeBackend::new("claude", &Credentials::from_env());
//! let limits = AgentLimits::default();
//! let outcome = backend
//!     .run(&AgentRequest { prompt: "…", workspace: ws, limits: &limits, model: None, label: "generate-1" })
//!     .await?;
//! println!("claimed {} in {} ms", outcome.claimed_success, outcome.wall_ms);
//! # Ok(()) }
//! ```

mod backend;
mod claude;
mod cli;
mod codex;
mod config;
mod error;
mod kimi;
mod openai;
mod outcome;
mod tls;
mod transcript;

pub use backend::{AgentBackend, AgentLimits, AgentRequest, Credentials};
pub use claude::{CLAUDE_ENV, ClaudeBackend, DEFAULT_ALLOWED_TOOLS};
pub use codex::{CODEX_ENV, CodexBackend};
pub use config::{BACKENDS, BackendsConfig, CliConfig, OpenAiSettings, backend};
pub use error::AgentError;
pub use kimi::{KIMI_ENV, KimiBackend};
pub use openai::{OpenAiBackend, OpenAiConfig, Price, RetryPolicy};
pub use outcome::{AgentOutcome, Failure, FailureKind, Usage};
