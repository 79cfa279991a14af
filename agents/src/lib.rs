//! harch-agents
