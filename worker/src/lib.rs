//! The `harch-worker` library: the paths the command line, tests and benchmarks have always
//! used (`harch_worker::queue::config`, `harch_worker::hub`, ...), each re-exported from the
//! crate that owns it. The binary (`main.rs`, `cli/`, `cmd/`) wires those crates together; this
//! crate owns nothing else.

pub use harch_hub as hub;
pub use harch_library::{candidate, declared_gap, specs, subject, verify};
pub use harch_net as net;
pub use harch_pipeline as pipeline;
pub use harch_pipeline::ablation;
pub use harch_publish as publish;
pub use harch_truth::{cache_dir, inventory_cache, snapshot, source, truth_dir};

pub use harch_jobs::text;

/// The job queue as the commands see it: settings and records (`harch-jobs`), the runtime
/// (`harch-queue`), the agent preflight (`harch-pipeline`), and what every queue command does
/// first (`cli`) and logging (`logging`), which are the command line's own.
pub mod queue {
    pub mod cli;
    pub mod logging;

    pub use harch_jobs::{config, model_id, record, stage, store};
    pub use harch_pipeline::preflight;
    pub use harch_queue::{backend, ops, pipeline, recover, redis_keys, worker};
}
