//! Choosing and configuring a backend by name, from settings the worker reads (`queue.toml`'s
//! `[agent.*]` tables or the environment).

use std::path::PathBuf;
use std::time::Duration;

use serde::Deserialize;

use crate::{
    AgentBackend, AgentError, ClaudeBackend, CodexBackend, Credentials, KimiBackend, OpenAiBackend,
    OpenAiConfig,
};

/// The backend names `backend()` accepts.
pub const BACKENDS: &[&str] = &["claude", "codex", "kimi", "openai"];

#[derive(Clone, Debug, Deserialize, PartialEq)]
#[serde(default, deny_unknown_fields)]
pub struct BackendsConfig {
    pub claude: CliConfig,
    pub codex: CliConfig,
    pub kimi: CliConfig,
    pub openai: OpenAiSettings,
}

impl Default for BackendsConfig {
    fn default() -> Self {
        BackendsConfig {
            claude: CliConfig::named("claude"),
            codex: CliConfig::named("codex"),
            kimi: CliConfig::named("kimi"),
            openai: OpenAiSettings::default(),
        }
    }
}

#[derive(Clone, Debug, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct CliConfig {
    /// The executable: a name looked up on PATH or an absolute path.
    pub binary: PathBuf,
}

impl CliConfig {
    fn named(name: &str) -> Self {
        CliConfig {
            binary: PathBuf::from(name),
        }
    }
}

#[derive(Clone, Debug, Deserialize, PartialEq)]
#[serde(default, deny_unknown_fields)]
pub struct OpenAiSettings {
    pub base_url: String,
    pub model: String,
    pub api_key_env: String,
    pub request_timeout_s: u64,
    /// List prices in dollars per million tokens; both 0 (the default) means unknown: the run
    /// then reports no cost and only the token cap applies inside it.
    pub input_usd_per_mtok: f64,
    pub output_usd_per_mtok: f64,
}

impl Default for OpenAiSettings {
    fn default() -> Self {
        OpenAiSettings {
            base_url: "https://api.openai.com/v1".into(),
            model: "gpt-5".into(),
            api_key_env: "OPENAI_API_KEY".into(),
            request_timeout_s: 600,
            input_usd_per_mtok: 0.0,
            output_usd_per_mtok: 0.0,
        }
    }
}

/// Builds the named backend. CLI binaries given as bare names are resolved on the worker's PATH
/// now, so the sandbox (whose PATH may differ) gets an absolute path.
pub fn backend(
    name: &str,
    config: &BackendsConfig,
    credentials: &Credentials,
) -> Result<Box<dyn AgentBackend>, AgentError> {
    Ok(match name {
        "claude" => Box::new(ClaudeBackend::new(
            resolve(&config.claude.binary),
            credentials,
        )),
        "codex" => Box::new(CodexBackend::new(
            resolve(&config.codex.binary),
            credentials,
        )),
        "kimi" => Box::new(KimiBackend::new(resolve(&config.kimi.binary), credentials)),
        "openai" => {
            let s = &config.openai;
            let mut c = OpenAiConfig::new(&s.base_url, &s.model);
            c.api_key_env = s.api_key_env.clone();
            c.request_timeout = Duration::from_secs(s.request_timeout_s);
            c.budget = harch_net::Budget::from_env();
            c.price = (s.input_usd_per_mtok > 0.0 || s.output_usd_per_mtok > 0.0).then_some(
                crate::Price {
                    input_usd_per_mtok: s.input_usd_per_mtok,
                    output_usd_per_mtok: s.output_usd_per_mtok,
                },
            );
            Box::new(OpenAiBackend::new(c, credentials)?)
        }
        other => {
            return Err(AgentError::Config {
                backend: "config",
                message: format!(
                    "unknown backend `{other}`; expected one of {}",
                    BACKENDS.join(", ")
                ),
            });
        }
    })
}

fn resolve(binary: &std::path::Path) -> PathBuf {
    if binary.components().count() != 1 {
        return binary.to_path_buf();
    }
    std::env::var_os("PATH")
        .iter()
        .flat_map(std::env::split_paths)
        .map(|dir| dir.join(binary))
        .find(|p| p.is_file())
        .unwrap_or_else(|| binary.to_path_buf())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_named_backend_builds_and_unknown_names_are_refused() {
        let cfg = BackendsConfig::default();
        for name in BACKENDS {
            assert_eq!(
                backend(name, &cfg, &Credentials::default()).unwrap().name(),
                *name
            );
        }
        let err = backend("gpt", &cfg, &Credentials::default()).err().unwrap();
        assert!(
            err.to_string().contains("claude, codex, kimi, openai"),
            "{err}"
        );
    }

    #[test]
    fn bare_names_resolve_on_path_and_paths_stay() {
        assert!(resolve(std::path::Path::new("sh")).is_absolute());
        assert_eq!(
            resolve(std::path::Path::new("./x/claude")),
            PathBuf::from("./x/claude")
        );
        assert_eq!(
            resolve(std::path::Path::new("no-such-agent-cli")),
            PathBuf::from("no-such-agent-cli")
        );
    }
}
