//! This crate's integration tests as one test binary: each file beside this one is a module of
//! it (`cargo test -p harch-analysis --test it FILE::` runs one file's). One binary links the crate's
//! dependency graph once instead of once per file. `autotests = false` in Cargo.toml, so a file
//! must be declared here to be built: the `architecture` test fails on one that is not.

mod support;

#[path = "communication.rs"]
mod communication;
#[path = "hardware_table.rs"]
mod hardware_table;
#[path = "library.rs"]
mod library;
#[path = "plan_search.rs"]
mod plan_search;
#[path = "properties.rs"]
mod properties;
#[path = "whatif.rs"]
mod whatif;
#[path = "writeup_anchor.rs"]
mod writeup_anchor;
