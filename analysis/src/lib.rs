//! Deployment cost over the engine's single evaluation: what a verified spec costs to serve on
//! given GPUs under a given layout. Pure: no I/O; the hardware table arrives as file contents,
//! the model as the engine's `ModelIr` and `Analysis`.
//!
//! ```text
//! Model::new(ir, analysis, config)          rows with their parts and the dims their axes carry
//!   + Request { gpu, layout, workload }     (hardware::HardwareTable, layout::LayoutSpec)
//!   --report::analyze-->  Plan, Report       memory plan, derived communication, bound and
//!                                            estimate per phase (and the images' encoding,
//!                                            `encode`, in the TTFT), every figure labelled
//! ```
//!
//! Architecture invariant: no quantity is derived a second time. Weight bytes, cache bytes and
//! FLOPs come from the engine's per-row figures; a layout only says which share of each row one
//! GPU holds, read from the dims each axis carries (`shardable_by` in the dim table).

pub mod comm;
pub mod components;
pub mod cost;
pub mod encode;
pub mod explain;
pub mod hardware;
pub mod json;
pub mod layout;
pub mod memory;
pub mod plot;
pub mod report;
pub mod search;
pub mod shard;
pub mod swap;
pub mod sweep;
pub mod traffic;
pub mod verdict;
pub mod whatif;

pub use cost::{ComputePrecision, Resource};
pub use hardware::{Gpu, HardwareTable, Missing};
pub use layout::{Layout, LayoutError, LayoutSpec, Part};
pub use report::{Report, Request, analyze, analyze_plan};
pub use shard::{Model, ModelError, Plan};
pub use traffic::{Activations, Logits, Phase, Step};
pub use verdict::{Fit, Overflow};
