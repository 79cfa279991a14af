//! A W3C WebDriver client for the page tests: the handful of commands they send to
//! chromedriver (a session, navigation, scripts, elements, keys, screenshots and chromedriver's
//! browser log), as JSON over HTTP on the reqwest the workspace already builds. A WebDriver
//! client crate would bring a second HTTP stack and a dozen duplicate crates into the lock file.
#![allow(dead_code)]

use std::time::{Duration, Instant};

use base64::Engine;
use serde_json::{Value, json};

/// The key W3C WebDriver names an element reference by.
const ELEMENT: &str = "element-6066-11e4-a52e-4f735466cecf";

pub enum Locator<'a> {
    Id(&'a str),
    Css(&'a str),
}

impl Locator<'_> {
    fn css(&self) -> String {
        match self {
            Locator::Id(id) => format!("#{id}"),
            Locator::Css(css) => css.to_string(),
        }
    }
}

/// A WebDriver error: the command, and what the driver said (`no such element`, ...).
#[derive(Debug)]
pub struct Error(pub String);

impl std::fmt::Display for Error {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

pub struct Client {
    http: reqwest::Client,
    session: String,
}

pub struct Element<'c> {
    client: &'c Client,
    id: String,
}

impl Client {
    /// A new session on the driver at `url` with these capabilities (`alwaysMatch`).
    pub async fn connect(url: &str, capabilities: Value) -> Result<Client, Error> {
        // reqwest is built without a TLS provider (harch's one is ring, installed per process);
        // a driver on localhost needs no TLS, but building a client needs a provider.
        let _ = rustls::crypto::ring::default_provider().install_default();
        let http = reqwest::Client::new();
        let v = send(
            &http,
            reqwest::Method::POST,
            &format!("{url}/session"),
            Some(json!({ "capabilities": { "alwaysMatch": capabilities } })),
        )
        .await?;
        let id = v["sessionId"]
            .as_str()
            .ok_or_else(|| Error(format!("new session: no sessionId in {v}")))?;
        Ok(Client {
            http,
            session: format!("{url}/session/{id}"),
        })
    }

    async fn cmd(
        &self,
        method: reqwest::Method,
        path: &str,
        body: Option<Value>,
    ) -> Result<Value, Error> {
        send(&self.http, method, &format!("{}{path}", self.session), body).await
    }

    pub async fn goto(&self, url: &str) -> Result<(), Error> {
        self.cmd(reqwest::Method::POST, "/url", Some(json!({ "url": url })))
            .await
            .map(drop)
    }

    /// Runs `script` as a function body in the page; its return value.
    pub async fn execute(&self, script: &str, args: Vec<Value>) -> Result<Value, Error> {
        self.cmd(
            reqwest::Method::POST,
            "/execute/sync",
            Some(json!({ "script": script, "args": args })),
        )
        .await
    }

    pub async fn find(&self, by: Locator<'_>) -> Result<Element<'_>, Error> {
        let v = self
            .cmd(
                reqwest::Method::POST,
                "/element",
                Some(json!({ "using": "css selector", "value": by.css() })),
            )
            .await?;
        self.element(v)
    }

    /// The first element `by` finds, polled until `timeout`.
    pub async fn wait_for(&self, by: Locator<'_>, timeout: Duration) -> Result<Element<'_>, Error> {
        let deadline = Instant::now() + timeout;
        let css = by.css();
        loop {
            match self.find(Locator::Css(&css)).await {
                Ok(e) => return Ok(e),
                Err(e) if Instant::now() >= deadline => return Err(e),
                Err(_) => tokio::time::sleep(Duration::from_millis(50)).await,
            }
        }
    }

    pub async fn active_element(&self) -> Result<Element<'_>, Error> {
        let v = self
            .cmd(reqwest::Method::GET, "/element/active", None)
            .await?;
        self.element(v)
    }

    /// The viewport as PNG bytes.
    pub async fn screenshot(&self) -> Result<Vec<u8>, Error> {
        let v = self.cmd(reqwest::Method::GET, "/screenshot", None).await?;
        let b64 = v
            .as_str()
            .ok_or_else(|| Error("screenshot: no data".into()))?;
        base64::engine::general_purpose::STANDARD
            .decode(b64)
            .map_err(|e| Error(format!("screenshot: {e}")))
    }

    /// chromedriver's browser log (console messages and uncaught errors) since the last read.
    pub async fn browser_log(&self) -> Result<Value, Error> {
        self.cmd(
            reqwest::Method::POST,
            "/se/log",
            Some(json!({ "type": "browser" })),
        )
        .await
    }

    pub async fn close(self) -> Result<(), Error> {
        self.cmd(reqwest::Method::DELETE, "", None).await.map(drop)
    }

    fn element(&self, v: Value) -> Result<Element<'_>, Error> {
        let id = v[ELEMENT]
            .as_str()
            .ok_or_else(|| Error(format!("no element reference in {v}")))?;
        Ok(Element {
            client: self,
            id: id.to_string(),
        })
    }
}

impl Element<'_> {
    pub async fn click(&self) -> Result<(), Error> {
        self.client
            .cmd(
                reqwest::Method::POST,
                &format!("/element/{}/click", self.id),
                Some(json!({})),
            )
            .await
            .map(drop)
    }

    /// Types `text` into the element (`\u{E007}` Enter, `\u{E004}` Tab, `\u{E00C}` Escape).
    pub async fn send_keys(&self, text: &str) -> Result<(), Error> {
        self.client
            .cmd(
                reqwest::Method::POST,
                &format!("/element/{}/value", self.id),
                Some(json!({ "text": text })),
            )
            .await
            .map(drop)
    }

    pub async fn clear(&self) -> Result<(), Error> {
        self.client
            .cmd(
                reqwest::Method::POST,
                &format!("/element/{}/clear", self.id),
                Some(json!({})),
            )
            .await
            .map(drop)
    }
}

/// One command: its `value`, or the driver's error (`{"value": {"error", "message"}}`).
async fn send(
    http: &reqwest::Client,
    method: reqwest::Method,
    url: &str,
    body: Option<Value>,
) -> Result<Value, Error> {
    let what = format!("{method} {url}");
    let mut req = http.request(method, url);
    if let Some(b) = body {
        req = req.json(&b);
    }
    let resp = req
        .send()
        .await
        .map_err(|e| Error(format!("{what}: {e}")))?;
    let status = resp.status();
    let v: Value = resp
        .json()
        .await
        .map_err(|e| Error(format!("{what}: {status}: {e}")))?;
    let value = v.get("value").cloned().unwrap_or(Value::Null);
    if !status.is_success() || value.get("error").is_some() {
        return Err(Error(format!(
            "{what}: {} ({})",
            value["error"].as_str().unwrap_or("error"),
            value["message"].as_str().unwrap_or_default()
        )));
    }
    Ok(value)
}
