//! The review and fix stages end to end, through the real `harch-worker` binary: a generate job
//! runs fetch → generate → verify → review → fix → publish (a dry run without `[publish]`).
//! The fake `claude`, `codex` and `kimi` under tests/fixtures/agents/ (model.sh) write REAL
//! review reports whose evidence cites llama's real config, checkpoint and forward source (line
//! numbers found in the staged file), and a fix agent that edits the spec and calls the REAL
//! `validate`; the openai backend reviews through a local OpenAI-compatible server (wiremock).
//! Every verdict is the worker's checker's, never the agent's.
//!
//! Needs the forward source of llama (scripts/fetch-transformers-src, or HARCH_TRANSFORMERS_SRC).
//! Tests that need Landlock skip without it unless HARCH_REQUIRE_LANDLOCK is set.

use serde_json::{Value, json};

use crate::agent_env;

use agent_env::{Env, stage, stage_attempts};

const ALL: &str = "fetch,generate,verify,review,fix,publish";

fn read(env: &Env, rec: &Value, rel: &str) -> String {
    std::fs::read_to_string(env.job_dir(rec).join(rel)).unwrap_or_else(|e| panic!("{rel}: {e}"))
}

/// The job went through every stage, publish as a dry run.
fn assert_succeeded(rec: &Value) {
    assert_eq!(rec["state"], "succeeded", "{rec:#}");
    for s in ALL.split(',') {
        assert_eq!(stage(rec, s)["state"], "done", "{s}: {rec:#}");
    }
    assert_eq!(stage(rec, "publish")["summary"]["mode"], "dry-run");
}

#[test]
fn a_malformed_report_goes_back_to_the_agent_and_a_true_pass_is_recorded() {
    let env = Env::new("claude", "review-malformed");
    let rec = env.job_through(ALL, true);
    assert_succeeded(&rec);
    let review = &stage(&rec, "review")["summary"];
    assert_eq!(review["recorded"], "PASS", "{review:#}");
    assert_eq!(
        review["rows"],
        json!({"verified": 2, "unverified": 0, "contradicted": 0})
    );
    assert_eq!(review["claims_holding"], review["claims"]);
    // The first report's verdict was not PASS or NO_PASS: a located error, re-prompted.
    let runs = stage_attempts(&rec, "review");
    assert_eq!(runs.len(), 2, "{runs:#?}");
    assert_eq!(runs[0]["valid"], false);
    assert_eq!(runs[1]["valid"], true);
    let p2 = read(&env, &rec, "attempts/review/2/prompt.md");
    assert!(p2.contains("## Your previous report was malformed (attempt 1)"));
    assert!(
        p2.contains("review/review.yaml:1:10"),
        "the error is located"
    );
    // The prompt carries the grammar and the staged source with its line count.
    let lines = std::fs::read_to_string(
        env.job_dir(&rec)
            .join("work/review/sandbox/workspace/truth/source/modeling_llama.py"),
    )
    .unwrap()
    .lines()
    .count();
    assert!(p2.contains(harch_review::GRAMMAR));
    assert!(p2.contains(&format!(
        "- `truth/source/modeling_llama.py` ({lines} lines)"
    )));
    // A PASS needs no fix; publish opens the generated spec, not as a draft for the review.
    assert_eq!(stage(&rec, "fix")["summary"]["needed"], false);
    assert!(stage_attempts(&rec, "fix").is_empty());
    let publish = &stage(&rec, "publish")["summary"];
    assert_eq!(publish["spec_origin"], "generate");
    assert!(
        publish["labels"]
            .as_array()
            .unwrap()
            .contains(&json!("harch:review-pass")),
        "{publish:#}"
    );
    // Usage of every agent stage is in the record, and the reviewed spec was read-only.
    assert!(stage(&rec, "review")["usage"]["turns"].as_u64().unwrap() > 0);
    assert!(
        env.job_dir(&rec)
            .join("work/review/sandbox/workspace/specs/reviewed/models/llama.yaml")
            .is_file()
    );
}

