//! This crate's integration tests as one test binary: each file beside this one is a module of
//! it (`cargo test -p harch-guards --test it FILE::` runs one file's). One binary links the crate's
//! dependency graph once instead of once per file. `autotests = false` in Cargo.toml, so a file
//! must be declared here to be built: the `architecture` test fails on one that is not.

#[path = "codes_documented.rs"]
mod codes_documented;
#[path = "dsl_constructs.rs"]
mod dsl_constructs;
#[path = "header_fuzz.rs"]
mod header_fuzz;
