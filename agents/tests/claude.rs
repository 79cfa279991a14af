//! The claude backend against a fake `claude` that speaks stream-json and edits the workspace.

use crate::common;

use std::path::PathBuf;

use common::*;
use harch_agents::{AgentBackend, AgentError, AgentRequest, ClaudeBackend, FailureKind, Usage};
use harch_sandbox::testing::landlock_available;

async fn run(scenario: &str) -> (Fixture, harch_agents::AgentOutcome) {
    let f = workspace();
    let prompt = format!("Write the spec for tiny.\nSCENARIO: {scenario}\n");
    let outcome = run_in(&f, &prompt).await;
    (f, outcome)
}

async fn run_in(f: &Fixture, prompt: &str) -> harch_agents::AgentOutcome {
    let backend = ClaudeBackend::new(fixture("claude"), &credentials());
    let limits = limits();
    let req = AgentRequest {
        prompt,
        workspace: &f.ws,
        limits: &limits,
        model: Some("claude-test"),
        label: "generate-1",
    };
    backend.run(&req).await.unwrap()
}

#[tokio::test]
async fn writes_a_wrong_spec_fixes_it_from_validate_and_reports_usage() {
    let (f, o) = run("normal").await;
    assert_eq!(o.failure, None, "{o:?}");
    assert!(o.claimed_success);
    assert_eq!(o.exit_code, Some(0));
    assert_eq!(o.turns, Some(5));
    assert_eq!(o.cost_usd, Some(0.0123));
    assert_eq!(
        o.usage,
        Some(Usage {
            input_tokens: 1500,
            output_tokens: 150,
            cached_input_tokens: 300
        })
    );
    assert_eq!(
        o.files_changed,
        vec![PathBuf::from("specs/models/tiny.yaml")]
    );
    assert_eq!(spec_text(&f.ws), "model: tiny\nattention: gqa_attention\n");
    assert_eq!(
        o.final_message.as_deref(),
        Some("validate reports valid: true")
    );
    let transcript = std::fs::read_to_string(&o.transcript).unwrap();
    assert!(transcript.contains("\"type\":\"result\""));
    assert!(
        transcript.contains("W001"),
        "validate's errors reached the agent"
    );
}

#[tokio::test]
async fn gets_only_its_own_credentials_and_a_private_config_dir() {
    let (f, _) = run("noop").await;
    let env = agent_env(&f.ws);
    assert!(env.contains("ANTHROPIC_API_KEY=sk-ant-test"));
    for foreign in [
        "GITHUB_TOKEN",
        "GH_TOKEN",
        "OPENAI_API_KEY",
        "CODEX_API_KEY",
        "KIMI_API_KEY",
        "ghp_",
    ] {
        assert!(!env.contains(foreign), "{foreign} leaked into {env}");
    }
    let config = f.ws.home().join(".claude");
    assert!(env.contains(&format!("CLAUDE_CONFIG_DIR={}", config.display())));
    assert!(config.is_dir());
    assert!(env.contains(&format!("HOME={}", f.ws.home().display())));
    // The host's CLAUDE.md files and git status stay out (proven against the real CLI in
    // worker/tests/real_clis.rs).
    for switch in [
        "CLAUDE_CODE_DISABLE_CLAUDE_MDS=1",
        "CLAUDE_CODE_DISABLE_GIT_INSTRUCTIONS=1",
        "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC=1",
    ] {
        assert!(env.contains(switch), "{switch} missing from {env}");
    }
}

#[tokio::test]
async fn no_settings_are_loaded_only_its_tools_exist_and_the_cost_cap_is_passed() {
    let f = workspace();
    let backend = ClaudeBackend::new(fixture("claude"), &credentials());
    let mut limits = limits();
    limits.max_cost_usd = Some(1.25);
    let req = AgentRequest {
        prompt: "Write the spec for tiny.\nSCENARIO: noop\n",
        workspace: &f.ws,
        limits: &limits,
        model: None,
        label: "generate-1",
    };
    backend.run(&req).await.unwrap();
    let args = std::fs::read_to_string(f.ws.home().join("args.txt")).unwrap();
    let args: Vec<&str> = args.lines().collect();
    let after = |flag: &str| {
        let i = args
            .iter()
            .position(|a| *a == flag)
            .unwrap_or_else(|| panic!("{flag} missing: {args:?}"));
        args[i + 1]
    };
    assert_eq!(after("--setting-sources"), "");
    assert_eq!(after("--tools"), "Read,Write,Edit,Glob,Grep,Bash");
    let allowed = after("--allowedTools");
    assert!(
        !allowed.contains("LS") && !allowed.contains("MultiEdit"),
        "{allowed}"
    );
    assert_eq!(after("--max-budget-usd"), "1.2500");
    assert!(!args.contains(&"--model"));
}

