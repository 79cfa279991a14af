//! harch-engine
