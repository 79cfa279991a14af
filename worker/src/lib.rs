//! The `harch-worker` library: everything the binary does that other code (tests, benchmarks,
//! queue stages) calls directly — truth directories, bundled snapshots, the Hub fetcher.
//!
//! This crate owns all I/O of harch (files, network, processes); the crates below it take
//! values. It must not re-derive quantities the engine computes.

pub mod ablation;
pub mod candidate;
pub mod declared_gap;
pub mod hub;
pub mod inventory_cache;
pub mod pipeline;
pub mod publish;
pub mod queue;
pub mod snapshot;
pub mod source;
pub mod specs;
pub mod subject;
pub mod synth;
pub mod text;
pub mod truth_dir;
pub mod verify;
