//! Claude Code headless: `claude -p … --output-format stream-json --verbose`. The last event is
//! `{"type":"result", subtype, is_error, num_turns, total_cost_usd, usage, modelUsage, result}`;
//! without it the run failed, whatever the exit code says.
//!
//! The agent is cut off from the host's Claude setup: no settings file is loaded
//! (`--setting-sources ""`), no `CLAUDE.md` of any ancestor directory and no git status of the
//! checkout the workspace happens to sit in reaches its context (the two `CLAUDE_CODE_DISABLE_*`
//! switches), its config dir is private to the job, and it sends nothing but model requests.
//! Only the tools in [`TOOLS`] exist for it. Checked against the real CLI in
//! `worker/tests/real_clis.rs`.

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

/// The built-in tools the agent gets at all (`--tools`): file tools and a shell. No web tools,
/// no sub-agents. Claude Code 2.1 has no `LS` or `MultiEdit` tool any more.
pub const TOOLS: &[&str] = &["Read", "Write", "Edit", "Glob", "Grep", "Bash"];

/// What runs without asking (`--allowedTools`): reading and searching inside the working
/// directory (the workspace root), writing and editing only where the sandbox lets it write, and
/// the validate command. A path outside these is refused by Claude Code itself (a permission
/// denial the model reads), before our Landlock policy would refuse it. Claude Code also
/// auto-approves shell commands it classifies as read-only (`ls`, `cat`, `grep`, `find`, `head`,
/// `wc`, `pwd`, `echo` …) on paths inside the working directory, whatever this list says;
/// every other command is denied in print mode.
pub const DEFAULT_ALLOWED_TOOLS: &[&str] = &[
    "Read(./**)",
    "Glob(./**)",
    "Grep(./**)",
    "Write(./specs/models/**)",
    "Write(./specs/components/drafts/**)",
    "Edit(./specs/models/**)",
    "Edit(./specs/components/drafts/**)",
    "Bash(validate:*)",
    "Bash(validate)",
];

/// `allowed` plus writing and editing in every directory the workspace lets the agent write (a
/// review stage's `review/`), so Claude Code's own permissions follow the sandbox's.
fn allowed_tools(allowed: &[String], req: &AgentRequest<'_>) -> Vec<String> {
    let mut out = allowed.to_vec();
    let root = req.workspace.root();
    for dir in req.workspace.writable_dirs() {
        let Ok(rel) = dir.strip_prefix(&root) else {
            continue;
        };
        for tool in ["Write", "Edit"] {
            let rule = format!("{tool}(./{}/**)", rel.display());
            if !out.contains(&rule) {
                out.push(rule);
            }
        }
    }
    out
}

/// Environment switches that keep the host out of the agent's context and the network quiet.
const ISOLATION_ENV: &[(&str, &str)] = &[
    ("DISABLE_AUTOUPDATER", "1"),
    ("CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC", "1"),
    ("CLAUDE_CODE_DISABLE_CLAUDE_MDS", "1"),
    ("CLAUDE_CODE_DISABLE_GIT_INSTRUCTIONS", "1"),
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
            "--setting-sources".into(),
            "".into(),
            "--tools".into(),
            TOOLS.join(",").into(),
            "--allowedTools".into(),
            allowed_tools(&self.allowed_tools, req).join(",").into(),
        ];
        if let Some(usd) = req.limits.max_cost_usd {
            args.extend(["--max-budget-usd".into(), format!("{usd:.4}").into()]);
        }
        if let Some(m) = req.model {
            args.extend(["--model".into(), m.into()]);
        }
        let mut env = self.env.clone();
        env.extend(
            ISOLATION_ENV
                .iter()
                .map(|(k, v)| (k.to_string(), v.to_string())),
        );
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
    let failure = if subtype == "error_max_turns" {
        Some(Failure::new(FailureKind::MaxTurns, "reached --max-turns"))
    } else if subtype == "error_max_budget_usd" {
        Some(Failure::new(
            FailureKind::BudgetExceeded,
            format!(
                "reached --max-budget-usd after ${:.4}",
                result["total_cost_usd"].as_f64().unwrap_or(0.0)
            ),
        ))
    } else if is_error || subtype != "success" {
        let errors: Vec<&str> = result["errors"]
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(Value::as_str)
            .collect();
        let text = message
            .clone()
            .or_else(|| (!errors.is_empty()).then(|| errors.join("; ")))
            .unwrap_or_else(|| subtype.to_string());
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
        usage: usage(result),
        cost_usd: result["total_cost_usd"].as_f64(),
        final_message: message,
        failure,
    }
}

/// Tokens of the whole run. `modelUsage` sums every request per model; the top-level `usage` of
/// an error result (2.1.332, `error_max_budget_usd`) covers only the last request, so it is the
/// fallback. Input counts cache writes and reads too, as the provider bills them.
fn usage(result: &Value) -> Option<Usage> {
    if let Some(models) = result["modelUsage"].as_object().filter(|m| !m.is_empty()) {
        let mut total = Usage::default();
        for m in models.values() {
            total.add(Usage {
                input_tokens: n(&m["inputTokens"])
                    + n(&m["cacheCreationInputTokens"])
                    + n(&m["cacheReadInputTokens"]),
                output_tokens: n(&m["outputTokens"]),
                cached_input_tokens: n(&m["cacheReadInputTokens"]),
            });
        }
        return Some(total);
    }
    let u = &result["usage"];
    u.is_object().then(|| Usage {
        input_tokens: n(&u["input_tokens"])
            + n(&u["cache_creation_input_tokens"])
            + n(&u["cache_read_input_tokens"]),
        output_tokens: n(&u["output_tokens"]),
        cached_input_tokens: n(&u["cache_read_input_tokens"]),
    })
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
    fn the_budget_cap_is_budget_exceeded_and_usage_covers_every_request() {
        // The shape Claude Code 2.1.332 prints when --max-budget-usd stops it after two requests.
        let events = [json!({"type": "result", "subtype": "error_max_budget_usd",
            "is_error": true, "num_turns": 2, "total_cost_usd": 0.0075,
            "errors": ["Reached maximum budget ($0.005)"],
            "usage": {"input_tokens": 1000, "output_tokens": 50},
            "modelUsage": {"claude-sonnet-4-5": {"inputTokens": 2000, "outputTokens": 100,
                "cacheReadInputTokens": 0, "cacheCreationInputTokens": 0, "costUSD": 0.0075}}})];
        let p = parse(&events, &[]);
        let f = p.failure.unwrap();
        assert_eq!(f.kind, FailureKind::BudgetExceeded);
        assert!(!f.kind.retryable());
        assert!(f.message.contains("$0.0075"), "{}", f.message);
        assert_eq!(p.usage.unwrap().input_tokens, 2000);
        assert_eq!(p.cost_usd, Some(0.0075));
    }

    #[test]
    fn without_a_result_the_assistant_events_still_count_turns() {
        let events = [json!({"type": "assistant"}), json!({"type": "assistant"})];
        let p = parse(&events, &["Error: overloaded_error".to_string()]);
        assert_eq!(p.turns, Some(2));
        assert_eq!(p.failure.unwrap().kind, FailureKind::RateLimited);
    }
}
