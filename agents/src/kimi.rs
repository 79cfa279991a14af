//! Kimi CLI print mode: `kimi --print --output-format stream-json -p PROMPT`, started in the
//! workspace root. Lines are OpenAI-style messages; errors may arrive as plain text on stdout;
//! exit 75 means "try again". Print mode approves every tool call itself (shell, file writes,
//! `FetchURL`); our sandbox is the boundary.
//!
//! No `-w DIR`: kimi-cli 1.51.0 refuses a work dir its user cannot write ("Directory … is not
//! writable", exit 2), and the workspace root is read-only to the agent by design (only
//! `specs/models` and the drafts are writable). Without `-w` it takes the current directory,
//! which the sandbox sets to the workspace root, unchecked.

use std::path::PathBuf;

use serde_json::Value;

use crate::cli::{self, CliInvocation, Parsed};
use crate::{
    AgentBackend, AgentError, AgentOutcome, AgentRequest, Credentials, Failure, FailureKind,
};

pub const KIMI_ENV: &[&str] = &["KIMI_API_KEY", "KIMI_BASE_URL", "KIMI_MODEL_NAME"];

/// Kimi's documented "temporary failure, retry" exit status (EX_TEMPFAIL).
const EXIT_RETRYABLE: i32 = 75;

pub struct KimiBackend {
    pub binary: PathBuf,
    env: Vec<(String, String)>,
}

impl KimiBackend {
    pub fn new(binary: impl Into<PathBuf>, credentials: &Credentials) -> Self {
        KimiBackend {
            binary: binary.into(),
            env: credentials.select(KIMI_ENV),
        }
    }
}

#[async_trait::async_trait]
impl AgentBackend for KimiBackend {
    fn name(&self) -> &'static str {
        "kimi"
    }

    async fn run(&self, req: &AgentRequest<'_>) -> Result<AgentOutcome, AgentError> {
        let mut args: Vec<std::ffi::OsString> = vec![
            "--print".into(),
            "--output-format".into(),
            "stream-json".into(),
        ];
        if let Some(m) = req.model {
            args.extend(["--model".into(), m.into()]);
        }
        args.extend(["-p".into(), cli::prompt_arg(req)?.into()]);
        let run = cli::run_cli(
            req,
            CliInvocation {
                backend: self.name(),
                program: &self.binary,
                args,
                config_dir: ("KIMI_SHARE_DIR", ".kimi"),
                env: self.env.clone(),
            },
        )
        .await?;
        let parsed = parse(&run.events, &run.text, run.report.exit_code);
        Ok(cli::outcome(req, self.name(), run, parsed))
    }
}

pub(crate) fn parse(events: &[Value], text: &[String], exit_code: Option<i32>) -> Parsed {
    let assistant: Vec<&Value> = events.iter().filter(|e| e["role"] == "assistant").collect();
    let final_message = assistant.iter().rev().find_map(|m| match &m["content"] {
        Value::String(s) if !s.is_empty() => Some(s.clone()),
        Value::Array(parts) => {
            let joined: String = parts.iter().filter_map(|p| p["text"].as_str()).collect();
            (!joined.is_empty()).then_some(joined)
        }
        _ => None,
    });
    let error_text = text.join("\n");
    let failure = match exit_code {
        Some(0) if assistant.is_empty() => {
            Some(Failure::new(FailureKind::NoResult, "no assistant message"))
        }
        Some(0) | None => None,
        Some(EXIT_RETRYABLE) => Some(Failure::new(
            FailureKind::Transient,
            format!("exit 75: {error_text}"),
        )),
        Some(code) => {
            let kind = match cli::classify_message(&error_text) {
                FailureKind::AgentError => FailureKind::ExitStatus,
                k => k,
            };
            Some(Failure::new(kind, format!("exit {code}: {error_text}")))
        }
    };
    Parsed {
        claimed_success: exit_code == Some(0) && failure.is_none(),
        turns: Some(assistant.len() as u32),
        usage: None,
        cost_usd: None,
        final_message,
        failure,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn content_parts_are_joined_and_an_empty_exit_zero_is_no_result() {
        let msg = json!({"role": "assistant", "content": [{"type": "text", "text": "a"}, {"type": "text", "text": "b"}]});
        let p = parse(&[msg], &[], Some(0));
        assert_eq!(p.final_message.as_deref(), Some("ab"));
        assert!(p.claimed_success);
        let p = parse(&[], &["banner".to_string()], Some(0));
        assert_eq!(p.failure.unwrap().kind, FailureKind::NoResult);
    }

    #[test]
    fn a_plain_text_rate_limit_is_retryable() {
        let p = parse(&[], &["Error: 429 Too Many Requests".to_string()], Some(1));
        assert_eq!(p.failure.unwrap().kind, FailureKind::RateLimited);
    }
}
