//! One HTTP client for the Hub: bearer auth (sent to the Hub's own origin only), bounded
//! concurrency, per-request timeouts, and redirects followed hop by hop so that each hop is
//! retried on its own: a CDN range that fails is asked again without going back through the
//! Hub's redirect. Retries wait a jittered exponential backoff, or the server's `Retry-After`;
//! a 429 slows every request of the fetch down, not only the one that got it; nothing waits past
//! the fetch's deadline. Requests made, body bytes received and retries are counted. Hub error
//! answers become [`FetchError`]s here.

use std::sync::Arc;
use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use backon::BackoffBuilder;
use reqwest::StatusCode;
use reqwest::header::{HeaderMap, RANGE};
use tokio::sync::Semaphore;
use tokio::time::Instant;

use super::error::FetchError;

#[derive(Clone, Debug)]
pub struct RetryPolicy {
    /// Retries of one hop after its first attempt.
    pub max_retries: u32,
    /// First backoff; doubled each retry, plus up to as much again of random jitter.
    pub base_delay: Duration,
    /// Cap on one wait, including a server's `Retry-After`.
    pub max_delay: Duration,
}

impl Default for RetryPolicy {
    fn default() -> Self {
        // Eight retries per hop: at a 20% fault rate a hop gives up with probability 0.2^9
        // (5e-7), so a 330-request fetch completes (the deadline bounds the worst case).
        RetryPolicy {
            max_retries: 8,
            base_delay: Duration::from_millis(100),
            max_delay: Duration::from_secs(30),
        }
    }
}

#[derive(Debug, Default)]
pub struct Stats {
    /// HTTP requests sent, each redirect hop counted.
    pub requests: AtomicU64,
    /// Response body bytes received.
    pub bytes: AtomicU64,
    pub retries: AtomicU64,
    /// Answers 429 (Too Many Requests) among the retries.
    pub rate_limited: AtomicU64,
}

/// What a request was for, so a 404 or 401 can be told apart: the API's 404 means no such
/// repo, a file's 404 means no such file.
#[derive(Clone, Debug)]
pub enum Target<'a> {
    Revision { revision: &'a str },
    File { path: &'a str, revision: &'a str },
}

pub struct Response {
    pub body: Vec<u8>,
    pub etag: Option<String>,
    /// Size of the whole file (from `Content-Range`, or `Content-Length` of a full answer).
    pub total_len: Option<u64>,
    /// A 206 answer: the body is the range asked for, not the file from byte 0.
    pub partial: bool,
    /// The commit the Hub resolved the revision to (`X-Repo-Commit` of the first hop).
    pub commit: Option<String>,
}

pub struct Hub {
    http: reqwest::Client,
    pub endpoint: String,
    /// `scheme://host:port` of the endpoint: the token goes there and nowhere else.
    origin: String,
    token: Option<String>,
    retry: RetryPolicy,
    slots: Semaphore,
    /// No request leaves before this instant: set when the Hub answers 429.
    slow_down: Mutex<Option<Instant>>,
    /// No retry waits past this instant.
    deadline: Option<Instant>,
    pub stats: Arc<Stats>,
    pub repo: String,
    /// Retries by cause, within `retry.max_retries`.
    budget: harch_net::Budget,
    /// Each retry said on stderr.
    notices: bool,
}

/// One hop's outcome: the answer, or where it redirects.
enum Hop {
    Done(Response),
    Redirect(reqwest::Url, Option<String>),
}

const MAX_REDIRECTS: usize = 10;

/// Connecting (name lookup, TCP and TLS) takes longer than this only when there is no route.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(3);

