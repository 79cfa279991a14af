//! The codex and kimi backends against fake CLIs that emit their real JSONL formats.

use crate::common;

use std::path::PathBuf;

use common::*;
use harch_agents::{
    AgentBackend, AgentOutcome, AgentRequest, CodexBackend, FailureKind, KimiBackend, Usage,
};

async fn run(
    backend: &dyn AgentBackend,
    f: &Fixture,
    scenario: &str,
    wall_ms: u64,
) -> AgentOutcome {
    let prompt = format!("Write the spec for tiny.\nSCENARIO: {scenario}\n");
    let mut limits = limits();
    limits.wall_time = std::time::Duration::from_millis(wall_ms);
    let req = AgentRequest {
        prompt: &prompt,
        workspace: &f.ws,
        limits: &limits,
        model: Some("test-model"),
        label: "generate-1",
    };
    backend.run(&req).await.unwrap()
}

fn codex() -> CodexBackend {
    CodexBackend::new(fixture("codex"), &credentials())
}

fn kimi() -> KimiBackend {
    KimiBackend::new(fixture("kimi"), &credentials())
}

#[tokio::test]
async fn codex_gets_its_base_url_as_a_config_override_and_runs_without_its_own_sandbox() {
    let f = workspace();
    let creds = harch_agents::Credentials::from_pairs([
        ("CODEX_API_KEY", "sk-codex-test"),
        ("OPENAI_BASE_URL", "http://127.0.0.1:9/v1"),
    ]);
    let backend = CodexBackend::new(fixture("codex"), &creds);
    run(&backend, &f, "fix", 20_000).await;
    let args = std::fs::read_to_string(f.ws.home().join("args.txt")).unwrap();
    let args: Vec<&str> = args.lines().collect();
    let pairs: Vec<(&str, &str)> = args.windows(2).map(|w| (w[0], w[1])).collect();
    for want in [
        ("-s", "danger-full-access"),
        ("-c", "allow_login_shell=false"),
        ("-c", r#"openai_base_url="http://127.0.0.1:9/v1""#),
    ] {
        assert!(pairs.contains(&want), "{want:?} missing: {args:?}");
    }
    // Codex ignores the variable; it is not passed on.
    let env = agent_env(&f.ws);
    assert!(!env.contains("OPENAI_BASE_URL"), "{env}");
    assert!(
        f.ws.home().join(".codex").is_dir(),
        "CODEX_HOME exists before launch"
    );
}

#[tokio::test]
async fn codex_fixes_the_spec_and_reports_usage_from_turn_completed() {
    let f = workspace();
    let o = run(&codex(), &f, "normal", 20_000).await;
    assert_eq!(o.failure, None, "{o:?}");
    assert!(o.claimed_success);
    assert_eq!(
        o.usage,
        Some(Usage {
            input_tokens: 2400,
            output_tokens: 300,
            cached_input_tokens: 1200
        })
    );
    assert_eq!(o.cost_usd, None);
    assert_eq!(o.turns, Some(5));
    assert_eq!(o.final_message.as_deref(), Some("The spec validates."));
    assert_eq!(
        o.files_changed,
        vec![PathBuf::from("specs/models/tiny.yaml")]
    );
    assert_eq!(spec_text(&f.ws), "model: tiny\nattention: gqa_attention\n");
    let env = agent_env(&f.ws);
    assert!(env.contains("CODEX_API_KEY=sk-codex-test"));
    assert!(env.contains(&format!(
        "CODEX_HOME={}",
        f.ws.home().join(".codex").display()
    )));
    for foreign in [
        "GITHUB_TOKEN",
        "GH_TOKEN",
        "ANTHROPIC_API_KEY",
        "KIMI_API_KEY",
    ] {
        assert!(!env.contains(foreign), "{foreign} leaked");
    }
}

#[tokio::test]
async fn codex_turn_failed_with_429_is_a_retryable_rate_limit() {
    let f = workspace();
    let o = run(&codex(), &f, "ratelimit", 20_000).await;
    assert!(!o.claimed_success);
    assert_eq!(
        o.failure.as_ref().map(|f| f.kind),
        Some(FailureKind::RateLimited)
    );
    assert!(o.retryable());
}

#[tokio::test]
async fn codex_hang_is_killed_with_its_group() {
    let f = workspace();
    let o = run(&codex(), &f, "hang", 800).await;
    assert_eq!(
        o.failure.as_ref().map(|f| f.kind),
        Some(FailureKind::Timeout)
    );
    assert!(wait_gone(child_pid(&f.ws)).await);
}

#[tokio::test]
async fn kimi_fixes_the_spec_and_tolerates_plain_text_lines() {
    let f = workspace();
    let o = run(&kimi(), &f, "normal", 20_000).await;
    assert_eq!(o.failure, None, "{o:?}");
    assert!(o.claimed_success);
    assert_eq!(o.turns, Some(5));
    assert_eq!(o.usage, None, "kimi's stream carries no token counts");
    assert_eq!(
        o.final_message.as_deref(),
        Some("Spec written; validate reports valid.")
    );
    assert_eq!(spec_text(&f.ws), "model: tiny\nattention: gqa_attention\n");
    let env = agent_env(&f.ws);
    assert!(env.contains("KIMI_API_KEY=sk-kimi-test"));
    assert!(env.contains(&format!(
        "KIMI_SHARE_DIR={}",
        f.ws.home().join(".kimi").display()
    )));
    assert!(!env.contains("GITHUB_TOKEN") && !env.contains("OPENAI_API_KEY"));
}

#[tokio::test]
async fn kimi_exit_75_is_retryable_and_an_auth_error_is_not() {
    let f = workspace();
    let o = run(&kimi(), &f, "retry", 20_000).await;
    assert_eq!(o.exit_code, Some(75));
    assert_eq!(
        o.failure.as_ref().map(|f| f.kind),
        Some(FailureKind::Transient)
    );
    assert!(o.retryable());
    assert!(
        o.failure
            .as_ref()
            .unwrap()
            .message
            .contains("connection reset")
    );

    let o = run(&kimi(), &f, "autherror", 20_000).await;
    assert_eq!(o.exit_code, Some(1));
    assert_eq!(o.failure.as_ref().map(|f| f.kind), Some(FailureKind::Auth));
    assert!(!o.retryable());
}
