//! What the agent-stage tests share: a worker environment (its own queue, data dir the sandbox
//! user can reach, the fake agent CLIs of tests/fixtures/agents with the library's llama spec
//! next to them, short limits), driven through the real `harch-worker` binary.
#![allow(dead_code)]

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

use serde_json::Value;

pub const BIN: &str = env!("CARGO_BIN_EXE_harch-worker");
pub const MODEL: &str = "meta-llama/Llama-3.1-8B";

pub fn project_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("..")
}

pub struct Env {
    pub tmp: tempfile::TempDir,
    pub env: Vec<(String, String)>,
}

impl Env {
    /// A data dir the sandbox user can reach, the fakes with the library's current llama spec
    /// next to them, and short limits.
    pub fn new(agent: &str, scenario: &str) -> Env {
        use std::os::unix::fs::PermissionsExt;
        let tmp = tempfile::tempdir().unwrap();
        std::fs::set_permissions(tmp.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
        let fakes = tmp.path().join("agents");
        std::fs::create_dir_all(&fakes).unwrap();
        let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/agents");
        for e in std::fs::read_dir(&src).unwrap() {
            let p = e.unwrap().path();
            std::fs::copy(&p, fakes.join(p.file_name().unwrap())).unwrap();
        }
        std::fs::copy(
            project_root().join("specs/models/llama.yaml"),
            fakes.join("llama.yaml"),
        )
        .unwrap();
        let mut env: Vec<(String, String)> = vec![
            (
                "HARCH_QUEUE_URL".into(),
                format!("sqlite://{}", tmp.path().join("q.sqlite").display()),
            ),
            (
                "HARCH_DATA_DIR".into(),
                tmp.path().join("data").display().to_string(),
            ),
            ("HARCH_HEARTBEAT_MS".into(), "1000".into()),
            ("HARCH_RETRY_BACKOFF_INITIAL_MS".into(), "50".into()),
            ("HARCH_RETRY_BACKOFF_MAX_MS".into(), "100".into()),
            ("HARCH_RETRY_MAX_ATTEMPTS".into(), "2".into()),
            ("HARCH_AGENT".into(), agent.into()),
            ("HARCH_AGENT_ATTEMPTS".into(), "3".into()),
            ("HARCH_AGENT_TIMEOUT_S".into(), "60".into()),
            (
                "HARCH_AGENT_REQUIRE_LANDLOCK".into(),
                harch_sandbox::testing::require_landlock().to_string(),
            ),
            ("HARCH_SANDBOX_USER".into(), "nobody".into()),
            ("HARCH_PROMPT_NOTES".into(), format!("SCENARIO: {scenario}")),
            ("RUST_LOG".into(), "warn".into()),
            // Publishing credentials in the worker's environment must never reach an agent.
            ("GITHUB_TOKEN".into(), "ghp_never_in_the_sandbox".into()),
            ("ANTHROPIC_API_KEY".into(), "sk-ant-test".into()),
            ("CODEX_API_KEY".into(), "sk-codex-test".into()),
            ("KIMI_API_KEY".into(), "sk-kimi-test".into()),
        ];
        for cli in ["claude", "codex", "kimi"] {
            env.push((
                format!("HARCH_{}_BIN", cli.to_uppercase()),
                fakes.join(cli).display().to_string(),
            ));
        }
        Env { tmp, env }
    }

    pub fn set(mut self, k: &str, v: &str) -> Env {
        self.env.retain(|(key, _)| key != k);
        self.env.push((k.into(), v.into()));
        self
    }

    pub fn cmd(&self, args: &[&str]) -> Command {
        let mut c = Command::new(BIN);
        c.args(args).current_dir(self.tmp.path());
        for (k, _) in std::env::vars() {
            if k.starts_with("HARCH_") && k != "HARCH_TRANSFORMERS_SRC" {
                c.env_remove(k);
            }
        }
        c.envs(self.env.iter().map(|(k, v)| (k.as_str(), v.as_str())));
        c
    }

    pub fn run(&self, args: &[&str]) -> Output {
        let out = self.cmd(args).output().unwrap();
        assert!(
            out.status.success() || drained_with_failures(args, &out),
            "harch-worker {args:?} failed: {}\n{}",
            out.status,
            String::from_utf8_lossy(&out.stderr)
        );
        out
    }

    /// Enqueues the model (fresh: its library spec hidden), runs the worker until the queue is
    /// empty, and returns the job record.
    pub fn job(&self) -> Value {
        let id = self.enqueue();
        self.run(&["run", "--once", "--concurrency", "1"]);
        self.record(&id)
    }

    /// Queues the model (fresh) through fetch, generate, verify; returns the job id.
    pub fn enqueue(&self) -> String {
        self.enqueue_stages("fetch,generate,verify", true)
    }

    /// Queues the model through `stages` (fresh: its library spec hidden from generate).
    pub fn enqueue_stages(&self, stages: &str, fresh: bool) -> String {
        let mut args = vec!["enqueue", "--offline"];
        if fresh {
            args.push("--fresh");
        }
        args.extend(["--stages", stages, MODEL]);
        let out = self.run(&args);
        String::from_utf8(out.stdout).unwrap().trim().to_string()
    }

    /// Runs `stages` for the model to the end and returns the job record.
    pub fn job_through(&self, stages: &str, fresh: bool) -> Value {
        let id = self.enqueue_stages(stages, fresh);
        self.run(&["run", "--once", "--concurrency", "1"]);
        self.record(&id)
    }

    pub fn record(&self, id: &str) -> Value {
        serde_json::from_slice(&self.run(&["status", id, "--json"]).stdout).unwrap()
    }

    /// A worker running in the background (`run --once`), its output discarded.
    pub fn spawn_worker(&self) -> Child {
        self.cmd(&["run", "--once", "--concurrency", "1"])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap()
    }

    pub fn data_dir(&self) -> PathBuf {
        self.tmp.path().join("data")
    }

    pub fn job_dir(&self, rec: &Value) -> PathBuf {
        self.tmp
            .path()
            .join("data/jobs")
            .join(rec["id"].as_str().unwrap())
    }
}

pub fn stage<'a>(rec: &'a Value, name: &str) -> &'a Value {
    rec["stages"]
        .as_array()
        .unwrap()
        .iter()
        .find(|s| s["name"] == name)
        .unwrap()
}

