//! What a job needs before an agent may start on it: a backend this build has, and that
//! backend's credentials. Checked at `enqueue` (a clear error instead of a queued job that
//! fails three agent runs with "Not logged in") and again when an agent stage starts (the
//! worker's environment is not the one `enqueue` ran in).

use anyhow::bail;

use harch_jobs::config::AgentSettings;
use harch_jobs::record::JobRequest;

/// Whether the request runs an agent at all.
pub fn uses_agent(request: &JobRequest) -> bool {
    request.stages.iter().any(|s| s.is_agent())
}

/// The variables that can hold the backend's key: one of them must be set and non-empty.
pub fn credential_vars(settings: &AgentSettings, agent: &str) -> anyhow::Result<Vec<String>> {
    Ok(match agent {
        "claude" => vec!["ANTHROPIC_API_KEY".into(), "ANTHROPIC_AUTH_TOKEN".into()],
        "codex" => vec!["CODEX_API_KEY".into(), "OPENAI_API_KEY".into()],
        "kimi" => vec!["KIMI_API_KEY".into()],
        "openai" => vec![settings.openai_api_key_env.clone()],
        other => bail!(
            "unknown agent `{other}`: the backends are {}",
            harch_agents::BACKENDS.join(", ")
        ),
    })
}

/// Checks the backend name (every request with an agent stage).
pub fn check_backend(settings: &AgentSettings, request: &JobRequest) -> anyhow::Result<()> {
    if uses_agent(request) {
        credential_vars(settings, &request.agent)?;
    }
    Ok(())
}

/// Checks that the backend's key is set in this process's environment.
pub fn check_credentials(settings: &AgentSettings, request: &JobRequest) -> anyhow::Result<()> {
    if !uses_agent(request) {
        return Ok(());
    }
    check_agent_credentials(settings, &request.agent, |k| std::env::var(k).ok())
}

pub fn check_agent_credentials(
    settings: &AgentSettings,
    agent: &str,
    get: impl Fn(&str) -> Option<String>,
) -> anyhow::Result<()> {
    let vars = credential_vars(settings, agent)?;
    if vars
        .iter()
        .any(|v| get(v).is_some_and(|x| !x.trim().is_empty()))
    {
        return Ok(());
    }
    let names = vars.join(" or ");
    bail!(
        "the {agent} agent needs its API key: set {names} (see the README's backend table); \
         `enqueue --skip-credential-check` queues anyway for a worker that has it"
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use harch_jobs::config::{DEFAULT_TOML, Settings};

    #[test]
    fn missing_keys_are_named_and_unknown_agents_refused() {
        let s = Settings::parse(DEFAULT_TOML, "default").unwrap().agent;
        let err = check_agent_credentials(&s, "claude", |_| None)
            .unwrap_err()
            .to_string();
        assert!(err.contains("ANTHROPIC_API_KEY"), "{err}");
        check_agent_credentials(&s, "claude", |k| {
            (k == "ANTHROPIC_AUTH_TOKEN").then(|| "t".into())
        })
        .unwrap();
        let err = check_agent_credentials(&s, "kimi", |_| Some("  ".into()))
            .unwrap_err()
            .to_string();
        assert!(err.contains("KIMI_API_KEY"), "{err}");
        let err = check_agent_credentials(&s, "gpt5", |_| None)
            .unwrap_err()
            .to_string();
        assert!(
            err.contains("unknown agent `gpt5`") && err.contains("openai"),
            "{err}"
        );
    }
}
