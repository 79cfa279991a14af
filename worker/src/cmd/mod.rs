pub mod ablate;
pub mod analyze;
pub mod bench_queue;
pub mod cancel;
pub mod compare;
pub mod compare_slots;
pub mod dims;
pub mod enqueue;
pub mod evidence;
pub mod explain;
pub mod explain_terms;
pub mod fetch;
pub mod friendly;
pub mod inspect;
pub mod logs;
pub mod models;
pub mod ops;
pub mod plan;
pub mod promote;
pub mod prompt;
pub mod retry;
pub mod revalidate;
pub mod run;
pub mod show;
pub mod snapshot;
pub mod status;
pub mod units;
pub mod validate;
pub mod validate_changed;
pub mod verdict;
pub mod whatif;

/// The arguments of commands that act on one job (`cancel`, `retry`).
#[derive(clap::Args)]
pub struct JobArgs {
    /// Job id, as `enqueue` printed it, a unique prefix of one (as git takes short hashes), or
    /// `last` (the newest job).
    pub job: String,
    /// Print the job's record after the change as JSON (as `status JOB --json`); errors are
    /// JSON too.
    #[arg(long)]
    pub json: bool,
    #[command(flatten)]
    pub flags: harch_worker::queue::config::QueueFlags,
}
