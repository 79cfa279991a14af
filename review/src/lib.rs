//! harch-review
