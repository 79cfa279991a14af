//! `harch-worker revalidate [--offline]`: re-validate the whole spec library against the current
//! truth (or, offline, the bundled snapshots). Queues one re-validate job per library model,
//! runs a worker until those jobs are done, and prints a summary table.

use std::process::ExitCode;
use std::sync::Arc;

use harch_worker::pipeline::registry::StageRegistry;
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
    #[command(flatten)]
    pub flags: QueueFlags,
}

pub fn run(args: Args) -> anyhow::Result<ExitCode> {
    let settings = setup_worker(&args.flags, args.concurrency)?;
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
            stages: JobKind::Revalidate
                .default_stages()
                .iter()
                .map(|s| s.to_string())
                .collect(),
            priority: 0,
            offline: args.offline,
            exclude_library_spec: false,
            agent_model: None,
            ablation: None,
        })
        .collect();
    let registry = StageRegistry::builtin();
    let settings = Arc::new(settings);
    let jobs = block_on(settings.worker.concurrency, async {
        let queued = enqueue(&settings, &registry, requests).await?;
        let ids: Vec<String> = queued.iter().map(|q| q.id.clone()).collect();
        let opts = WorkerOptions {
            concurrency: settings.worker.concurrency,
            once: false,
            until_final: ids.clone(),
            handle_signals: true,
        };
        run_worker(settings.clone(), registry.clone(), opts).await?;
        anyhow::Ok(ids)
    })??;
    let store = JobStore::open(settings.data_dir())?;
    let records: Vec<JobRecord> = jobs
        .iter()
        .map(|id| store.load(id))
        .collect::<Result<_, _>>()?;
    out!("{}", summary(&records));
    let all_valid = records.iter().all(|r| {
        r.state == JobState::Succeeded
            && r.stage("verify")
                .is_some_and(|s| s.summary.get("valid") == Some(&serde_json::Value::Bool(true)))
    });
    Ok(if all_valid {
        ExitCode::SUCCESS
    } else {
        ExitCode::from(1)
    })
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

fn summary(records: &[JobRecord]) -> String {
    let mut out = format!(
        "{:<36}  {:<7}  {:>6}  {:>12}  {:>9}  {}\n",
        "MODEL", "VALID", "ERRORS", "BYTES DIFF", "TIME", "NOTE"
    );
    for r in records {
        let verify = r.stage("verify").map(|s| &s.summary);
        let field = |k: &str| {
            verify
                .and_then(|v| v.get(k))
                .filter(|v| !v.is_null())
                .map(|v| v.to_string())
                .unwrap_or("-".into())
        };
        let time = match (r.started_ms, r.finished_ms) {
            (Some(s), Some(f)) => fmt_ms(f.saturating_sub(s)),
            _ => "-".into(),
        };
        let note = match r.state {
            JobState::Succeeded => String::new(),
            s => format!(
                "{}: {}",
                s.as_str(),
                r.last_error.as_deref().unwrap_or("no reason recorded")
            ),
        };
        let valid = match verify
            .and_then(|v| v.get("valid"))
            .and_then(|v| v.as_bool())
        {
            Some(true) => "yes",
            Some(false) => "NO",
            None => "-",
        };
        out += &format!(
            "{:<36}  {:<7}  {:>6}  {:>12}  {:>9}  {}\n",
            r.request.model_id,
            valid,
            field("errors"),
            field("bytes_diff"),
            time,
            note
        );
    }
    out
}