#[test]
fn a_pass_with_fabricated_evidence_is_recorded_no_pass_and_contradicted() {
    let env = Env::new("codex", "review-fabricated");
    let rec = env.job_through(ALL, true);
    assert_succeeded(&rec);
    let checked: Value = serde_json::from_str(&read(&env, &rec, "review/checked.json")).unwrap();
    assert_eq!(checked["said"], "PASS");
    assert_eq!(checked["recorded"], "NO_PASS", "{checked:#}");
    let row = &checked["mapping"][0];
    assert_eq!(row["standing"], "contradicted");
    let claims = row["claims"].as_array().unwrap();
    assert!(claims.iter().all(|c| c["holds"] == false), "{claims:#?}");
    assert!(
        claims[0]["truth"].as_str().unwrap().contains("32"),
        "{claims:#?}"
    );
    // Nothing it said may be acted on: no fix agent ran, the review ran again and held.
    let fix = &stage(&rec, "fix")["summary"];
    assert_eq!(fix["rounds"][0]["actionable"], 0, "{fix:#}");
    assert!(stage_attempts(&rec, "fix").is_empty());
    let review = &stage(&rec, "review")["summary"];
    assert_eq!(review["history"][0]["recorded"], "NO_PASS");
    assert_eq!(review["history"][1]["recorded"], "PASS");
    assert_eq!(review["recorded"], "PASS");
    let p = read(&env, &rec, "attempts/review/2/prompt.md");
    assert!(
        p.contains("false: `cfg: num_hidden_layers = 40`"),
        "the re-review is told"
    );
}

#[test]
fn a_verified_defect_is_fixed_validated_and_reviewed_again() {
    let env = Env::new("kimi", "review-defect");
    let rec = env.job_through(ALL, true);
    assert_succeeded(&rec);
    let first: Value = serde_json::from_str(&read(&env, &rec, "review/checked.json")).unwrap();
    assert_eq!(first["recorded"], "NO_PASS");
    assert_eq!(first["defects"][0]["standing"], "verified", "{first:#}");
    // The fix agent got the verified fix with its checked evidence.
    let prompt = read(&env, &rec, "attempts/fix/1/prompt.md");
    assert!(prompt.contains("Fix: call the MLP SwiGLU in the summary"));
    assert!(prompt.contains("- cfg: hidden_act = silu"));
    // Its spec was validated by the worker, kept, re-reviewed PASS and published.
    let runs = stage_attempts(&rec, "fix");
    assert_eq!(runs.len(), 1, "{runs:#?}");
    assert_eq!(runs[0]["valid"], true);
    let generated = read(&env, &rec, "generate/spec/models/llama.yaml");
    let fixed = read(&env, &rec, "fix/spec/models/llama.yaml");
    assert!(generated.contains("scaling, GeLU MLP"));
    assert!(fixed.contains("scaling, SwiGLU MLP"), "{fixed}");
    let fix = &stage(&rec, "fix")["summary"];
    assert_eq!(fix["fixed_in_round"], 1);
    assert_eq!(fix["recorded"], "PASS");
    let review = &stage(&rec, "review")["summary"];
    assert_eq!(review["recorded"], "PASS", "{review:#}");
    assert_eq!(review["review_round"], 1);
    let rereview: Value =
        serde_json::from_str(&read(&env, &rec, "fix/review-1/checked.json")).unwrap();
    assert_eq!(rereview["recorded"], "PASS");
    // The re-review saw the fixed spec.
    assert!(read(&env, &rec, "attempts/review/2/prompt.md").contains("scaling, SwiGLU MLP"));
    assert_eq!(stage(&rec, "publish")["summary"]["spec_origin"], "fix");
    assert!(stage(&rec, "fix")["usage"]["turns"].as_u64().unwrap() > 0);
    // `status` shows both stages' verdicts, counts and runs.
    let out = env.run(&["status", rec["id"].as_str().unwrap()]);
    let status = String::from_utf8(out.stdout).unwrap();
    for line in [
        "    review round 0: recorded NO_PASS; rows 2 verified, 0 unverified, 0 contradicted; defects 1 verified, 0 unverified, 0 contradicted\n",
        "    review round 1: recorded PASS; rows 2 verified, 0 unverified, 0 contradicted; defects 0 verified, 0 unverified, 0 contradicted\n",
        "recorded=PASS",
        "kept in attempts/fix/1/",
        "kept in attempts/review/2/",
    ] {
        assert!(status.contains(line), "{line}\n{status}");
    }
}

