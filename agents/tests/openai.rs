//! The OpenAI-compatible loop against a local server (wiremock) that plays a scripted model:
//! each answer is computed from the conversation it receives, like a deterministic replay.

use crate::common;

use std::time::Duration;

use common::*;
use harch_agents::{
    AgentBackend, AgentOutcome, AgentRequest, FailureKind, OpenAiBackend, OpenAiConfig, Price,
    RetryPolicy,
};
use serde_json::{Value, json};
use wiremock::matchers::{header, method, path};
use wiremock::{Mock, MockServer, Request, Respond, ResponseTemplate};

fn tool_call(id: &str, name: &str, args: Value) -> Value {
    json!({"id": id, "type": "function", "function": {"name": name, "arguments": args.to_string()}})
}

fn reply(message: Value, finish: &str, tokens: u64) -> ResponseTemplate {
    ResponseTemplate::new(200).set_body_json(json!({
        "id": "c", "object": "chat.completion", "model": "scripted",
        "choices": [{"index": 0, "message": message, "finish_reason": finish}],
        "usage": {"prompt_tokens": tokens, "completion_tokens": 10, "total_tokens": tokens + 10,
                  "prompt_tokens_details": {"cached_tokens": tokens / 2}}
    }))
}

fn calls(calls: Vec<Value>) -> ResponseTemplate {
    reply(
        json!({"role": "assistant", "content": null, "tool_calls": calls}),
        "tool_calls",
        100,
    )
}

fn messages(req: &Request) -> Vec<Value> {
    let body: Value = req.body_json().unwrap();
    body["messages"].as_array().cloned().unwrap_or_default()
}

/// Lists, reads the config, writes a wrong spec, validates, fixes it from the hint, validates,
/// stops. Like Moonshot's thinking models it refuses a conversation that dropped its
/// `reasoning_content`.
struct FixingModel;

impl Respond for FixingModel {
    fn respond(&self, req: &Request) -> ResponseTemplate {
        let msgs = messages(req);
        let assistants: Vec<&Value> = msgs.iter().filter(|m| m["role"] == "assistant").collect();
        if assistants
            .iter()
            .any(|m| m["reasoning_content"] != "thinking about the spec")
        {
            return ResponseTemplate::new(400)
                .set_body_string("reasoning_content missing on an assistant message");
        }
        let last_tool = msgs.iter().rev().find(|m| m["role"] == "tool");
        let think = |mut r: Value| {
            r["reasoning_content"] = json!("thinking about the spec");
            r
        };
        let step = |c: Vec<Value>| {
            reply(
                think(json!({"role": "assistant", "content": null, "tool_calls": c})),
                "tool_calls",
                100,
            )
        };
        match assistants.len() {
            0 => step(vec![
                tool_call("a", "list_files", json!({})),
                tool_call("b", "read_file", json!({"path": "truth/config.json"})),
            ]),
            1 => step(vec![tool_call(
                "c",
                "write_file",
                json!({"path": "specs/models/tiny.yaml", "content": "model: tiny\nattention: wrong\n"}),
            )]),
            2 | 4 => step(vec![tool_call("v", "run_validate", json!({}))]),
            3 => {
                let report = last_tool.unwrap()["content"].as_str().unwrap();
                let hint = report
                    .split("\"hint\":\"set ")
                    .nth(1)
                    .unwrap()
                    .split('"')
                    .next()
                    .unwrap();
                step(vec![tool_call(
                    "d",
                    "write_file",
                    json!({"path": "specs/models/tiny.yaml", "content": format!("model: tiny\n{hint}\n")}),
                )])
            }
            _ => reply(
                think(json!({"role": "assistant", "content": "The spec validates."})),
                "stop",
                100,
            ),
        }
    }
}

async fn server(responder: impl Respond + 'static) -> MockServer {
    let server = MockServer::start().await;
    Mock::given(method("POST"))
        .and(path("/v1/chat/completions"))
        .and(header("authorization", "Bearer sk-openai-test"))
        .respond_with(responder)
        .mount(&server)
        .await;
    server
}

