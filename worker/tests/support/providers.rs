//! Local servers that speak the model providers' streaming APIs, so the real agent CLIs can run
//! against a scripted model: the Anthropic Messages API for Claude Code, the OpenAI Responses
//! API for Codex and streaming chat completions (Moonshot's OpenAI-compatible API) for Kimi CLI.
//! All play the same [`Script`]: each turn is computed from the conversation the CLI sends (how
//! many answers it already got, what its last tool returned), like a deterministic model, and
//! each answer is the protocol's real event stream with tool calls for the CLI's own tools
//! (Write/Edit/Bash for Claude Code; apply_patch/exec_command for Codex;
//! WriteFile/StrReplaceFile/Shell for Kimi).
//!
//! Every request body is kept for assertions (what reached the model: prompt, tool results,
//! leaked host context). Shapes as Claude Code 2.1.332, codex-cli 0.171.0 and kimi-cli 1.51.0
//! send and accept them (docs/agents.md).
#![allow(dead_code)]

use std::sync::{Arc, Mutex};

use serde_json::{Value, json};
use wiremock::matchers::{header, method, path};
use wiremock::{Mock, MockServer, Request, Respond, ResponseTemplate};

/// One model turn.
#[derive(Clone, Debug)]
pub enum Step {
    /// Create (or replace) a file with the CLI's file tool.
    Write { path: String, content: String },
    /// Replace one whole line of a file with the CLI's edit tool.
    Edit {
        path: String,
        old: String,
        new: String,
    },
    /// Read a file with the CLI's read tool (Codex has none: it runs `cat`).
    Read(String),
    /// Run a command with the CLI's shell tool.
    Shell(String),
    /// Answer in text and stop.
    Say(String),
}

/// What the script sees of the conversation so far.
pub struct Turn<'a> {
    /// Answers the model already gave in this conversation.
    pub n: usize,
    /// The text of the last tool result the CLI sent back ("" before the first).
    pub last_output: String,
    /// The whole request, as sent.
    pub body: &'a Value,
}

pub type Script = Arc<dyn Fn(&Turn) -> Step + Send + Sync>;

/// Tokens every answer reports.
pub const INPUT_TOKENS: u64 = 1000;
pub const CACHED_TOKENS: u64 = 200;
pub const OUTPUT_TOKENS: u64 = 50;

pub struct Provider {
    pub server: MockServer,
    requests: Arc<Mutex<Vec<Value>>>,
}

impl Provider {
    pub fn uri(&self) -> String {
        self.server.uri()
    }

    /// Every model request body received so far, in order.
    pub fn bodies(&self) -> Vec<Value> {
        self.requests.lock().unwrap().clone()
    }

    /// Every request of any kind: (method, path).
    pub async fn all_requests(&self) -> Vec<(String, String)> {
        self.server
            .received_requests()
            .await
            .unwrap_or_default()
            .iter()
            .map(|r| (r.method.to_string(), r.url.path().to_string()))
            .collect()
    }

    /// The Anthropic Messages API (`POST /v1/messages`, streaming) for requests carrying
    /// `x-api-key: api_key`; `HEAD /` answers 200 as the real API does.
    pub async fn anthropic(api_key: &str, script: Script) -> Provider {
        let server = MockServer::start().await;
        let requests = Arc::new(Mutex::new(Vec::new()));
        Mock::given(method("HEAD"))
            .respond_with(ResponseTemplate::new(200))
            .mount(&server)
            .await;
        Mock::given(method("POST"))
            .and(path("/v1/messages/count_tokens"))
            .respond_with(ResponseTemplate::new(200).set_body_json(json!({"input_tokens": 1000})))
            .mount(&server)
            .await;
        Mock::given(method("POST"))
            .and(path("/v1/messages"))
            .and(header("x-api-key", api_key))
            .respond_with(Anthropic {
                script,
                requests: requests.clone(),
            })
            .mount(&server)
            .await;
        Provider { server, requests }
    }

