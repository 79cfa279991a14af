//! What every command shares: one stdout writer that ends quietly when its reader goes away,
//! one table of exit codes, JSON for every outcome under `--json`, quiet logging, and the help
//! texts' examples (docs/cli.md is the user's copy of all of this).

pub mod exit;
pub mod help;
pub mod progress;
pub mod report;
#[macro_use]
pub mod out;

pub use exit::{failed, transient, usage};
