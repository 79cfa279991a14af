//! The job queue: settings, model-id checks, job records, the apalis stores (embedded SQLite or
//! Redis) and the worker loop.
//!
//! The store only carries tickets (job ids) and delivers them at least once; the job record
//! (`job.json` under the data dir) is the truth about a job. Nothing here knows what a stage
//! does: the pipeline comes in through [`pipeline::Pipeline`].

pub mod backend;
pub mod cli;
pub mod config;
pub mod logging;
pub mod model_id;
pub mod ops;
pub mod pipeline;
pub mod preflight;
pub mod record;
pub mod recover;
pub mod redis_keys;
pub mod store;
pub mod worker;
