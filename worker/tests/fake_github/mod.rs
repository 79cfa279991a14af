//! A local fake of the GitHub REST (and the GraphQL draft mutations) API, for the publish tests.
//! It keeps pull requests and labels as GitHub does, checks every request harch sends
//! (token, media type, API version, the fields GitHub requires, `owner:branch` heads, no `draft`
//! on PATCH) and records what it did not expect as a violation the tests assert empty. Scripted
//! faults (401, 403, 422, 429 with `Retry-After`, 5xx) answer one matching request each.
#![allow(dead_code)]

pub mod git_http;

use std::collections::VecDeque;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::{Arc, Mutex};

use serde_json::{Value, json};
use wiremock::matchers::any;
use wiremock::{Mock, MockServer, Request, Respond, ResponseTemplate};

#[derive(Clone, Debug)]
pub struct Pr {
    pub number: u64,
    pub title: String,
    pub body: String,
    pub draft: bool,
    pub head: String,
    pub base: String,
    pub labels: Vec<String>,
    pub open: bool,
}

#[derive(Clone, Debug)]
pub struct Call {
    pub method: String,
    pub path: String,
    pub query: String,
    pub body: Value,
}

struct Fault {
    method: &'static str,
    path_suffix: String,
    response: ResponseTemplate,
}

#[derive(Default)]
pub struct State {
    pub prs: Vec<Pr>,
    pub calls: Vec<Call>,
    pub violations: Vec<String>,
    faults: VecDeque<Fault>,
    /// Lists answered with no pull requests, whatever exists (a lagging search index).
    pub stale_lists: u32,
    /// A GitHub App installed on the repository: (app id, installation id, public key PEM).
    pub app: Option<(u64, u64, PathBuf)>,
    /// The repository's plan has no draft pull requests.
    pub no_drafts: bool,
}

#[derive(Clone)]
pub struct FakeGitHub {
    pub server: Arc<MockServer>,
    pub state: Arc<Mutex<State>>,
    pub owner: String,
    pub repo: String,
    token: String,
    /// The bare repository pushes go to: a PR's head must exist there.
    remote: PathBuf,
}

impl FakeGitHub {
    pub async fn start(owner: &str, repo: &str, token: &str, remote: PathBuf) -> FakeGitHub {
        let server = MockServer::start().await;
        let fake = FakeGitHub {
            server: Arc::new(server),
            state: Arc::default(),
            owner: owner.into(),
            repo: repo.into(),
            token: token.into(),
            remote,
        };
        Mock::given(any())
            .respond_with(Responder(fake.clone_inner()))
            .mount(&fake.server)
            .await;
        fake
    }

    fn clone_inner(&self) -> FakeGitHub {
        FakeGitHub {
            server: self.server.clone(),
            state: self.state.clone(),
            owner: self.owner.clone(),
            repo: self.repo.clone(),
            token: self.token.clone(),
            remote: self.remote.clone(),
        }
    }

    pub fn uri(&self) -> String {
        self.server.uri()
    }

    /// The next `method` request whose path ends with `path_suffix` gets `response`.
    pub fn fault(&self, method: &'static str, path_suffix: &str, response: ResponseTemplate) {
        self.state.lock().unwrap().faults.push_back(Fault {
            method,
            path_suffix: path_suffix.into(),
            response,
        });
    }

    pub fn prs(&self) -> Vec<Pr> {
        self.state.lock().unwrap().prs.clone()
    }

    pub fn calls(&self) -> Vec<Call> {
        self.state.lock().unwrap().calls.clone()
    }

    pub fn count(&self, method: &str, path_suffix: &str) -> usize {
        self.calls()
            .iter()
            .filter(|c| c.method == method && c.path.ends_with(path_suffix))
            .count()
    }

    /// Calls that change something (anything but GET).
    pub fn writes(&self) -> usize {
        self.calls().iter().filter(|c| c.method != "GET").count()
    }

    pub fn violations(&self) -> Vec<String> {
        self.state.lock().unwrap().violations.clone()
    }