/// Fast retries, so a test of a persistent 429 takes milliseconds.
fn config(server: &MockServer) -> OpenAiConfig {
    let mut config = OpenAiConfig::new(format!("{}/v1", server.uri()), "scripted");
    config.retry = RetryPolicy {
        max_retries: 2,
        base_delay: Duration::from_millis(10),
        max_delay: Duration::from_millis(100),
    };
    config
}

async fn run(server: &MockServer, f: &Fixture, limits: harch_agents::AgentLimits) -> AgentOutcome {
    run_with(config(server), f, limits).await
}

async fn run_with(
    config: OpenAiConfig,
    f: &Fixture,
    limits: harch_agents::AgentLimits,
) -> AgentOutcome {
    let backend = OpenAiBackend::new(config, &credentials()).unwrap();
    let req = AgentRequest {
        prompt: "Write the spec for tiny.",
        workspace: &f.ws,
        limits: &limits,
        model: None,
        label: "generate-1",
    };
    backend.run(&req).await.unwrap()
}

#[tokio::test]
async fn the_loop_writes_validates_fixes_and_stops() {
    let s = server(FixingModel).await;
    let f = workspace();
    let o = run(&s, &f, limits()).await;
    assert_eq!(o.failure, None, "{o:?}");
    assert!(o.claimed_success);
    assert_eq!(o.turns, Some(6));
    let usage = o.usage.unwrap();
    assert_eq!(
        (
            usage.input_tokens,
            usage.output_tokens,
            usage.cached_input_tokens
        ),
        (600, 60, 300)
    );
    assert_eq!(o.final_message.as_deref(), Some("The spec validates."));
    assert_eq!(spec_text(&f.ws), "model: tiny\nattention: gqa_attention\n");
    assert_eq!(
        o.files_changed,
        vec![std::path::PathBuf::from("specs/models/tiny.yaml")]
    );

    let transcript = std::fs::read_to_string(&o.transcript).unwrap();
    let lines: Vec<Value> = transcript
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(lines.first().unwrap()["event"], "start");
    assert_eq!(lines.last().unwrap()["event"], "end");
    assert_eq!(lines.iter().filter(|l| l["message"].is_object()).count(), 6);
    let validate_answers: Vec<&str> = lines
        .iter()
        .filter(|l| l["tool"] == "run_validate")
        .map(|l| l["result"].as_str().unwrap())
        .collect();
    assert!(validate_answers[0].contains("W001"));
    assert!(validate_answers[1].contains("\"valid\":true"));
}

/// Tries to write outside the writable area every way it can, then stops.
struct EscapingModel;

impl Respond for EscapingModel {
    fn respond(&self, req: &Request) -> ResponseTemplate {
        if messages(req).iter().any(|m| m["role"] == "tool") {
            return reply(json!({"role": "assistant", "content": "done"}), "stop", 10);
        }
        let w =
            |id: &str, p: &str| tool_call(id, "write_file", json!({"path": p, "content": "pwned"}));
        calls(vec![
            w("1", "../escape.txt"),
            w("2", "/tmp/harch-openai-escape.txt"),
            w("3", "truth/config.json"),
            w("4", "specs/models/link/escape.txt"),
            w("5", "specs/models/../../escape.txt"),
            tool_call(
                "6",
                "read_file",
                json!({"path": "../logs/generate-1.openai.jsonl"}),
            ),
            tool_call("7", "read_file", json!({"path": "/etc/hostname"})),
        ])
    }
}

#[tokio::test]
async fn tools_refuse_paths_outside_the_workspace() {
    let s = server(EscapingModel).await;
    let f = workspace();
    std::os::unix::fs::symlink(f.tmp.path(), f.ws.specs_dir().join("models/link")).unwrap();
    let o = run(&s, &f, limits()).await;
    assert!(o.claimed_success);
    let transcript = std::fs::read_to_string(&o.transcript).unwrap();
    let results: Vec<String> = transcript
        .lines()
        .map(|l| serde_json::from_str::<Value>(l).unwrap())
        .filter(|l| l["tool"].is_string())
        .map(|l| l["result"].as_str().unwrap().to_string())
        .collect();
    assert_eq!(results.len(), 7);
    for r in &results {
        assert!(r.starts_with("error:"), "{r}");
    }
    assert!(!f.ws.job_dir().join("escape.txt").exists());
    assert!(!f.tmp.path().join("escape.txt").exists());
    assert!(!std::path::Path::new("/tmp/harch-openai-escape.txt").exists());
    assert_eq!(
        std::fs::read_to_string(f.ws.truth_dir().join("config.json")).unwrap(),
        r#"{"hidden_size": 64}"#
    );
    assert!(o.wrote_nothing());
}

