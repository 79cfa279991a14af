//! The Hub ground-truth fetcher: resolves a revision to a commit sha and writes a truth
//! directory (config, index, every shard's safetensors header, forward source) without
//! downloading a weight byte. Speaks the Hugging Face Hub protocol:
//!
//! - `GET {endpoint}/api/models/{id}/revision/{rev}` → `{"sha", "siblings": [{"rfilename"}]}`
//! - `GET {endpoint}/{id}/resolve/{sha}/{file}` → the file, often via a 302 to a CDN, with
//!   `Range` honoured (206 + `Content-Range`)
//! - errors carry `x-error-code`: `RepositoryNotFound`, `GatedRepo`, `RevisionNotFound`,
//!   `EntryNotFound`.
//!
//! Honours `HF_ENDPOINT`, `HF_TOKEN` and `HF_HUB_OFFLINE` (offline serves the bundled snapshot).

mod cache;
mod client;
mod error;
mod fetch;
mod headers;
pub mod tls;

use std::path::PathBuf;
use std::time::Duration;

pub use cache::Cache;
pub use client::RetryPolicy;
pub use error::FetchError;
pub use fetch::fetch_truth;
pub use harch_net::Budget;
pub use harch_truth::cache_dir::harch_cache_dir;
pub use harch_truth::names::check_repo_path;
pub use headers::{DEFAULT_GUESS, ENTRY_OVERHEAD, HEADER_SLACK, guess_from_names};

pub const DEFAULT_ENDPOINT: &str = "https://huggingface.co";

#[derive(Clone, Debug)]
pub struct FetchOptions {
    /// `org/name`.
    pub model_id: String,
    /// Branch, tag or commit sha.
    pub revision: String,
    /// Truth directory to write (replaced atomically).
    pub out: PathBuf,
    pub endpoint: String,
    pub token: Option<String>,
    /// Serve from the bundled snapshot; no network.
    pub offline: bool,
    /// Content-addressed cache; None disables it.
    pub cache_dir: Option<PathBuf>,
    /// Requests in flight at once.
    pub concurrency: usize,
    /// Limit on one request, connect to last byte.
    pub timeout: Duration,
    pub retry: RetryPolicy,
    /// Limit on the whole fetch, retries and waits included; None for no limit.
    pub deadline: Option<Duration>,
    /// Draw a bar over shards on stderr (only when it is a terminal).
    pub progress: bool,
    /// Retries of one request by cause, within `retry.max_retries`.
    pub budget: harch_net::Budget,
    /// Say on stderr what the fetch is doing and each retry (`fetch` without `-q`).
    pub notices: bool,
}

impl FetchOptions {
    /// Options with defaults, taking endpoint, token, offline mode, cache and retry budget from
    /// the environment (`HF_ENDPOINT`, `HF_TOKEN`, `HF_HUB_OFFLINE`, `HARCH_CACHE_DIR`,
    /// `HARCH_RETRIES_*`).
    pub fn from_env(model_id: &str, out: PathBuf) -> FetchOptions {
        let env = |k: &str| std::env::var(k).ok().filter(|v| !v.is_empty());
        FetchOptions {
            model_id: model_id.to_string(),
            revision: "main".into(),
            out,
            endpoint: env("HF_ENDPOINT").unwrap_or_else(|| DEFAULT_ENDPOINT.to_string()),
            token: env("HF_TOKEN"),
            offline: env("HF_HUB_OFFLINE").is_some_and(|v| {
                matches!(v.to_ascii_lowercase().as_str(), "1" | "true" | "yes" | "on")
            }),
            cache_dir: Cache::default_root(),
            concurrency: 64,
            timeout: Duration::from_secs(30),
            retry: RetryPolicy::default(),
            deadline: Some(Duration::from_secs(600)),
            progress: false,
            budget: harch_net::Budget::from_env(),
            notices: false,
        }
    }
}

/// What a fetch did; `--json` prints it.
#[derive(Clone, Debug, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct FetchReport {
    pub model_id: String,
    pub requested_revision: String,
    /// Commit sha (None for a snapshot without one).
    pub revision: Option<String>,
    pub out: PathBuf,
    /// `hub`, `cache` or `snapshot`.
    pub origin: String,
    /// Truth-directory files written.
    pub files: Vec<String>,
    pub shards: usize,
    pub tensors: usize,
    pub total_bytes: u64,
    /// HTTP requests sent, each redirect hop counted.
    pub requests: u64,
    /// Response body bytes received.
    pub bytes_transferred: u64,
    /// Requests sent again after a transient failure (each hop retried on its own).
    pub retries: u64,
    /// Of the retries, answers 429 (Too Many Requests).
    #[serde(default)]
    pub rate_limited: u64,
    /// Where the forward source came from (`repo` for remote code), if any was found.
    pub source_origin: Option<String>,
    /// What the fetch could not do that a later step will miss (no forward source, a cache entry
    /// that failed its check).
    #[serde(default)]
    pub warnings: Vec<String>,
    pub elapsed_ms: u64,
    /// Where the time went.
    #[serde(default)]
    pub timings: Timings,
}

/// The fetch's wall time by phase, in milliseconds. Phases overlap only where noted.
#[derive(Clone, Debug, Default, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct Timings {
    /// Revision → commit sha (one API request, made only when a cached commit of the repo could
    /// be hit; otherwise the sha comes with config.json and this is ~0), and the cache lookup.
    pub resolve_ms: f64,
    /// config.json and the index (fetched together) and planning the header requests.
    pub index_ms: f64,
    /// From the first header request to the last header (and remote code) in hand; each
    /// header is parsed, checked and written into the staging directory as it arrives.
    pub headers_ms: f64,
    /// After the last response: the whole-checkpoint checks, the remaining files, the rename
    /// into place, the cache.
    pub local_ms: f64,
}
