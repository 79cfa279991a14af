//! Operating harch as a newcomer does (issue 31): a dead agent endpoint fails its job once,
//! saying why and what to check; Ctrl-C stops `run` and `bench-queue` cleanly the first time
//! and at once the second; jobs are named by unique prefixes and `last`; one queue per user.
//!
//! Signals go to the child's process group, as a terminal's Ctrl-C does.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

use crate::agent_env;

use agent_env::{Env, attempts, stage};

const BIN: &str = env!("CARGO_BIN_EXE_harch-worker");

/// The binary with its queue in `dir` (an explicit data dir, a per-user one under `dir`),
/// nothing inherited from the caller's harch settings.
fn cmd(dir: &Path, args: &[&str]) -> Command {
    let mut c = Command::new(BIN);
    c.args(args).current_dir(dir);
    for (k, _) in std::env::vars() {
        if k.starts_with("HARCH_") || k == "RUST_LOG" {
            c.env_remove(k);
        }
    }
    c.env("HARCH_DATA_DIR", dir.join("data"))
        .env("XDG_DATA_HOME", dir.join("xdg"))
        .env("HARCH_HEARTBEAT_MS", "1000")
        .env("HARCH_INVENTORY_CACHE", "off")
        .env("NO_COLOR", "1");
    c
}

fn run(dir: &Path, args: &[&str]) -> (i32, String, String) {
    split(cmd(dir, args).output().unwrap())
}

fn split(out: Output) -> (i32, String, String) {
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into(),
        String::from_utf8_lossy(&out.stderr).into(),
    )
}

/// Starts `args` in a process group of its own, as a shell starts a foreground job.
fn spawn(dir: &Path, args: &[&str]) -> Child {
    use std::os::unix::process::CommandExt;
    cmd(dir, args)
        .process_group(0)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap()
}

/// What a terminal does on Ctrl-C: SIGINT to the foreground process group.
fn ctrl_c(child: &Child) {
    let pgid = child.id() as libc::pid_t;
    assert_eq!(unsafe { libc::kill(-pgid, libc::SIGINT) }, 0);
}

