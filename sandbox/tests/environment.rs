//! The child's environment is built from nothing: the worker's own GITHUB_TOKEN never reaches
//! it, and asking for it explicitly is refused. (Its own test binary: it sets process env.)

use crate::common;

#[tokio::test]
async fn the_environment_is_cleared_and_refuses_publishing_credentials() {
    // SAFETY: this binary has one test, so no other thread reads the environment meanwhile.
    unsafe {
        std::env::set_var("GITHUB_TOKEN", "ghp_secret");
        std::env::set_var("OPENAI_API_KEY", "sk-not-for-claude");
    }
    let f = common::workspace();
    let mut cmd = f.ws.command("/usr/bin/env");
    assert!(cmd.env("GITHUB_TOKEN", "x").is_err());
    assert!(cmd.env("GH_TOKEN", "x").is_err());
    cmd.env("ANTHROPIC_API_KEY", "sk-ant").unwrap();
    let report = cmd
        .run(&common::opts(
            &f.ws,
            "env",
            std::time::Duration::from_secs(10),
        ))
        .await
        .unwrap();
    let env = std::fs::read_to_string(report.stdout_path).unwrap();
    assert!(!env.contains("ghp_secret"), "{env}");
    assert!(!env.contains("GITHUB"), "{env}");
    assert!(!env.contains("OPENAI_API_KEY"), "{env}");
    assert!(env.contains("ANTHROPIC_API_KEY=sk-ant"));
    assert!(env.contains(&format!("HOME={}", f.ws.home().display())));
    assert!(
        env.lines()
            .any(|l| l.starts_with("PATH=") && l.contains(&*f.ws.bin_dir().to_string_lossy()))
    );
}