#[test]
fn a_fix_that_breaks_the_spec_is_never_kept_and_fails_the_job_after_the_budget() {
    let env = Env::new("claude", "fix-breaks").set("HARCH_AGENT_ATTEMPTS", "2");
    let rec = env.job_through(ALL, true);
    assert_eq!(rec["state"], "failed", "{rec:#}");
    assert_eq!(rec["failure"], "permanent");
    let err = rec["last_error"].as_str().unwrap();
    assert!(
        err.contains(
            "no valid fixed spec at specs/models/llama.yaml (review round 1) after 2 agent attempts"
        ),
        "{err}"
    );
    assert!(err.contains("invalid ("), "{err}");
    let runs = stage_attempts(&rec, "fix");
    assert_eq!(runs.len(), 2, "{runs:#?}");
    for r in &runs {
        assert_eq!(r["claimed_success"], true);
        assert_eq!(r["valid"], false);
    }
    // The retry was told why; nothing of the broken spec became an artifact.
    let p2 = read(&env, &rec, "attempts/fix/2/prompt.md");
    assert!(p2.contains("## Your previous attempt did not validate (attempt 1)"));
    assert!(!env.job_dir(&rec).join("fix").exists());
    assert_eq!(stage(&rec, "publish")["state"], "pending");
}

#[test]
fn an_unverified_suggestion_never_reaches_the_fix_prompt() {
    let env = Env::new("codex", "review-unverified");
    let rec = env.job_through(ALL, true);
    assert_succeeded(&rec);
    let first: Value = serde_json::from_str(&read(&env, &rec, "review/checked.json")).unwrap();
    let standings: Vec<&Value> = first["defects"]
        .as_array()
        .unwrap()
        .iter()
        .map(|d| &d["standing"])
        .collect();
    assert_eq!(standings, [&json!("verified"), &json!("unverified")]);
    let report = read(&env, &rec, "review/review.yaml");
    assert!(report.contains("UNVERIFIED-SUGGESTION"));
    let prompt = read(&env, &rec, "attempts/fix/1/prompt.md");
    assert!(prompt.contains("Fix: call the MLP SwiGLU in the summary"));
    assert!(prompt.contains("Unverified finding"));
    assert!(prompt.contains("the rope theta may be wrong"));
    assert!(!prompt.contains("UNVERIFIED-SUGGESTION"), "{prompt}");
    assert!(!prompt.contains("123456"));
}

/// A scripted reviewer behind a local OpenAI-compatible server: reads the staged source, finds
/// the MLP's line in what the read returned, and writes a true report through the loop's
/// write_file tool.
struct ScriptedReviewer;

