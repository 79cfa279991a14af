//! A local server that speaks the Hugging Face Hub's protocol, for the fetcher's tests and the
//! fetch benchmark (shared by both through `#[path]`):
//!
//! - `GET /api/models/{repo}/revision/{rev}` → `{"id", "sha", "siblings": [{"rfilename"}]}`
//! - `GET|HEAD /{repo}/resolve/{rev}/{file}`: small files answer directly (with `ETag` and
//!   `X-Repo-Commit`); `.safetensors` files 302-redirect to `/cdn/...` (with `X-Linked-Etag`,
//!   `X-Linked-Size`), like the Hub's LFS files
//! - `GET|HEAD /cdn/{repo}/{sha}/{file}` honours `Range` (206 + `Content-Range`)
//! - errors carry `x-error-code` (`RepositoryNotFound`, `RevisionNotFound`, `EntryNotFound`,
//!   `GatedRepo`); gated repos need `Authorization: Bearer <token>`
//!
//! Shards are virtual: a header prefix plus a payload length; payload bytes read as zeros and are
//! never allocated, so DeepSeek-V3's 688 GB of shards cost nothing.
#![allow(dead_code)]

use std::collections::{BTreeMap, HashMap, VecDeque};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use wiremock::{Mock, MockServer, Request, Respond, ResponseTemplate, matchers::any};

pub const SHA: &str = "0123456789abcdef0123456789abcdef01234567";

/// A file in a mock repo: its first bytes, and its full length (the rest reads as zeros).
#[derive(Clone, Debug)]
pub struct MockFile {
    pub prefix: Vec<u8>,
    pub len: u64,
}

impl MockFile {
    pub fn small(bytes: impl Into<Vec<u8>>) -> MockFile {
        let prefix = bytes.into();
        MockFile {
            len: prefix.len() as u64,
            prefix,
        }
    }

    /// A shard whose JSON header is `json` and whose payload is `payload_len` bytes.
    pub fn shard(json: &str, payload_len: u64) -> MockFile {
        let mut prefix = (json.len() as u64).to_le_bytes().to_vec();
        prefix.extend_from_slice(json.as_bytes());
        MockFile {
            len: prefix.len() as u64 + payload_len,
            prefix,
        }
    }

    fn slice(&self, start: u64, end_inclusive: u64) -> Vec<u8> {
        let mut out = vec![0u8; (end_inclusive + 1 - start) as usize];
        let have = self.prefix.len() as u64;
        if start < have {
            let upto = have.min(end_inclusive + 1);
            out[..(upto - start) as usize]
                .copy_from_slice(&self.prefix[start as usize..upto as usize]);
        }
        out
    }
}

/// A safetensors JSON header for `(name, dtype, shape)` tensors laid out contiguously, padded
/// with spaces to at least `min_len` bytes. Returns the JSON and the payload length.
pub fn header_json(tensors: &[(&str, &str, &[u64])], min_len: usize) -> (String, u64) {
    let mut offset = 0u64;
    let mut parts = vec![r#""__metadata__":{"format":"pt"}"#.to_string()];
    for (name, dtype, shape) in tensors {
        let size = match *dtype {
            "F32" | "I32" => 4,
            "BF16" | "F16" => 2,
            "I64" | "F64" => 8,
            _ => 1,
        };
        let n: u64 = shape.iter().product::<u64>() * size;
        parts.push(format!(
            r#""{name}":{{"dtype":"{dtype}","shape":{shape:?},"data_offsets":[{offset},{}]}}"#,
            offset + n
        ));
        offset += n;
    }
    let mut json = format!("{{{}}}", parts.join(","));
    while json.len() < min_len {
        json.push(' ');
    }
    (json, offset)
}

/// What a request should get instead of the normal answer, once.
#[derive(Clone, Debug)]
pub enum Fault {
    Status(u16),
    /// 429 with `Retry-After: secs`.
    RateLimited(u64),
    /// A 206 whose body is shorter than its `Content-Range` says.
    ShortBody,
}

#[derive(Clone, Debug, Default)]
pub struct MockRepo {
    pub files: BTreeMap<String, MockFile>,
    /// When set, requests need `Authorization: Bearer <token>`.
    pub gated_token: Option<String>,
    /// Answer 200 with the whole file instead of 206 (a server that ignores Range).
    pub ignore_range: bool,
    /// The `X-Repo-Commit` a file answers with when asked at `main`, where it is not `SHA`:
    /// another commit (the branch moved between two requests) or none (a server that does not
    /// say). Asked at `SHA`, every file answers `SHA`.
    pub commit_at_main: BTreeMap<String, Option<String>>,
}

#[derive(Default)]
struct State {
    repos: HashMap<String, MockRepo>,
    /// Faults by path suffix (e.g. the file name), served in order.
    faults: Vec<(String, VecDeque<Fault>)>,
    /// Random faults on every request: (probability, xorshift state).
    random: Option<(f64, u64)>,
    /// Random faults served, by hop: API, resolve (the Hub), CDN.
    pub injected: InjectedFaults,
}

/// Random faults served so far, by where they hit.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct InjectedFaults {
    pub api: u64,
    pub resolve: u64,
    pub cdn: u64,
    pub rate_limited: u64,
}