/// Never stops exploring.
struct RestlessModel;

impl Respond for RestlessModel {
    fn respond(&self, _: &Request) -> ResponseTemplate {
        calls(vec![tool_call("l", "list_files", json!({"path": "truth"}))])
    }
}

#[tokio::test]
async fn the_step_cap_ends_the_loop() {
    let s = server(RestlessModel).await;
    let f = workspace();
    let mut l = limits();
    l.max_turns = 3;
    let o = run(&s, &f, l).await;
    assert!(!o.claimed_success);
    assert_eq!(o.turns, Some(3));
    assert_eq!(
        o.failure.as_ref().map(|f| f.kind),
        Some(FailureKind::MaxTurns)
    );
    assert_eq!(s.received_requests().await.unwrap().len(), 3);
}

#[tokio::test]
async fn the_token_cap_ends_the_loop() {
    let s = server(RestlessModel).await;
    let f = workspace();
    let mut l = limits();
    l.max_tokens = 250;
    let o = run(&s, &f, l).await;
    assert_eq!(
        o.failure.as_ref().map(|f| f.kind),
        Some(FailureKind::BudgetExceeded)
    );
    assert_eq!(
        o.turns,
        Some(3),
        "110 tokens a step: the cap is seen before the fourth request"
    );
}

#[tokio::test]
async fn the_wall_clock_cap_ends_the_loop() {
    let s = server(ResponseTemplate::new(200).set_delay(Duration::from_secs(10))).await;
    let f = workspace();
    let mut l = limits();
    l.wall_time = Duration::from_millis(300);
    let o = run(&s, &f, l).await;
    assert_eq!(
        o.failure.as_ref().map(|f| f.kind),
        Some(FailureKind::Timeout)
    );
    assert!(o.retryable());
}

#[tokio::test]
async fn http_errors_are_classified() {
    for (status, kind, retryable) in [
        (429, FailureKind::RateLimited, true),
        (503, FailureKind::Transient, true),
        (401, FailureKind::Auth, false),
        (400, FailureKind::AgentError, false),
    ] {
        let s = server(ResponseTemplate::new(status).set_body_string("nope")).await;
        let f = workspace();
        let o = run(&s, &f, limits()).await;
        assert_eq!(o.failure.as_ref().map(|f| f.kind), Some(kind), "{status}");
        assert_eq!(o.retryable(), retryable, "{status}");
        assert!(o.failure.unwrap().message.contains(&status.to_string()));
        // 429 and 5xx are sent again (twice, as configured); the others are not.
        let sent = s.received_requests().await.unwrap().len();
        assert_eq!(sent, if retryable { 3 } else { 1 }, "{status}");
    }
}

/// The fixing model behind a provider that answers one request (the third) with a 429 and a
/// `Retry-After`: the same request is sent again and the conversation goes on where it was.
struct OneRateLimit {
    served: std::sync::atomic::AtomicUsize,
}

impl Respond for OneRateLimit {
    fn respond(&self, req: &Request) -> ResponseTemplate {
        let n = self
            .served
            .fetch_add(1, std::sync::atomic::Ordering::SeqCst);
        if n == 2 {
            return ResponseTemplate::new(429)
                .insert_header("retry-after", "0")
                .set_body_string("rate limit reached for requests");
        }
        FixingModel.respond(req)
    }
}

