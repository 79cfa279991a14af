//! `harch-worker fetch` as a user runs it: environment variables, `--json` report, exit codes.

use crate::support;

use std::process::Command;
use std::time::Duration;

use support::mock_hub::{MockHub, SHA, requests};
use support::*;

fn fetch_cmd(endpoint: &str, args: &[&str]) -> Command {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_harch-worker"));
    cmd.arg("fetch")
        .args(args)
        .env("HF_ENDPOINT", endpoint)
        .env_remove("HF_TOKEN")
        .env_remove("HF_HUB_OFFLINE")
        .env("HARCH_CACHE_DIR", "/nonexistent/harch-test-cache-unused");
    cmd
}

#[tokio::test(flavor = "multi_thread")]
async fn json_report_counts_files_tensors_requests_and_bytes() {
    let (server, hub) = MockHub::start(Duration::ZERO).await;
    hub.add_repo("org/sharded", sharded_repo(3));
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("t");
    let output = fetch_cmd(
        &server.uri(),
        &[
            "org/sharded",
            "--json",
            "--no-cache",
            "--out",
            out.to_str().unwrap(),
        ],
    )
    .output()
    .unwrap();
    assert!(
        output.status.success(),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
    // Quiet: the report is the only output.
    assert!(
        output.stderr.is_empty(),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
    let report: serde_json::Value = serde_json::from_slice(&output.stdout).unwrap();
    assert_eq!(report["revision"], SHA);
    assert_eq!(report["tensors"], 6);
    assert_eq!(report["shards"], 3);
    assert_eq!(report["requests"], 8);
    assert_eq!(requests(&server).await.len(), 8);
    assert_eq!(
        report["bytes_transferred"],
        hub.sent_bytes.load(std::sync::atomic::Ordering::Relaxed)
    );
    let files: Vec<&str> = report["files"]
        .as_array()
        .unwrap()
        .iter()
        .map(|f| f.as_str().unwrap())
        .collect();
    assert!(files.contains(&"config.json"));
    assert!(files.contains(&"shards/model-00003-of-00003.safetensors.header.json"));
    assert!(files.contains(&"truth.json"));
    // The test config's model_type has no forward source anywhere: said in the report, not
    // left for validate to find.
    let warnings = report["warnings"].as_array().unwrap();
    assert_eq!(warnings.len(), 1, "{warnings:?}");
    assert!(
        warnings[0]
            .as_str()
            .unwrap()
            .contains("no forward source for model_type `harch_test_arch`")
    );
    assert_eq!(report["retries"], 0);
    let t = &report["timings"];
    for phase in ["resolve_ms", "index_ms", "headers_ms", "local_ms"] {
        assert!(t[phase].as_f64().is_some_and(|v| v >= 0.0), "{phase}: {t}");
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn text_report_shows_the_time_split_and_warnings() {
    let (server, hub) = MockHub::start(Duration::ZERO).await;
    hub.add_repo("org/sharded", sharded_repo(2));
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("t");
    let output = fetch_cmd(
        &server.uri(),
        &["org/sharded", "--no-cache", "--out", out.to_str().unwrap()],
    )
    .output()
    .unwrap();
    assert!(output.status.success());
    let stdout = String::from_utf8_lossy(&output.stdout);
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(stdout.contains("4 tensors"), "{stdout}");
    assert!(stdout.contains("time: resolve"), "{stdout}");
    assert!(stdout.contains("0 retries"), "{stdout}");
    assert!(
        stderr.contains("warning: no forward source for model_type `harch_test_arch`"),
        "{stderr}"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn exit_codes_tell_permanent_from_transient() {
    let (server, _hub) = MockHub::start(Duration::ZERO).await;
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("t");
    let missing = fetch_cmd(
        &server.uri(),
        &[
            "org/none",
            "--json",
            "--no-cache",
            "--out",
            out.to_str().unwrap(),
        ],
    )
    .output()
    .unwrap();
    assert_eq!(missing.status.code(), Some(1));
    let v: serde_json::Value = serde_json::from_slice(&missing.stdout).unwrap();
    assert_eq!(v["transient"], false);
    assert!(v["error"].as_str().unwrap().contains("no model `org/none`"));

    let down = fetch_cmd(
        "http://127.0.0.1:9",
        &[
            "org/m",
            "--no-cache",
            "--timeout",
            "2",
            "--out",
            out.to_str().unwrap(),
        ],
    )
    .output()
    .unwrap();
    // No Hub: exit 3 (try again later), the cause named, and the ways to work without it.
    assert_eq!(down.status.code(), Some(3));
    let said = String::from_utf8_lossy(&down.stderr);
    for part in [
        "cannot reach the Hub at http://127.0.0.1:9",
        "connection refused",
        "(2 requests)",
        "--offline",
        "HF_HUB_OFFLINE=1",
        "bundled snapshots",
    ] {
        assert!(said.contains(part), "{part}: {said}");
    }
    // The retry is said while it happens; -q keeps stderr to the error.
    assert!(said.contains("retrying GET http://127.0.0.1:9/"), "{said}");
    let quiet = fetch_cmd(
        "http://127.0.0.1:9",
        &["org/m", "-q", "--no-cache", "--out", out.to_str().unwrap()],
    )
    .output()
    .unwrap();
    assert_eq!(quiet.status.code(), Some(3));
    let said = String::from_utf8_lossy(&quiet.stderr);
    assert!(
        !said.contains("retrying") && said.contains("cannot reach the Hub"),
        "{said}"
    );
}

#[test]
fn hf_hub_offline_serves_the_snapshot() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("t");
    let output = fetch_cmd(
        "http://127.0.0.1:9",
        &["Qwen/Qwen3-8B", "--json", "--out", out.to_str().unwrap()],
    )
    .env("HF_HUB_OFFLINE", "1")
    .output()
    .unwrap();
    assert!(
        output.status.success(),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
    let report: serde_json::Value = serde_json::from_slice(&output.stdout).unwrap();
    assert_eq!(report["origin"], "snapshot");
    assert_eq!(report["tensors"], 399);
    assert_eq!(report["requests"], 0);
    assert!(out.join("inventory.txt").exists());
}
