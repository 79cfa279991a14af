//! The spec engine: the YAML DSL, its IR, and the single evaluation every number comes from.
//!
//! Architecture invariant: this crate does no I/O. The spec repository arrives as file
//! contents ([`Repo::from_files`]), configs as JSON values; the worker reads files.
//!
//! ```text
//! Repo::from_files(files) --load_model--> ModelIr --evaluate(config)--> Analysis
//! ```
//!
//! Numbers and formulas come from the same walk: `evaluate` with `symbolic: true` builds
//! each quantity's formula next to its value.

pub mod analysis;
pub mod dataflow;
pub mod diag;
pub mod encoders;
pub mod eval;
pub mod expr;
pub mod ir;
pub mod load;
pub mod ops;
pub mod q;
pub mod quant;
pub mod rows;
pub mod schema;
pub mod text;

pub use analysis::Analysis;
pub use diag::{Location, SpecError};
pub use eval::{EvalOptions, ImageSize, evaluate, evaluate_at};
pub use ir::ModelIr;
pub use load::Repo;
pub use q::Q;
