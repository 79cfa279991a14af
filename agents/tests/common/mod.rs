//! Shared fixtures: a staged workspace whose `validate` is the fake harch-worker, and the fake
//! agent CLIs under tests/fixtures.
#![allow(dead_code)]

use std::path::{Path, PathBuf};
use std::time::Duration;

use harch_agents::{AgentLimits, Credentials};
use harch_sandbox::{StageSpec, StagedFile, ValidateCommand, Workspace};

pub fn fixture(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures")
        .join(name)
}

pub struct Fixture {
    pub tmp: tempfile::TempDir,
    pub ws: Workspace,
}

pub fn workspace() -> Fixture {
    let tmp = tempfile::tempdir().unwrap();
    let lib = tmp.path().join("library");
    std::fs::create_dir_all(&lib).unwrap();
    std::fs::write(lib.join("gqa_attention.yaml"), "component: gqa_attention\n").unwrap();
    let mut spec = StageSpec {
        truth_files: vec![StagedFile::bytes(
            "config.json",
            br#"{"hidden_size": 64}"#.to_vec(),
        )],
        library_components_dir: Some(lib),
        validate: Some(ValidateCommand {
            worker_bin: fixture("fake-harch-worker"),
            args: Vec::new(),
        }),
        ..StageSpec::default()
    };
    spec.fs_policy.require_landlock = harch_sandbox::testing::require_landlock();
    let ws = Workspace::create(&tmp.path().join("job"), &spec).unwrap();
    Fixture { tmp, ws }
}

pub fn limits() -> AgentLimits {
    AgentLimits {
        max_turns: 12,
        wall_time: Duration::from_secs(20),
        max_output_bytes: 1 << 20,
        max_tokens: 100_000,
        max_cost_usd: None,
        term_grace: Duration::from_millis(300),
    }
}

/// The worker's environment as the backends see it: every agent's key plus the publishing token.
pub fn credentials() -> Credentials {
    Credentials::from_pairs([
        ("ANTHROPIC_API_KEY", "sk-ant-test"),
        ("CODEX_API_KEY", "sk-codex-test"),
        ("KIMI_API_KEY", "sk-kimi-test"),
        ("OPENAI_API_KEY", "sk-openai-test"),
        ("GITHUB_TOKEN", "ghp_never"),
        ("GH_TOKEN", "ghp_never"),
    ])
}

/// The agent's environment as its fake wrote it to $HOME/env.txt.
pub fn agent_env(ws: &Workspace) -> String {
    std::fs::read_to_string(ws.home().join("env.txt")).unwrap()
}

pub fn spec_text(ws: &Workspace) -> String {
    std::fs::read_to_string(ws.specs_dir().join("models/tiny.yaml")).unwrap_or_default()
}

pub use harch_sandbox::testing::process_gone as gone;

pub async fn wait_gone(pid: i32) -> bool {
    for _ in 0..100 {
        if gone(pid) {
            return true;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    false
}

pub fn child_pid(ws: &Workspace) -> i32 {
    std::fs::read_to_string(ws.home().join("child.pid"))
        .unwrap()
        .trim()
        .parse()
        .unwrap()
}
