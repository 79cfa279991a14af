//! The GitHub side of a publish, over the REST API with reqwest: find the model branch's open
//! pull request, open one or update it (never a second), switch draft state, keep harch's labels
//! in step.
//!
//! harch calls six endpoints and needs every answer's status and headers (`Retry-After` lives
//! there), so a typed client buys nothing here and costs a large build. Nothing is retried
//! blindly (a POST re-sent could open a second pull request); waits happen here: `Retry-After`,
//! the primary limit's `x-ratelimit-reset`, or a minute for a secondary limit that names no
//! time, each honoured when no longer than `publish.max_wait_s`.

use std::time::Duration;

use reqwest::header::{ACCEPT, AUTHORIZATION, HeaderMap, HeaderValue, USER_AGENT};
use reqwest::{Method, StatusCode};
use serde::Deserialize;
use serde_json::{Value, json};

use super::PublishError;
use super::bundle::LABEL_PREFIX;
use super::config::{Auth, Target, Token};

/// Rate-limit waits one request may sit out before it gives up (as a transient failure).
const RATE_LIMIT_TRIES: u32 = 3;

pub struct GitHub {
    http: reqwest::Client,
    /// `publish.api_url` without a trailing slash; request paths start with `/`.
    api_url: String,
    owner: String,
    repo: String,
    /// What authenticates the requests, for messages (never the secret itself).
    credential: String,
    graphql_url: String,
    max_wait: Duration,
    /// Rate-limit waits sat out, for the stage's log.
    pub waits: Vec<String>,
}

/// The fields of a pull request harch reads.
#[derive(Clone, Debug, Deserialize)]
pub struct PullRequest {
    pub number: u64,
    #[serde(default)]
    pub node_id: String,
    #[serde(default)]
    pub html_url: String,
    #[serde(default)]
    pub title: String,
    #[serde(default)]
    pub body: Option<String>,
    #[serde(default)]
    pub draft: bool,
    #[serde(default)]
    pub labels: Vec<Label>,
    pub head: Head,
}

#[derive(Clone, Debug, Deserialize)]
pub struct Label {
    pub name: String,
}

#[derive(Clone, Debug, Deserialize)]
pub struct Head {
    #[serde(rename = "ref")]
    pub branch: String,
}

/// What the pull request should say.
pub struct PrRequest<'a> {
    pub branch: &'a str,
    pub base: &'a str,
    pub title: &'a str,
    pub body: &'a str,
    pub draft: bool,
    pub labels: &'a [String],
}

#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct PrOutcome {
    pub number: u64,
    pub url: String,
    /// `opened`, `updated` or `unchanged`.
    pub action: String,
    pub draft: bool,
    pub labels_added: Vec<String>,
    pub labels_removed: Vec<String>,
    /// The repository does not support draft pull requests; the PR was opened ready, with the
    /// draft reasons on top of its body.
    pub draft_unsupported: bool,
}

/// A 422 answer: GitHub's message and each `errors[].message` (where the useful text is).
#[derive(Debug)]
enum Failure {
    Unprocessable(String),
    Other(PublishError),
}

impl From<PublishError> for Failure {
    fn from(e: PublishError) -> Failure {
        Failure::Other(e)
    }
}

impl Failure {
    fn into_error(self, what: &str) -> PublishError {
        match self {
            Failure::Unprocessable(m) => {
                PublishError::permanent(format!("{what}: GitHub refused it (HTTP 422): {m}"))
            }
            Failure::Other(e) => e,
        }
    }
}

/// The token a publish uses: the configured one, or for a GitHub App a fresh installation
/// token, scoped to the spec repository and to the permissions publishing needs.
pub async fn token_for(t: &Target) -> Result<Token, PublishError> {
    let (app_id, key, installation_id, key_env) = match &t.auth {
        Auth::Token(token) => return Ok(token.clone()),
        Auth::App {
            app_id,
            key,
            installation_id,
            key_env,
        } => (*app_id, key, *installation_id, key_env),
    };
    let jwt = super::jwt::app_jwt(app_id, key.expose()).map_err(|e| {
        PublishError::permanent(format!(
            "${key_env} does not hold the GitHub App's RSA private key in PEM form: {e}"
        ))
    })?;
    let http = client(&jwt)?;
    let mut app = GitHub::with_client(http, t, format!("GitHub App {app_id} (key in ${key_env})"));
    let id = if installation_id != 0 {
        installation_id
    } else {
        let uri = format!("/repos/{}/{}/installation", t.owner, t.name);
        let v = app
            .call(Method::GET, &uri, None)
            .await
            .map_err(|f| f.into_error("finding the app's installation"))?;
        v.get("id").and_then(Value::as_u64).ok_or_else(|| {
            PublishError::permanent(format!(
                "GitHub App {app_id} is not installed on {}",
                t.repo()
            ))
        })?
    };
    let uri = format!("/app/installations/{id}/access_tokens");
    let body = json!({
        "repositories": [t.name],
        "permissions": {"contents": "write", "pull_requests": "write", "issues": "write"},
    });
    let v = app
        .call(Method::POST, &uri, Some(&body))
        .await
        .map_err(|f| f.into_error("minting an installation token"))?;
    let token = v.get("token").and_then(Value::as_str).ok_or_else(|| {
        PublishError::transient("GitHub's installation token answer has no token")
    })?;
    Ok(Token::new(token.to_string()))
}

