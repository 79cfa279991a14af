//! The stages this crate provides; review and fix come with later issues.

pub mod fetch;
pub mod generate;
pub mod probe;
pub mod publish;
pub mod verify;
