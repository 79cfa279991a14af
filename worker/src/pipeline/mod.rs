//! The staged pipeline a job runs: fetch → generate → verify → review → fix → publish.
//!
//! This module owns the stage machinery (the [`Stage`](stage::Stage) trait, the registry, the
//! runner that resumes, retries, times out and cancels) and the fetch and verify stages. It must
//! not know about the queue store: it reads and writes job records only.

pub mod agent_stage;
pub mod queued;
pub mod registry;
pub mod runner;
pub mod stage;
pub mod stages;
