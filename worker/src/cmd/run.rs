//! `harch-worker run`: a worker that runs queued jobs until SIGINT/SIGTERM or, with `--once`,
//! until no job is pending or running. It says which queue it serves, then one line per stage
//! transition and per finished job on stderr (each failure once, with its cause); `-q` keeps
//! only the failures, at the end. The first Ctrl-C stops it cleanly (running stages finish or
//! checkpoint), a second at once.

use std::process::ExitCode;
use std::sync::{Arc, Mutex};

use crate::cli::progress::Transitions;

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
    /// No line per stage transition: only the failures, when the drain ends.
    #[arg(short, long)]
    pub quiet: bool,
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
    let talk = !args.json && !args.quiet && !harch_worker::queue::logging::json_lines();
    if talk {
        eprintln!(
            "worker on {}; {}",
            settings.describe_queue(),
            match args.once {
                true => format!("{} jobs waiting", waiting.len()),
                false => "Ctrl-C stops it".to_string(),
            }
        );
    }
    let bar = crate::cli::progress::bar(!args.json, waiting.len(), "jobs done");
    let transitions = Arc::new(Mutex::new(Transitions::default()));
    let say = {
        let (transitions, bar) = (transitions.clone(), bar.clone());
        move |store: &JobStore| {
            let lines = transitions
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .tick(store);
            for l in lines {
                bar.suspend(|| eprintln!("{l}"));
            }
        }
    };
    if talk {
        let store = JobStore::open(&data_dir)?;
        transitions
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .seed(&store, &waiting);
    }
    block_on(opts.concurrency, async {
        let watch = tokio::spawn(crate::cli::progress::follow(
            JobStore::open(&data_dir)?,
            waiting.clone(),
            bar.clone(),
        ));
        let lines = talk.then(|| {
            let (store, say) = (JobStore::open(&data_dir), say.clone());
            tokio::spawn(async move {
                let Ok(store) = store else { return };
                loop {
                    say(&store);
                    tokio::time::sleep(std::time::Duration::from_millis(250)).await;
                }
            })
        });
        let result = run_worker(Arc::new(settings), StageRegistry::builtin(), opts).await;
        watch.abort();
        if let Some(l) = lines {
            l.abort();
        }
        result
    })?
    .map_err(crate::cli::transient)?;
    bar.finish_and_clear();
    let store = JobStore::open(&data_dir)?;
    if talk {
        // What happened since the last look (the waiting jobs were seeded: none is missed).
        say(&store);
    }
    let (mut failed, mut succeeded) = (0, 0);
    let mut jobs = Vec::new();
    for id in &waiting {
        let rec = store.load(id)?;
        if matches!(rec.state, JobState::Failed | JobState::Cancelled) {
            failed += 1;
            if !args.json && !talk {
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
