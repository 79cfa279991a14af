//! `harch-worker run`: a worker that runs queued jobs until SIGINT/SIGTERM or, with `--once`,
//! until no job is pending or running.

use std::process::ExitCode;
use std::sync::Arc;

use harch_worker::pipeline::registry::StageRegistry;
use harch_worker::queue::cli::{block_on, setup_worker};
use harch_worker::queue::config::QueueFlags;
use harch_worker::queue::worker::{WorkerOptions, run_worker};

#[derive(clap::Args)]
pub struct Args {
    /// Jobs run at the same time (default: worker.concurrency in queue.toml).
    #[arg(long)]
    pub concurrency: Option<usize>,
    /// Exit when the queue is drained instead of waiting for more jobs.
    #[arg(long)]
    pub once: bool,
    #[command(flatten)]
    pub flags: QueueFlags,
}

pub fn run(args: Args) -> anyhow::Result<ExitCode> {
    let settings = setup_worker(&args.flags, args.concurrency)?;
    let opts = WorkerOptions {
        concurrency: settings.worker.concurrency,
        once: args.once,
        until_final: Vec::new(),
        handle_signals: true,
    };
    block_on(
        opts.concurrency,
        run_worker(Arc::new(settings), StageRegistry::builtin(), opts),
    )??;
    Ok(ExitCode::SUCCESS)
}
