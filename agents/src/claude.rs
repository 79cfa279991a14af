//! Claude Code headless: `claude -p … --output-format stream-json --verbose`. The last event is
//! `{"type":"result", subtype, is_error, num_turns, total_cost_usd, usage, result}`; without it
//! the run failed, whatever the exit code says.

use std::path::PathBuf;

use serde_json::Value;

use crate::cli::{self, CliInvocation, Parsed};
use crate::{
    AgentBackend, AgentError, AgentOutcome, AgentRequest, Credentials, Failure, FailureKind, Usage,
};

/// The variables Claude Code reads for credentials and endpoints; nothing else is passed.
pub const CLAUDE_ENV: &[&str] = &[
    "ANTHROPIC_API_KEY",
    "ANTHROPIC_AUTH_TOKEN",
    "ANTHROPIC_BASE_URL",
    "ANTHROPIC_MODEL",
    "ANTHROPIC_SMALL_FAST_MODEL",
];

/// File tools plus the validate command; no web access, no other shell commands.
pub const DEFAULT_ALLOWED_TOOLS: &[&str] = &[
    "Read",
    "Write",
    "Edit",
    "MultiEdit",
    "Glob",
    "Grep",
    "LS",
    "Bash(validate:*)",
    "Bash(validate)",
];

pub struct ClaudeBackend {
    pub binary: PathBuf,
    pub allowed_tools: Vec<String>,
    env: Vec<(String, String)>,
}

impl ClaudeBackend {
    pub fn new(binary: impl Into<PathBuf>, credentials: &Credentials) -> Self {
        ClaudeBackend {
            binary: binary.into(),
            allowed_tools: DEFAULT_ALLOWED_TOOLS
                .iter()
                .map(|s| s.to_string())
                .collect(),
            env: credentials.select(CLAUDE_ENV),
        }
    }
}

#[async_trait::async_trait]
impl AgentBackend for ClaudeBackend {
    fn name(&self) -> &'static str {
        "claude"
    }

    async fn run(&self, req: &AgentRequest<'_>) -> Result<AgentOutcome, AgentError> {
        let mut args: Vec<std::ffi::OsString> = vec![
            "-p".into(),
            cli::prompt_arg(req)?.into(),
            "--output-format".into(),
            "stream-json".into(),
            "--verbose".into(),
            "--max-turns".into(),
            req.limits.max_turns.to_string().into(),
            "--allowedTools".into(),
            self.allowed_tools.join(",").into(),
        ];
        if let Some(m) = req.model {
            args.extend(["--model".into(), m.into()]);
        }
        let mut env = self.env.clone();
        env.push(("DISABLE_AUTOUPDATER".into(), "1".into()));
        env.push((
            "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC".into(),
            "1".into(),
        ));
        let run = cli::run_cli(
            req,
            CliInvocation {
                backend: self.name(),
                program: &self.binary,
                args,
                config_dir: ("CLAUDE_CONFIG_DIR", ".claude"),
                env,
            },
        )
        .await?;
        let parsed = parse(&run.events, &run.text);
        Ok(cli::outcome(req, self.name(), run, parsed))
    }
}

pub(crate) fn parse(events: &[Value], text: &[String]) -> Parsed {
    let assistant_turns = events.iter().filter(|e| e["type"] == "assistant").count() as u32;
    let Some(result) = events.iter().rev().find(|e| e["type"] == "result") else {
        let hint = text.last().cloned().unwrap_or_default();
        let kind = if cli::mentions_rate_limit(&hint) {
            FailureKind::RateLimited
        } else {
            FailureKind::NoResult
        };
        return Parsed {
            turns: Some(assistant_turns),
            failure: Some(Failure::new(
                kind,
                format!("no result event in the stream {hint}")
                    .trim()
                    .to_string(),
            )),
            ..Parsed::default()
        };
    };
    let subtype = result["subtype"].as_str().unwrap_or("");
    let is_error = result["is_error"].as_bool().unwrap_or(false);
    let message = result["result"].as_str().map(str::to_string);
    let u = &result["usage"];
    let usage = u.is_object().then(|| Usage {
        input_tokens: n(&u["input_tokens"])
            + n(&u["cache_creation_input_tokens"])
            + n(&u["cache_read_input_tokens"]),
        output_tokens: n(&u["output_tokens"]),
        cached_input_tokens: n(&u["cache_read_input_tokens"]),
    });
    let failure = if subtype == "error_max_turns" {
        Some(Failure::new(FailureKind::MaxTurns, "reached --max-turns"))
    } else if is_error || subtype != "success" {
        let text = message.clone().unwrap_or_else(|| subtype.to_string());
        Some(Failure::new(cli::classify_message(&text), text))
    } else {
        None
    };
    Parsed {
        claimed_success: subtype == "success" && !is_error,
        turns: result["num_turns"]
            .as_u64()
            .map(|t| t as u32)
            .or(Some(assistant_turns)),
        usage,
        cost_usd: result["total_cost_usd"].as_f64(),
        final_message: message,
        failure,
    }
}

fn n(v: &Value) -> u64 {
    v.as_u64().unwrap_or(0)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn an_error_result_with_success_subtype_is_not_a_claim() {
        let events = [
            json!({"type": "result", "subtype": "success", "is_error": true,
            "result": "Invalid API key · Please run /login", "num_turns": 1}),
        ];
        let p = parse(&events, &[]);
        assert!(!p.claimed_success);
        assert_eq!(p.failure.unwrap().kind, FailureKind::Auth);
        assert_eq!(p.usage, None, "no usage object, no invented zeros");
    }

    #[test]
    fn without_a_result_the_assistant_events_still_count_turns() {
        let events = [json!({"type": "assistant"}), json!({"type": "assistant"})];
        let p = parse(&events, &["Error: overloaded_error".to_string()]);
        assert_eq!(p.turns, Some(2));
        assert_eq!(p.failure.unwrap().kind, FailureKind::RateLimited);
    }
}
