//! `harch-worker run`: a worker that runs queued jobs until SIGINT/SIGTERM or, with `--once`,
//! until no job is pending or running.

use std::process::ExitCode;
use std::sync::Arc;

use harch_worker::pipeline::registry::StageRegistry;
use harch_worker::queue::cli::{block_on, setup_worker};
use harch_worker::queue::config::QueueFlags;
use harch_worker::queue::record::JobState;
use harch_worker::queue::store::JobStore;
use harch_worker::queue::worker::{WorkerOptions, run_worker};

#[derive(clap::Args)]
pub struct Args {
    /// Jobs run at the same time (default: worker.concurrency in queue.toml).
    #[arg(long)]
    pub concurrency: Option<usize>,
    /// Exit when the queue is drained instead of waiting for more jobs: 0 when every job that
    /// was waiting succeeded, 1 when one failed or was cancelled.
    #[arg(long)]
    pub once: bool,
    /// At the end, print what the drain did as JSON: `jobs` (id, model_id, state, last_error
    /// of each job that was waiting when `--once` started), `succeeded`, `failed`; errors are
    /// JSON too.
    #[arg(long)]
    pub json: bool,
    #[command(flatten)]
    pub flags: QueueFlags,
}

pub fn run(args: Args) -> anyhow::Result<ExitCode> {
    let settings = setup_worker(&args.flags, args.concurrency)?;
    // The jobs this drain is about: those waiting when it starts.
    let waiting: Vec<String> = match args.once {
        true => JobStore::open(settings.data_dir())?
            .active_jobs()?
            .into_iter()
            .map(|r| r.id)
            .collect(),
        false => Vec::new(),
    };
    let opts = WorkerOptions {
        concurrency: settings.worker.concurrency,
        once: args.once,
        until_final: Vec::new(),
        handle_signals: true,
    };
    let data_dir = settings.data_dir().to_path_buf();
    let bar = crate::cli::progress::bar(!args.json, waiting.len(), "jobs done");
    block_on(opts.concurrency, async {
        let watch = tokio::spawn(crate::cli::progress::follow(
            JobStore::open(&data_dir)?,
            waiting.clone(),
            bar.clone(),
        ));
        let result = run_worker(Arc::new(settings), StageRegistry::builtin(), opts).await;
        watch.abort();
        result
    })?
    .map_err(crate::cli::transient)?;
    bar.finish_and_clear();
    let store = JobStore::open(&data_dir)?;
    let (mut failed, mut succeeded) = (0, 0);
    let mut jobs = Vec::new();
    for id in &waiting {
        let rec = store.load(id)?;
        if matches!(rec.state, JobState::Failed | JobState::Cancelled) {
            failed += 1;
            if !args.json {
                eprintln!(
                    "job {id} ({}) {}: {}",
                    rec.request.model_id,
                    rec.state.as_str(),
                    rec.last_error.as_deref().unwrap_or("no reason recorded")
                );
            }
        }
        succeeded += usize::from(rec.state == JobState::Succeeded);
        jobs.push(serde_json::json!({
            "id": rec.id,
            "model_id": rec.request.model_id,
            "state": rec.state.as_str(),
            "last_error": rec.last_error,
        }));
    }
    if args.json {
        crate::cli::out::print_json(&serde_json::json!({
            "jobs": jobs,
            "succeeded": succeeded,
            "failed": failed,
        }))?;
    }
    Ok(if failed == 0 {
        ExitCode::SUCCESS
    } else {
        ExitCode::from(crate::cli::exit::FAILED)
    })
}