/// A client sending GitHub's media type, API version and `credential` as a bearer token on
/// every request, with timeouts; the secret sits only in a sensitive header value.
fn client(credential: &str) -> Result<reqwest::Client, PublishError> {
    let mut headers = HeaderMap::new();
    headers.insert(
        ACCEPT,
        HeaderValue::from_static("application/vnd.github+json"),
    );
    headers.insert(
        "x-github-api-version",
        HeaderValue::from_static("2022-11-28"),
    );
    // GitHub refuses requests without a User-Agent.
    headers.insert(
        USER_AGENT,
        HeaderValue::from_static(concat!("harch/", env!("CARGO_PKG_VERSION"))),
    );
    let mut auth = HeaderValue::from_str(&format!("Bearer {credential}")).map_err(|_| {
        PublishError::permanent("the GitHub credential is not a valid HTTP header value")
    })?;
    auth.set_sensitive(true);
    headers.insert(AUTHORIZATION, auth);
    harch_hub::tls::install_provider();
    reqwest::Client::builder()
        .default_headers(headers)
        .connect_timeout(Duration::from_secs(15))
        .read_timeout(Duration::from_secs(60))
        .build()
        .map_err(|e| PublishError::permanent(format!("building the GitHub client: {e}")))
}

impl GitHub {
    /// A client that authenticates with `token` (see [`token_for`]).
    pub fn new(t: &Target, token: &Token) -> Result<GitHub, PublishError> {
        let http = client(token.expose())?;
        let credential = match &t.auth {
            Auth::Token(_) => format!("the token in ${}", t.token_env),
            Auth::App { app_id, .. } => format!("the installation token of GitHub App {app_id}"),
        };
        Ok(GitHub::with_client(http, t, credential))
    }

    fn with_client(http: reqwest::Client, t: &Target, credential: String) -> GitHub {
        GitHub {
            http,
            api_url: t.api_url.trim_end_matches('/').to_string(),
            owner: t.owner.clone(),
            repo: t.name.clone(),
            credential,
            graphql_url: graphql_url(&t.api_url),
            max_wait: Duration::from_secs(t.max_wait_s),
            waits: Vec::new(),
        }
    }

    /// Opens the branch's pull request, or brings the open one up to date.
    pub async fn open_or_update(
        &mut self,
        want: &PrRequest<'_>,
    ) -> Result<PrOutcome, PublishError> {
        let mut draft_unsupported = false;
        let (pr, action) = match self.find_open(want.branch).await? {
            Some(pr) => {
                let (changed, unsupported) = self.update(&pr, want).await?;
                draft_unsupported = unsupported;
                (pr, if changed { "updated" } else { "unchanged" })
            }
            None => match self.create(want, want.draft).await {
                Ok(pr) => (pr, "opened"),
                Err(Failure::Unprocessable(m)) if m.contains("already exists") => {
                    // A create whose answer was lost, or a race: the PR is there; update it.
                    let pr = self.find_open(want.branch).await?.ok_or_else(|| {
                        PublishError::transient(format!(
                            "GitHub says a pull request for `{}` exists but does not list it yet",
                            want.branch
                        ))
                    })?;
                    draft_unsupported = self.update(&pr, want).await?.1;
                    (pr, "updated")
                }
                Err(Failure::Unprocessable(m))
                    if want.draft && m.to_lowercase().contains("draft") =>
                {
                    draft_unsupported = true;
                    let pr = self
                        .create(want, false)
                        .await
                        .map_err(|f| f.into_error("opening the pull request"))?;
                    (pr, "opened")
                }
                Err(f) => return Err(f.into_error("opening the pull request")),
            },
        };
        let (labels_added, labels_removed) = self.sync_labels(&pr, want.labels).await?;
        Ok(PrOutcome {
            number: pr.number,
            url: pr.html_url.clone(),
            action: action.to_string(),
            draft: want.draft && !draft_unsupported,
            labels_added,
            labels_removed,
            draft_unsupported,
        })
    }

