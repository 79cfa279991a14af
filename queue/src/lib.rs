//! The queue runtime: the apalis stores (embedded SQLite or Redis), the Redis store's keys,
//! recovery of lost tickets, the operator actions (enqueue, cancel, retry) and the worker loop.
//!
//! The store only carries tickets (job ids) and delivers them at least once; the job record
//! (`job.json` under the data dir, `harch-jobs`) is the truth about a job. Nothing here knows
//! what a stage does: the pipeline comes in through [`pipeline::Pipeline`].

pub mod backend;
pub mod ops;
pub mod pipeline;
pub mod recover;
pub mod redis_keys;
pub mod worker;
