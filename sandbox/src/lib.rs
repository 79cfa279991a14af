//! harch-sandbox
