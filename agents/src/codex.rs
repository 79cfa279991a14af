//! Codex CLI: `codex exec --json --skip-git-repo-check -C DIR -s workspace-write -m MODEL --
//! PROMPT`. JSONL events: `turn.completed {usage}`, `turn.failed {error}`, `error`, and
//! `item.*` carrying `agent_message`, `command_execution` and `file_change` items. No cost field.

use std::path::PathBuf;

use serde_json::Value;

use crate::cli::{self, CliInvocation, Parsed};
use crate::{
    AgentBackend, AgentError, AgentOutcome, AgentRequest, Credentials, Failure, FailureKind, Usage,
};

pub const CODEX_ENV: &[&str] = &["CODEX_API_KEY", "OPENAI_API_KEY", "OPENAI_BASE_URL"];

pub struct CodexBackend {
    pub binary: PathBuf,
    env: Vec<(String, String)>,
}

impl CodexBackend {
    pub fn new(binary: impl Into<PathBuf>, credentials: &Credentials) -> Self {
        CodexBackend {
            binary: binary.into(),
            env: credentials.select(CODEX_ENV),
        }
    }
}

#[async_trait::async_trait]
impl AgentBackend for CodexBackend {
    fn name(&self) -> &'static str {
        "codex"
    }

    async fn run(&self, req: &AgentRequest<'_>) -> Result<AgentOutcome, AgentError> {
        let mut args: Vec<std::ffi::OsString> = vec![
            "exec".into(),
            "--json".into(),
            "--skip-git-repo-check".into(),
            "-C".into(),
            req.workspace.root().into(),
            "-s".into(),
            "workspace-write".into(),
        ];
        if let Some(m) = req.model {
            args.extend(["-m".into(), m.into()]);
        }
        args.extend(["--".into(), cli::prompt_arg(req)?.into()]);
        let run = cli::run_cli(
            req,
            CliInvocation {
                backend: self.name(),
                program: &self.binary,
                args,
                config_dir: ("CODEX_HOME", ".codex"),
                env: self.env.clone(),
            },
        )
        .await?;
        let parsed = parse(&run.events, run.report.exit_code);
        Ok(cli::outcome(req, self.name(), run, parsed))
    }
}

pub(crate) fn parse(events: &[Value], exit_code: Option<i32>) -> Parsed {
    let mut usage = Usage::default();
    let mut completed = 0;
    let mut steps = 0u32;
    let mut failure = None;
    let mut final_message = None;
    for e in events {
        match e["type"].as_str().unwrap_or("") {
            "turn.completed" => {
                completed += 1;
                let u = &e["usage"];
                usage.add(Usage {
                    input_tokens: u["input_tokens"].as_u64().unwrap_or(0),
                    output_tokens: u["output_tokens"].as_u64().unwrap_or(0),
                    cached_input_tokens: u["cached_input_tokens"].as_u64().unwrap_or(0),
                });
            }
            "turn.failed" | "error" => {
                let msg = e["error"]["message"]
                    .as_str()
                    .or(e["message"].as_str())
                    .unwrap_or("codex reported an error")
                    .to_string();
                failure = Some(Failure::new(cli::classify_message(&msg), msg));
            }
            "item.completed" => {
                let item = &e["item"];
                match item["type"].as_str().unwrap_or("") {
                    "agent_message" => {
                        steps += 1;
                        final_message = item["text"].as_str().map(str::to_string);
                    }
                    "command_execution" | "file_change" => steps += 1,
                    _ => {}
                }
            }
            _ => {}
        }
    }
    if failure.is_none() && exit_code == Some(0) && completed == 0 {
        failure = Some(Failure::new(
            FailureKind::NoResult,
            "no turn.completed event",
        ));
    }
    Parsed {
        claimed_success: exit_code == Some(0) && completed > 0 && failure.is_none(),
        turns: Some(steps),
        usage: (completed > 0).then_some(usage),
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
    fn usage_is_summed_over_turns_and_exit_zero_without_a_turn_is_no_result() {
        let turn =
            json!({"type": "turn.completed", "usage": {"input_tokens": 10, "output_tokens": 2}});
        let p = parse(&[turn.clone(), turn], Some(0));
        assert_eq!(p.usage.unwrap().input_tokens, 20);
        assert!(p.claimed_success);
        let p = parse(&[json!({"type": "thread.started"})], Some(0));
        assert_eq!(p.failure.unwrap().kind, FailureKind::NoResult);
        assert!(!p.claimed_success);
    }
}