pub fn attempts(rec: &Value) -> Vec<Value> {
    stage_attempts(rec, "generate")
}

/// The agent runs of one stage, as the job record mirrors them.
pub fn stage_attempts(rec: &Value, name: &str) -> Vec<Value> {
    stage(rec, name)["summary"]["attempts"]
        .as_array()
        .cloned()
        .unwrap_or_default()
}

/// Polls `cond` every 100 ms until it holds; panics with `what` after `limit` (a liveness bound
/// for the test, not a measurement).
pub fn wait_until(what: &str, limit: Duration, mut cond: impl FnMut() -> bool) {
    let deadline = Instant::now() + limit;
    while !cond() {
        assert!(Instant::now() < deadline, "gave up waiting: {what}");
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// Waits for a child process to exit, killing it and panicking after `limit`.
pub fn wait_exit(child: &mut Child, what: &str, limit: Duration) -> std::process::ExitStatus {
    let deadline = Instant::now() + limit;
    loop {
        if let Some(status) = child.try_wait().unwrap() {
            return status;
        }
        if Instant::now() >= deadline {
            let _ = child.kill();
            panic!("gave up waiting: {what}");
        }
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// The ledger's attempts of job `id` as the job record mirrors them.
pub fn runs(env: &Env, id: &str) -> Vec<Value> {
    attempts(&env.record(id))
}

/// Every file under `dir`, recursively (links not followed).
pub fn all_files(dir: &Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        let Ok(entries) = std::fs::read_dir(&d) else {
            continue;
        };
        for e in entries.flatten() {
            match e.file_type() {
                Ok(t) if t.is_dir() => stack.push(e.path()),
                Ok(t) if t.is_file() => out.push(e.path()),
                _ => {}
            }
        }
    }
    out
}

/// Whether process `pid` (read from `file`) still runs.
pub fn pid_alive(file: &Path) -> bool {
    let pid: i32 = std::fs::read_to_string(file)
        .unwrap()
        .trim()
        .parse()
        .unwrap();
    !harch_sandbox::testing::process_gone(pid)
}

/// `run --once` exits 1 when a job it drained failed: the tests read the job's record for that.
fn drained_with_failures(args: &[&str], out: &Output) -> bool {
    args.starts_with(&["run", "--once"]) && out.status.code() == Some(1)
}
