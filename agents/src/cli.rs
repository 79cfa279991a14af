//! What every CLI backend shares: running the binary in the sandbox with a private config dir
//! and only its own credentials, reading its stdout back as JSON lines (tolerating text), and
//! turning the process's fate into an outcome.

use std::ffi::OsString;
use std::path::{Path, PathBuf};

use harch_sandbox::{RunOptions, RunReport};

use crate::{AgentError, AgentOutcome, AgentRequest, Failure, FailureKind};

/// Linux caps one argv string at 128 KiB; longer prompts go through a file.
const MAX_PROMPT_ARG: usize = 96 * 1024;
const PROMPT_FILE: &str = "PROMPT.md";

pub(crate) struct CliInvocation<'a> {
    pub backend: &'static str,
    pub program: &'a Path,
    pub args: Vec<OsString>,
    /// (variable, directory name under HOME) for the agent's private config dir.
    pub config_dir: (&'static str, &'static str),
    pub env: Vec<(String, String)>,
}

/// What came back from the process.
pub(crate) struct CliRun {
    pub report: RunReport,
    pub events: Vec<serde_json::Value>,
    /// Lines that were not JSON (banners, plain-text errors).
    pub text: Vec<String>,
    pub files_changed: Vec<PathBuf>,
}

/// The prompt as a single argument, or a pointer to `PROMPT.md` (written read-only into the
/// workspace root) when it is too long for argv.
pub(crate) fn prompt_arg(req: &AgentRequest<'_>) -> Result<String, AgentError> {
    if req.prompt.len() <= MAX_PROMPT_ARG {
        return Ok(req.prompt.to_string());
    }
    let path = req.workspace.root().join(PROMPT_FILE);
    let tmp = req.workspace.root().join(format!(".{PROMPT_FILE}.tmp"));
    std::fs::write(&tmp, req.prompt).map_err(AgentError::io("writing", &tmp))?;
    std::fs::rename(&tmp, &path).map_err(AgentError::io("renaming into", &path))?;
    Ok(format!(
        "Your complete instructions are in the file {PROMPT_FILE} in the current directory. \
         Read all of it first, then follow it."
    ))
}

pub(crate) async fn run_cli(
    req: &AgentRequest<'_>,
    inv: CliInvocation<'_>,
) -> Result<CliRun, AgentError> {
    let ws = req.workspace;
    let mut cmd = ws.command(inv.program.as_os_str());
    cmd.args(inv.args);
    let config_dir = ws.private_dir(inv.config_dir.1)?;
    cmd.env(inv.config_dir.0, config_dir)?;
    for (k, v) in &inv.env {
        cmd.env(k, v)?;
    }
    let stem = format!("{}.{}", req.label, inv.backend);
    let mut opts = RunOptions::new(&ws.logs_dir(), &stem, req.limits.wall_time);
    opts.stdout_path = ws.logs_dir().join(format!("{stem}.jsonl"));
    opts.max_stdout_bytes = req.limits.max_output_bytes;
    opts.max_stderr_bytes = (req.limits.max_output_bytes / 10).max(64 * 1024);
    opts.term_grace = req.limits.term_grace;

    let before = ws.snapshot_writable();
    let report = cmd.run(&opts).await?;
    let files_changed = ws.snapshot_writable().changed_since(&before);
    let (events, text) = read_lines(&report.stdout_path)?;
    Ok(CliRun {
        report,
        events,
        text,
        files_changed,
    })
}

/// Splits a captured stream into JSON events and other lines.
pub(crate) fn read_lines(path: &Path) -> Result<(Vec<serde_json::Value>, Vec<String>), AgentError> {
    let bytes = std::fs::read(path).map_err(AgentError::io("reading", path))?;
    let mut events = Vec::new();
    let mut text = Vec::new();
    for line in String::from_utf8_lossy(&bytes).lines() {
        let line = line.trim();
        if line.is_empty() {
            continue;
        }
        match serde_json::from_str::<serde_json::Value>(line) {
            Ok(v) if v.is_object() => events.push(v),
            _ => text.push(line.to_string()),
        }
    }
    Ok((events, text))
}

/// What a backend's parser concluded from the event stream.
#[derive(Default)]
pub(crate) struct Parsed {
    pub claimed_success: bool,
    pub turns: Option<u32>,
    pub usage: Option<crate::Usage>,
    pub cost_usd: Option<f64>,
    pub final_message: Option<String>,
    pub failure: Option<Failure>,
}

/// Builds the outcome; the process's fate (timeout, flood) outranks what the stream says.
pub(crate) fn outcome(
    req: &AgentRequest<'_>,
    backend: &str,
    run: CliRun,
    parsed: Parsed,
) -> AgentOutcome {
    let r = &run.report;
    let failure = if r.timed_out {
        Some(Failure::new(
            FailureKind::Timeout,
            format!(
                "killed after the wall-clock limit of {:?}",
                req.limits.wall_time
            ),
        ))
    } else if r.output_capped {
        Some(Failure::new(
            FailureKind::OutputLimit,
            format!(
                "output exceeded {} bytes; killed",
                req.limits.max_output_bytes
            ),
        ))
    } else if parsed.failure.is_some() {
        parsed.failure
    } else if r.exit_code != Some(0) {
        let tail = stderr_tail(&r.stderr_path);
        Some(Failure::new(
            FailureKind::ExitStatus,
            match (r.exit_code, r.signal) {
                (Some(c), _) => format!("exit {c}: {tail}"),
                (None, Some(s)) => format!("killed by signal {s}: {tail}"),
                (None, None) => format!("no exit status: {tail}"),
            },
        ))
    } else {
        None
    };
    AgentOutcome {
        backend: backend.to_string(),
        model: req.model.map(str::to_string),
        exit_code: r.exit_code,
        claimed_success: parsed.claimed_success,
        turns: parsed.turns,
        usage: parsed.usage,
        cost_usd: parsed.cost_usd,
        wall_ms: r.wall_time.as_millis() as u64,
        transcript: r.stdout_path.clone(),
        stderr_log: Some(r.stderr_path.clone()),
        files_changed: run.files_changed,
        final_message: parsed.final_message,
        failure,
    }
}

/// The last few hundred bytes of stderr, for a failure message.
pub(crate) fn stderr_tail(path: &Path) -> String {
    let bytes = std::fs::read(path).unwrap_or_default();
    let start = bytes.len().saturating_sub(400);
    String::from_utf8_lossy(&bytes[start..]).trim().to_string()
}

/// Whether an error text says "slow down" rather than "you are wrong".
pub(crate) fn mentions_rate_limit(text: &str) -> bool {
    let t = text.to_ascii_lowercase();
    [
        "rate limit",
        "rate_limit",
        "ratelimit",
        "429",
        "too many requests",
        "overloaded",
        "quota",
    ]
    .iter()
    .any(|k| t.contains(k))
}

/// A failure kind for an error message from the agent.
pub(crate) fn classify_message(text: &str) -> FailureKind {
    let t = text.to_ascii_lowercase();
    if mentions_rate_limit(&t) {
        FailureKind::RateLimited
    } else if [
        "401",
        "403",
        "unauthorized",
        "invalid api key",
        "authentication",
    ]
    .iter()
    .any(|k| t.contains(k))
    {
        FailureKind::Auth
    } else {
        FailureKind::AgentError
    }
}