    /// The open pull request whose head is `branch` in this repository. GitHub wants
    /// `owner:branch` (a bare name is silently ignored); the head is checked again here.
    pub async fn find_open(&mut self, branch: &str) -> Result<Option<PullRequest>, PublishError> {
        let uri = format!(
            "/repos/{}/{}/pulls?state=open&head={}:{}&per_page=100",
            self.owner,
            self.repo,
            query_escape(&self.owner),
            query_escape(branch)
        );
        let v = self
            .call(Method::GET, &uri, None)
            .await
            .map_err(|f| f.into_error("listing pull requests"))?;
        let prs: Vec<PullRequest> = serde_json::from_value(v).map_err(|e| {
            PublishError::transient(format!("GitHub's list of pull requests did not parse: {e}"))
        })?;
        Ok(prs
            .into_iter()
            .filter(|p| p.head.branch == branch)
            .min_by_key(|p| p.number))
    }

    async fn create(&mut self, want: &PrRequest<'_>, draft: bool) -> Result<PullRequest, Failure> {
        let uri = format!("/repos/{}/{}/pulls", self.owner, self.repo);
        let body = json!({
            "title": want.title,
            "head": want.branch,
            "base": want.base,
            "body": want.body,
            "draft": draft,
            "maintainer_can_modify": false,
        });
        let v = self.call(Method::POST, &uri, Some(&body)).await?;
        parse_pr(v).map_err(Failure::Other)
    }

    /// Edits title and body when they differ, and switches draft state when it differs.
    /// Returns whether anything changed, and whether the repository refused draft state.
    async fn update(
        &mut self,
        pr: &PullRequest,
        want: &PrRequest<'_>,
    ) -> Result<(bool, bool), PublishError> {
        let mut changed = false;
        if pr.title != want.title || pr.body.as_deref().unwrap_or("") != want.body {
            let uri = format!("/repos/{}/{}/pulls/{}", self.owner, self.repo, pr.number);
            let body = json!({ "title": want.title, "body": want.body });
            self.call(Method::PATCH, &uri, Some(&body))
                .await
                .map_err(|f| f.into_error("updating the pull request"))?;
            changed = true;
        }
        if pr.draft == want.draft {
            return Ok((changed, false));
        }
        // REST ignores `draft` on PATCH: only GraphQL switches it.
        let mutation = if want.draft {
            "mutation($id: ID!) { convertPullRequestToDraft(input: {pullRequestId: $id}) { pullRequest { isDraft } } }"
        } else {
            "mutation($id: ID!) { markPullRequestReadyForReview(input: {pullRequestId: $id}) { pullRequest { isDraft } } }"
        };
        let body = json!({ "query": mutation, "variables": { "id": pr.node_id } });
        let url = self.graphql_url.clone();
        let v = self
            .call(Method::POST, &url, Some(&body))
            .await
            .map_err(|f| f.into_error("switching the pull request's draft state"))?;
        let errors: Vec<&str> = v
            .get("errors")
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
            .filter_map(|e| e.get("message").and_then(Value::as_str))
            .collect();
        if errors.is_empty() {
            return Ok((true, false));
        }
        let text = errors.join("; ");
        if want.draft && text.to_lowercase().contains("not supported") {
            // The warning on top of the body stands in for draft state.
            return Ok((changed, true));
        }
        Err(PublishError::permanent(format!(
            "switching the pull request's draft state: {text} (the token needs pull requests: write)"
        )))
    }

