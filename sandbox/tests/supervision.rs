//! Running untrusted processes: hangs are killed with their whole group, floods are capped, both
//! streams are drained at once, `validate` is on PATH.

use crate::common;

use std::time::{Duration, Instant};

use common::{opts, sh, workspace};
use harch_sandbox::testing::process_gone as gone;

#[tokio::test]
async fn a_hang_is_killed_at_the_timeout_with_its_process_group() {
    let f = workspace();
    let mut cmd = f.ws.command("/bin/sh");
    cmd.args([
        "-c",
        "sleep 300 & echo $! > \"$TMPDIR/child.pid\"; trap '' TERM; sleep 300",
    ]);
    let started = Instant::now();
    let report = cmd
        .run(&opts(&f.ws, "hang", Duration::from_millis(700)))
        .await
        .unwrap();
    assert!(report.timed_out);
    assert_eq!(report.exit_code, None);
    assert!(started.elapsed() < Duration::from_secs(10));
    let pid: i32 = std::fs::read_to_string(f.ws.tmp().join("child.pid"))
        .unwrap()
        .trim()
        .parse()
        .unwrap();
    let deadline = Instant::now() + Duration::from_secs(3);
    while !gone(pid) && Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert!(gone(pid), "background child {pid} survived");
}

#[tokio::test]
async fn children_left_behind_after_a_clean_exit_are_killed() {
    let f = workspace();
    let (report, _, _) = sh(
        &f.ws,
        "sleep 300 > /dev/null 2>&1 & echo $! > \"$TMPDIR/child.pid\"",
    )
    .await;
    assert_eq!(report.exit_code, Some(0));
    let pid: i32 = std::fs::read_to_string(f.ws.tmp().join("child.pid"))
        .unwrap()
        .trim()
        .parse()
        .unwrap();
    assert!(gone(pid), "leftover child {pid} survived");
}

#[tokio::test]
async fn an_output_flood_is_capped_and_stopped() {
    let f = workspace();
    let mut cmd = f.ws.command("/bin/sh");
    cmd.args(["-c", "yes flood"]);
    let mut o = opts(&f.ws, "flood", Duration::from_secs(30));
    o.max_stdout_bytes = 1 << 20;
    let started = Instant::now();
    let report = cmd.run(&o).await.unwrap();
    assert!(report.output_capped);
    assert!(!report.timed_out);
    assert!(!report.success());
    assert_eq!(report.stdout_bytes, 1 << 20);
    assert_eq!(
        std::fs::metadata(&report.stdout_path).unwrap().len(),
        1 << 20
    );
    assert!(started.elapsed() < Duration::from_secs(10));
}

#[tokio::test]
async fn stdout_and_stderr_are_drained_concurrently() {
    let f = workspace();
    // 2 MiB on each stream, far beyond a pipe buffer: deadlocks unless both are read at once.
    let mut cmd = f.ws.command("/bin/sh");
    cmd.args([
        "-c",
        "head -c 2097152 /dev/zero | tr '\\0' e >&2; head -c 2097152 /dev/zero | tr '\\0' o",
    ]);
    let mut o = opts(&f.ws, "both", Duration::from_secs(20));
    o.max_stderr_bytes = 4 << 20;
    let report = cmd.run(&o).await.unwrap();
    assert!(report.success(), "{report:?}");
    let out = std::fs::read_to_string(&report.stdout_path).unwrap();
    let err = std::fs::read_to_string(&report.stderr_path).unwrap();
    assert_eq!(out.len(), 2 << 20);
    assert_eq!(err.len(), 2 << 20);
}

#[tokio::test]
async fn stdin_is_closed() {
    let f = workspace();
    let (report, out, _) = sh(&f.ws, "cat; echo eof").await;
    assert!(report.success());
    assert_eq!(out, "eof\n");
}

#[tokio::test]
async fn validate_is_on_path_and_calls_the_worker() {
    let f = workspace();
    let (report, out, _) = sh(&f.ws, "validate specs/models/m.yaml").await;
    assert!(report.success());
    let expected = format!(
        "fake-worker validate --json --specs {} specs/models/m.yaml\n",
        f.ws.specs_dir().display()
    );
    assert_eq!(out, expected);
}

#[tokio::test]
async fn a_missing_program_is_a_spawn_error() {
    let f = workspace();
    let cmd = f.ws.command("/nonexistent/agent");
    let err = cmd
        .run(&opts(&f.ws, "x", Duration::from_secs(1)))
        .await
        .unwrap_err();
    assert!(err.to_string().contains("/nonexistent/agent"), "{err}");
}
