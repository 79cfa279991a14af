use std::path::PathBuf;

/// Everything that can go wrong while building or running a sandbox. Each variant names the path
/// or variable involved so the worker can report it without guessing.
#[derive(Debug, thiserror::Error)]
pub enum SandboxError {
    #[error("{action} {path}: {source}")]
    Io {
        action: &'static str,
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("staged path {0:?} must be relative and stay inside its area")]
    BadStagedPath(PathBuf),
    #[error("path {path:?} rejected: {reason}")]
    PathRejected { path: String, reason: &'static str },
    #[error(
        "environment variable {0} is a publishing or foreign credential and never enters a sandbox"
    )]
    ForbiddenEnv(String),
    #[error("Landlock is required but unavailable on this kernel ({0})")]
    LandlockUnavailable(String),
    #[error("building the Landlock ruleset: {0}")]
    Landlock(String),
    #[error("sealing settings into a program: {0}")]
    Seal(String),
    #[error("spawning {program}: {source}")]
    Spawn {
        program: String,
        #[source]
        source: std::io::Error,
    },
}

impl SandboxError {
    pub(crate) fn io(
        action: &'static str,
        path: impl Into<PathBuf>,
    ) -> impl FnOnce(std::io::Error) -> Self {
        let path = path.into();
        move |source| SandboxError::Io {
            action,
            path,
            source,
        }
    }
}
