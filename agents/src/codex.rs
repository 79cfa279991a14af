//! Codex CLI: `codex exec --json --skip-git-repo-check -C DIR -s danger-full-access
//! -c allow_login_shell=false [-c openai_base_url=URL] [-m MODEL] -- PROMPT`. JSONL events:
//! `turn.completed {usage}`, `turn.failed {error}`, `error`, and `item.*` carrying
//! `agent_message`, `command_execution`, `file_change` and `error` items. No cost field.
//!
//! Why these flags (measured with codex-cli 0.171.0, see docs/agents.md):
//! - Codex's own sandbox is off. `-s workspace-write` starts every command under bubblewrap,
//!   which cannot set up its namespaces inside our Landlock domain ("error building bubblewrap
//!   command: Permission denied"), so no command would ever run. Our sandbox (Landlock, rlimits,
//!   the sandbox user, a cleared environment) is the boundary, as for every backend.
//! - Commands run in `bash -c`, not a login shell: `/etc/profile` would reset PATH and drop
//!   the workspace's `bin/`, where `validate` lives.
//! - Codex ignores `OPENAI_BASE_URL`; the endpoint is a config override.
//! - Its stream carries `{"type":"error","message":"Reconnecting... n/5 …"}` while it retries a
//!   transport (the WebSocket first, then HTTPS): notices, not the run's failure.

use std::path::PathBuf;

use serde_json::Value;

use crate::cli::{self, CliInvocation, Parsed};
use crate::{
    AgentBackend, AgentError, AgentOutcome, AgentRequest, Credentials, Failure, FailureKind, Usage,
};

/// Passed to Codex as they are. `OPENAI_BASE_URL` is read by the backend and handed to Codex as
/// `-c openai_base_url=…`, the only form it honours.
pub const CODEX_ENV: &[&str] = &["CODEX_API_KEY", "OPENAI_API_KEY"];
const BASE_URL_ENV: &str = "OPENAI_BASE_URL";

pub struct CodexBackend {
    pub binary: PathBuf,
    /// The Responses API endpoint up to `/v1`; `None` keeps Codex's default.
    pub base_url: Option<String>,
    env: Vec<(String, String)>,
}

impl CodexBackend {
    pub fn new(binary: impl Into<PathBuf>, credentials: &Credentials) -> Self {
        CodexBackend {
            binary: binary.into(),
            base_url: credentials
                .get(BASE_URL_ENV)
                .filter(|u| !u.trim().is_empty())
                .map(str::to_string),
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
            "danger-full-access".into(),
            "-c".into(),
            "allow_login_shell=false".into(),
        ];
        if let Some(url) = &self.base_url {
            // A TOML string: quoted, so a URL is never read as another type.
            let quoted = serde_json::to_string(url).expect("a string serializes");
            args.extend(["-c".into(), format!("openai_base_url={quoted}").into()]);
        }
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

/// Codex reports its own transport retries as `error` events; they end nothing.
fn is_notice(msg: &str) -> bool {
    msg.trim_start().starts_with("Reconnecting")
}

/// A dropped stream is the network's fault, not the agent's: worth another run.
fn classify(msg: &str) -> FailureKind {
    let lower = msg.to_ascii_lowercase();
    match cli::classify_message(msg) {
        FailureKind::AgentError
            if [
                "stream disconnected",
                "connection reset",
                "timed out",
                "error sending request",
            ]
            .iter()
            .any(|k| lower.contains(k)) =>
        {
            FailureKind::Transient
        }
        k => k,
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
                if is_notice(&msg) {
                    continue;
                }
                failure = Some(Failure::new(classify(&msg), msg));
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

    #[test]
    fn reconnect_notices_are_not_failures_and_a_dropped_stream_is_transient() {
        // As codex-cli 0.171.0 prints them while it falls back from the WebSocket to HTTPS.
        let notice = json!({"type": "error", "message": "Reconnecting... 2/5 (unexpected status 404 Not Found: Unknown error, url: ws://127.0.0.1:1/v1/responses)"});
        let turn =
            json!({"type": "turn.completed", "usage": {"input_tokens": 10, "output_tokens": 2}});
        let p = parse(&[notice.clone(), turn], Some(0));
        assert!(p.failure.is_none(), "{:?}", p.failure);
        assert!(p.claimed_success);
        let dropped = json!({"type": "turn.failed", "error": {"message": "stream disconnected before completion: error sending request for url (http://127.0.0.1:1/v1/responses)"}});
        let p = parse(&[notice, dropped], Some(1));
        let f = p.failure.unwrap();
        assert_eq!(f.kind, FailureKind::Transient);
        assert!(f.kind.retryable());
    }
}
