//! `openai`: our own tool-calling loop over any OpenAI-compatible chat-completions API (OpenAI,
//! Moonshot, DeepSeek, vLLM, llama.cpp). The whole loop is [`agent_loop`]; the wire types are
//! in [`wire`], the tools in [`tools`].

mod agent_loop;
mod tools;
mod wire;

use std::time::Duration;

use crate::{AgentBackend, AgentError, AgentOutcome, AgentRequest, Credentials};

#[derive(Clone, Debug)]
pub struct OpenAiConfig {
    /// Up to and including `/v1`, e.g. `https://api.deepseek.com/v1` or `http://127.0.0.1:8000/v1`.
    pub base_url: String,
    /// Used when the request names no model.
    pub default_model: String,
    /// The variable holding this provider's key (`OPENAI_API_KEY`, `MOONSHOT_API_KEY`, …); a
    /// local server may need none.
    pub api_key_env: String,
    /// Per HTTP request.
    pub request_timeout: Duration,
    /// How one request is retried on 429, 5xx and network errors before the run gives up.
    pub retry: RetryPolicy,
    /// Retries by cause within `retry.max_retries`: a refused connection or a name that does
    /// not resolve is tried again once, not for minutes.
    pub budget: harch_net::Budget,
    /// The provider's list prices, when known: the run's cost is then counted after every
    /// response and checked against [`crate::AgentLimits::max_cost_usd`].
    pub price: Option<Price>,
}

/// Dollars per million tokens. Cached input is counted at the input price (an upper bound).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Price {
    pub input_usd_per_mtok: f64,
    pub output_usd_per_mtok: f64,
}

impl Price {
    pub fn cost(&self, usage: &crate::Usage) -> f64 {
        (usage.input_tokens as f64 * self.input_usd_per_mtok
            + usage.output_tokens as f64 * self.output_usd_per_mtok)
            / 1e6
    }
}

/// Retries of one request: exponential backoff with jitter from `base_delay` up to `max_delay`;
/// a `Retry-After` from the server replaces the computed wait (capped at `max_delay`).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct RetryPolicy {
    pub max_retries: usize,
    pub base_delay: Duration,
    pub max_delay: Duration,
}

impl Default for RetryPolicy {
    fn default() -> Self {
        RetryPolicy {
            max_retries: 4,
            base_delay: Duration::from_secs(2),
            max_delay: Duration::from_secs(60),
        }
    }
}

impl OpenAiConfig {
    pub fn new(base_url: impl Into<String>, default_model: impl Into<String>) -> Self {
        OpenAiConfig {
            base_url: base_url.into(),
            default_model: default_model.into(),
            api_key_env: "OPENAI_API_KEY".into(),
            request_timeout: Duration::from_secs(600),
            retry: RetryPolicy::default(),
            budget: harch_net::Budget::default(),
            price: None,
        }
    }
}

pub struct OpenAiBackend {
    config: OpenAiConfig,
    api_key: Option<String>,
    http: reqwest::Client,
}

impl OpenAiBackend {
    pub fn new(config: OpenAiConfig, credentials: &Credentials) -> Result<Self, AgentError> {
        if harch_sandbox::is_forbidden_env(&config.api_key_env) {
            return Err(AgentError::Config {
                backend: "openai",
                message: format!(
                    "{} is a publishing credential, not an API key",
                    config.api_key_env
                ),
            });
        }
        crate::tls::install_provider();
        let http = reqwest::Client::builder()
            .timeout(config.request_timeout)
            .build()
            .map_err(|e| AgentError::Config {
                backend: "openai",
                message: format!("HTTP client: {e}"),
            })?;
        Ok(OpenAiBackend {
            api_key: credentials.get(&config.api_key_env).map(str::to_string),
            config,
            http,
        })
    }
}

#[async_trait::async_trait]
impl AgentBackend for OpenAiBackend {
    fn name(&self) -> &'static str {
        "openai"
    }

    async fn run(&self, req: &AgentRequest<'_>) -> Result<AgentOutcome, AgentError> {
        agent_loop::run(self, req).await
    }
}