#[tokio::test]
async fn a_429_retries_the_request_not_the_conversation() {
    let s = server(OneRateLimit {
        served: Default::default(),
    })
    .await;
    let f = workspace();
    let o = run(&s, &f, limits()).await;
    assert!(o.claimed_success, "{:?}", o.failure);
    assert!(o.failure.is_none());
    let requests = s.received_requests().await.unwrap();
    // Six model steps plus the one request sent twice.
    assert_eq!(o.turns, Some(6));
    assert_eq!(requests.len(), 7);
    assert_eq!(
        requests[2].body, requests[3].body,
        "the refused request is repeated as it was"
    );
    assert!(messages(&requests[2]).len() > 1, "not the first request");
    let transcript = std::fs::read_to_string(&o.transcript).unwrap();
    assert_eq!(transcript.matches("retry_after_error").count(), 1);
    assert!(transcript.contains("rate_limited"), "{transcript}");
}

#[tokio::test]
async fn the_cost_cap_is_checked_after_every_response() {
    let s = server(RestlessModel).await;
    let f = workspace();
    let mut c = config(&s);
    // 100 input + 10 output tokens a step at $10/$100 per million: $0.002 a step.
    c.price = Some(Price {
        input_usd_per_mtok: 10.0,
        output_usd_per_mtok: 100.0,
    });
    let mut l = limits();
    l.max_cost_usd = Some(0.005);
    let o = run_with(c, &f, l).await;
    let failure = o.failure.clone().unwrap();
    assert_eq!(failure.kind, FailureKind::BudgetExceeded);
    assert!(!o.retryable());
    assert_eq!(o.turns, Some(3), "$0.006 after the third response");
    assert_eq!(s.received_requests().await.unwrap().len(), 3);
    let cost = o.cost_usd.unwrap();
    assert!((cost - 0.006).abs() < 1e-9, "{cost}");
    assert!(failure.message.contains("$0.0060"), "{}", failure.message);
}

#[tokio::test]
async fn a_publishing_token_cannot_be_configured_as_the_api_key() {
    let mut config = OpenAiConfig::new("http://127.0.0.1:9/v1", "m");
    config.api_key_env = "GITHUB_TOKEN".into();
    assert!(OpenAiBackend::new(config, &credentials()).is_err());
}

/// An endpoint that cannot be reached ends the run as `unreachable`, naming the cause (from
/// the HTTP client's error chain) and what to check, after the cause's own small budget: a
/// refused connection is tried twice, a failed TLS handshake once. Real sockets, real reqwest.
#[tokio::test]
async fn unreachable_endpoints_name_their_cause_and_spend_their_own_budget() {
    let s = server(ResponseTemplate::new(200)).await;
    let closed = {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        l.local_addr().unwrap().port()
    };
    // https to a plain-HTTP server: the handshake fails.
    let tls_url = format!("{}/v1", s.uri().replace("http://", "https://"));
    for (base, said, requests) in [
        (
            format!("http://127.0.0.1:{closed}/v1"),
            format!("connection refused: nothing listens at 127.0.0.1:{closed}"),
            "(2 requests)",
        ),
        (tls_url, "TLS failure".to_string(), "(1 request)"),
    ] {
        let f = workspace();
        let mut config = config(&s);
        config.base_url = base.clone();
        config.retry.max_retries = 8;
        let o = run_with(config, &f, limits()).await;
        let failure = o.failure.clone().unwrap();
        assert_eq!(
            failure.kind,
            FailureKind::Unreachable,
            "{base}: {failure:?}"
        );
        assert!(!o.retryable());
        assert!(
            failure.message.contains(&said)
                && failure.message.contains(requests)
                && failure.message.contains("HARCH_OPENAI_BASE_URL"),
            "{base}: {}",
            failure.message
        );
    }
    // Nothing reached the server over plain HTTP.
    assert!(s.received_requests().await.unwrap().is_empty());
    // A 404 is a wrong base URL or model: not retried, said so.
    let s = server(ResponseTemplate::new(200)).await;
    let f = workspace();
    let mut config = config(&s);
    config.base_url = format!("{}/wrong", s.uri());
    let o = run_with(config, &f, limits()).await;
    let failure = o.failure.unwrap();
    assert_eq!(failure.kind, FailureKind::Unreachable);
    assert!(
        failure.message.contains("check the base URL"),
        "{}",
        failure.message
    );
    assert_eq!(s.received_requests().await.unwrap().len(), 1);
}
