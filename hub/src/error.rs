//! What can go wrong fetching from the Hub, sorted into transient (worth retrying later: the
//! network, rate limits, server errors that outlived our retries) and permanent (the repo, the
//! file or the access is not there, or what the repo holds is malformed).

use std::path::PathBuf;

#[derive(Debug, thiserror::Error)]
pub enum FetchError {
    #[error("`{model_id}` is not a Hub model id: {why}")]
    BadModelId { model_id: String, why: String },
    #[error("no model `{repo}` on {endpoint} (HTTP 404)")]
    RepoNotFound { repo: String, endpoint: String },
    #[error("`{repo}` has no revision `{revision}`")]
    RevisionNotFound { repo: String, revision: String },
    #[error("{}", gated_message(repo, *status, *with_token))]
    Gated {
        repo: String,
        status: u16,
        with_token: bool,
    },
    #[error("`{repo}` has no file `{file}` at {revision}")]
    FileNotFound {
        repo: String,
        file: String,
        revision: String,
    },
    #[error(
        "`{repo}` has no safetensors weights (neither model.safetensors nor model.safetensors.index.json)"
    )]
    NoSafetensors { repo: String },
    #[error("{file} in `{repo}` is malformed: {message}")]
    Invalid {
        repo: String,
        file: String,
        message: String,
    },
    #[error(
        "{file} in `{repo}` names `{name}`, which is not a plain relative path inside the repository ({why}); nothing was written"
    )]
    UnsafeName {
        repo: String,
        file: String,
        name: String,
        why: String,
    },
    /// `attempts`: requests sent for this one URL (a stage attempt may send many).
    #[error("HTTP {status} from {url} ({})", requests(*attempts))]
    Http {
        url: String,
        status: u16,
        attempts: u32,
    },
    #[error("{url}: {message} ({})", requests(*attempts))]
    Network {
        url: String,
        message: String,
        attempts: u32,
    },
    #[error(
        "cannot reach the Hub at {endpoint}: GET {url}: {reason} ({}). \
         To work without it: `--offline` or HF_HUB_OFFLINE=1 serve the bundled snapshots \
         (`harch-worker models` lists them); HF_ENDPOINT selects a mirror",
        requests(*attempts)
    )]
    Unreachable {
        endpoint: String,
        url: String,
        reason: String,
        attempts: u32,
    },
    #[error(
        "the fetch of `{repo}` passed its {secs} s deadline ({requests} requests, {retries} retries)"
    )]
    Deadline {
        repo: String,
        secs: u64,
        requests: u64,
        retries: u64,
    },
    #[error("offline, and no bundled snapshot of `{model_id}` (snapshots: {available})")]
    NoSnapshot { model_id: String, available: String },
    #[error("{}: {message}", path.display())]
    Io { path: PathBuf, message: String },
}

/// `1 request`, `3 requests`.
fn requests(n: u32) -> String {
    match n {
        1 => "1 request".into(),
        n => format!("{n} requests"),
    }
}

fn gated_message(repo: &str, status: u16, with_token: bool) -> String {
    if with_token {
        format!(
            "`{repo}` is gated or private and the token in HF_TOKEN has no access (HTTP {status}): request access on the model page or use another token"
        )
    } else {
        format!(
            "`{repo}` is gated or private (HTTP {status}): set HF_TOKEN to a token that has been granted access"
        )
    }
}

impl FetchError {
    /// True when trying again later may succeed: network failures, and 429/5xx answers that
    /// persisted through the retries. Everything else needs a person (or never succeeds).
    pub fn is_transient(&self) -> bool {
        match self {
            FetchError::Network { .. }
            | FetchError::Unreachable { .. }
            | FetchError::Deadline { .. } => true,
            FetchError::Http { status, .. } => *status == 429 || *status >= 500,
            _ => false,
        }
    }
}
