//! `harch-worker status [JOB] [--json] [--watch]`: one job in detail, or every job as a table
//! under a line naming the queue and data dir.

use std::io::IsTerminal;
use std::process::ExitCode;

use harch_review::{Decision, Tally};
use harch_worker::pipeline::summary::{AgentRuns, FixSummary, ReviewHistory};
use harch_worker::queue::cli::{fmt_ms, fmt_time, setup};
use harch_worker::queue::config::QueueFlags;
use harch_worker::queue::record::{JobRecord, JobState, StageRecord, StageState, now_ms};
use harch_worker::queue::stage::Stage;
use harch_worker::queue::store::JobStore;

#[derive(clap::Args)]
pub struct Args {
    /// Job id, a unique prefix of one, or `last`; without it, all jobs.
    pub job: Option<String>,
    /// Print the job record(s) as JSON.
    #[arg(long)]
    pub json: bool,
    /// Redraw every --interval seconds until the job (without JOB: every job) is final.
    #[arg(short, long, conflicts_with = "json")]
    pub watch: bool,
    /// Seconds between redraws under --watch.
    #[arg(long, default_value_t = 2.0, requires = "watch")]
    pub interval: f64,
    #[command(flatten)]
    pub flags: QueueFlags,
}

pub fn run(args: Args) -> anyhow::Result<ExitCode> {
    let settings = setup(&args.flags)?;
    let dir = settings.data_dir();
    let Some(store) = JobStore::existing(dir) else {
        // Nothing was ever queued here: say where we looked, and create nothing.
        if let Some(id) = &args.job {
            return Err(anyhow::anyhow!(
                "job {id} does not exist: {} holds no jobs",
                dir.display()
            ));
        }
        if args.json {
            crate::cli::out::print_json(&Vec::<JobRecord>::new())?;
        } else {
            outln!(
                "no jobs in {} (the data dir, {}; --data-dir or HARCH_DATA_DIR selects another)",
                dir.display(),
                settings.data_dir_origin.as_str()
            );
        }
        return Ok(ExitCode::SUCCESS);
    };
    let id = args.job.as_deref().map(|j| store.resolve(j)).transpose()?;
    let header = settings.describe_queue();
    let redraw = args.watch && std::io::stdout().is_terminal();
    loop {
        let finished = match &id {
            Some(id) => {
                let rec = store.load(id)?;
                if args.json {
                    crate::cli::out::print_json(&rec)?;
                } else {
                    out!("{}", detail(&rec));
                }
                rec.state.is_final()
            }
            None => {
                let all = store.list()?;
                if args.json {
                    crate::cli::out::print_json(&all)?;
                } else {
                    out!("{header}\n{}", table(&all, dir));
                }
                all.iter().all(|r| r.state.is_final())
            }
        };
        crate::cli::out::flush();
        if !args.watch || finished {
            return Ok(ExitCode::SUCCESS);
        }
        std::thread::sleep(std::time::Duration::from_secs_f64(args.interval.max(0.1)));
        if redraw {
            // Home and clear: the table is redrawn in place.
            out!("\x1b[H\x1b[2J");
        } else {
            outln!();
        }
    }
}

fn elapsed(rec: &JobRecord) -> String {
    match (rec.started_ms, rec.finished_ms) {
        (Some(s), Some(f)) => fmt_ms(f.saturating_sub(s)),
        (Some(s), None) => format!("{} so far", fmt_ms(now_ms().saturating_sub(s))),
        _ => "-".into(),
    }
}

fn detail(rec: &JobRecord) -> String {
    let r = &rec.request;
    let mut out = format!(
        "job {}  {}@{}  {}  {}\n",
        rec.id,
        r.model_id,
        r.revision,
        r.kind.as_str(),
        rec.state.as_str()
    );
    out += &format!(
        "created {}  time {}  deliveries {}  attempts {}  retries {}  worker {}\n",
        fmt_time(rec.created_ms),
        elapsed(rec),
        rec.deliveries,
        rec.attempts,
        rec.retries,
        rec.worker.as_deref().unwrap_or("-")
    );
    out += &format!(
        "agent {}  guards {}  priority {}  {}\n",
        r.agent,
        r.guards,
        r.priority,
        if r.offline { "offline" } else { "online" }
    );
    if rec.cancel_requested {
        out += "cancel requested\n";
    }
    if let Some(e) = &rec.last_error {
        let kind = rec
            .failure
            .map(|k| format!(" ({k:?})").to_lowercase())
            .unwrap_or_default();
        out += &format!("last error{kind}: {e}\n");
    }
    let u = rec.usage();
    out += &format!(
        "agent usage: {} turns, {} input + {} output tokens, ${:.2}\n",
        u.turns, u.input_tokens, u.output_tokens, u.cost_usd
    );
    out += "stages:\n";
    for s in &rec.stages {
        let state = match s.state {
            StageState::Pending => "pending",
            StageState::Running => "running",
            StageState::Done => "done",
            StageState::Failed => "failed",
        };
        out += &format!(
            "  {:<12} {:<8} attempts {:<3} work {:>9}",
            s.stage,
            state,
            s.attempts,
            fmt_ms(s.work_ms)
        );
        let runs = s.summary_as::<AgentRuns>().map(|r| r.attempts);
        match &s.summary {
            serde_json::Value::Null => {}
            serde_json::Value::Object(m) => {
                let mut rest = m.clone();
                // Runs, review rounds and a review's every claim get their own lines (or are in
                // the artifacts and `status --json`); the line keeps the verdict and counts.
                for long in ["attempts", "checked", "history", "rounds"] {
                    rest.remove(long);
                }
                out += &format!("  {}", fields(&serde_json::Value::Object(rest)));
            }
            summary => out += &format!("  {summary}"),
        }
        out += "\n";
        out += &review_rounds(s);
        if let Some(e) = &s.last_error {
            out += &format!("    error: {e}\n");
        }
        for a in runs.into_iter().flatten() {
            let round = if rec.retries > 0 {
                format!("round {}: ", a.round)
            } else {
                String::new()
            };
            out += &format!("    {round}{}\n      kept in {}/\n", a.line(), a.dir);
            if let Some(r) = &a.rejected {
                out += &format!("      refused: {r}\n");
            }
        }
        for a in &s.artifacts {
            out += &format!("    {a}\n");
        }
    }
    out
}