    /// The OpenAI Responses API (`POST /v1/responses`, streaming) for requests carrying
    /// `Authorization: Bearer api_key`. The WebSocket upgrade Codex tries first is refused with
    /// 426, which makes it fall back to HTTPS at once.
    pub async fn openai_responses(api_key: &str, script: Script) -> Provider {
        let server = MockServer::start().await;
        let requests = Arc::new(Mutex::new(Vec::new()));
        Mock::given(method("GET"))
            .and(path("/v1/responses"))
            .respond_with(ResponseTemplate::new(426).set_body_string("use HTTPS"))
            .mount(&server)
            .await;
        Mock::given(method("POST"))
            .and(path("/v1/responses"))
            .and(header(
                "authorization",
                format!("Bearer {api_key}").as_str(),
            ))
            .respond_with(Responses {
                script,
                requests: requests.clone(),
            })
            .mount(&server)
            .await;
        Provider { server, requests }
    }
}

impl Provider {
    /// Streaming chat completions (`POST /v1/chat/completions`, `stream: true`, usage in the
    /// last chunk) for requests carrying `Authorization: Bearer api_key`.
    pub async fn openai_chat(api_key: &str, script: Script) -> Provider {
        let server = MockServer::start().await;
        let requests = Arc::new(Mutex::new(Vec::new()));
        Mock::given(method("POST"))
            .and(path("/v1/chat/completions"))
            .and(header(
                "authorization",
                format!("Bearer {api_key}").as_str(),
            ))
            .respond_with(Chat {
                script,
                requests: requests.clone(),
            })
            .mount(&server)
            .await;
        Provider { server, requests }
    }
}

fn sse(events: &[(&str, Value)]) -> ResponseTemplate {
    let mut body = String::new();
    for (name, data) in events {
        body.push_str(&format!("event: {name}\ndata: {data}\n\n"));
    }
    ResponseTemplate::new(200)
        .insert_header("cache-control", "no-cache")
        .set_body_raw(body.into_bytes(), "text/event-stream")
}

/// Text of a tool result: a string, or a list of text blocks.
fn text_of(v: &Value) -> String {
    match v {
        Value::String(s) => s.clone(),
        Value::Array(parts) => parts
            .iter()
            .filter_map(|p| p["text"].as_str())
            .collect::<Vec<_>>()
            .join("\n"),
        _ => String::new(),
    }
}

struct Anthropic {
    script: Script,
    requests: Arc<Mutex<Vec<Value>>>,
}

impl Respond for Anthropic {
    fn respond(&self, req: &Request) -> ResponseTemplate {
        let Ok(body) = req.body_json::<Value>() else {
            return ResponseTemplate::new(400).set_body_string("body is not JSON");
        };
        self.requests.lock().unwrap().push(body.clone());
        let messages = body["messages"].as_array().cloned().unwrap_or_default();
        let n = messages.iter().filter(|m| m["role"] == "assistant").count();
        let last_output = messages
            .iter()
            .rev()
            .filter(|m| m["role"] == "user")
            .flat_map(|m| m["content"].as_array().cloned().unwrap_or_default())
            .find(|b| b["type"] == "tool_result")
            .map(|b| text_of(&b["content"]))
            .unwrap_or_default();
        let step = (self.script)(&Turn {
            n,
            last_output,
            body: &body,
        });
        let tool = |name: &str, input: Value| {
            (
                json!({"type": "tool_use", "id": format!("toolu_{n}"), "name": name, "input": {}}),
                input.to_string(),
            )
        };
        let (block, payload, stop) = match step {
            Step::Write { path, content } => {
                let (b, p) = tool("Write", json!({"file_path": path, "content": content}));
                (b, p, "tool_use")
            }
            Step::Edit { path, old, new } => {
                let (b, p) = tool(
                    "Edit",
                    json!({"file_path": path, "old_string": old, "new_string": new}),
                );
                (b, p, "tool_use")
            }
            Step::Read(path) => {
                let (b, p) = tool("Read", json!({"file_path": path}));
                (b, p, "tool_use")
            }
            Step::Shell(command) => {
                let (b, p) = tool(
                    "Bash",
                    json!({"command": command, "description": "run the command"}),
                );
                (b, p, "tool_use")
            }
            Step::Say(text) => (json!({"type": "text", "text": ""}), text, "end_turn"),
        };
        let delta = if block["type"] == "text" {
            json!({"type": "text_delta", "text": payload})
        } else {
            json!({"type": "input_json_delta", "partial_json": payload})
        };
        let model = body["model"].clone();
        sse(&[
            (
                "message_start",
                json!({"type": "message_start", "message": {"id": format!("msg_{n}"),
                "type": "message", "role": "assistant", "model": model, "content": [],
                "stop_reason": null, "stop_sequence": null,
                "usage": {"input_tokens": INPUT_TOKENS, "output_tokens": 1}}}),
            ),
            (
                "content_block_start",
                json!({"type": "content_block_start", "index": 0, "content_block": block}),
            ),
            (
                "content_block_delta",
                json!({"type": "content_block_delta", "index": 0, "delta": delta}),
            ),
            (
                "content_block_stop",
                json!({"type": "content_block_stop", "index": 0}),
            ),
            (
                "message_delta",
                json!({"type": "message_delta", "delta": {"stop_reason": stop, "stop_sequence": null},
                "usage": {"output_tokens": OUTPUT_TOKENS}}),
            ),
            ("message_stop", json!({"type": "message_stop"})),
        ])
    }
}