/// Waits for `child` (a liveness bound for the test, not a measurement) and collects its output.
fn finish(mut child: Child, limit: Duration) -> (i32, String, String) {
    let deadline = Instant::now() + limit;
    while child.try_wait().unwrap().is_none() {
        if Instant::now() > deadline {
            let _ = child.kill();
            panic!("the process did not exit");
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    split(child.wait_with_output().unwrap())
}

fn wait_until(what: &str, mut cond: impl FnMut() -> bool) {
    let deadline = Instant::now() + Duration::from_secs(120);
    while !cond() {
        assert!(Instant::now() < deadline, "gave up waiting: {what}");
        std::thread::sleep(Duration::from_millis(50));
    }
}

fn enqueue(dir: &Path, model: &str, stages: &str) -> String {
    let (code, out, err) = run(dir, &["enqueue", model, "--stages", stages, "--offline"]);
    assert_eq!(code, 0, "{err}");
    out.trim().to_string()
}

fn record(dir: &Path, id: &str) -> serde_json::Value {
    let (code, out, err) = run(dir, &["status", id, "--json"]);
    assert_eq!(code, 0, "{err}");
    serde_json::from_str(&out).unwrap()
}

/// A port nothing listens on (bound, then closed).
fn closed_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

#[test]
fn a_refused_local_endpoint_fails_the_generate_job_once_saying_why() {
    let port = closed_port();
    let base = format!("http://127.0.0.1:{port}/v1");
    let env = Env::new("openai", "fix")
        .set("HARCH_OPENAI_BASE_URL", &base)
        .set("HARCH_OPENAI_MODEL", "any")
        .set("OPENAI_API_KEY", "sk-openai-test")
        // The default budget: one retry of a refused connection; a small one is the point.
        .set("HARCH_RETRY_MAX_ATTEMPTS", "5");
    let id = env.enqueue();
    let out = env
        .cmd(&["run", "--once", "--concurrency", "1"])
        .output()
        .unwrap();
    let said = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{said}");
    let rec = env.record(&id);
    assert_eq!(rec["state"], "failed", "{rec:#}");
    let err = rec["last_error"].as_str().unwrap();
    for part in [
        "stage generate: agent openai cannot reach its provider",
        &format!("connection refused: nothing listens at 127.0.0.1:{port}"),
        "HARCH_OPENAI_BASE_URL",
        "(2 requests)",
    ] {
        assert!(err.contains(part), "{part}: {err}");
    }
    assert_eq!(rec["failure"], "permanent", "{rec:#}");
    // Not retried stage by stage: one attempt, one run, as the message's count of requests
    // belongs to that one run, and `status` lists exactly that.
    let generate = stage(&rec, "generate");
    assert_eq!(generate["attempts"], 1, "{generate:#}");
    let runs = attempts(&rec);
    assert_eq!(runs.len(), 1, "{runs:#?}");
    assert_eq!(runs[0]["failure"], "unreachable");
    assert!(
        runs[0]["failure_message"]
            .as_str()
            .unwrap()
            .contains("(2 requests)")
    );
    let status = String::from_utf8(env.run(&["status", &id]).stdout).unwrap();
    assert!(status.contains("attempts 1"), "{status}");
    assert_eq!(status.matches("attempt 1 (openai)").count(), 1, "{status}");
    // `run` said the failure once, with its cause, and no log line repeated it.
    assert_eq!(said.matches("connection refused").count(), 1, "{said}");
    assert!(said.contains(&format!("{id} ")), "{said}");
    assert!(!said.contains("WARN") && !said.contains("ERROR"), "{said}");
}

#[test]
fn run_stops_cleanly_on_one_ctrl_c_and_at_once_on_two() {
    let tmp = tempfile::tempdir().unwrap();
    let d = tmp.path();
    // One Ctrl-C while a stage runs: it finishes, the job is checkpointed before its next
    // stage, and the stop is no error.
    let id = enqueue(d, "org/one", "sleep:1500,noop");
    let child = spawn(d, &["run"]);
    wait_until("the sleep stage to run", || {
        record(d, &id)["stages"][0]["state"] == "running"
    });
    ctrl_c(&child);
    let (code, out, err) = finish(child, Duration::from_secs(60));
    assert_eq!(code, 0, "{out}\n{err}");
    assert!(err.contains("SIGINT: stopping"), "{err}");
    assert!(
        !err.contains("ERROR") && !err.contains("task.failed"),
        "{err}"
    );
    assert!(err.contains("sleep:1500 started (attempt 1)"), "{err}");
    assert!(err.contains("sleep:1500 done in"), "{err}");
    let rec = record(d, &id);
    assert_eq!(rec["state"], "pending", "{rec:#}");
    assert_eq!(rec["stages"][0]["state"], "done");
    assert_eq!(rec["stages"][1]["state"], "pending");
    let (_, log, _) = run(d, &["logs", &id]);
    assert!(log.contains("resumes at stage noop"), "{log}");
    // It resumes where it stopped.
    let (code, _, err) = run(d, &["run", "--once"]);
    assert_eq!(code, 0, "{err}");
    assert_eq!(record(d, &id)["state"], "succeeded");

    // Two: the second ends the process at once, whatever is running.
    let id = enqueue(d, "org/two", "sleep:60000");
    let child = spawn(d, &["run"]);
    wait_until("the long stage to run", || {
        record(d, &id)["stages"][0]["state"] == "running"
    });
    ctrl_c(&child);
    std::thread::sleep(Duration::from_millis(300));
    ctrl_c(&child);
    let (code, _, err) = finish(child, Duration::from_secs(30));
    assert_eq!(code, 130, "{err}");
    assert!(err.contains("second interrupt: exiting now"), "{err}");
}

/// The records of the benchmark's temporary data dir still waiting (its `active/` index).
fn bench_waiting(data: &Path) -> Option<usize> {
    let tmp = std::fs::read_dir(data).ok()?.flatten().next()?.path();
    Some(std::fs::read_dir(tmp.join("active")).ok()?.count())
}

/// Starts a benchmark of `jobs` jobs and returns once its drain has begun.
fn bench_draining(d: &Path, jobs: usize) -> Child {
    let data = d.join("bench");
    let n = jobs.to_string();
    let child = spawn(
        d,
        &[
            "bench-queue",
            "--jobs",
            &n,
            "--data-dir",
            data.to_str().unwrap(),
        ],
    );
    let mut full = false;
    wait_until("the drain to start", || match bench_waiting(&data) {
        Some(w) if w == jobs => {
            full = true;
            false
        }
        Some(w) => full && w < jobs,
        None => false,
    });
    child
}

#[test]
fn bench_queue_reports_what_it_measured_on_one_ctrl_c_and_exits_on_two() {
    let tmp = tempfile::tempdir().unwrap();
    let d = tmp.path();
    let child = bench_draining(d, 2000);
    ctrl_c(&child);
    let (code, out, err) = finish(child, Duration::from_secs(120));
    assert_eq!(code, 130, "{out}\n{err}");
    // The embedded backend only (no Redis named), marked interrupted, with the jobs done.
    let rows: Vec<&str> = out.lines().skip(1).collect();
    assert_eq!(rows.len(), 1, "{out}");
    assert!(
        rows[0].starts_with("sqlite ") && rows[0].ends_with("interrupted"),
        "{out}"
    );
    let done: usize = rows[0]
        .split_whitespace()
        .nth(1)
        .unwrap()
        .split('/')
        .next()
        .unwrap()
        .parse()
        .unwrap();
    assert!(done < 2000, "{out}");
    // Jobs an interrupt left waiting are not failures.
    assert_eq!(rows[0].split_whitespace().nth(6), Some("0"), "{out}");
    assert!(
        err.contains("interrupted: the figures cover the jobs done"),
        "{err}"
    );
    assert!(!err.contains("ERROR") && !err.contains("redis"), "{err}");

    let child = bench_draining(d, 2000);
    ctrl_c(&child);
    std::thread::sleep(Duration::from_millis(100));
    ctrl_c(&child);
    let (code, _, err) = finish(child, Duration::from_secs(30));
    assert_eq!(code, 130, "{err}");
    assert!(err.contains("second interrupt: exiting now"), "{err}");
}

#[test]
fn jobs_are_named_by_unique_prefixes_and_last() {
    let tmp = tempfile::tempdir().unwrap();
    let d = tmp.path();
    let a = enqueue(d, "org/a", "noop");
    let b = enqueue(d, "org/b", "noop");
    let common = a.chars().zip(b.chars()).take_while(|(x, y)| x == y).count();
    let short_a = a[..=common].to_ascii_lowercase();
    assert_eq!(record(d, &short_a)["id"], a.as_str());
    assert_eq!(record(d, "last")["id"], b.as_str());
    let (code, out, err) = run(d, &["cancel", "last"]);
    assert_eq!(code, 0, "{err}");
    assert!(out.contains(&format!("{b} cancelled")), "{out}");
    let (code, _, err) = run(d, &["cancel", &b[..=common]]);
    assert_eq!(code, 2);
    assert!(
        err.contains(&format!("job {b} has already been cancelled")),
        "{err}"
    );
    let (code, _, err) = run(d, &["status", &a[..common]]);
    assert_eq!(code, 2);
    assert!(
        err.contains("is ambiguous: 2 jobs start with it")
            && err.contains(&format!("{a}  org/a  pending"))
            && err.contains(&format!("{b}  org/b  cancelled")),
        "{err}"
    );
    let (code, _, err) = run(d, &["retry", &short_a]);
    assert_eq!(code, 2);
    assert!(
        err.contains(&format!(
            "job {a} is pending: only failed or cancelled jobs can be retried"
        )),
        "{err}"
    );
    let (code, out, _) = run(d, &["logs", "last"]);
    assert_eq!(code, 0);
    assert!(out.contains("cancelled by operator"), "{out}");
    // The table says which queue it lists and how far each job is.
    let (_, table, _) = run(d, &["status"]);
    let data = d.join("data");
    assert!(
        table.starts_with(&format!(
            "queue sqlite://{}/queue.sqlite, data dir {} (HARCH_DATA_DIR)\n",
            data.display(),
            data.display()
        )),
        "{table}"
    );
    assert!(
        table.contains("STAGES") && table.contains("0/1 noop"),
        "{table}"
    );
    // `logs -f` ends with the job.
    let (code, _, err) = run(d, &["run", "--once"]);
    assert_eq!(code, 0, "{err}");
    let (code, out, _) = run(d, &["logs", "-f", &short_a]);
    assert_eq!(code, 0);
    assert!(out.contains("stage noop: done"), "{out}");
    let (code, out, _) = run(d, &["status", "--watch", "--interval", "0.1"]);
    assert_eq!(code, 0);
    assert!(out.contains("1/1 "), "{out}");
}

#[test]
fn the_queue_is_one_per_user_wherever_a_command_runs() {
    let tmp = tempfile::tempdir().unwrap();
    let home = tmp.path().join("xdg");
    let in_dir = |sub: &str| -> PathBuf {
        let p = tmp.path().join(sub);
        std::fs::create_dir_all(&p).unwrap();
        p
    };
    let (one, two) = (in_dir("one"), in_dir("two"));
    let per_user = |dir: &Path, args: &[&str]| {
        let mut c = cmd(dir, args);
        c.env_remove("HARCH_DATA_DIR").env("XDG_DATA_HOME", &home);
        split(c.output().unwrap())
    };
    let (code, id, err) = per_user(&one, &["enqueue", "org/m", "--stages", "noop"]);
    assert_eq!(code, 0, "{err}");
    let (_, table, _) = per_user(&two, &["status"]);
    assert!(table.contains(id.trim()), "{table}");
    assert!(table.contains("(per-user default)"), "{table}");
    assert!(home.join("harch/jobs").join(id.trim()).is_dir());
    assert!(!one.join(".harch").exists() && !two.join(".harch").exists());
    // A project that asks for its own queue gets it.
    std::fs::write(two.join("queue.toml"), "[worker]\ndata_dir = \".harch\"\n").unwrap();
    let (_, table, _) = per_user(&two, &["status"]);
    assert!(
        table.contains("no jobs in .harch (the data dir, queue.toml"),
        "{table}"
    );
}

/// The queue commands and `fetch` document every flag their `--help` lists, in their section of
/// docs/cli.md or, for the flags every queue command takes, in its common-flags section.
#[test]
fn the_queue_commands_document_every_flag() {
    let root = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("..");
    let doc = std::fs::read_to_string(root.join("docs/cli.md")).unwrap();
    let common = doc
        .split_once("## The queue commands' common flags")
        .map(|(_, rest)| rest.split("\n## ").next().unwrap())
        .expect("docs/cli.md has a common-flags section");
    let tmp = tempfile::tempdir().unwrap();
    let mut missing = Vec::new();
    for c in [
        "fetch",
        "enqueue",
        "run",
        "status",
        "cancel",
        "retry",
        "logs",
        "bench-queue",
    ] {
        let section = doc
            .split_once(&format!("### `{c}`\n"))
            .map(|(_, rest)| rest.split("\n### ").next().unwrap())
            .unwrap_or_else(|| panic!("docs/cli.md has no section for {c}"));
        let (_, help, _) = run(tmp.path(), &[c, "--help"]);
        for line in help.lines() {
            let t = line.trim_start();
            let t = t
                .strip_prefix("-")
                .filter(|r| r.chars().nth(1) == Some(','))
                .map_or(t, |r| r[2..].trim_start());
            let Some(flag) = t.strip_prefix("--") else {
                continue;
            };
            let flag: String = flag
                .chars()
                .take_while(|ch| ch.is_ascii_alphanumeric() || *ch == '-')
                .collect();
            let flag = format!("--{flag}");
            if ["--help", "--version", "--verbose", "--log-json", "--json"].contains(&flag.as_str())
            {
                continue;
            }
            if !section.contains(&format!("`{flag}")) && !common.contains(&format!("`{flag}")) {
                missing.push(format!("{c} {flag}"));
            }
        }
    }
    assert!(missing.is_empty(), "docs/cli.md does not name: {missing:?}");
}