    /// Adds the labels harch wants and removes harch's labels it no longer wants; labels
    /// people added are left alone.
    async fn sync_labels(
        &mut self,
        pr: &PullRequest,
        want: &[String],
    ) -> Result<(Vec<String>, Vec<String>), PublishError> {
        let have: Vec<&str> = pr.labels.iter().map(|l| l.name.as_str()).collect();
        let add: Vec<String> = want
            .iter()
            .filter(|w| !have.contains(&w.as_str()))
            .cloned()
            .collect();
        let remove: Vec<String> = have
            .iter()
            .filter(|h| h.starts_with(LABEL_PREFIX) && !want.iter().any(|w| w == *h))
            .map(|h| h.to_string())
            .collect();
        for name in &remove {
            let uri = format!(
                "/repos/{}/{}/issues/{}/labels/{}",
                self.owner,
                self.repo,
                pr.number,
                path_escape(name)
            );
            match self.call(Method::DELETE, &uri, None).await {
                Ok(_) => {}
                Err(Failure::Other(e)) if e.to_string().contains("HTTP 404") => {}
                Err(f) => return Err(f.into_error("removing a label")),
            }
        }
        if !add.is_empty() {
            let uri = format!(
                "/repos/{}/{}/issues/{}/labels",
                self.owner, self.repo, pr.number
            );
            self.call(Method::POST, &uri, Some(&json!({ "labels": add })))
                .await
                .map_err(|f| f.into_error("labelling the pull request"))?;
        }
        Ok((add, remove))
    }

    /// One API call, sitting out rate limits up to `max_wait`, with every other failure sorted
    /// transient or permanent.
    async fn call(
        &mut self,
        method: Method,
        uri: &str,
        body: Option<&Value>,
    ) -> Result<Value, Failure> {
        let what = format!("{method} {}", uri.split('?').next().unwrap_or(uri));
        let mut tries = 0;
        loop {
            tries += 1;
            let url = if uri.starts_with("http://") || uri.starts_with("https://") {
                uri.to_string()
            } else {
                format!("{}{uri}", self.api_url)
            };
            let mut req = self.http.request(method.clone(), url);
            if let Some(b) = body {
                req = req.json(b);
            }
            let resp = req.send().await.map_err(|e| {
                PublishError::transient(format!("{what}: cannot reach GitHub: {e}"))
            })?;
            let status = resp.status();
            let headers = resp.headers().clone();
            let text = resp.text().await.map_err(|e| {
                PublishError::transient(format!("{what}: reading GitHub's answer: {e}"))
            })?;
            let json: Value = if text.trim().is_empty() {
                Value::Null
            } else {
                match serde_json::from_str(&text) {
                    Ok(v) => v,
                    Err(_) if status.is_server_error() => Value::Null,
                    Err(e) if status.is_success() => {
                        return Err(PublishError::transient(format!(
                            "{what}: GitHub's answer is not JSON: {e}"
                        ))
                        .into());
                    }
                    Err(_) => Value::Null,
                }
            };
            if status.is_success() {
                return Ok(json);
            }
            let message = github_message(&json);
            if let Some(wait) = rate_limit_wait(status, &headers, &message) {
                if wait <= self.max_wait && tries < RATE_LIMIT_TRIES {
                    let line = format!(
                        "{what}: rate limited (HTTP {}), waiting {} s as GitHub asked",
                        status.as_u16(),
                        wait.as_secs()
                    );
                    tracing::warn!("{line}");
                    self.waits.push(line);
                    tokio::time::sleep(wait).await;
                    continue;
                }
                return Err(PublishError::transient(format!(
                    "{what}: rate limited by GitHub (HTTP {}{}); retry after {} s (longer than publish.max_wait_s {} s, or still limited after {tries} tries)",
                    status.as_u16(),
                    if message.is_empty() { String::new() } else { format!(": {message}") },
                    wait.as_secs(),
                    self.max_wait.as_secs()
                ))
                .into());
            }
            return Err(match status.as_u16() {
                401 => PublishError::permanent(format!(
                    "{what}: GitHub refused {} (HTTP 401: {message}); it is wrong, expired or revoked",
                    self.credential
                ))
                .into(),
                403 => PublishError::permanent(format!(
                    "{what}: {} may not do this (HTTP 403: {message}); it needs contents, pull requests and issues: write on {}/{}",
                    self.credential, self.owner, self.repo
                ))
                .into(),
                404 => PublishError::permanent(format!(
                    "{what}: HTTP 404 ({message}): no such repository or installation, or {} cannot see {}/{}",
                    self.credential, self.owner, self.repo
                ))
                .into(),
                422 => Failure::Unprocessable(message),
                s if s >= 500 => PublishError::transient(format!(
                    "{what}: GitHub had a server error (HTTP {s}{})",
                    if message.is_empty() { String::new() } else { format!(": {message}") }
                ))
                .into(),
                s => PublishError::permanent(format!("{what}: HTTP {s}: {message}")).into(),
            });
        }
    }
}

fn parse_pr(v: Value) -> Result<PullRequest, PublishError> {
    serde_json::from_value(v)
        .map_err(|e| PublishError::transient(format!("GitHub's pull request did not parse: {e}")))
}