impl wiremock::Respond for ScriptedReviewer {
    fn respond(&self, req: &wiremock::Request) -> wiremock::ResponseTemplate {
        let body: Value = req.body_json().unwrap();
        let msgs = body["messages"].as_array().cloned().unwrap_or_default();
        let prompt = msgs
            .iter()
            .find(|m| m["role"] == "user")
            .and_then(|m| m["content"].as_str())
            .unwrap_or("")
            .to_string();
        if !prompt.starts_with("# Task: review") {
            return wiremock::ResponseTemplate::new(400).set_body_string("no review prompt");
        }
        let turn = msgs.iter().filter(|m| m["role"] == "assistant").count();
        let call = |id: &str, name: &str, args: Value| json!({"id": id, "type": "function", "function": {"name": name, "arguments": args.to_string()}});
        let message = match turn {
            0 => json!({"role": "assistant", "content": null, "tool_calls": [
                call("a", "read_file", json!({"path": "truth/source/modeling_llama.py"}))]}),
            1 => {
                let source = msgs
                    .iter()
                    .rev()
                    .find(|m| m["role"] == "tool")
                    .and_then(|m| m["content"].as_str())
                    .unwrap_or("");
                let down =
                    "down_proj = self.down_proj(self.act_fn(self.gate_proj(x)) * self.up_proj(x))";
                let line = source
                    .lines()
                    .position(|l| l.contains(down))
                    .map_or(0, |i| i + 1);
                let ffn = prompt
                    .lines()
                    .find(|l| l.starts_with("layers") && l.contains(".ffn"))
                    .map(|l| format!("{}.ffn", l.split(".ffn").next().unwrap()))
                    .unwrap_or_default();
                let report = format!(
                    "verdict: PASS\nmapping:\n  - step: \"32 decoder layers\"\n    node: layers\n    status: consistent\n    evidence:\n      - \"count: model.layers = 32\"\n  - step: \"SwiGLU MLP\"\n    node: \"{ffn}\"\n    status: consistent\n    evidence:\n      - 'src: modeling_llama.py:{line} \"{down}\"'\n      - \"cfg: hidden_act = silu\"\ndefects: []\n"
                );
                json!({"role": "assistant", "content": null, "tool_calls": [
                    call("b", "write_file", json!({"path": "review/review.yaml", "content": report}))]})
            }
            _ => json!({"role": "assistant", "content": "The review is written."}),
        };
        let finish = if turn < 2 { "tool_calls" } else { "stop" };
        wiremock::ResponseTemplate::new(200).set_body_json(json!({
            "id": "c", "object": "chat.completion", "model": "scripted",
            "choices": [{"index": 0, "message": message, "finish_reason": finish}],
            "usage": {"prompt_tokens": 1000, "completion_tokens": 50, "total_tokens": 1050}
        }))
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn openai_compatible_reviewer_passes_the_library_spec() {
    use wiremock::matchers::{method, path};
    let server = wiremock::MockServer::start().await;
    wiremock::Mock::given(method("POST"))
        .and(path("/v1/chat/completions"))
        .respond_with(ScriptedReviewer)
        .mount(&server)
        .await;
    let env = Env::new("openai", "review-pass")
        .set("HARCH_OPENAI_BASE_URL", &format!("{}/v1", server.uri()))
        .set("HARCH_OPENAI_MODEL", "scripted")
        .set("OPENAI_API_KEY", "sk-openai-test");
    // No generate: the review takes the library spec serving the model.
    let (env, rec) = tokio::task::spawn_blocking(move || {
        let rec = env.job_through("fetch,verify,review,fix,publish", false);
        (env, rec)
    })
    .await
    .unwrap();
    assert_eq!(rec["state"], "succeeded", "{rec:#}");
    let review = &stage(&rec, "review")["summary"];
    assert_eq!(review["recorded"], "PASS", "{review:#}");
    assert_eq!(review["spec"], "specs/models/llama.yaml");
    let runs = stage_attempts(&rec, "review");
    assert_eq!(runs.len(), 1);
    assert_eq!(runs[0]["backend"], "openai");
    assert_eq!(runs[0]["input_tokens"], 3000);
    assert_eq!(stage(&rec, "fix")["summary"]["needed"], false);
    assert_eq!(stage(&rec, "publish")["summary"]["spec_origin"], "library");
    let _ = env;
}