    fn pr_json(&self, p: &Pr) -> Value {
        json!({
            "url": format!("{}/repos/{}/{}/pulls/{}", self.uri(), self.owner, self.repo, p.number),
            "id": 1000 + p.number,
            "node_id": format!("PR_node{}", p.number),
            "html_url": format!("https://github.example/{}/{}/pull/{}", self.owner, self.repo, p.number),
            "number": p.number,
            "state": if p.open { "open" } else { "closed" },
            "title": p.title,
            "body": p.body,
            "draft": p.draft,
            "labels": p.labels.iter().map(|l| json!({"name": l, "color": "ededed"})).collect::<Vec<_>>(),
            "head": {"ref": p.head, "label": format!("{}:{}", self.owner, p.head), "sha": "0".repeat(40)},
            "base": {"ref": p.base, "label": format!("{}:{}", self.owner, p.base), "sha": "0".repeat(40)},
        })
    }

    fn branch_exists(&self, branch: &str) -> bool {
        tip(&self.remote, branch).is_some()
    }

    fn answer(&self, req: &Request) -> ResponseTemplate {
        let method = req.method.to_string();
        let path = req.url.path().to_string();
        let query = req.url.query().unwrap_or("").to_string();
        let body: Value = serde_json::from_slice(&req.body).unwrap_or(Value::Null);
        let mut st = self.state.lock().unwrap();
        st.calls.push(Call {
            method: method.clone(),
            path: path.clone(),
            query: query.clone(),
            body: body.clone(),
        });
        let header = |k: &str| {
            req.headers
                .get(k)
                .and_then(|v| v.to_str().ok())
                .unwrap_or("")
                .to_string()
        };
        let as_app = path.starts_with("/app/")
            || path == format!("/repos/{}/{}/installation", self.owner, self.repo);
        if as_app {
            return self.app_call(&mut st, &method, &path, &body, &header("authorization"));
        }
        if header("authorization") != format!("Bearer {}", self.token) {
            st.violations
                .push(format!("{method} {path}: wrong or missing Authorization"));
            return ResponseTemplate::new(401).set_body_json(json!({"message": "Bad credentials"}));
        }
        if !header("accept").contains("application/vnd.github+json") {
            st.violations
                .push(format!("{method} {path}: Accept is `{}`", header("accept")));
        }
        if header("x-github-api-version").is_empty() {
            st.violations
                .push(format!("{method} {path}: no X-GitHub-Api-Version"));
        }
        if let Some(i) = st
            .faults
            .iter()
            .position(|f| f.method == method && path.ends_with(&f.path_suffix))
        {
            return st.faults.remove(i).unwrap().response;
        }
        let prefix = format!("/repos/{}/{}", self.owner, self.repo);
        let rest = match path.strip_prefix(&prefix) {
            Some(r) => r.to_string(),
            None if path == "/graphql" && method == "POST" => return self.graphql(&mut st, &body),
            None => return unexpected(&mut st, &method, &path),
        };
        let segs: Vec<&str> = rest.trim_start_matches('/').split('/').collect();
        match (method.as_str(), segs.as_slice()) {
            ("GET", ["pulls"]) => {
                let q: Vec<(String, String)> = req.url.query_pairs().into_owned().collect();
                let get = |k: &str| q.iter().find(|(a, _)| a == k).map(|(_, v)| v.clone());
                let head = get("head").unwrap_or_default();
                let Some(branch) = head.strip_prefix(&format!("{}:", self.owner)) else {
                    st.violations.push(format!(
                        "GET pulls with head `{head}`: GitHub ignores a head without `owner:`"
                    ));
                    return ResponseTemplate::new(200).set_body_json(json!([]));
                };
                if get("state").as_deref() != Some("open") {
                    st.violations.push("GET pulls without state=open".into());
                }
                if st.stale_lists > 0 {
                    st.stale_lists -= 1;
                    return ResponseTemplate::new(200).set_body_json(json!([]));
                }
                let list: Vec<Value> = st
                    .prs
                    .iter()
                    .filter(|p| p.open && p.head == branch)
                    .map(|p| self.pr_json(p))
                    .collect();
                ResponseTemplate::new(200).set_body_json(Value::Array(list))
            }
            ("POST", ["pulls"]) => {
                for k in ["title", "head", "base", "body"] {
                    if !body.get(k).is_some_and(Value::is_string) {
                        st.violations
                            .push(format!("POST pulls without string `{k}`"));
                    }
                }
                let head = body["head"].as_str().unwrap_or("").to_string();
                if !self.branch_exists(&head) {
                    return ResponseTemplate::new(422).set_body_json(json!({
                        "message": "Validation Failed",
                        "errors": [{"resource": "PullRequest", "field": "head", "code": "invalid"}],
                    }));
                }
                if st.prs.iter().any(|p| p.open && p.head == head) {
                    return ResponseTemplate::new(422).set_body_json(json!({
                        "message": "Validation Failed",
                        "errors": [{"resource": "PullRequest", "code": "custom",
                            "message": format!("A pull request already exists for {}:{head}.", self.owner)}],
                    }));
                }
                if st.no_drafts && body["draft"] == true {
                    return ResponseTemplate::new(422).set_body_json(json!({
                        "message": "Validation Failed",
                        "errors": [{"resource": "PullRequest", "code": "custom",
                            "message": "Draft pull requests are not supported in this repository."}],
                    }));
                }
                let pr = Pr {
                    number: st.prs.len() as u64 + 1,
                    title: body["title"].as_str().unwrap_or("").into(),
                    body: body["body"].as_str().unwrap_or("").into(),
                    draft: body["draft"].as_bool().unwrap_or(false),
                    head,
                    base: body["base"].as_str().unwrap_or("").into(),
                    labels: Vec::new(),
                    open: true,
                };
                let json = self.pr_json(&pr);
                st.prs.push(pr);
                ResponseTemplate::new(201).set_body_json(json)
            }
            ("PATCH", ["pulls", n]) => {
                if body.get("draft").is_some() {
                    st.violations
                        .push("PATCH pulls with `draft`: the REST API ignores it".into());
                }
                let Some(pr) = find(&mut st, n) else {
                    return not_found();
                };
                if let Some(t) = body["title"].as_str() {
                    pr.title = t.into();
                }
                if let Some(b) = body["body"].as_str() {
                    pr.body = b.into();
                }
                let pr = pr.clone();
                ResponseTemplate::new(200).set_body_json(self.pr_json(&pr))
            }
            ("POST", ["issues", n, "labels"]) => {
                let Some(labels) = body["labels"].as_array().cloned() else {
                    st.violations.push("POST labels without `labels`".into());
                    return ResponseTemplate::new(422);
                };
                let Some(pr) = find(&mut st, n) else {
                    return not_found();
                };
                for l in labels.iter().filter_map(Value::as_str) {
                    if !pr.labels.iter().any(|x| x == l) {
                        pr.labels.push(l.into());
                    }
                }
                let all: Vec<Value> = pr.labels.iter().map(|l| json!({"name": l})).collect();
                ResponseTemplate::new(200).set_body_json(Value::Array(all))
            }
            ("DELETE", ["issues", n, "labels", name]) => {
                let name = name.replace("%3A", ":");
                let Some(pr) = find(&mut st, n) else {
                    return not_found();
                };
                let before = pr.labels.len();
                pr.labels.retain(|l| *l != name);
                if pr.labels.len() == before {
                    return not_found();
                }
                let all: Vec<Value> = pr.labels.iter().map(|l| json!({"name": l})).collect();
                ResponseTemplate::new(200).set_body_json(Value::Array(all))
            }
            _ => unexpected(&mut st, &method, &path),
        }
    }