impl Hub {
    pub fn new(
        endpoint: &str,
        repo: &str,
        token: Option<String>,
        concurrency: usize,
        timeout: Duration,
        retry: RetryPolicy,
        deadline: Option<Duration>,
    ) -> Result<Hub, FetchError> {
        crate::tls::install_provider();
        let http = reqwest::Client::builder()
            .user_agent(concat!("harch-worker/", env!("CARGO_PKG_VERSION")))
            // A Hub (or CDN) that does not complete a connection in 3 s is not there: say so
            // within seconds rather than after a long wait (one retry, by the budget).
            .connect_timeout(timeout.min(CONNECT_TIMEOUT))
            .timeout(timeout)
            .pool_max_idle_per_host(concurrency.max(1))
            // Followed by hand, one retried hop at a time.
            .redirect(reqwest::redirect::Policy::none())
            .build()
            .map_err(|e| FetchError::Network {
                url: endpoint.to_string(),
                message: format!("cannot build the HTTP client: {e}"),
                attempts: 0,
            })?;
        let endpoint = endpoint.trim_end_matches('/').to_string();
        let origin = reqwest::Url::parse(&endpoint)
            .map(|u| u.origin().ascii_serialization())
            .map_err(|e| FetchError::Network {
                url: endpoint.clone(),
                message: format!("not a URL: {e}"),
                attempts: 0,
            })?;
        Ok(Hub {
            http,
            endpoint,
            origin,
            token,
            retry,
            slots: Semaphore::new(concurrency.max(1)),
            slow_down: Mutex::new(None),
            deadline: deadline.map(|d| Instant::now() + d),
            stats: Arc::new(Stats::default()),
            repo: repo.to_string(),
            budget: harch_net::Budget::default(),
            notices: false,
        })
    }

    /// Retries by cause ([`harch_net::Budget`]); `notices`: each retry said on stderr.
    pub fn with_budget(mut self, budget: harch_net::Budget, notices: bool) -> Hub {
        self.budget = budget;
        self.notices = notices;
        self
    }

    pub fn revision_url(&self, revision: &str) -> String {
        format!(
            "{}/api/models/{}/revision/{}",
            self.endpoint,
            self.repo,
            encode_segment(revision)
        )
    }

    pub fn file_url(&self, sha: &str, path: &str) -> String {
        let path: Vec<String> = path.split('/').map(encode_segment).collect();
        format!(
            "{}/{}/resolve/{}/{}",
            self.endpoint,
            self.repo,
            encode_segment(sha),
            path.join("/")
        )
    }

    /// GET, following redirects; each hop is retried on its own. `range` asks for
    /// `bytes=start-end` (inclusive); `limit` stops reading a body after that many bytes (a
    /// server that ignores Range must not make us download weights).
    pub async fn get(
        &self,
        url: &str,
        target: &Target<'_>,
        range: Option<(u64, u64)>,
        limit: Option<u64>,
    ) -> Result<Response, FetchError> {
        let mut hop = reqwest::Url::parse(url).map_err(|e| FetchError::Network {
            url: url.to_string(),
            message: format!("not a URL: {e}"),
            attempts: 0,
        })?;
        let mut commit = None;
        for _ in 0..=MAX_REDIRECTS {
            match self.hop(&hop, target, range, limit).await? {
                Hop::Done(mut r) => {
                    r.commit = commit.or(r.commit);
                    return Ok(r);
                }
                Hop::Redirect(next, c) => {
                    commit = commit.or(c);
                    hop = next;
                }
            }
        }
        Err(FetchError::Network {
            url: url.to_string(),
            message: format!("more than {MAX_REDIRECTS} redirects"),
            attempts: 1,
        })
    }

