//! `harch-worker cancel JOB`: a pending job is cancelled at once; a running one when its worker
//! next checks (within worker.cancel_poll_ms), which stops the running stage.

use std::process::ExitCode;

use harch_worker::queue::cli::setup;
use harch_worker::queue::ops::cancel;
use harch_worker::queue::record::JobState;
use harch_worker::queue::store::JobStore;

pub use super::JobArgs as Args;

pub fn run(args: Args) -> anyhow::Result<ExitCode> {
    let settings = setup(&args.flags)?;
    let id = JobStore::open(settings.data_dir())?.resolve(&args.job)?;
    let rec = cancel(&settings, &id)?;
    if args.json {
        crate::cli::out::print_json(&rec)?;
    } else if rec.state == JobState::Cancelled {
        outln!("{} cancelled", rec.id);
    } else {
        outln!(
            "{} cancel requested (running on {})",
            rec.id,
            rec.worker.as_deref().unwrap_or("?")
        );
    }
    Ok(ExitCode::SUCCESS)
}
