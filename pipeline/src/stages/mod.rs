//! The stages this crate provides.

pub mod fetch;
pub mod fix;
pub mod generate;
pub mod probe;
pub mod publish;
pub mod review;
pub mod verify;