    /// One hop, retried until it answers, fails for good, or runs out of retries or time.
    async fn hop(
        &self,
        url: &reqwest::Url,
        target: &Target<'_>,
        range: Option<(u64, u64)>,
        limit: Option<u64>,
    ) -> Result<Hop, FetchError> {
        let mut backoff = backon::ExponentialBuilder::default()
            .with_min_delay(self.retry.base_delay)
            .with_max_delay(self.retry.max_delay)
            .with_factor(2.0)
            .with_max_times(self.retry.max_retries as usize)
            .with_jitter()
            .build();
        let mut attempt: u32 = 0;
        loop {
            attempt += 1;
            self.wait_out_slow_down().await;
            let outcome = {
                let _slot = self
                    .slots
                    .acquire()
                    .await
                    .map_err(|_| FetchError::Network {
                        url: url.to_string(),
                        message: "client shut down".into(),
                        attempts: attempt,
                    })?;
                self.once(url, target, range, limit).await
            };
            let (server_wait, error) = match outcome {
                Ok(hop) => return Ok(hop),
                Err(Failure::Permanent(e)) => return Err(e),
                Err(Failure::Retry { wait, error }) => (wait, error),
            };
            let allowed = self.budget.retries(error.cause());
            let Some(backoff_wait) = backoff.next().filter(|_| attempt <= allowed) else {
                return Err(error.into_fetch_error(&self.endpoint, url.as_str(), attempt));
            };
            let wait = server_wait
                .unwrap_or(backoff_wait)
                .min(self.retry.max_delay);
            if self
                .deadline
                .is_some_and(|deadline| Instant::now() + wait >= deadline)
            {
                return Err(error.into_fetch_error(&self.endpoint, url.as_str(), attempt));
            }
            if self.notices {
                eprintln!(
                    "retrying GET {url} in {} ms: {} (attempt {} of at most {})",
                    wait.as_millis(),
                    error.cause(),
                    attempt + 1,
                    allowed.min(self.retry.max_retries).saturating_add(1)
                );
            }
            if matches!(error, Transient::Status(429)) {
                self.stats.rate_limited.fetch_add(1, Ordering::Relaxed);
                self.slow_down_for(wait);
            }
            self.stats.retries.fetch_add(1, Ordering::Relaxed);
            tracing::debug!(url = url.as_str(), attempt, ?wait, "retrying");
            tokio::time::sleep(wait).await;
        }
    }

    /// Every request of this fetch holds off until `wait` from now (the Hub rate-limits the
    /// client, not one URL).
    fn slow_down_for(&self, wait: Duration) {
        let until = Instant::now() + wait;
        let mut slot = self.slow_down.lock().unwrap_or_else(|p| p.into_inner());
        if slot.is_none_or(|t| t < until) {
            *slot = Some(until);
        }
    }

    async fn wait_out_slow_down(&self) {
        let until = *self.slow_down.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(until) = until
            && until > Instant::now()
        {
            tokio::time::sleep_until(until).await;
        }
    }

