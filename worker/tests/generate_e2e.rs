//! The generate stage end to end, through the real `harch-worker` binary: `enqueue --fresh` a
//! library model (its own spec hidden from the agent), `run --once`, and a valid spec at the
//! end, once per backend. The fake `claude`, `codex` and `kimi` under
//! tests/fixtures/agents/ print their CLIs' real output formats, write REAL spec YAML (the
//! library's llama.yaml with one wrong dim binding first) and call the REAL `validate` staged on
//! their PATH; the openai backend talks to a local OpenAI-compatible server (wiremock) that
//! scripts the same tool calls. Misbehaving agents: a hang, exit 0 without a spec, writes
//! outside the workspace, an output flood, a claim of success with an invalid spec.
//!
//! Needs the forward source of llama (scripts/fetch-transformers-src, or HARCH_TRANSFORMERS_SRC).
//! Tests that need Landlock skip without it unless HARCH_REQUIRE_LANDLOCK is set.

use std::path::Path;

use serde_json::{Value, json};

use crate::agent_env;

use agent_env::{Env, attempts, project_root, stage};

/// The job succeeded through verify with the spec the agent fixed on its second validate, after
/// a first attempt... and the accepted spec is the library's own text, which the agent never saw.
fn assert_generated_valid(env: &Env, rec: &Value) {
    assert_eq!(rec["state"], "succeeded", "{rec:#}");
    let generate = stage(rec, "generate");
    assert_eq!(generate["summary"]["valid"], true, "{generate:#}");
    assert_eq!(
        generate["summary"]["excluded_library_spec"],
        "specs/models/llama.yaml"
    );
    assert_eq!(stage(rec, "verify")["summary"]["valid"], true, "{rec:#}");
    let dir = env.job_dir(rec);
    let spec = std::fs::read_to_string(dir.join("generate/spec/models/llama.yaml")).unwrap();
    let library = std::fs::read_to_string(project_root().join("specs/models/llama.yaml")).unwrap();
    assert_eq!(spec, library);
    // The agent's workspace never held the library's llama spec.
    let examples = dir.join("work/generate/sandbox/workspace/specs/examples");
    assert!(examples.join("qwen3.yaml").is_file());
    assert!(!examples.join("llama.yaml").exists());
    let prompt = std::fs::read_to_string(dir.join("attempts/generate/1/prompt.md")).unwrap();
    assert!(
        !prompt.contains("model: llama\n"),
        "the hidden spec leaked into the prompt"
    );
    assert!(prompt.contains("model.layers.{0-31}.self_attn.k_proj.weight"));
}

/// The fake fixed the spec from validate's errors inside one run: one attempt, valid, with the
/// agent's usage recorded.
fn assert_fixed_in_one_attempt(rec: &Value) {
    let a = attempts(rec);
    assert_eq!(a.len(), 1, "{a:#?}");
    assert_eq!(a[0]["valid"], true);
    assert_eq!(a[0]["written"], true);
    assert!(a[0]["wall_ms"].as_u64().is_some());
    assert!(a[0]["prompt_bytes"].as_u64().unwrap() > 50_000);
}