    /// The app's own endpoints: authenticated by a JWT the app's key signed (RS256, `iss` the
    /// app id), checked with openssl against the public key.
    fn app_call(
        &self,
        st: &mut State,
        method: &str,
        path: &str,
        body: &Value,
        auth: &str,
    ) -> ResponseTemplate {
        let Some((app_id, installation, public)) = st.app.clone() else {
            return unexpected(st, method, path);
        };
        if let Err(why) = check_jwt(auth, app_id, &public) {
            st.violations.push(format!("{method} {path}: {why}"));
            return ResponseTemplate::new(401)
                .set_body_json(json!({"message": "A JSON web token could not be decoded"}));
        }
        if method == "GET" && path.ends_with("/installation") {
            return ResponseTemplate::new(200)
                .set_body_json(json!({"id": installation, "app_id": app_id}));
        }
        if method == "POST" && path == format!("/app/installations/{installation}/access_tokens") {
            return ResponseTemplate::new(201).set_body_json(json!({
                "token": self.token,
                "expires_at": "2099-01-01T00:00:00Z",
                "permissions": body["permissions"],
                "repositories": body["repositories"],
            }));
        }
        unexpected(st, method, path)
    }

    fn graphql(&self, st: &mut State, body: &Value) -> ResponseTemplate {
        let query = body["query"].as_str().unwrap_or("");
        let id = body["variables"]["id"].as_str().unwrap_or("");
        let to_draft = if query.contains("convertPullRequestToDraft") {
            true
        } else if query.contains("markPullRequestReadyForReview") {
            false
        } else {
            st.violations
                .push(format!("unexpected GraphQL query: {query}"));
            return ResponseTemplate::new(200)
                .set_body_json(json!({"errors": [{"message": "unknown"}]}));
        };
        if to_draft && st.no_drafts {
            return ResponseTemplate::new(200).set_body_json(json!({
                "data": null,
                "errors": [{"message": "Draft pull requests are not supported in this repository."}]
            }));
        }
        let Some(pr) = st
            .prs
            .iter_mut()
            .find(|p| format!("PR_node{}", p.number) == id)
        else {
            return ResponseTemplate::new(200).set_body_json(json!({
                "data": null, "errors": [{"message": format!("Could not resolve to a node with the global id of '{id}'")}]
            }));
        };
        pr.draft = to_draft;
        ResponseTemplate::new(200)
            .set_body_json(json!({"data": {"x": {"pullRequest": {"isDraft": to_draft}}}}))
    }
}