struct Responses {
    script: Script,
    requests: Arc<Mutex<Vec<Value>>>,
}

/// A whole-file patch in apply_patch's grammar.
fn add_file_patch(path: &str, content: &str) -> String {
    let mut patch = format!("*** Begin Patch\n*** Add File: {path}\n");
    for line in content.lines() {
        patch.push('+');
        patch.push_str(line);
        patch.push('\n');
    }
    patch.push_str("*** End Patch\n");
    patch
}

impl Respond for Responses {
    fn respond(&self, req: &Request) -> ResponseTemplate {
        let Ok(body) = req.body_json::<Value>() else {
            return ResponseTemplate::new(400).set_body_string("body is not JSON");
        };
        self.requests.lock().unwrap().push(body.clone());
        let input = body["input"].as_array().cloned().unwrap_or_default();
        let n = input
            .iter()
            .filter(|i| {
                matches!(
                    i["type"].as_str(),
                    Some("function_call" | "custom_tool_call")
                ) || (i["type"] == "message" && i["role"] == "assistant")
            })
            .count();
        let last_output = input
            .iter()
            .rev()
            .find(|i| {
                matches!(
                    i["type"].as_str(),
                    Some("function_call_output" | "custom_tool_call_output")
                )
            })
            .map(|i| text_of(&i["output"]))
            .unwrap_or_default();
        let step = (self.script)(&Turn {
            n,
            last_output,
            body: &body,
        });
        let call_id = format!("call_{n}");
        let item = match step {
            Step::Write { path, content } => {
                json!({"type": "custom_tool_call", "id": format!("ctc_{n}"), "call_id": call_id,
                    "name": "apply_patch", "input": add_file_patch(&path, &content)})
            }
            Step::Edit { path, old, new } => {
                json!({"type": "custom_tool_call", "id": format!("ctc_{n}"), "call_id": call_id,
                "name": "apply_patch",
                "input": format!("*** Begin Patch\n*** Update File: {path}\n@@\n-{old}\n+{new}\n*** End Patch\n")})
            }
            Step::Shell(cmd) => {
                json!({"type": "function_call", "id": format!("fc_{n}"), "call_id": call_id,
                "name": "exec_command", "arguments": json!({"cmd": cmd}).to_string()})
            }
            Step::Read(path) => {
                json!({"type": "function_call", "id": format!("fc_{n}"), "call_id": call_id,
                "name": "exec_command", "arguments": json!({"cmd": format!("cat {path}")}).to_string()})
            }
            Step::Say(text) => {
                json!({"type": "message", "id": format!("msg_{n}"), "role": "assistant",
                "content": [{"type": "output_text", "text": text}]})
            }
        };
        let id = format!("resp_{n}");
        sse(&[
            (
                "response.created",
                json!({"type": "response.created", "response": {"id": id}}),
            ),
            (
                "response.output_item.added",
                json!({"type": "response.output_item.added", "output_index": 0, "item": item}),
            ),
            (
                "response.output_item.done",
                json!({"type": "response.output_item.done", "output_index": 0, "item": item}),
            ),
            (
                "response.completed",
                json!({"type": "response.completed", "response": {"id": id, "usage": {
                "input_tokens": INPUT_TOKENS,
                "input_tokens_details": {"cached_tokens": CACHED_TOKENS},
                "output_tokens": OUTPUT_TOKENS,
                "output_tokens_details": {"reasoning_tokens": 0},
                "total_tokens": INPUT_TOKENS + OUTPUT_TOKENS}}}),
            ),
        ])
    }
}

