//! Git's smart HTTP protocol, served by the real `git http-backend` (CGI) behind a wiremock
//! server that asks for Basic credentials as GitHub does (`x-access-token:<token>`). Lets the
//! tests push over http with harch's git credential helper, and have pushes refused by a
//! pre-receive hook or by a wrong token.

use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use wiremock::matchers::any;
use wiremock::{Mock, MockServer, Request, Respond, ResponseTemplate};

pub struct GitHttp {
    pub server: MockServer,
}

impl GitHttp {
    /// Serves the bare repositories under `root`; only `token` may push or fetch.
    pub async fn start(root: &Path, token: &str) -> GitHttp {
        let server = MockServer::start().await;
        Mock::given(any())
            .respond_with(Backend {
                root: root.to_path_buf(),
                auth: format!(
                    "Basic {}",
                    base64(format!("x-access-token:{token}").as_bytes())
                ),
            })
            .mount(&server)
            .await;
        GitHttp { server }
    }

    /// The URL of the bare repository `name` (e.g. `remote.git`).
    pub fn url(&self, name: &str) -> String {
        format!("{}/{name}", self.server.uri())
    }
}

struct Backend {
    root: PathBuf,
    auth: String,
}

impl Respond for Backend {
    fn respond(&self, req: &Request) -> ResponseTemplate {
        let given = req
            .headers
            .get("authorization")
            .and_then(|v| v.to_str().ok())
            .unwrap_or("");
        if given != self.auth {
            return ResponseTemplate::new(401)
                .insert_header("www-authenticate", "Basic realm=\"GitHub\"");
        }
        let mut child = Command::new("git")
            .arg("http-backend")
            .env_clear()
            .env("PATH", std::env::var("PATH").unwrap_or_default())
            .env("GIT_PROJECT_ROOT", &self.root)
            .env("GIT_HTTP_EXPORT_ALL", "1")
            .env("REMOTE_USER", "x-access-token")
            .env("REQUEST_METHOD", req.method.as_str())
            .env("PATH_INFO", req.url.path())
            .env("QUERY_STRING", req.url.query().unwrap_or(""))
            .env(
                "CONTENT_TYPE",
                req.headers
                    .get("content-type")
                    .and_then(|v| v.to_str().ok())
                    .unwrap_or(""),
            )
            .env("CONTENT_LENGTH", req.body.len().to_string())
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .expect("git http-backend");
        child.stdin.take().unwrap().write_all(&req.body).unwrap();
        let out = child.wait_with_output().unwrap();
        cgi_response(&out.stdout)
    }
}

/// A CGI answer (headers, blank line, body) as an HTTP response.
fn cgi_response(raw: &[u8]) -> ResponseTemplate {
    let split = raw
        .windows(4)
        .position(|w| w == b"\r\n\r\n")
        .map(|i| (i, 4))
        .or_else(|| raw.windows(2).position(|w| w == b"\n\n").map(|i| (i, 2)));
    let Some((at, skip)) = split else {
        return ResponseTemplate::new(500);
    };
    let head = String::from_utf8_lossy(&raw[..at]).into_owned();
    let mut status = 200;
    let mut headers = Vec::new();
    for line in head.lines() {
        let Some((k, v)) = line.split_once(':') else {
            continue;
        };
        let (k, v) = (k.trim(), v.trim());
        if k.eq_ignore_ascii_case("status") {
            status = v
                .split(' ')
                .next()
                .and_then(|s| s.parse().ok())
                .unwrap_or(500);
        } else {
            headers.push((k.to_string(), v.to_string()));
        }
    }
    let mime = headers
        .iter()
        .find(|(k, _)| k.eq_ignore_ascii_case("content-type"))
        .map(|(_, v)| v.clone())
        .unwrap_or_else(|| "application/octet-stream".into());
    let mut t = ResponseTemplate::new(status).set_body_raw(raw[at + skip..].to_vec(), &mime);
    for (k, v) in headers {
        if !k.eq_ignore_ascii_case("content-type") {
            t = t.insert_header(k.as_str(), v.as_str());
        }
    }
    t
}

fn base64(data: &[u8]) -> String {
    const T: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    let mut out = String::new();
    for chunk in data.chunks(3) {
        let b = [
            chunk[0],
            *chunk.get(1).unwrap_or(&0),
            *chunk.get(2).unwrap_or(&0),
        ];
        let n = (b[0] as u32) << 16 | (b[1] as u32) << 8 | b[2] as u32;
        for i in 0..4 {
            if i <= chunk.len() {
                out.push(T[(n >> (18 - 6 * i) & 63) as usize] as char);
            } else {
                out.push('=');
            }
        }
    }
    out
}
