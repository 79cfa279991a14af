/// A run that could not take place at all (the outcome of a run that took place, however badly,
/// is an [`crate::AgentOutcome`]).
#[derive(Debug, thiserror::Error)]
pub enum AgentError {
    #[error(transparent)]
    Sandbox(#[from] harch_sandbox::SandboxError),
    #[error("{action} {path}: {source}")]
    Io {
        action: &'static str,
        path: std::path::PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("backend {backend}: {message}")]
    Config {
        backend: &'static str,
        message: String,
    },
}

impl AgentError {
    pub(crate) fn io(
        action: &'static str,
        path: impl Into<std::path::PathBuf>,
    ) -> impl FnOnce(std::io::Error) -> Self {
        let path = path.into();
        move |source| AgentError::Io {
            action,
            path,
            source,
        }
    }
}
