//! The review stage's pure core: the review report format, the evidence-citation grammar
//! (`src:`, `cfg:`, `ckpt:`, `count:`) and its checker, and the work orders Agent Fix gets.
//!
//! Filled by the review issue; today it only marks its place in the dependency order
//! (worker → review → engine). Architecture invariant: no I/O.