    async fn once(
        &self,
        url: &reqwest::Url,
        target: &Target<'_>,
        range: Option<(u64, u64)>,
        limit: Option<u64>,
    ) -> Result<Hop, Failure> {
        let mut req = self.http.get(url.clone());
        if let Some(token) = &self.token
            && url.origin().ascii_serialization() == self.origin
        {
            req = req.bearer_auth(token);
        }
        if let Some((a, b)) = range {
            req = req.header(RANGE, format!("bytes={a}-{b}"));
        }
        self.stats.requests.fetch_add(1, Ordering::Relaxed);
        let mut resp = req.send().await.map_err(|e| Failure::Retry {
            wait: None,
            error: Transient::network(&e, ""),
        })?;
        let status = resp.status();
        if status == StatusCode::TOO_MANY_REQUESTS || status.is_server_error() {
            let wait = retry_after(resp.headers());
            drain(&mut resp, &self.stats).await;
            return Err(Failure::Retry {
                wait,
                error: Transient::Status(status.as_u16()),
            });
        }
        let commit = resp
            .headers()
            .get("x-repo-commit")
            .and_then(|v| v.to_str().ok())
            .map(str::to_string);
        if status.is_redirection() && status != StatusCode::NOT_MODIFIED {
            let next = resp
                .headers()
                .get(reqwest::header::LOCATION)
                .and_then(|v| v.to_str().ok())
                .and_then(|loc| url.join(loc).ok());
            drain(&mut resp, &self.stats).await;
            return match next {
                Some(next) if matches!(next.scheme(), "http" | "https") => {
                    Ok(Hop::Redirect(next, commit))
                }
                _ => Err(Failure::Permanent(FetchError::Invalid {
                    repo: self.repo.clone(),
                    file: url.to_string(),
                    message: format!("HTTP {status} without a usable Location"),
                })),
            };
        }
        if !status.is_success() {
            let code = resp
                .headers()
                .get("x-error-code")
                .and_then(|v| v.to_str().ok())
                .map(str::to_string);
            drain(&mut resp, &self.stats).await;
            return Err(Failure::Permanent(self.classify(
                status.as_u16(),
                code.as_deref(),
                target,
                url.as_str(),
            )));
        }
        let headers = resp.headers().clone();
        let content_range = headers
            .get(reqwest::header::CONTENT_RANGE)
            .and_then(|v| v.to_str().ok())
            .and_then(parse_content_range);
        let content_length = resp.content_length();
        let mut body = Vec::new();
        loop {
            match resp.chunk().await {
                Ok(Some(chunk)) => {
                    self.stats
                        .bytes
                        .fetch_add(chunk.len() as u64, Ordering::Relaxed);
                    body.extend_from_slice(&chunk);
                    if limit.is_some_and(|l| body.len() as u64 >= l) {
                        break;
                    }
                }
                Ok(None) => break,
                Err(e) => {
                    return Err(Failure::Retry {
                        wait: None,
                        error: Transient::network(&e, "reading the body: "),
                    });
                }
            }
        }
        let (expected, total_len) = match (status, content_range) {
            (StatusCode::PARTIAL_CONTENT, Some((a, b, total))) => (Some(b + 1 - a), total),
            (StatusCode::PARTIAL_CONTENT, None) => {
                return Err(Failure::Permanent(FetchError::Invalid {
                    repo: self.repo.clone(),
                    file: url.to_string(),
                    message: "206 answer without a usable Content-Range".into(),
                }));
            }
            _ => (content_length, content_length),
        };
        if let Some(expected) = expected {
            let wanted = limit.map_or(expected, |l| expected.min(l));
            if (body.len() as u64) < wanted {
                return Err(Failure::Retry {
                    wait: None,
                    error: Transient::Network(
                        harch_net::Cause::Reset,
                        format!("truncated body: {} of {wanted} bytes", body.len()),
                    ),
                });
            }
        }
        if let Some(l) = limit {
            body.truncate(l as usize);
        }
        Ok(Hop::Done(Response {
            body,
            etag: headers
                .get(reqwest::header::ETAG)
                .and_then(|v| v.to_str().ok())
                .map(clean_etag),
            total_len,
            partial: status == StatusCode::PARTIAL_CONTENT,
            commit,
        }))
    }

    fn classify(
        &self,
        status: u16,
        code: Option<&str>,
        target: &Target<'_>,
        url: &str,
    ) -> FetchError {
        let repo = self.repo.clone();
        let gated = FetchError::Gated {
            repo: repo.clone(),
            status,
            with_token: self.token.is_some(),
        };
        match (code, target) {
            (Some("RepoNotFound" | "RepositoryNotFound"), _) => {
                return FetchError::RepoNotFound {
                    repo,
                    endpoint: self.endpoint.clone(),
                };
            }
            (Some("GatedRepo"), _) => return gated,
            (
                Some("RevisionNotFound"),
                Target::Revision { revision } | Target::File { revision, .. },
            ) => {
                return FetchError::RevisionNotFound {
                    repo,
                    revision: revision.to_string(),
                };
            }
            (Some("EntryNotFound"), Target::File { path, revision }) => {
                return FetchError::FileNotFound {
                    repo,
                    file: path.to_string(),
                    revision: revision.to_string(),
                };
            }
            _ => {}
        }
        match (status, target) {
            (401 | 403, _) => gated,
            (404, Target::Revision { .. }) => FetchError::RepoNotFound {
                repo,
                endpoint: self.endpoint.clone(),
            },
            (404, Target::File { path, revision }) => FetchError::FileNotFound {
                repo,
                file: path.to_string(),
                revision: revision.to_string(),
            },
            _ => FetchError::Http {
                url: url.to_string(),
                status,
                attempts: 1,
            },
        }
    }
}

enum Failure {
    Permanent(FetchError),
    Retry {
        wait: Option<Duration>,
        error: Transient,
    },
}

enum Transient {
    Status(u16),
    Network(harch_net::Cause, String),
}