#[tokio::test]
async fn exit_zero_without_writing_anything_is_visible() {
    let (_, o) = run("noop").await;
    assert!(o.claimed_success);
    assert!(o.wrote_nothing());
    assert_eq!(o.failure, None);
}

#[tokio::test]
async fn a_claim_of_success_over_an_invalid_spec_is_recorded_not_believed() {
    let (f, o) = run("claim").await;
    assert!(o.claimed_success);
    assert_eq!(spec_text(&f.ws), "model: tiny\nattention: wrong\n");
    // The worker's own check disagrees with the claim.
    let status = std::process::Command::new(f.ws.bin_dir().join("validate"))
        .current_dir(f.ws.root())
        .output()
        .unwrap();
    assert!(!status.status.success());
    assert!(String::from_utf8_lossy(&status.stdout).contains("\"valid\":false"));
}

#[tokio::test]
async fn a_hang_is_killed_at_the_timeout_with_its_children() {
    let f = workspace();
    let backend = ClaudeBackend::new(fixture("claude"), &credentials());
    let mut limits = limits();
    limits.wall_time = std::time::Duration::from_millis(800);
    let req = AgentRequest {
        prompt: "SCENARIO: hang",
        workspace: &f.ws,
        limits: &limits,
        model: None,
        label: "hang",
    };
    let started = std::time::Instant::now();
    let o = backend.run(&req).await.unwrap();
    assert!(started.elapsed() < std::time::Duration::from_secs(5));
    assert_eq!(
        o.failure.as_ref().map(|f| f.kind),
        Some(FailureKind::Timeout)
    );
    assert!(o.retryable());
    assert!(!o.claimed_success);
    assert!(
        wait_gone(child_pid(&f.ws)).await,
        "the agent's child survived"
    );
}

#[tokio::test]
async fn an_output_flood_is_capped() {
    let (_f, o) = run("flood").await;
    assert_eq!(
        o.failure.as_ref().map(|f| f.kind),
        Some(FailureKind::OutputLimit)
    );
    assert!(!o.retryable());
    assert_eq!(
        std::fs::metadata(&o.transcript).unwrap().len(),
        limits().max_output_bytes
    );
}

#[tokio::test]
async fn writes_outside_the_workspace_are_blocked() {
    if !landlock_available() {
        return;
    }
    let (f, o) = run("escape").await;
    let transcript = std::fs::read_to_string(&o.transcript).unwrap();
    assert!(!transcript.contains("wrote /"), "{transcript}");
    assert_eq!(transcript.matches("blocked /").count(), 3, "{transcript}");
    assert!(!f.ws.job_dir().join("escape.txt").exists());
    assert!(!f.tmp.path().join("escape.txt").exists());
    assert_eq!(
        std::fs::read_to_string(f.ws.truth_dir().join("config.json")).unwrap(),
        r#"{"hidden_size": 64}"#
    );
    assert!(o.claimed_success, "the agent still did its work inside");
}

#[tokio::test]
async fn a_stream_without_a_result_event_is_a_retryable_failure() {
    let (_, o) = run("noresult").await;
    assert_eq!(o.exit_code, Some(0));
    assert!(!o.claimed_success);
    assert_eq!(
        o.failure.as_ref().map(|f| f.kind),
        Some(FailureKind::NoResult)
    );
    assert!(o.retryable());
}

#[tokio::test]
async fn rate_limits_are_retryable_and_max_turns_is_not() {
    let (_, o) = run("ratelimit").await;
    assert_eq!(
        o.failure.as_ref().map(|f| f.kind),
        Some(FailureKind::RateLimited)
    );
    assert!(o.retryable());
    let (_, o) = run("maxturns").await;
    assert_eq!(
        o.failure.as_ref().map(|f| f.kind),
        Some(FailureKind::MaxTurns)
    );
    assert_eq!(o.turns, Some(12));
    assert!(!o.retryable());
}

#[tokio::test]
async fn a_prompt_too_long_for_argv_goes_through_a_file() {
    let f = workspace();
    let prompt = format!("SCENARIO: noop\n{}", "tensor list line\n".repeat(12_000));
    assert!(prompt.len() > 128 * 1024);
    let o = run_in(&f, &prompt).await;
    assert_eq!(o.failure, None, "{o:?}");
    assert_eq!(
        std::fs::read_to_string(f.ws.root().join("PROMPT.md")).unwrap(),
        prompt
    );
}

#[tokio::test]
async fn a_missing_binary_is_an_error_not_an_outcome() {
    let f = workspace();
    let backend = ClaudeBackend::new("/nonexistent/claude", &credentials());
    let limits = limits();
    let req = AgentRequest {
        prompt: "x",
        workspace: &f.ws,
        limits: &limits,
        model: None,
        label: "g",
    };
    let err = backend.run(&req).await.unwrap_err();
    assert!(matches!(err, AgentError::Sandbox(_)), "{err}");
    assert!(err.to_string().contains("/nonexistent/claude"));
}
