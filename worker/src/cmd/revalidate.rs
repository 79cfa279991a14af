//! `harch-worker revalidate [--offline]`: re-validate the whole spec library against the current
//! truth (or, offline, the bundled snapshots). Queues one re-validate job per library model on
//! a queue of its own, runs a worker until those jobs are done, and prints a summary table.
//!
//! The queue is private (a SQLite file and job records under `<data_dir>/revalidate/<run>/`):
//! a worker on the shared queue would also run whatever else waits there, such as generate
//! jobs that start paid agent runs.

use std::process::ExitCode;
use std::sync::Arc;

use harch_worker::pipeline::registry::StageRegistry;
use harch_worker::pipeline::summary::{FetchSummary, VerifySummary};
use harch_worker::queue::cli::{block_on, fmt_ms, setup_worker};
use harch_worker::queue::config::QueueFlags;
use harch_worker::queue::ops::enqueue;
use harch_worker::queue::record::{JobKind, JobRecord, JobRequest, JobState};
use harch_worker::queue::store::JobStore;
use harch_worker::queue::worker::{WorkerOptions, run_worker};

#[derive(clap::Args)]
pub struct Args {
    /// Use the bundled snapshots instead of fetching from the Hub.
    #[arg(long)]
    pub offline: bool,
    /// Only these models (default: the whole library).
    #[arg(long, value_delimiter = ',')]
    pub models: Option<Vec<String>>,
    /// Jobs run at the same time (default: worker.concurrency in queue.toml).
    #[arg(long)]
    pub concurrency: Option<usize>,
    /// Print one JSON object per model (model_id, spec, truth, guards, valid, errors,
    /// warnings, matched_tensors, checkpoint_tensors, state, error) instead of the table.
    #[arg(long)]
    pub json: bool,
    #[command(flatten)]
    pub flags: QueueFlags,
}

pub fn run(args: Args) -> anyhow::Result<ExitCode> {
    let mut settings = setup_worker(&args.flags, args.concurrency)?;
    let run_dir = settings
        .data_dir()
        .join("revalidate")
        .join(ulid::Ulid::generate().to_string());
    settings.worker.data_dir = run_dir.clone();
    settings.queue.url = format!("sqlite://{}", run_dir.join("queue.sqlite").display());
    let models = match args.models.clone() {
        Some(m) => m,
        None => library_ids()?,
    };
    let requests: Vec<JobRequest> = models
        .iter()
        .map(|m| JobRequest {
            model_id: m.clone(),
            revision: "main".into(),
            kind: JobKind::Revalidate,
            agent: "none".into(),
            guards: settings.agent.guards.clone(),
            stages: JobKind::Revalidate.default_stages().to_vec(),
            priority: 0,
            offline: args.offline,
            exclude_library_spec: false,
            agent_model: None,
            ablation: None,
        })
        .collect();
    let registry = StageRegistry::builtin();
    let settings = Arc::new(settings);
    let bar = crate::cli::progress::bar(!args.json, requests.len(), "models re-validated");
    let jobs = block_on(settings.worker.concurrency, async {
        let queued = enqueue(&settings, &registry, requests).await?;
        let ids: Vec<String> = queued.iter().map(|q| q.id.clone()).collect();
        let opts = WorkerOptions {
            concurrency: settings.worker.concurrency,
            once: false,
            until_final: ids.clone(),
            handle_signals: true,
        };
        let watch = tokio::spawn(crate::cli::progress::follow(
            JobStore::open(settings.data_dir())?,
            ids.clone(),
            bar.clone(),
        ));
        let result = run_worker(settings.clone(), registry.clone(), opts).await;
        watch.abort();
        result?;
        anyhow::Ok(ids)
    })?
    .map_err(crate::cli::failed)?;
    bar.finish_and_clear();
    let store = JobStore::open(settings.data_dir())?;
    let records: Vec<JobRecord> = jobs
        .iter()
        .map(|id| store.load(id))
        .collect::<Result<_, _>>()?;
    let rows: Vec<Row> = records.iter().map(Row::of).collect();
    if args.json {
        crate::cli::out::print_json(&rows)?;
    } else {
        out!("{}", table(&rows, args.offline));
    }
    let all_valid = rows.iter().all(|r| r.valid == Some(true));
    if all_valid {
        // Nothing to look into: the records of a clean run are not kept.
        let _ = std::fs::remove_dir_all(&run_dir);
        Ok(ExitCode::SUCCESS)
    } else {
        eprintln!(
            "job records kept in {} (harch-worker status --data-dir {})",
            run_dir.display(),
            run_dir.display()
        );
        Ok(ExitCode::from(crate::cli::exit::FAILED))
    }
}