fn check_jwt(auth: &str, app_id: u64, public: &std::path::Path) -> Result<(), String> {
    let jwt = auth.strip_prefix("Bearer ").ok_or("no bearer JWT")?;
    let parts: Vec<&str> = jwt.split('.').collect();
    let [h, p, sig] = parts.as_slice() else {
        return Err("not a JWT".into());
    };
    let header: Value = serde_json::from_slice(&b64url(h)?).map_err(|e| e.to_string())?;
    let payload: Value = serde_json::from_slice(&b64url(p)?).map_err(|e| e.to_string())?;
    if header["alg"] != "RS256" {
        return Err(format!("JWT alg {}", header["alg"]));
    }
    let iss = payload["iss"]
        .as_u64()
        .or_else(|| payload["iss"].as_str()?.parse().ok());
    if iss != Some(app_id) {
        return Err(format!(
            "JWT iss {} is not the app {app_id}",
            payload["iss"]
        ));
    }
    let dir = tempfile::tempdir().map_err(|e| e.to_string())?;
    std::fs::write(dir.path().join("input"), format!("{h}.{p}")).map_err(|e| e.to_string())?;
    std::fs::write(dir.path().join("sig"), b64url(sig)?).map_err(|e| e.to_string())?;
    let out = std::process::Command::new("openssl")
        .args(["dgst", "-sha256", "-verify"])
        .arg(public)
        .arg("-signature")
        .arg(dir.path().join("sig"))
        .arg(dir.path().join("input"))
        .output()
        .map_err(|e| format!("openssl: {e}"))?;
    if !out.status.success() {
        return Err("the JWT's signature does not verify with the app's public key".into());
    }
    Ok(())
}

fn b64url(s: &str) -> Result<Vec<u8>, String> {
    let mut out = Vec::new();
    let (mut acc, mut bits) = (0u32, 0);
    for c in s.bytes().filter(|c| *c != b'=') {
        let v = match c {
            b'A'..=b'Z' => c - b'A',
            b'a'..=b'z' => c - b'a' + 26,
            b'0'..=b'9' => c - b'0' + 52,
            b'-' | b'+' => 62,
            b'_' | b'/' => 63,
            _ => return Err(format!("bad base64url byte {c}")),
        };
        acc = acc << 6 | v as u32;
        bits += 6;
        if bits >= 8 {
            bits -= 8;
            out.push((acc >> bits) as u8);
            acc &= (1 << bits) - 1;
        }
    }
    Ok(out)
}

fn find<'a>(st: &'a mut State, n: &str) -> Option<&'a mut Pr> {
    let n: u64 = n.parse().ok()?;
    st.prs.iter_mut().find(|p| p.number == n)
}

fn not_found() -> ResponseTemplate {
    ResponseTemplate::new(404).set_body_json(json!({"message": "Not Found"}))
}

fn unexpected(st: &mut State, method: &str, path: &str) -> ResponseTemplate {
    st.violations
        .push(format!("unexpected call {method} {path}"));
    not_found()
}

struct Responder(FakeGitHub);

