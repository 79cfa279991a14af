//! The stages this crate provides; generate, review, fix and publish come with later issues.

pub mod fetch;
pub mod generate;
pub mod probe;
pub mod verify;
