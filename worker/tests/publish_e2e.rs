//! The publish stage inside whole jobs, through the real `harch-worker` binary: the default
//! embedded settings make publish a dry run that succeeds; with `[publish]` pointed at a local
//! bare repository and a fake GitHub, a generate job (the fake `claude` agent in the sandbox)
//! ends with a pull request, and the token, present in the worker's environment throughout,
//! appears nowhere: not in the agent's environment, its transcript, the job's logs and records,
//! the worker's own output, or the clone's files.
//!
//! Needs the forward source of llama (scripts/fetch-transformers-src).

use crate::fake_github;

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use serde_json::Value;

const BIN: &str = env!("CARGO_BIN_EXE_harch-worker");
const MODEL: &str = "meta-llama/Llama-3.1-8B";
const TOKEN: &str = "ghs_E2Etoken_never_anywhere_51c0";

fn project_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("..")
}

struct Env {
    tmp: tempfile::TempDir,
    vars: Vec<(String, String)>,
}

impl Env {
    fn new() -> Env {
        use std::os::unix::fs::PermissionsExt;
        let tmp = tempfile::tempdir().unwrap();
        std::fs::set_permissions(tmp.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
        let vars = vec![
            (
                "HARCH_QUEUE_URL".to_string(),
                format!("sqlite://{}", tmp.path().join("q.sqlite").display()),
            ),
            (
                "HARCH_DATA_DIR".into(),
                tmp.path().join("data").display().to_string(),
            ),
            ("HARCH_RETRY_BACKOFF_INITIAL_MS".into(), "50".into()),
            ("HARCH_RETRY_MAX_ATTEMPTS".into(), "2".into()),
            ("RUST_LOG".into(), "trace".into()),
        ];
        Env { tmp, vars }
    }

    fn set(&mut self, k: &str, v: &str) {
        self.vars.retain(|(key, _)| key != k);
        self.vars.push((k.into(), v.into()));
    }

    fn run(&self, args: &[&str]) -> Output {
        let mut c = Command::new(BIN);
        c.args(args).current_dir(self.tmp.path());
        for (k, _) in std::env::vars() {
            if k.starts_with("HARCH_") && k != "HARCH_TRANSFORMERS_SRC" || k == "GITHUB_TOKEN" {
                c.env_remove(k);
            }
        }
        c.envs(self.vars.iter().map(|(k, v)| (k.as_str(), v.as_str())));
        let out = c.output().unwrap();
        assert!(
            out.status.success() || drained_with_failures(args, &out),
            "harch-worker {args:?}: {}\n{}",
            out.status,
            String::from_utf8_lossy(&out.stderr)
        );
        out
    }

    /// Enqueues MODEL with `stages`, runs the worker until the queue is empty; returns the job
    /// record and everything the commands printed.
    fn job(&self, extra: &[&str], stages: &str) -> (Value, String) {
        let mut args = vec!["enqueue", "--offline", "--stages", stages];
        args.extend_from_slice(extra);
        args.push(MODEL);
        let enq = self.run(&args);
        let id = String::from_utf8(enq.stdout.clone())
            .unwrap()
            .trim()
            .to_string();
        let run = self.run(&["run", "--once", "--concurrency", "1"]);
        let status = self.run(&["status", &id, "--json"]);
        let logs = self.run(&["logs", &id]);
        let mut printed = String::new();
        for o in [&enq, &run, &status, &logs] {
            printed.push_str(&String::from_utf8_lossy(&o.stdout));
            printed.push_str(&String::from_utf8_lossy(&o.stderr));
        }
        (serde_json::from_slice(&status.stdout).unwrap(), printed)
    }

    fn job_dir(&self, rec: &Value) -> PathBuf {
        self.tmp
            .path()
            .join("data/jobs")
            .join(rec["id"].as_str().unwrap())
    }
}

fn stage<'a>(rec: &'a Value, name: &str) -> &'a Value {
    rec["stages"]
        .as_array()
        .unwrap()
        .iter()
        .find(|s| s["name"] == name)
        .unwrap()
}

#[test]
fn without_a_repository_publish_is_a_dry_run_and_the_job_succeeds() {
    let env = Env::new();
    let (rec, printed) = env.job(&[], "fetch,verify,publish");
    assert_eq!(rec["state"], "succeeded", "{rec:#}");
    let publish = &stage(&rec, "publish")["summary"];
    assert_eq!(publish["mode"], "dry-run");
    assert!(printed.contains("publish: dry run"), "{printed}");
    let dir = env.job_dir(&rec).join("publish");
    assert!(dir.join("pr-body.md").is_file());
    assert!(dir.join("commit-message.txt").is_file());
    assert!(dir.join("bundle/specs/models/llama.yaml").is_file());
    // No agent ran: the library's spec, not reviewed.
    assert_eq!(publish["spec_origin"], "library");
    assert_eq!(publish["draft"], true);
}

