//! `harch-worker retry JOB`: queue a failed or cancelled job again; it resumes after its last
//! completed stage, and its agent stages start a new round with a fresh attempt and cost budget.

use std::process::ExitCode;

use harch_worker::queue::cli::{block_on, setup};
use harch_worker::queue::ops::retry;
use harch_worker::queue::store::JobStore;

pub use super::JobArgs as Args;

pub fn run(args: Args) -> anyhow::Result<ExitCode> {
    let settings = setup(&args.flags)?;
    let id = JobStore::open(settings.data_dir())?.resolve(&args.job)?;
    let rec = block_on(1, retry(&settings, &id))??;
    if args.json {
        crate::cli::out::print_json(&rec)?;
        return Ok(ExitCode::SUCCESS);
    }
    let resume = rec
        .current_stage()
        .map_or_else(|| "-".to_string(), |s| s.stage.to_string());
    outln!(
        "{} queued again (resumes at stage {resume}; agent stages get a fresh budget of {} runs)",
        rec.id,
        settings.agent.attempts
    );
    Ok(ExitCode::SUCCESS)
}