impl InjectedFaults {
    pub fn total(&self) -> u64 {
        self.api + self.resolve + self.cdn
    }
}

#[derive(Clone)]
pub struct MockHub {
    state: Arc<Mutex<State>>,
    latency: Duration,
    /// Response body bytes sent for GET requests (HEAD answers carry no body).
    pub sent_bytes: Arc<AtomicU64>,
}

impl MockHub {
    pub async fn start(latency: Duration) -> (MockServer, MockHub) {
        let server = MockServer::start().await;
        let hub = MockHub {
            state: Arc::default(),
            latency,
            sent_bytes: Arc::default(),
        };
        Mock::given(any())
            .respond_with(hub.clone())
            .mount(&server)
            .await;
        (server, hub)
    }

    pub fn add_repo(&self, id: &str, repo: MockRepo) {
        self.state
            .lock()
            .unwrap()
            .repos
            .insert(id.to_string(), repo);
    }

    /// The next requests whose path ends with `path_suffix` get these faults, in order.
    pub fn fault(&self, path_suffix: &str, faults: Vec<Fault>) {
        self.state
            .lock()
            .unwrap()
            .faults
            .push((path_suffix.to_string(), faults.into()));
    }

    /// From now on each request fails with probability `rate` (seeded, so a failing run can
    /// be replayed): a 429 (half of them with `Retry-After: 0`), 500, 502 or 503, on any hop.
    pub fn fault_rate(&self, rate: f64, seed: u64) {
        self.state.lock().unwrap().random = Some((rate, seed.max(1)));
    }

    pub fn injected(&self) -> InjectedFaults {
        self.state.lock().unwrap().injected
    }

