//! The staged pipeline a job runs: fetch → generate → verify → review → fix → publish.
//!
//! This crate owns the stage machinery (the [`Stage`](stage::Stage) trait, the registry, the
//! runner that resumes, retries, times out and cancels), the stages, the agent-stage loop, the
//! agent preflight and the ablation records the generate stage writes. It must not know about
//! the queue store: it reads and writes job records only, and the queue drives it through
//! [`harch_queue::pipeline::Pipeline`] (implemented in `queued.rs`).

pub mod ablation;
pub mod agent_stage;
pub mod preflight;
pub mod queued;
pub mod registry;
pub mod runner;
pub mod stage;
pub mod stages;
pub mod summary;