#[test]
fn claude_writes_a_wrong_spec_reads_validate_and_fixes_it() {
    let env = Env::new("claude", "fix");
    let rec = env.job();
    assert_generated_valid(&env, &rec);
    assert_fixed_in_one_attempt(&rec);
    let a = &attempts(&rec)[0];
    assert_eq!(a["turns"], 5);
    assert_eq!(a["input_tokens"], 1500);
    assert_eq!(a["output_tokens"], 150);
    assert_eq!(a["cost_usd"], 0.0125);
    assert_eq!(stage(&rec, "generate")["usage"]["turns"], 5);
    // The agent really ran validate and saw the wrong binding first.
    let transcript = std::fs::read_to_string(
        env.job_dir(&rec)
            .join("attempts/generate/1/generate-1.claude.jsonl"),
    )
    .unwrap();
    assert!(transcript.contains(r#"\"valid\": false"#), "{transcript}");
    assert!(transcript.contains(r#"\"valid\": true"#), "{transcript}");
    // The agent saw its own key and nothing else of the worker's secrets, and ran as the
    // sandbox user when the worker is root.
    let home = env.job_dir(&rec).join("work/generate/sandbox/home");
    let agent_env = std::fs::read_to_string(home.join("env.txt")).unwrap();
    assert!(
        agent_env.contains("ANTHROPIC_API_KEY=sk-ant-test"),
        "{agent_env}"
    );
    for secret in ["GITHUB_TOKEN", "CODEX_API_KEY", "KIMI_API_KEY", "HARCH_"] {
        assert!(
            !agent_env.contains(secret),
            "{secret} reached the agent: {agent_env}"
        );
    }
    let uid: u32 = std::fs::read_to_string(home.join("uid.txt"))
        .unwrap()
        .trim()
        .parse()
        .unwrap();
    // SAFETY: geteuid has no preconditions.
    if unsafe { libc::geteuid() } == 0 {
        assert_ne!(uid, 0, "the agent ran as root");
    }
}

#[test]
fn codex_writes_a_wrong_spec_reads_validate_and_fixes_it() {
    let env = Env::new("codex", "fix");
    let rec = env.job();
    assert_generated_valid(&env, &rec);
    assert_fixed_in_one_attempt(&rec);
    assert_eq!(attempts(&rec)[0]["input_tokens"], 2400);
}

#[test]
fn kimi_writes_a_wrong_spec_reads_validate_and_fixes_it() {
    let env = Env::new("kimi", "fix");
    let rec = env.job();
    assert_generated_valid(&env, &rec);
    assert_fixed_in_one_attempt(&rec);
    assert_eq!(attempts(&rec)[0]["turns"], 5);
}

#[test]
fn a_claim_of_success_with_an_invalid_spec_is_not_accepted() {
    let env = Env::new("claude", "claim");
    let rec = env.job();
    assert_generated_valid(&env, &rec);
    let a = attempts(&rec);
    assert_eq!(a.len(), 2, "{a:#?}");
    assert_eq!(a[0]["claimed_success"], true);
    assert_eq!(a[0]["valid"], false);
    assert!(a[0]["errors"].as_u64().unwrap() > 0);
    // The retry prompt carries the worker's errors and says the claim was not accepted.
    let p2 =
        std::fs::read_to_string(env.job_dir(&rec).join("attempts/generate/2/prompt.md")).unwrap();
    assert!(
        p2.contains("(attempt 1) was rejected"),
        "{}",
        &p2[..2000.min(p2.len())]
    );
    assert!(p2.contains("k_proj"));
    assert!(p2.contains("reported success, but the worker's own validation did not accept"));
    assert_eq!(a[1]["valid"], true);
    assert_eq!(
        stage(&rec, "generate")["usage"]["turns"].as_u64().unwrap(),
        3 + 5
    );
}

#[test]
fn an_agent_that_writes_nothing_is_retried_and_then_fails_the_job_cleanly() {
    // Exit 0 with a claim and no spec: retried with a note; the fake behaves on the retry.
    let env = Env::new("claude", "noop");
    let rec = env.job();
    assert_generated_valid(&env, &rec);
    let a = attempts(&rec);
    assert_eq!(
        (a[0]["written"].clone(), a[0]["claimed_success"].clone()),
        (json!(false), json!(true))
    );
    let p2 =
        std::fs::read_to_string(env.job_dir(&rec).join("attempts/generate/2/prompt.md")).unwrap();
    assert!(p2.contains("Nothing was written at `specs/models/llama.yaml`."));

    // With a budget of one attempt the job fails permanently, saying why.
    let env = Env::new("claude", "noop").set("HARCH_AGENT_ATTEMPTS", "1");
    let rec = env.job();
    assert_eq!(rec["state"], "failed", "{rec:#}");
    assert_eq!(rec["failure"], "permanent");
    let err = rec["last_error"].as_str().unwrap();
    assert!(
        err.contains("no valid spec at specs/models/llama.yaml after 1 agent attempts"),
        "{err}"
    );
    assert!(err.contains("nothing written"), "{err}");
    assert_eq!(stage(&rec, "verify")["state"], "pending");
}

#[test]
fn a_hanging_agent_is_killed_at_its_timeout_and_the_job_fails_cleanly() {
    let env = Env::new("claude", "hang")
        .set("HARCH_AGENT_TIMEOUT_S", "2")
        .set("HARCH_AGENT_ATTEMPTS", "1");
    let started = std::time::Instant::now();
    let rec = env.job();
    assert!(started.elapsed().as_secs() < 60, "{:?}", started.elapsed());
    assert_eq!(rec["state"], "failed", "{rec:#}");
    let a = attempts(&rec);
    assert_eq!(a[0]["failure"], "timeout", "{a:#?}");
    let err = rec["last_error"].as_str().unwrap();
    assert!(err.contains("ended: timeout"), "{err}");
    // Its child was killed with it.
    let pid_file = env
        .job_dir(&rec)
        .join("work/generate/sandbox/home/child.pid");
    let pid = std::fs::read_to_string(pid_file).unwrap();
    assert!(
        !Path::new(&format!("/proc/{}", pid.trim())).exists(),
        "child {pid} survived"
    );
}

#[test]
fn a_hang_then_a_working_retry_succeeds() {
    let env = Env::new("claude", "hang").set("HARCH_AGENT_TIMEOUT_S", "2");
    let rec = env.job();
    assert_generated_valid(&env, &rec);
    let a = attempts(&rec);
    assert_eq!(a[0]["failure"], "timeout");
    let p2 =
        std::fs::read_to_string(env.job_dir(&rec).join("attempts/generate/2/prompt.md")).unwrap();
    assert!(p2.contains("stopped at its time limit"));
}

#[test]
fn an_output_flood_is_capped_and_the_retry_succeeds() {
    let env = Env::new("claude", "flood").set("HARCH_AGENT_MAX_OUTPUT_MIB", "1");
    let rec = env.job();
    assert_generated_valid(&env, &rec);
    let a = attempts(&rec);
    assert_eq!(a[0]["failure"], "output_limit", "{a:#?}");
    let log = env
        .job_dir(&rec)
        .join("attempts/generate/1/generate-1.claude.jsonl");
    assert_eq!(std::fs::metadata(log).unwrap().len(), 1 << 20);
}

#[test]
fn writes_outside_the_workspace_are_blocked() {
    if !harch_sandbox::testing::landlock_available() {
        return;
    }
    let env = Env::new("claude", "escape");
    let rec = env.job();
    assert_generated_valid(&env, &rec);
    let dir = env.job_dir(&rec);
    let transcript =
        std::fs::read_to_string(dir.join("attempts/generate/1/generate-1.claude.jsonl")).unwrap();
    assert!(!transcript.contains("wrote "), "{transcript}");
    assert_eq!(transcript.matches("blocked ").count(), 4, "{transcript}");
    assert!(!dir.join("work/generate/sandbox/escape.txt").exists());
    assert!(!dir.join("work/generate/escape.txt").exists());
    assert!(
        !dir.join("work/generate/sandbox/workspace/specs/components/library/evil.yaml")
            .exists()
    );
    let config =
        std::fs::read_to_string(dir.join("work/generate/sandbox/workspace/truth/config.json"))
            .unwrap();
    assert!(!config.contains("pwned"));
}

/// A scripted model behind a local OpenAI-compatible server: lists and reads the truth, writes
/// the library spec with the wrong kv-head binding, validates, fixes the binding the errors
/// point at, validates again, stops. Each answer is computed from the conversation it receives.
struct ScriptedModel {
    wrong: String,
    right: String,
}

impl wiremock::Respond for ScriptedModel {
    fn respond(&self, req: &wiremock::Request) -> wiremock::ResponseTemplate {
        let body: Value = req.body_json().unwrap();
        let msgs = body["messages"].as_array().cloned().unwrap_or_default();
        let first_user = msgs.iter().find(|m| m["role"] == "user");
        if !first_user.is_some_and(|m| {
            m["content"]
                .as_str()
                .unwrap_or("")
                .contains("# Task: write the harch spec of meta-llama/Llama-3.1-8B")
        }) {
            return wiremock::ResponseTemplate::new(400).set_body_string("no generate prompt");
        }
        let turn = msgs.iter().filter(|m| m["role"] == "assistant").count();
        let last_tool = msgs
            .iter()
            .rev()
            .find(|m| m["role"] == "tool")
            .and_then(|m| m["content"].as_str())
            .unwrap_or("")
            .to_string();
        let call = |id: &str, name: &str, args: Value| json!({"id": id, "type": "function", "function": {"name": name, "arguments": args.to_string()}});
        let (message, finish) = match turn {
            0 => (
                vec![
                    call("a", "list_files", json!({"path": "truth"})),
                    call("b", "read_file", json!({"path": "truth/config.json"})),
                ],
                "tool_calls",
            ),
            1 => (
                vec![call(
                    "c",
                    "write_file",
                    json!({"path": "specs/models/llama.yaml", "content": self.wrong}),
                )],
                "tool_calls",
            ),
            2 | 4 => (vec![call("v", "run_validate", json!({}))], "tool_calls"),
            3 => {
                let text = if last_tool.contains("k_proj") {
                    &self.right
                } else {
                    &self.wrong
                };
                (
                    vec![call(
                        "d",
                        "write_file",
                        json!({"path": "specs/models/llama.yaml", "content": text}),
                    )],
                    "tool_calls",
                )
            }
            _ => (Vec::new(), "stop"),
        };
        let msg = if message.is_empty() {
            json!({"role": "assistant", "content": "validate prints valid: true"})
        } else {
            json!({"role": "assistant", "content": null, "tool_calls": message})
        };
        wiremock::ResponseTemplate::new(200).set_body_json(json!({
            "id": "c", "object": "chat.completion", "model": "scripted",
            "choices": [{"index": 0, "message": msg, "finish_reason": finish}],
            "usage": {"prompt_tokens": 1000, "completion_tokens": 50, "total_tokens": 1050}
        }))
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn openai_compatible_server_scripts_the_tool_calls_to_a_valid_spec() {
    use wiremock::matchers::{header, method, path};
    let right = std::fs::read_to_string(project_root().join("specs/models/llama.yaml")).unwrap();
    let wrong = right.replace(
        "  n_kv_heads: config.num_key_value_heads\n",
        "  n_kv_heads: config.num_attention_heads\n",
    );
    assert_ne!(wrong, right);
    let server = wiremock::MockServer::start().await;
    wiremock::Mock::given(method("POST"))
        .and(path("/v1/chat/completions"))
        .and(header("authorization", "Bearer sk-openai-test"))
        .respond_with(ScriptedModel { wrong, right })
        .mount(&server)
        .await;
    let env = Env::new("openai", "fix")
        .set("HARCH_OPENAI_BASE_URL", &format!("{}/v1", server.uri()))
        .set("HARCH_OPENAI_MODEL", "scripted")
        .set("OPENAI_API_KEY", "sk-openai-test");
    let (env, rec) = tokio::task::spawn_blocking(move || {
        let rec = env.job();
        (env, rec)
    })
    .await
    .unwrap();
    assert_generated_valid(&env, &rec);
    assert_fixed_in_one_attempt(&rec);
    let a = &attempts(&rec)[0];
    assert_eq!(a["backend"], "openai");
    assert_eq!(a["turns"], 6);
    assert_eq!(a["input_tokens"], 6000);
    // The loop's own validate call saw the wrong binding, then the fixed one.
    let transcript = std::fs::read_to_string(
        env.job_dir(&rec)
            .join("attempts/generate/1/generate-1.openai.jsonl"),
    )
    .unwrap();
    assert!(transcript.contains(r#"\"valid\": false"#), "{transcript}");
    assert!(transcript.contains(r#"\"valid\": true"#));
}
