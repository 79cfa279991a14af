//! Ground truth about a checkpoint, and the guards that check a spec against it.
//!
//! This crate does no I/O: truth arrives as bytes and values (the worker reads files and
//! the network), and `validate()` returns structured errors with stable codes.

pub mod truth;
