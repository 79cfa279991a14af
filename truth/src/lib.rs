//! Ground truth on disk, with no network: truth directories (`truth_dir`: read headers only,
//! checked with the guards' parsers; written whole or not at all), the bundled snapshots
//! (`snapshot`), the inventory cache keyed by the bytes it was read from (`inventory_cache`),
//! forward source for architectures native to transformers (`source`), and the check every
//! repository-supplied name passes before it becomes a path (`names`).
//!
//! This crate reads and writes files; it must not open a network connection or know about
//! jobs, queues, agents or publishing.

pub mod cache_dir;
pub mod inventory_cache;
pub mod names;
pub mod snapshot;
pub mod source;
#[cfg(feature = "testing")]
pub mod synth;
pub mod truth_dir;