/// GitHub's `message`, with each `errors[].message` or `errors[].code` after it.
fn github_message(v: &Value) -> String {
    let mut parts = Vec::new();
    if let Some(m) = v.get("message").and_then(Value::as_str) {
        parts.push(m.to_string());
    }
    for e in v
        .get("errors")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
    {
        if let Some(m) = e.get("message").and_then(Value::as_str) {
            parts.push(m.to_string());
        } else if let Some(c) = e.get("code").and_then(Value::as_str) {
            parts.push(c.to_string());
        } else if let Some(s) = e.as_str() {
            parts.push(s.to_string());
        }
    }
    parts.join(": ")
}

/// How long GitHub asks us to wait, when the answer is a rate limit: `Retry-After` (429 or a
/// secondary-limit 403), the primary limit's reset time (`x-ratelimit-remaining: 0`), or a minute
/// for a secondary limit that names no time (GitHub's documented advice).
pub fn rate_limit_wait(status: StatusCode, headers: &HeaderMap, message: &str) -> Option<Duration> {
    if status != StatusCode::TOO_MANY_REQUESTS && status != StatusCode::FORBIDDEN {
        return None;
    }
    let header = |k: &str| headers.get(k).and_then(|v| v.to_str().ok()).map(str::trim);
    if let Some(secs) = header("retry-after").and_then(|v| v.parse::<u64>().ok()) {
        return Some(Duration::from_secs(secs.max(1)));
    }
    if header("x-ratelimit-remaining") == Some("0")
        && let Some(reset) = header("x-ratelimit-reset").and_then(|v| v.parse::<u64>().ok())
    {
        let now = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_secs())
            .unwrap_or(0);
        return Some(Duration::from_secs(reset.saturating_sub(now).max(1)));
    }
    let lower = message.to_ascii_lowercase();
    if status == StatusCode::TOO_MANY_REQUESTS
        || lower.contains("secondary rate limit")
        || lower.contains("rate limit exceeded")
    {
        return Some(Duration::from_secs(60));
    }
    None
}

/// `https://api.github.com` → `…/graphql`; GitHub Enterprise's `https://HOST/api/v3` →
/// `https://HOST/api/graphql`.
fn graphql_url(api_url: &str) -> String {
    let api = api_url.trim_end_matches('/');
    match api.strip_suffix("/api/v3") {
        Some(host) => format!("{host}/api/graphql"),
        None => format!("{api}/graphql"),
    }
}

fn query_escape(s: &str) -> String {
    escape(s, |c| {
        c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.' | '/')
    })
}

fn path_escape(s: &str) -> String {
    escape(s, |c| {
        c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.' | ':')
    })
}

fn escape(s: &str, keep: impl Fn(char) -> bool) -> String {
    let mut out = String::new();
    for c in s.chars() {
        if keep(c) {
            out.push(c);
        } else {
            let mut buf = [0u8; 4];
            for b in c.encode_utf8(&mut buf).bytes() {
                out.push_str(&format!("%{b:02X}"));
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rate_limits_are_read_from_headers_and_messages() {
        let mut h = HeaderMap::new();
        assert_eq!(
            rate_limit_wait(StatusCode::FORBIDDEN, &h, "Resource not accessible"),
            None
        );
        assert_eq!(
            rate_limit_wait(
                StatusCode::FORBIDDEN,
                &h,
                "You have exceeded a secondary rate limit"
            ),
            Some(Duration::from_secs(60))
        );
        h.insert("retry-after", "7".parse().unwrap());
        assert_eq!(
            rate_limit_wait(StatusCode::TOO_MANY_REQUESTS, &h, ""),
            Some(Duration::from_secs(7))
        );
        assert_eq!(rate_limit_wait(StatusCode::BAD_GATEWAY, &h, ""), None);
        let mut h = HeaderMap::new();
        h.insert("x-ratelimit-remaining", "0".parse().unwrap());
        h.insert("x-ratelimit-reset", "1".parse().unwrap());
        assert_eq!(
            rate_limit_wait(StatusCode::FORBIDDEN, &h, ""),
            Some(Duration::from_secs(1))
        );
    }

    #[test]
    fn urls() {
        assert_eq!(
            graphql_url("https://api.github.com"),
            "https://api.github.com/graphql"
        );
        assert_eq!(
            graphql_url("https://ghe.example.com/api/v3/"),
            "https://ghe.example.com/api/graphql"
        );
        assert_eq!(path_escape("harch:review-pass"), "harch:review-pass");
        assert_eq!(query_escape("harch/a b"), "harch/a%20b");
    }
}
