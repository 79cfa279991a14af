pub mod explain;
pub mod ops;
pub mod show;