impl Respond for Responder {
    fn respond(&self, request: &Request) -> ResponseTemplate {
        self.0.answer(request)
    }
}

/// `git ARGS` in the repository `dir` (bare or not) with `stdin` and `env`; None when it fails.
pub fn try_git(dir: &Path, args: &[&str], stdin: &[u8], env: &[(&str, &str)]) -> Option<String> {
    let mut child = Command::new("git")
        .arg("-C")
        .arg(dir)
        .args(args)
        .envs(env.iter().copied())
        .env("LC_ALL", "C")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("the tests need the git command line");
    child.stdin.take().unwrap().write_all(stdin).unwrap();
    let out = child.wait_with_output().unwrap();
    out.status
        .success()
        .then(|| String::from_utf8_lossy(&out.stdout).into_owned())
}

/// `git ARGS` in `dir`, which must succeed; its stdout, trimmed.
pub fn git(dir: &Path, args: &[&str]) -> String {
    try_git(dir, args, b"", &[])
        .unwrap_or_else(|| panic!("git {args:?} failed in {}", dir.display()))
        .trim()
        .to_string()
}

/// Where `branch` points in the repository at `dir`.
pub fn tip(dir: &Path, branch: &str) -> Option<String> {
    try_git(
        dir,
        &[
            "rev-parse",
            "--verify",
            "--quiet",
            &format!("refs/heads/{branch}^{{commit}}"),
        ],
        b"",
        &[],
    )
    .map(|s| s.trim().to_string())
}

/// A commit of `tree` with `parents` by `author` (name, email), as `refs/heads/{branch}`.
pub fn commit_tree(
    dir: &Path,
    branch: &str,
    tree: &str,
    parents: &[&str],
    author: (&str, &str),
    message: &str,
) -> String {
    let mut args = vec!["commit-tree", "--no-gpg-sign", tree];
    for p in parents {
        args.extend(["-p", p]);
    }
    let env = [
        ("GIT_AUTHOR_NAME", author.0),
        ("GIT_AUTHOR_EMAIL", author.1),
        ("GIT_COMMITTER_NAME", author.0),
        ("GIT_COMMITTER_EMAIL", author.1),
    ];
    let commit = try_git(dir, &args, message.as_bytes(), &env)
        .expect("git commit-tree")
        .trim()
        .to_string();
    git(
        dir,
        &["update-ref", &format!("refs/heads/{branch}"), &commit],
    );
    commit
}

/// A new bare repository at `path` with one commit on `main` holding `files`, by a maintainer.
pub fn init_remote(path: &Path, files: &[(&str, &str)]) -> String {
    let out = Command::new("git")
        .args(["init", "--bare", "--quiet"])
        .arg(path)
        .output()
        .expect("the tests need the git command line");
    assert!(out.status.success());
    let index = path.join("test-index");
    let index = index.to_str().unwrap();
    let env = [("GIT_INDEX_FILE", index)];
    try_git(path, &["read-tree", "--empty"], b"", &env).expect("git read-tree");
    for (p, text) in files {
        let blob = git_stdin(path, &["hash-object", "-w", "--stdin"], text.as_bytes());
        try_git(
            path,
            &[
                "update-index",
                "--add",
                "--cacheinfo",
                &format!("100644,{blob},{p}"),
            ],
            b"",
            &env,
        )
        .expect("git update-index");
    }
    let tree = try_git(path, &["write-tree"], b"", &env).expect("git write-tree");
    std::fs::remove_file(index).unwrap();
    commit_tree(
        path,
        "main",
        tree.trim(),
        &[],
        ("Maintainer", "m@example.com"),
        "initial",
    )
}

fn git_stdin(dir: &Path, args: &[&str], stdin: &[u8]) -> String {
    try_git(dir, args, stdin, &[])
        .unwrap_or_else(|| panic!("git {args:?} failed"))
        .trim()
        .to_string()
}

/// The text of `path` in `commit`'s tree.
pub fn show_file(dir: &Path, commit: &str, path: &str) -> String {
    git_raw(dir, &["show", &format!("{commit}:{path}")])
}

/// The stdout of `git ARGS`, untrimmed.
pub fn git_raw(dir: &Path, args: &[&str]) -> String {
    try_git(dir, args, b"", &[]).unwrap_or_else(|| panic!("git {args:?} failed"))
}
