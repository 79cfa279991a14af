pub mod explain;
pub mod fetch;
pub mod ops;
pub mod show;
pub mod snapshot;
