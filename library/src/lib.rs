//! The spec repository on disk and what a command names: `specs` finds the repository root and
//! reads `specs/` into a `Repo`; `subject` resolves a spec file, a model spec name or a model id
//! to a spec and its truth; `verify` is the full validation of a truth directory; `candidate`
//! joins an agent's spec with the project's library and validates it in the worker.
//!
//! No network, no job records, no agents: everything here takes paths and returns values.

pub mod candidate;
pub mod declared_gap;
pub mod specs;
pub mod subject;
pub mod verify;
