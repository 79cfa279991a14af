//! harch-prompts