    fn answer(&self, req: &Request) -> Answer {
        let path = req.url.path().to_string();
        let method = req.method.as_str().to_string();
        let mut state = self.state.lock().unwrap();
        if let Some((rate, rng)) = state.random.as_mut() {
            let draw = |rng: &mut u64| {
                *rng ^= *rng << 13;
                *rng ^= *rng >> 7;
                *rng ^= *rng << 17;
                *rng
            };
            let roll = (draw(rng) >> 11) as f64 / (1u64 << 53) as f64;
            if roll < *rate {
                let kind = draw(rng) % 5;
                let counts = &mut state.injected;
                if path.starts_with("/api/") {
                    counts.api += 1;
                } else if path.starts_with("/cdn/") {
                    counts.cdn += 1;
                } else {
                    counts.resolve += 1;
                }
                let t = match kind {
                    0 => ResponseTemplate::new(429).insert_header("retry-after", "0"),
                    1 => ResponseTemplate::new(429),
                    2 => ResponseTemplate::new(500),
                    3 => ResponseTemplate::new(502),
                    _ => ResponseTemplate::new(503),
                };
                if kind < 2 {
                    counts.rate_limited += 1;
                }
                return (t, 0);
            }
        }
        if let Some((_, queue)) = state
            .faults
            .iter_mut()
            .find(|(suffix, q)| path.ends_with(suffix.as_str()) && !q.is_empty())
            && let Some(fault) = queue.pop_front()
        {
            match fault {
                Fault::Status(s) => return (ResponseTemplate::new(s), 0),
                Fault::RateLimited(secs) => {
                    let t =
                        ResponseTemplate::new(429).insert_header("retry-after", secs.to_string());
                    return (t, 0);
                }
                Fault::ShortBody => {
                    let t = ResponseTemplate::new(206)
                        .insert_header("content-range", "bytes 0-1023/100000");
                    return with_body(t, vec![0u8; 100]);
                }
            }
        }
        let state = &*state;
        let (resp, body_len) = if let Some(rest) = path.strip_prefix("/api/models/") {
            api(state, rest)
        } else if let Some(rest) = path.strip_prefix("/cdn/") {
            cdn(state, rest, req, &method)
        } else {
            resolve(state, &path, req, &method)
        };
        (resp, if method == "HEAD" { 0 } else { body_len })
    }
}

impl Respond for MockHub {
    fn respond(&self, request: &Request) -> ResponseTemplate {
        let (resp, body_len) = self.answer(request);
        self.sent_bytes
            .fetch_add(body_len as u64, Ordering::Relaxed);
        resp.set_delay(self.latency)
    }
}

/// A response and the length of its body.
type Answer = (ResponseTemplate, usize);

fn with_body(t: ResponseTemplate, body: Vec<u8>) -> Answer {
    let n = body.len();
    (t.set_body_bytes(body), n)
}

fn json_body(t: ResponseTemplate, v: serde_json::Value) -> Answer {
    with_body(
        t.insert_header("content-type", "application/json"),
        serde_json::to_vec(&v).unwrap(),
    )
}

fn error(status: u16, code: &str) -> Answer {
    json_body(
        ResponseTemplate::new(status).insert_header("x-error-code", code),
        serde_json::json!({"error": code}),
    )
}

/// Splits `org/name/<marker>/rest` at the marker that follows the repo id.
fn split_repo<'a>(state: &State, rest: &'a str, marker: &str) -> Option<(String, &'a str)> {
    let parts: Vec<&str> = rest.splitn(3, '/').collect();
    // Try `org/name` first, then a bare `name`.
    if parts.len() == 3 {
        let id = format!("{}/{}", parts[0], parts[1]);
        if let Some(after) = parts[2].strip_prefix(marker) {
            return Some((id, after));
        }
        if state.repos.contains_key(&id) {
            return None;
        }
    }
    let (id, after) = rest.split_once('/')?;
    Some((id.to_string(), after.strip_prefix(marker)?))
}

fn auth_error(repo: &MockRepo, req: &Request) -> Option<Answer> {
    let token = repo.gated_token.as_ref()?;
    let sent = req
        .headers
        .get("authorization")
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.strip_prefix("Bearer "));
    match sent {
        None => Some(error(401, "GatedRepo")),
        Some(t) if t != token => Some(error(403, "GatedRepo")),
        Some(_) => None,
    }
}

fn api(state: &State, rest: &str) -> Answer {
    let Some((id, rev)) = split_repo(state, rest, "revision/") else {
        return error(404, "RepositoryNotFound");
    };
    let Some(repo) = state.repos.get(&id) else {
        return error(404, "RepositoryNotFound");
    };
    if rev != "main" && rev != SHA {
        return error(404, "RevisionNotFound");
    }
    let siblings: Vec<_> = repo
        .files
        .keys()
        .map(|f| serde_json::json!({"rfilename": f}))
        .collect();
    json_body(
        ResponseTemplate::new(200),
        serde_json::json!({"id": id, "sha": SHA, "siblings": siblings, "private": false}),
    )
}

