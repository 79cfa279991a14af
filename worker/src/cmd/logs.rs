//! `harch-worker logs JOB`: the job's event log (deliveries, stage attempts, errors).
//! `harch-worker logs JOB --attempt N`: one agent run: its record, the files kept of it, the
//! worker's findings and the end of its transcript; `--show` prints one kept file whole.

use std::path::{Path, PathBuf};
use std::process::ExitCode;

use anyhow::{Context, bail};
use harch_worker::pipeline::agent_stage::{Attempt, Ledger};
use harch_worker::queue::cli::setup;
use harch_worker::queue::config::QueueFlags;
use harch_worker::queue::stage::Stage;
use harch_worker::queue::store::JobStore;

#[derive(clap::Args)]
pub struct Args {
    /// Job id, as `enqueue` printed it, a unique prefix of one, or `last`.
    pub job: String,
    /// Keep printing the event log as it grows, until the job is final (or Ctrl-C).
    #[arg(short, long, conflicts_with_all = ["attempt", "json"])]
    pub follow: bool,
    /// Show agent run N (as `status JOB` numbers them) instead of the event log: its record,
    /// the files kept of it, the worker's findings and the end of its transcript.
    #[arg(long, value_name = "N")]
    pub attempt: Option<u32>,
    /// The agent stage of the run (default: the first of generate, review, fix that has it).
    #[arg(long, requires = "attempt")]
    pub stage: Option<Stage>,
    /// Print one kept file of the run whole instead.
    #[arg(long, requires = "attempt", value_enum)]
    pub show: Option<Show>,
    /// Print as JSON: the event log as `job` and `lines`; an agent run as `job`, `stage`,
    /// `attempt` (its record), `dir` and `files` (name, bytes). Errors are JSON too.
    #[arg(long, conflicts_with = "show")]
    pub json: bool,
    #[command(flatten)]
    pub flags: QueueFlags,
}

#[derive(Clone, Copy, Debug, clap::ValueEnum)]
pub enum Show {
    /// The prompt the agent got.
    Prompt,
    /// The agent's own event stream (stdout).
    Transcript,
    /// The agent's stderr.
    Stderr,
    /// The worker's report on what the agent left (validate's JSON for generate).
    Report,
}

impl Show {
    /// The file's name in messages.
    fn noun(self) -> &'static str {
        match self {
            Show::Prompt => "prompt",
            Show::Transcript => "transcript",
            Show::Stderr => "stderr",
            Show::Report => "report",
        }
    }
}

/// Prints `path` (job `id`'s event log) as it grows, until the job is final and everything it
/// wrote is out.
fn follow(store: &JobStore, id: &str, path: &Path) {
    let mut shown = 0usize;
    loop {
        // Read the state before the log: a final state's last lines are then already written.
        let done = store.load(id).is_ok_and(|r| r.state.is_final());
        let text = std::fs::read(path).unwrap_or_default();
        if text.len() > shown {
            crate::cli::out::write_bytes(&text[shown..]);
            crate::cli::out::flush();
            shown = text.len();
        }
        if done {
            return;
        }
        std::thread::sleep(std::time::Duration::from_millis(300));
    }
}

/// Lines of the transcript shown by default.
const TAIL: usize = 20;