fn table(all: &[JobRecord], dir: &std::path::Path) -> String {
    if all.is_empty() {
        return format!("no jobs in {}\n", dir.display());
    }
    let mut out = format!(
        "{:<26}  {:<36}  {:<10}  {:<9}  {:<20}  {:>4}  {:>12}  {}\n",
        "JOB", "MODEL", "KIND", "STATE", "STAGES", "ATT", "TIME", "LAST ERROR"
    );
    for rec in all {
        let mut err = rec.last_error.clone().unwrap_or_default();
        if err.chars().count() > 60 {
            err = err.chars().take(57).collect::<String>() + "...";
        }
        out += &format!(
            "{:<26}  {:<36}  {:<10}  {:<9}  {:<20}  {:>4}  {:>12}  {}\n",
            rec.id,
            format!("{}@{}", rec.request.model_id, rec.request.revision),
            rec.request.kind.as_str(),
            rec.state.as_str(),
            progress(rec),
            rec.attempts,
            elapsed(rec),
            err
        );
    }
    out
}

/// A stage summary as `key=value` words: nested objects by dotted keys, lists by their length.
fn fields(v: &serde_json::Value) -> String {
    fn walk(prefix: &str, v: &serde_json::Value, out: &mut Vec<String>) {
        match v {
            serde_json::Value::Object(m) => {
                for (k, x) in m {
                    let key = match prefix {
                        "" => k.clone(),
                        p => format!("{p}.{k}"),
                    };
                    walk(&key, x, out);
                }
            }
            serde_json::Value::Array(a) => out.push(format!("{prefix}=[{} items]", a.len())),
            serde_json::Value::String(s) => out.push(format!("{prefix}={s}")),
            serde_json::Value::Null => {}
            x => out.push(format!("{prefix}={x}")),
        }
    }
    let mut out = Vec::new();
    walk("", v, &mut out);
    out.join(" ")
}

/// `3/6 generate`: stages done of all, and the one running or next.
fn progress(rec: &JobRecord) -> String {
    let done = rec
        .stages
        .iter()
        .filter(|s| s.state == StageState::Done)
        .count();
    let total = rec.stages.len();
    let at = match rec.state {
        JobState::Succeeded => String::new(),
        _ => rec
            .stages
            .iter()
            .find(|s| s.state != StageState::Done)
            .map(|s| format!(" {}", s.stage))
            .unwrap_or_default(),
    };
    format!("{done}/{total}{at}")
}

/// The review rounds a review or fix stage recorded, one line each.
fn review_rounds(s: &StageRecord) -> String {
    let rounds: Vec<(u32, Decision, Tally, Tally)> = match s.stage {
        Stage::Review => s
            .summary_as::<ReviewHistory>()
            .map(|h| h.history)
            .unwrap_or_default()
            .into_iter()
            .map(|r| (r.round, r.recorded, r.rows, r.defects))
            .collect(),
        Stage::Fix => s
            .summary_as::<FixSummary>()
            .map(|f| f.rounds)
            .unwrap_or_default()
            .into_iter()
            .map(|r| (r.round, r.recorded, r.rows, r.defects))
            .collect(),
        _ => Vec::new(),
    };
    let tally = |t: &Tally| {
        format!(
            "{} verified, {} unverified, {} contradicted",
            t.verified, t.unverified, t.contradicted
        )
    };
    let mut out = String::new();
    for (round, recorded, rows, defects) in rounds {
        out += &format!(
            "    review round {round}: recorded {recorded}; rows {}; defects {}\n",
            tally(&rows),
            tally(&defects)
        );
    }
    out
}