struct Chat {
    script: Script,
    requests: Arc<Mutex<Vec<Value>>>,
}

impl Respond for Chat {
    fn respond(&self, req: &Request) -> ResponseTemplate {
        let Ok(body) = req.body_json::<Value>() else {
            return ResponseTemplate::new(400).set_body_string("body is not JSON");
        };
        self.requests.lock().unwrap().push(body.clone());
        if body["stream"] != true {
            return ResponseTemplate::new(400).set_body_string("this server only streams");
        }
        let messages = body["messages"].as_array().cloned().unwrap_or_default();
        let n = messages.iter().filter(|m| m["role"] == "assistant").count();
        let last_output = messages
            .iter()
            .rev()
            .find(|m| m["role"] == "tool")
            .map(|m| text_of(&m["content"]))
            .unwrap_or_default();
        let step = (self.script)(&Turn {
            n,
            last_output,
            body: &body,
        });
        let call = |name: &str, args: Value| Some((name.to_string(), args.to_string()));
        let (tool, text) = match step {
            Step::Write { path, content } => (
                call("WriteFile", json!({"path": path, "content": content})),
                None,
            ),
            Step::Edit { path, old, new } => (
                call(
                    "StrReplaceFile",
                    json!({"path": path, "edit": {"old": old, "new": new}}),
                ),
                None,
            ),
            Step::Shell(command) => (call("Shell", json!({"command": command})), None),
            Step::Read(path) => (call("ReadFile", json!({"path": path})), None),
            Step::Say(text) => (None, Some(text)),
        };
        let model = body["model"].clone();
        let chunk = |delta: Value, finish: Value| {
            let mut c = json!({"id": format!("chatcmpl-{n}"), "object": "chat.completion.chunk",
                "created": 1, "model": model, "choices": [{"index": 0, "delta": delta,
                "finish_reason": finish}]});
            if !finish.is_null() {
                c["usage"] = json!({"prompt_tokens": INPUT_TOKENS,
                    "completion_tokens": OUTPUT_TOKENS,
                    "total_tokens": INPUT_TOKENS + OUTPUT_TOKENS});
            }
            format!("data: {c}\n\n")
        };
        let mut stream = String::new();
        match (tool, text) {
            (Some((name, args)), _) => {
                stream.push_str(&chunk(
                    json!({"role": "assistant", "content": null, "tool_calls": [{"index": 0,
                    "id": format!("call_{n}"), "type": "function",
                    "function": {"name": name, "arguments": ""}}]}),
                    Value::Null,
                ));
                stream.push_str(&chunk(
                    json!({"tool_calls": [{"index": 0, "function": {"arguments": args}}]}),
                    Value::Null,
                ));
                stream.push_str(&chunk(json!({}), json!("tool_calls")));
            }
            (None, text) => {
                stream.push_str(&chunk(
                    json!({"role": "assistant", "content": text.unwrap_or_default()}),
                    Value::Null,
                ));
                stream.push_str(&chunk(json!({}), json!("stop")));
            }
        }
        stream.push_str("data: [DONE]\n\n");
        ResponseTemplate::new(200).set_body_raw(stream.into_bytes(), "text/event-stream")
    }
}
