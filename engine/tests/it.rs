//! This crate's integration tests as one test binary: each file beside this one is a module of
//! it (`cargo test -p harch-engine --test it FILE::` runs one file's). One binary links the crate's
//! dependency graph once instead of once per file. `autotests = false` in Cargo.toml, so a file
//! must be declared here to be built: the `architecture` test fails on one that is not.

mod support;

#[path = "compressed_attention.rs"]
mod compressed_attention;
#[path = "deepseek_v4.rs"]
mod deepseek_v4;
#[path = "encoders.rs"]
mod encoders;
#[path = "fuzz.rs"]
mod fuzz;
#[path = "streams.rs"]
mod streams;