/// The models of the spec library (those with a bundled snapshot, so `--offline` works).
fn library_ids() -> anyhow::Result<Vec<String>> {
    let ids: Vec<String> = harch_worker::snapshot::snapshot_ids()
        .into_iter()
        .map(str::to_string)
        .collect();
    if ids.is_empty() {
        anyhow::bail!("the spec library lists no models");
    }
    Ok(ids)
}

/// What was checked for one model, and the result.
#[derive(serde::Serialize)]
struct Row {
    model_id: String,
    /// The library spec that was checked.
    spec: Option<String>,
    /// Where the truth came from: `snapshot` or `hub@<sha>`.
    truth: Option<String>,
    /// The guards that ran.
    guards: Vec<String>,
    valid: Option<bool>,
    errors: Option<u64>,
    warnings: Option<u64>,
    matched_tensors: Option<u64>,
    checkpoint_tensors: Option<u64>,
    state: &'static str,
    time_ms: Option<u64>,
    /// Why the job did not finish, when it did not.
    error: Option<String>,
    /// A valid spec's declared gap: what it leaves unverified.
    declared_gap: Option<String>,
}

impl Row {
    fn of(r: &JobRecord) -> Row {
        let verify = r.summary::<VerifySummary>();
        let fetch = r.summary::<FetchSummary>();
        let v = verify.as_ref();
        Row {
            model_id: r.request.model_id.clone(),
            spec: v.map(|v| v.spec.clone()),
            truth: fetch.map(|f| f.truth_line()),
            guards: v.and_then(|v| v.guards.clone()).unwrap_or_default(),
            valid: v.map(|v| v.valid),
            errors: v.map(|v| v.errors),
            warnings: v.map(|v| v.warnings),
            matched_tensors: v.and_then(|v| v.matched_tensors),
            checkpoint_tensors: v.and_then(|v| v.checkpoint_tensors),
            state: r.state.as_str(),
            time_ms: match (r.started_ms, r.finished_ms) {
                (Some(s), Some(f)) => Some(f.saturating_sub(s)),
                _ => None,
            },
            declared_gap: v.and_then(|v| v.declared_gap.clone()),
            error: (r.state != JobState::Succeeded).then(|| {
                r.last_error
                    .clone()
                    .unwrap_or_else(|| "no reason recorded".into())
            }),
        }
    }
}

fn table(rows: &[Row], offline: bool) -> String {
    let guards = rows
        .iter()
        .find(|r| !r.guards.is_empty())
        .map(|r| r.guards.join(", "))
        .unwrap_or_else(|| "-".into());
    let mut out = format!(
        "Each library spec checked against its model's {} with the guards {guards}:\n\n",
        if offline {
            "bundled snapshot"
        } else {
            "current Hub checkpoint"
        }
    );
    let w = rows
        .iter()
        .map(|r| r.model_id.chars().count())
        .max()
        .unwrap_or(0)
        .max(32);
    out += &format!(
        "{:<w$}  {:<12}  {:<20}  {:>17}  {:>9}  {}\n",
        "MODEL", "SPEC", "TRUTH", "TENSORS MATCHED", "TIME", "RESULT"
    );
    for r in rows {
        let tensors = match (r.matched_tensors, r.checkpoint_tensors) {
            (Some(m), Some(c)) => format!("{m} of {c}"),
            _ => "-".into(),
        };
        let result = match (r.valid, &r.error) {
            (_, Some(e)) => format!("{}: {e}", r.state),
            (Some(true), None) => {
                let valid = match r.warnings.unwrap_or(0) {
                    0 => "valid".to_string(),
                    w => format!("valid, {}", plural(w, "warning")),
                };
                match &r.declared_gap {
                    // The gap's line says "valid with a declared gap" itself.
                    Some(g) if r.warnings.unwrap_or(0) == 0 => g.clone(),
                    Some(g) => format!("{valid}; {g}"),
                    None => valid,
                }
            }
            (Some(false), None) => format!(
                "INVALID: {} (harch-worker validate {} shows them)",
                plural(r.errors.unwrap_or(0), "error"),
                r.model_id
            ),
            (None, None) => "not checked".into(),
        };
        let time = r.time_ms.map(fmt_ms).unwrap_or_else(|| "-".into());
        let truth = r.truth.clone().unwrap_or_else(|| "-".into());
        let truth = match truth.char_indices().nth(20) {
            Some((i, _)) => format!("{}…", &truth[..i - 1]),
            None => truth,
        };
        out += &format!(
            "{:<w$}  {:<12}  {:<20}  {:>17}  {:>9}  {}\n",
            r.model_id,
            r.spec.as_deref().unwrap_or("-"),
            truth,
            tensors,
            time,
            result
        );
    }
    out
}

/// `1 error`, `2 errors`.
pub fn plural(n: u64, word: &str) -> String {
    if n == 1 {
        format!("1 {word}")
    } else {
        format!("{n} {word}s")
    }
}