pub fn run(args: Args) -> anyhow::Result<ExitCode> {
    let settings = setup(&args.flags)?;
    let store = JobStore::open(settings.data_dir())?;
    let id = store.resolve(&args.job)?;
    store.load(&id)?;
    let job_dir = store.job_dir(&id)?;
    let Some(n) = args.attempt else {
        let path = job_dir.join("job.log");
        if args.follow {
            follow(&store, &id, &path);
            return Ok(ExitCode::SUCCESS);
        }
        let text = match std::fs::read_to_string(&path) {
            Ok(t) => t,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => String::new(),
            Err(e) => return Err(e).with_context(|| format!("cannot read {}", path.display())),
        };
        if args.json {
            crate::cli::out::print_json(&serde_json::json!({
                "job": id,
                "lines": text.lines().collect::<Vec<_>>(),
            }))?;
        } else {
            out!("{text}");
        }
        return Ok(ExitCode::SUCCESS);
    };
    let (stage, attempt) = find(&job_dir, args.stage, n)?;
    let dir = job_dir.join(&attempt.dir);
    let files = kept_files(&dir);
    let pick = |suffix: &str| {
        files
            .iter()
            .find(|f| f.starts_with(&format!("{}.", attempt.label)) && f.ends_with(suffix))
            .map(|f| dir.join(f))
    };
    let report = files
        .iter()
        .find(|f| !f.contains('/') && f.ends_with(".json"))
        .map(|f| dir.join(f));
    if let Some(show) = args.show {
        let path = match show {
            Show::Prompt => Some(dir.join("prompt.md")),
            Show::Transcript => pick(".jsonl"),
            Show::Stderr => pick(".stderr"),
            Show::Report => report,
        };
        let Some(path) = path.filter(|p| p.is_file()) else {
            bail!(
                "{stage} run {n} kept no {} file in {}",
                show.noun(),
                dir.display()
            );
        };
        let bytes =
            std::fs::read(&path).with_context(|| format!("cannot read {}", path.display()))?;
        crate::cli::out::write_bytes(&bytes);
        return Ok(ExitCode::SUCCESS);
    }
    if args.json {
        let kept: Vec<serde_json::Value> = files
            .iter()
            .map(|f| {
                let bytes = std::fs::metadata(dir.join(f)).map_or(0, |m| m.len());
                serde_json::json!({ "name": f, "bytes": bytes })
            })
            .collect();
        crate::cli::out::print_json(&serde_json::json!({
            "job": id,
            "stage": stage,
            "attempt": attempt,
            "dir": dir.display().to_string(),
            "files": kept,
        }))?;
        return Ok(ExitCode::SUCCESS);
    }
    out!(
        "{}",
        describe(&stage, &attempt, &dir, &files, pick(".jsonl"))
    );
    Ok(ExitCode::SUCCESS)
}

/// The attempt's stage and record.
fn find(job_dir: &Path, stage: Option<Stage>, n: u32) -> anyhow::Result<(Stage, Attempt)> {
    let stages: Vec<Stage> = match stage {
        Some(s) => vec![s],
        None => Stage::AGENT.to_vec(),
    };
    for &s in &stages {
        let ledger = Ledger::load(job_dir, s)?;
        if let Some(a) = ledger.attempts.into_iter().find(|a| a.n == n) {
            return Ok((s, a));
        }
    }
    bail!(
        "job {} has no agent run {n} in stage {} (`status {}` lists its runs)",
        job_dir.file_name().unwrap_or_default().to_string_lossy(),
        Stage::join(&stages, " or "),
        job_dir.file_name().unwrap_or_default().to_string_lossy(),
    )
}

/// Files kept of the run, relative to its directory.
fn kept_files(dir: &Path) -> Vec<String> {
    let mut out = Vec::new();
    let mut stack = vec![PathBuf::from(".")];
    while let Some(rel) = stack.pop() {
        let Ok(entries) = std::fs::read_dir(dir.join(&rel)) else {
            continue;
        };
        for e in entries.flatten() {
            let r = rel.join(e.file_name());
            match e.file_type() {
                Ok(t) if t.is_dir() => stack.push(r),
                Ok(t) if t.is_file() => out.push(
                    r.strip_prefix(".")
                        .unwrap_or(&r)
                        .to_string_lossy()
                        .into_owned(),
                ),
                _ => {}
            }
        }
    }
    out.sort();
    out
}

fn describe(
    stage: &Stage,
    a: &Attempt,
    dir: &Path,
    files: &[String],
    transcript: Option<PathBuf>,
) -> String {
    let mut out = format!(
        "{stage} run {} (round {}, label {})\n",
        a.n, a.round, a.label
    );
    out += &format!("  {}\n", a.line());
    if let Some(m) = &a.failure_message {
        out += &format!("  ended: {m}\n");
    }
    if let Some(r) = &a.rejected {
        out += &format!("  refused: {r}\n");
    }
    out += &format!("kept in {}:\n", dir.display());
    for f in files {
        let size = std::fs::metadata(dir.join(f)).map(|m| m.len()).unwrap_or(0);
        out += &format!("  {f:<48} {size:>10} bytes\n");
    }
    if !a.feedback.is_empty() {
        out += "the worker's findings:\n";
        for l in &a.feedback {
            out += &format!("  {l}\n");
        }
        if a.feedback_more > 0 {
            out += &format!("  … and {} more\n", a.feedback_more);
        }
    }
    if let Some(t) = transcript {
        let text = std::fs::read(&t).unwrap_or_default();
        let text = String::from_utf8_lossy(&text);
        let lines: Vec<&str> = text.lines().collect();
        let from = lines.len().saturating_sub(TAIL);
        out += &format!(
            "transcript ({}, last {} of {} lines; --show transcript for all):\n",
            t.file_name().unwrap_or_default().to_string_lossy(),
            lines.len() - from,
            lines.len()
        );
        for l in &lines[from..] {
            let l: String = l.chars().take(300).collect();
            out += &format!("  {l}\n");
        }
    }
    out
}