#[tokio::test(flavor = "multi_thread")]
async fn a_generate_job_ends_in_a_pull_request_and_the_token_is_nowhere() {
    let mut env = Env::new();
    let remote = env.tmp.path().join("remote.git");
    fake_github::init_remote(&remote, &[]);
    let gh = fake_github::FakeGitHub::start("acme", "specs", TOKEN, remote.clone()).await;
    let fakes = env.tmp.path().join("agents");
    std::fs::create_dir_all(&fakes).unwrap();
    for e in std::fs::read_dir(Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/agents"))
        .unwrap()
    {
        let p = e.unwrap().path();
        std::fs::copy(&p, fakes.join(p.file_name().unwrap())).unwrap();
    }
    std::fs::copy(
        project_root().join("specs/models/llama.yaml"),
        fakes.join("llama.yaml"),
    )
    .unwrap();
    for (k, v) in [
        ("HARCH_AGENT", "claude".to_string()),
        (
            "HARCH_CLAUDE_BIN",
            fakes.join("claude").display().to_string(),
        ),
        ("HARCH_PROMPT_NOTES", "SCENARIO: fix".into()),
        (
            "HARCH_AGENT_REQUIRE_LANDLOCK",
            harch_sandbox::testing::require_landlock().to_string(),
        ),
        ("HARCH_SANDBOX_USER", "nobody".into()),
        ("ANTHROPIC_API_KEY", "sk-ant-test".into()),
        ("HARCH_PUBLISH_REPO", "acme/specs".into()),
        (
            "HARCH_PUBLISH_REMOTE_URL",
            format!("file://{}", remote.display()),
        ),
        ("HARCH_PUBLISH_API_URL", gh.uri()),
        ("GITHUB_TOKEN", TOKEN.into()),
    ] {
        env.set(k, &v);
    }
    // The worker blocks; the fake GitHub answers on this runtime's other threads.
    let (env, rec, printed) = tokio::task::spawn_blocking(move || {
        let (rec, printed) = env.job(&["--fresh"], "fetch,generate,verify,publish");
        (env, rec, printed)
    })
    .await
    .unwrap();
    assert_eq!(rec["state"], "succeeded", "{rec:#}\n{printed}");
    let publish = &stage(&rec, "publish")["summary"];
    assert_eq!(publish["mode"], "published", "{publish:#}");
    assert_eq!(publish["pull_request"]["action"], "opened");
    assert!(gh.violations().is_empty(), "{:#?}", gh.violations());
    let prs = gh.prs();
    assert_eq!(prs.len(), 1);
    assert!(prs[0].draft, "not reviewed, so a draft");
    assert!(
        prs[0].body.contains("| generate | `claude` |"),
        "{}",
        prs[0].body
    );

    // The token: in the worker's environment all along, and nowhere else (the worker logged at
    // trace level, reqwest, hyper and the git runner included).
    assert!(printed.contains("pull request #1 opened"), "{printed}");
    assert!(!printed.contains(TOKEN), "the worker printed the token");
    let data = env.tmp.path().join("data");
    let agent_env =
        std::fs::read_to_string(env.job_dir(&rec).join("work/generate/sandbox/home/env.txt"))
            .unwrap_or_default();
    assert!(
        agent_env.contains("ANTHROPIC_API_KEY"),
        "the fake agent did not record its env"
    );
    assert!(!agent_env.contains("GITHUB_TOKEN"), "{agent_env}");
    let mut files = 0;
    for_each_file(&data, &mut |p| {
        files += 1;
        let bytes = std::fs::read(p).unwrap_or_default();
        assert!(
            !bytes.windows(TOKEN.len()).any(|w| w == TOKEN.as_bytes()),
            "the token is in {}",
            p.display()
        );
    });
    assert!(files > 20, "only {files} files under {}", data.display());
}

fn for_each_file(dir: &Path, f: &mut dyn FnMut(&Path)) {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return;
    };
    for e in entries.flatten() {
        let p = e.path();
        if p.is_symlink() {
            continue;
        }
        if p.is_dir() {
            for_each_file(&p, f);
        } else {
            f(&p);
        }
    }
}

/// `run --once` exits 1 when a job it drained failed: the tests read the job's record for that.
fn drained_with_failures(args: &[&str], out: &Output) -> bool {
    args.starts_with(&["run", "--once"]) && out.status.code() == Some(1)
}