impl Transient {
    /// A request that got no answer: its cause, and the error chain after `doing`.
    fn network(e: &reqwest::Error, doing: &str) -> Transient {
        let cause = harch_net::Cause::of(e, e.is_timeout(), e.is_connect());
        Transient::Network(cause, format!("{doing}{}", describe(e)))
    }

    fn cause(&self) -> harch_net::Cause {
        match self {
            Transient::Status(s) => harch_net::Cause::Status(*s),
            Transient::Network(c, _) => *c,
        }
    }

    fn into_fetch_error(self, endpoint: &str, url: &str, attempts: u32) -> FetchError {
        match self {
            Transient::Status(status) => FetchError::Http {
                url: url.to_string(),
                status,
                attempts,
            },
            // The Hub (or its CDN) was never reached: say so, and how to work without it.
            Transient::Network(cause, _) if cause.unreachable() => FetchError::Unreachable {
                endpoint: endpoint.to_string(),
                url: url.to_string(),
                reason: harch_net::explain(cause, url),
                attempts,
            },
            Transient::Network(cause, message) => FetchError::Network {
                url: url.to_string(),
                message: format!("{}; {message}", harch_net::explain(cause, url)),
                attempts,
            },
        }
    }
}

/// Reads and counts an error body so the connection can be reused.
async fn drain(resp: &mut reqwest::Response, stats: &Stats) {
    while let Ok(Some(chunk)) = resp.chunk().await {
        stats.bytes.fetch_add(chunk.len() as u64, Ordering::Relaxed);
    }
}

fn describe(e: &reqwest::Error) -> String {
    let kind = if e.is_timeout() {
        "timed out"
    } else if e.is_connect() {
        "cannot connect"
    } else {
        "request failed"
    };
    let mut msg = kind.to_string();
    let mut src: Option<&dyn std::error::Error> = std::error::Error::source(e);
    while let Some(s) = src {
        msg.push_str(": ");
        msg.push_str(&s.to_string());
        src = s.source();
    }
    msg
}

/// `Retry-After` in seconds (the Hub sends seconds; an HTTP date falls back to our backoff).
fn retry_after(headers: &HeaderMap) -> Option<Duration> {
    let v = headers.get(reqwest::header::RETRY_AFTER)?.to_str().ok()?;
    v.trim().parse::<u64>().ok().map(Duration::from_secs)
}

/// `bytes a-b/total` → (a, b, Some(total)); `/*` → (a, b, None).
fn parse_content_range(v: &str) -> Option<(u64, u64, Option<u64>)> {
    let rest = v.trim().strip_prefix("bytes ")?;
    let (span, total) = rest.split_once('/')?;
    let (a, b) = span.split_once('-')?;
    let (a, b) = (a.trim().parse().ok()?, b.trim().parse().ok()?);
    if b < a {
        return None;
    }
    let total = match total.trim() {
        "*" => None,
        t => Some(t.parse().ok()?),
    };
    Some((a, b, total))
}

fn clean_etag(raw: &str) -> String {
    raw.trim()
        .trim_start_matches("W/")
        .trim_matches('"')
        .to_string()
}

/// Percent-encodes one URL path segment (branch names may hold `/`).
pub fn encode_segment(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for b in s.bytes() {
        if b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.' | b'~') {
            out.push(b as char);
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn content_range_forms() {
        assert_eq!(
            parse_content_range("bytes 0-99/5000"),
            Some((0, 99, Some(5000)))
        );
        assert_eq!(parse_content_range("bytes 10-19/*"), Some((10, 19, None)));
        assert_eq!(parse_content_range("bytes 9-1/5"), None);
        assert_eq!(parse_content_range("items 0-1/2"), None);
    }

    #[test]
    fn segments_are_encoded() {
        assert_eq!(encode_segment("refs/pr/1"), "refs%2Fpr%2F1");
        assert_eq!(encode_segment("v1.0-rc_2"), "v1.0-rc_2");
        assert_eq!(clean_etag("W/\"abc\""), "abc");
    }
}
