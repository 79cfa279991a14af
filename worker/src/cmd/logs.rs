//! `harch-worker logs JOB`: the job's event log (deliveries, stage attempts, errors).

use std::process::ExitCode;

use anyhow::Context;
use harch_worker::queue::cli::setup;
use harch_worker::queue::store::JobStore;

pub use super::JobArgs as Args;

pub fn run(args: Args) -> anyhow::Result<ExitCode> {
    let settings = setup(&args.flags)?;
    let store = JobStore::open(settings.data_dir())?;
    store.load(&args.job)?;
    let path = store.job_dir(&args.job)?.join("job.log");
    let text = match std::fs::read_to_string(&path) {
        Ok(t) => t,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => String::new(),
        Err(e) => return Err(e).with_context(|| format!("cannot read {}", path.display())),
    };
    print!("{text}");
    Ok(ExitCode::SUCCESS)
}
