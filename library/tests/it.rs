//! This crate's integration tests as one test binary: each file beside this one is a module of
//! it (`cargo test -p harch-library --test it FILE::` runs one file's). One binary links the crate's
//! dependency graph once instead of once per file. `autotests = false` in Cargo.toml, so a file
//! must be declared here to be built: the `architecture` test fails on one that is not.

#[path = "broken_specs.rs"]
mod broken_specs;
#[path = "deepseek_v4_guards.rs"]
mod deepseek_v4_guards;
#[path = "extreme_counts.rs"]
mod extreme_counts;
#[path = "library.rs"]
mod library;
#[path = "mutations.rs"]
mod mutations;
#[path = "quant_config.rs"]
mod quant_config;
#[path = "semantic_config.rs"]
mod semantic_config;
