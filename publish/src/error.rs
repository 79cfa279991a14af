//! What can go wrong publishing, sorted like the fetcher's errors: transient (the network, rate
//! limits beyond what the stage waits out, server errors, a ref another process holds) is retried
//! by the runner with backoff; permanent (the token, the permissions, the repository, a protected
//! or diverged branch, a spec that does not validate) needs a person.

/// A publishing failure. Messages never contain the token: it is only ever handed to the git
/// credential helper's environment and to the GitHub client's authorization header.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum PublishError {
    #[error("{0}")]
    Transient(String),
    #[error("{0}")]
    Permanent(String),
}

impl PublishError {
    pub fn transient(msg: impl Into<String>) -> PublishError {
        PublishError::Transient(msg.into())
    }

    pub fn permanent(msg: impl Into<String>) -> PublishError {
        PublishError::Permanent(msg.into())
    }

    /// True when trying again later may succeed.
    pub fn is_transient(&self) -> bool {
        matches!(self, PublishError::Transient(_))
    }

    /// The same error with `what` in front of its message.
    pub fn context(self, what: &str) -> PublishError {
        match self {
            PublishError::Transient(m) => PublishError::Transient(format!("{what}: {m}")),
            PublishError::Permanent(m) => PublishError::Permanent(format!("{what}: {m}")),
        }
    }
}

/// Local I/O (the job dir, the clone) failing is worth another try: a full disk or a lock held
/// by a dying process clears up; a bug does not, and the runner's attempt limit stops it.
impl From<anyhow::Error> for PublishError {
    fn from(e: anyhow::Error) -> PublishError {
        PublishError::Transient(format!("{e:#}"))
    }
}
