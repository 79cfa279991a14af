//! `harch-worker status [JOB] [--json]`: one job in detail, or every job as a table.

use std::process::ExitCode;

use harch_worker::pipeline::agent_stage::Attempt;
use harch_worker::queue::cli::{fmt_ms, fmt_time, setup};
use harch_worker::queue::config::QueueFlags;
use harch_worker::queue::record::{JobRecord, StageState, now_ms};
use harch_worker::queue::store::JobStore;

#[derive(clap::Args)]
pub struct Args {
    /// Job id; without it, all jobs.
    pub job: Option<String>,
    /// Print the job record(s) as JSON.
    #[arg(long)]
    pub json: bool,
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
                "no jobs in {} (the data dir; --data-dir or HARCH_DATA_DIR selects another)",
                dir.display()
            );
        }
        return Ok(ExitCode::SUCCESS);
    };
    match &args.job {
        Some(id) => {
            let rec = store.load(id)?;
            if args.json {
                crate::cli::out::print_json(&rec)?;
            } else {
                out!("{}", detail(&rec));
            }
        }
        None => {
            let all = store.list()?;
            if args.json {
                crate::cli::out::print_json(&all)?;
            } else {
                out!("{}", table(&all, dir));
            }
        }
    }
    Ok(ExitCode::SUCCESS)
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
            s.name,
            state,
            s.attempts,
            fmt_ms(s.work_ms)
        );
        let runs = s.summary.get("attempts").and_then(|a| a.as_array());
        match &s.summary {
            serde_json::Value::Null => {}
            serde_json::Value::Object(m) => {
                let mut rest = m.clone();
                // Runs, review rounds and a review's every claim get their own lines (or are in
                // the artifacts and `status --json`); the line keeps the verdict and counts.
                for long in ["attempts", "checked", "history", "rounds"] {
                    rest.remove(long);
                }
                out += &format!("  {}", serde_json::Value::Object(rest));
            }
            summary => out += &format!("  {summary}"),
        }
        out += "\n";
        out += &review_rounds(&s.summary);
        if let Some(e) = &s.last_error {
            out += &format!("    error: {e}\n");
        }
        for run in runs.into_iter().flatten() {
            if let Ok(a) = serde_json::from_value::<Attempt>(run.clone()) {
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
        "{:<26}  {:<36}  {:<10}  {:<9}  {:<10}  {:>4}  {:>12}  {}\n",
        "JOB", "MODEL", "KIND", "STATE", "STAGE", "ATT", "TIME", "LAST ERROR"
    );
    for rec in all {
        let stage = if rec.state.is_final() {
            "-".to_string()
        } else {
            rec.current_stage()
                .map(|s| s.name.clone())
                .unwrap_or("-".into())
        };
        let mut err = rec.last_error.clone().unwrap_or_default();
        if err.chars().count() > 60 {
            err = err.chars().take(57).collect::<String>() + "...";
        }
        out += &format!(
            "{:<26}  {:<36}  {:<10}  {:<9}  {:<10}  {:>4}  {:>12}  {}\n",
            rec.id,
            format!("{}@{}", rec.request.model_id, rec.request.revision),
            rec.request.kind.as_str(),
            rec.state.as_str(),
            stage,
            rec.attempts,
            elapsed(rec),
            err
        );
    }
    out
}

/// The review rounds a review or fix stage recorded, one line each.
fn review_rounds(summary: &serde_json::Value) -> String {
    let tally = |v: &serde_json::Value| {
        format!(
            "{} verified, {} unverified, {} contradicted",
            v["verified"], v["unverified"], v["contradicted"]
        )
    };
    let rounds = ["history", "rounds"]
        .iter()
        .find_map(|k| summary.get(*k).and_then(|r| r.as_array()));
    let mut out = String::new();
    for r in rounds.into_iter().flatten() {
        out += &format!(
            "    review round {}: recorded {}; rows {}; defects {}\n",
            r["round"],
            r["recorded"].as_str().unwrap_or("?"),
            tally(&r["rows"]),
            tally(&r["defects"])
        );
    }
    out
}