fn resolve(state: &State, path: &str, req: &Request, method: &str) -> Answer {
    let Some((id, after)) = split_repo(state, path.trim_start_matches('/'), "resolve/") else {
        return error(404, "RepositoryNotFound");
    };
    let Some(repo) = state.repos.get(&id) else {
        return error(404, "RepositoryNotFound");
    };
    if let Some(denied) = auth_error(repo, req) {
        return denied;
    }
    let Some((rev, file)) = after.split_once('/') else {
        return error(404, "EntryNotFound");
    };
    if rev != "main" && rev != SHA {
        return error(404, "RevisionNotFound");
    }
    let Some(f) = repo.files.get(file) else {
        let (t, n) = error(404, "EntryNotFound");
        return (t.insert_header("x-repo-commit", SHA), n);
    };
    let etag = format!("\"etag-{}\"", file.replace('/', "-"));
    let commit = match repo.commit_at_main.get(file) {
        Some(said) if rev == "main" => said.clone(),
        _ => Some(SHA.to_string()),
    };
    let with_commit = |t: ResponseTemplate| match &commit {
        Some(c) => t.insert_header("x-repo-commit", c.as_str()),
        None => t,
    };
    if file.ends_with(".safetensors") {
        let redirect = with_commit(ResponseTemplate::new(302))
            .insert_header("location", format!("/cdn/{id}/{SHA}/{file}").as_str())
            .insert_header("x-linked-etag", etag.as_str())
            .insert_header("x-linked-size", f.len.to_string())
            .insert_header("etag", etag.as_str());
        return (redirect, 0);
    }
    let resp = with_commit(ResponseTemplate::new(200)).insert_header("etag", etag.as_str());
    let _ = method;
    with_body(resp, f.prefix.clone())
}

fn cdn(state: &State, rest: &str, req: &Request, method: &str) -> Answer {
    let Some((id, after)) = split_repo(state, rest, &format!("{SHA}/")) else {
        return (ResponseTemplate::new(404), 0);
    };
    let Some(f) = state.repos.get(&id).and_then(|r| r.files.get(after)) else {
        return (ResponseTemplate::new(404), 0);
    };
    let ignore_range = state.repos.get(&id).is_some_and(|r| r.ignore_range);
    let etag = format!("\"cdn-{}\"", after.replace('/', "-"));
    let range = req
        .headers
        .get("range")
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.strip_prefix("bytes="))
        .and_then(|v| v.split_once('-'))
        .and_then(|(a, b)| Some((a.parse::<u64>().ok()?, b.parse::<u64>().ok())));
    if method == "HEAD" {
        let head = ResponseTemplate::new(200)
            .insert_header("etag", etag.as_str())
            .insert_header("content-length", f.len.to_string());
        return (head, 0);
    }
    match range {
        Some((start, end)) if !ignore_range => {
            if start >= f.len {
                let refused = ResponseTemplate::new(416)
                    .insert_header("content-range", format!("bytes */{}", f.len).as_str());
                return (refused, 0);
            }
            let end = end.unwrap_or(f.len - 1).min(f.len - 1);
            let partial = ResponseTemplate::new(206)
                .insert_header("etag", etag.as_str())
                .insert_header(
                    "content-range",
                    format!("bytes {start}-{end}/{}", f.len).as_str(),
                );
            with_body(partial, f.slice(start, end))
        }
        _ => {
            // A whole virtual shard would be gigabytes: serve it only when it is small.
            assert!(
                f.len < 64 << 20,
                "test asked for a whole {}-byte shard",
                f.len
            );
            let whole = ResponseTemplate::new(200).insert_header("etag", etag.as_str());
            with_body(whole, f.slice(0, f.len.saturating_sub(1)))
        }
    }
}

/// Requests the server received, as `METHOD path`.
pub async fn requests(server: &MockServer) -> Vec<String> {
    server
        .received_requests()
        .await
        .unwrap_or_default()
        .iter()
        .map(|r| format!("{} {}", r.method, r.url.path()))
        .collect()
}
