//! This crate's integration tests as one test binary: each file beside this one is a module of
//! it (`cargo test -p harch-agents --test it FILE::` runs one file's). One binary links the crate's
//! dependency graph once instead of once per file. `autotests = false` in Cargo.toml, so a file
//! must be declared here to be built: the `architecture` test fails on one that is not.

mod common;

#[path = "claude.rs"]
mod claude;
#[path = "codex_kimi.rs"]
mod codex_kimi;
#[path = "openai.rs"]
mod openai;
