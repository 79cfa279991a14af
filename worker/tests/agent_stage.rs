//! The agent-stage loop on its own, in process, with a one-page task (`echo`, run as the generate
//! stage's loop: the agent must write `model: ok` to specs/models/m.yaml) and a backend that
//! plays an agent which got past
//! the sandbox: it plants, as the worker's own user, what Landlock refuses a real agent (a link
//! to a secret, a FIFO, a link to /dev/zero, an oversize file, a linked draft). The worker's own
//! reading must refuse each with a clear attempt failure and never block; a SIGTERM must stop a
//! hanging run at once, recorded and not counted.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use harch_agents::{AgentBackend, AgentError, AgentLimits, AgentOutcome, AgentRequest};
use harch_sandbox::{StageSpec, Workspace};
use harch_worker::pipeline::agent_stage::{
    self, AgentFiles, AgentTask, Attempt, Checked, Ledger, Phase, Prompt, ReadBack,
};
use harch_worker::pipeline::stage::{StageContext, StageError};
use harch_worker::queue::config::{AgentSettings, DEFAULT_TOML, Settings};
use harch_worker::queue::record::{JobKind, JobRequest};
use harch_worker::queue::stage::Stage;
use harch_worker::queue::store::JobStore;
use serde_json::json;

/// A stage in a page: the agent must write `model: ok` at specs/models/m.yaml.
struct Echo {
    sandbox: PathBuf,
}

impl AgentTask for Echo {
    fn stage(&self) -> Stage {
        Stage::Generate
    }
    fn report_file(&self) -> &'static str {
        "check.json"
    }
    fn read_back(&self) -> ReadBack {
        let mut r = ReadBack::new("specs/models/m.yaml");
        r.dirs
            .push(("specs/components/drafts".into(), vec!["yaml"]));
        r
    }
    fn unmet(&self) -> String {
        "no `model: ok` at specs/models/m.yaml".into()
    }
    fn workspace(&self) -> anyhow::Result<Workspace> {
        let mut spec = StageSpec::default();
        spec.fs_policy.require_landlock = harch_sandbox::testing::require_landlock();
        Ok(Workspace::create(&self.sandbox, &spec)?)
    }
    fn prompt(&self, previous: Option<&Attempt>) -> anyhow::Result<Prompt> {
        let text = format!(
            "Write `model: ok`. Before: {}",
            previous
                .and_then(|a| a.run_note("specs/models/m.yaml"))
                .unwrap_or_default()
        );
        Ok(Prompt {
            bytes: text.len(),
            est_tokens: text.len() / 3,
            text,
        })
    }
    fn check(&self, _n: u32, files: &AgentFiles) -> anyhow::Result<Checked> {
        let valid = files["specs/models/m.yaml"] == "model: ok\n";
        Ok(Checked {
            valid,
            report: json!({"valid": valid}),
            errors: usize::from(!valid),
            error_codes: if valid { vec![] } else { vec!["E1".into()] },
            feedback: if valid {
                vec![]
            } else {
                vec!["E1 m.yaml must say `model: ok`".into()]
            },
            feedback_more: 0,
        })
    }
    fn keep(&self, files: &AgentFiles, _: &Checked, out: &Path) -> anyhow::Result<()> {
        std::fs::write(out.join("m.yaml"), &files["specs/models/m.yaml"])?;
        Ok(())
    }
}

/// Plants run by run; `hang` makes every run wait forever instead.
struct Planting {
    secret: PathBuf,
    hang: bool,
}

fn mkfifo(path: &Path) {
    let c = std::ffi::CString::new(path.as_os_str().as_encoded_bytes()).unwrap();
    // SAFETY: a valid C string.
    assert_eq!(unsafe { libc::mkfifo(c.as_ptr(), 0o666) }, 0);
}

#[async_trait::async_trait]
impl AgentBackend for Planting {
    fn name(&self) -> &'static str {
        "planting"
    }

    async fn run(&self, req: &AgentRequest<'_>) -> Result<AgentOutcome, AgentError> {
        let ws = req.workspace;
        let transcript = ws.logs_dir().join(format!("{}.planting.jsonl", req.label));
        std::fs::write(&transcript, format!("{{\"label\":\"{}\"}}\n", req.label)).unwrap();
        if self.hang {
            tokio::time::sleep(Duration::from_secs(3600)).await;
        }
        let m = ws.specs_dir().join("models/m.yaml");
        let draft = ws.specs_dir().join("components/drafts/d.yaml");
        let _ = std::fs::remove_file(&m);
        let _ = std::fs::remove_file(&draft);
        match req.label {
            "generate-1" => std::os::unix::fs::symlink(&self.secret, &m).unwrap(),
            "generate-2" => mkfifo(&m),
            "generate-3" => std::os::unix::fs::symlink("/dev/zero", &m).unwrap(),
            "generate-4" => std::fs::write(&m, vec![b'#'; 5 << 20]).unwrap(),
            "generate-5" => {
                std::fs::write(&m, "model: ok\n").unwrap();
                std::os::unix::fs::symlink(&self.secret, &draft).unwrap();
            }
            _ => std::fs::write(&m, "model: ok\n").unwrap(),
        }
        Ok(AgentOutcome {
            backend: "planting".into(),
            model: None,
            exit_code: Some(0),
            claimed_success: true,
            turns: Some(1),
            usage: None,
            cost_usd: None,
            wall_ms: 1,
            transcript,
            stderr_log: None,
            files_changed: Vec::new(),
            final_message: None,
            failure: None,
        })
    }
}

struct Fixture {
    tmp: tempfile::TempDir,
    cx: StageContext,
    agent: AgentSettings,
    stop: tokio::sync::watch::Sender<bool>,
    secret: PathBuf,
}

fn fixture(attempts: u32) -> Fixture {
    let tmp = tempfile::tempdir().unwrap();
    let data = tmp.path().join("data");
    let mut agent = Settings::parse(DEFAULT_TOML, "default").unwrap().agent;
    agent.attempts = attempts;
    let store = JobStore::open(&data).unwrap();
    let request = JobRequest {
        model_id: "org/echo".into(),
        revision: "main".into(),
        kind: JobKind::Generate,
        agent: "planting".into(),
        guards: "all".into(),
        stages: vec![Stage::Generate],
        priority: 0,
        offline: true,
        exclude_library_spec: false,
        agent_model: None,
        ablation: None,
    };
    let (job, _) = store.create_or_existing(request, "t").unwrap();
    let job_dir = store.job_dir(&job.id).unwrap();
    let out_dir = job_dir.join(".staging/echo");
    std::fs::create_dir_all(&out_dir).unwrap();
    let secret = tmp.path().join("secret.txt");
    std::fs::write(&secret, "TOPSECRET").unwrap();
    let (stop, shutdown) = tokio::sync::watch::channel(false);
    let cx = StageContext {
        job,
        job_dir,
        out_dir,
        attempt: 1,
        store,
        shutdown,
    };
    Fixture {
        tmp,
        cx,
        agent,
        stop,
        secret,
    }
}

fn limits() -> AgentLimits {
    AgentLimits {
        wall_time: Duration::from_secs(60),
        ..AgentLimits::default()
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn what_an_escaped_agent_plants_is_refused_run_by_run() {
    let f = fixture(6);
    let task = Arc::new(Echo {
        sandbox: f.cx.job_dir.join("work/echo"),
    });
    let backend = Planting {
        secret: f.secret.clone(),
        hang: false,
    };
    // A read that blocked on the FIFO would hang here; the bound turns that into a failure.
    let out = tokio::time::timeout(
        Duration::from_secs(120),
        agent_stage::run(&f.cx, &f.agent, task, &backend, &limits()),
    )
    .await
    .expect("the loop wedged")
    .unwrap();
    assert_eq!(out.summary["valid"], true);
    let ledger = Ledger::load(&f.cx.job_dir, Stage::Generate).unwrap();
    let rejected: Vec<_> = ledger
        .attempts
        .iter()
        .map(|a| a.rejected.clone().unwrap_or_default())
        .collect();
    assert_eq!(
        rejected,
        [
            "`specs/models/m.yaml` is a symbolic link, not a regular file",
            "`specs/models/m.yaml` is a FIFO (named pipe), not a regular file",
            "`specs/models/m.yaml` is a symbolic link, not a regular file",
            "`specs/models/m.yaml` is larger than the 4194304-byte limit",
            "`specs/components/drafts/d.yaml` is a symbolic link, not a regular file",
            "",
        ]
    );
    for a in &ledger.attempts[..5] {
        assert_eq!((a.phase, a.valid, a.counted), (Phase::Checked, None, true));
    }
    assert_eq!(ledger.attempts[5].valid, Some(true));
    // Each run's prompt carries the refusal of the run before.
    let kept = f.cx.job_dir.join("attempts/generate");
    let p2 = std::fs::read_to_string(kept.join("2/prompt.md")).unwrap();
    assert!(
        p2.contains(
            "The worker refused to read your files: `specs/models/m.yaml` is a symbolic link"
        ),
        "{p2}"
    );
    // Transcripts are kept per run; the secret is nowhere.
    for n in 1..=6 {
        assert!(
            kept.join(format!("{n}/generate-{n}.planting.jsonl"))
                .is_file()
        );
    }
    for e in walk(f.tmp.path().join("data").as_path()) {
        let text = std::fs::read(&e).unwrap_or_default();
        assert!(
            !String::from_utf8_lossy(&text).contains("TOPSECRET"),
            "the secret leaked into {}",
            e.display()
        );
    }
    assert_eq!(
        std::fs::read_to_string(f.cx.out_dir.join("m.yaml")).unwrap(),
        "model: ok\n"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigterm_stops_a_hanging_run_at_once_and_does_not_count_it() {
    let f = fixture(3);
    let task = Arc::new(Echo {
        sandbox: f.cx.job_dir.join("work/echo"),
    });
    let backend = Planting {
        secret: f.secret.clone(),
        hang: true,
    };
    let job_dir = f.cx.job_dir.clone();
    let stop = f.stop;
    tokio::spawn(async move {
        loop {
            tokio::time::sleep(Duration::from_millis(50)).await;
            let ledger = Ledger::load(&job_dir, Stage::Generate).unwrap();
            if ledger
                .attempts
                .first()
                .is_some_and(|a| a.phase == Phase::Running)
            {
                stop.send(true).unwrap();
                return;
            }
        }
    });
    let err = tokio::time::timeout(
        Duration::from_secs(60),
        agent_stage::run(&f.cx, &f.agent, task, &backend, &limits()),
    )
    .await
    .expect("the loop ignored the shutdown")
    .unwrap_err();
    assert!(
        matches!(&err, StageError::Transient(m) if m.contains("the worker is stopping")),
        "{err}"
    );
    let ledger = Ledger::load(&f.cx.job_dir, Stage::Generate).unwrap();
    let a = &ledger.attempts[0];
    assert_eq!((a.phase, a.counted), (Phase::Interrupted, false));
    assert_eq!(ledger.counted(0), 0);
    assert!(
        f.cx.job_dir
            .join("attempts/generate/1/generate-1.planting.jsonl")
            .is_file()
    );
}

fn walk(dir: &Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        for e in std::fs::read_dir(&d).into_iter().flatten().flatten() {
            match e.file_type() {
                Ok(t) if t.is_dir() => stack.push(e.path()),
                Ok(t) if t.is_file() => out.push(e.path()),
                _ => {}
            }
        }
    }
    out
}

/// Echo whose agent may say the task cannot be done: a rejected result with a report the task
/// accepts as a reason ends the loop instead of re-prompting (the generate stage's gap report).
struct StopsOnReport {
    echo: Echo,
}

impl AgentTask for StopsOnReport {
    fn stage(&self) -> Stage {
        self.echo.stage()
    }
    fn report_file(&self) -> &'static str {
        self.echo.report_file()
    }
    fn read_back(&self) -> ReadBack {
        self.echo.read_back()
    }
    fn unmet(&self) -> String {
        self.echo.unmet()
    }
    fn workspace(&self) -> anyhow::Result<Workspace> {
        self.echo.workspace()
    }
    fn prompt(&self, previous: Option<&Attempt>) -> anyhow::Result<Prompt> {
        self.echo.prompt(previous)
    }
    fn check(&self, n: u32, files: &AgentFiles) -> anyhow::Result<Checked> {
        self.echo.check(n, files)
    }
    fn keep(&self, files: &AgentFiles, checked: &Checked, out: &Path) -> anyhow::Result<()> {
        self.echo.keep(files, checked, out)
    }
    fn stop(&self, checked: &Checked) -> Option<String> {
        (checked.report["valid"] == false).then(|| "the agent reports a DSL gap".to_string())
    }
}

/// An agent that writes what it is given, every run.
struct Writes(&'static str);

#[async_trait::async_trait]
impl AgentBackend for Writes {
    fn name(&self) -> &'static str {
        "writes"
    }

    async fn run(&self, req: &AgentRequest<'_>) -> Result<AgentOutcome, AgentError> {
        let ws = req.workspace;
        let transcript = ws.logs_dir().join(format!("{}.writes.jsonl", req.label));
        std::fs::write(&transcript, "{}\n").unwrap();
        std::fs::write(ws.specs_dir().join("models/m.yaml"), self.0).unwrap();
        Ok(AgentOutcome {
            backend: "writes".into(),
            model: None,
            exit_code: Some(0),
            claimed_success: true,
            turns: Some(1),
            usage: None,
            cost_usd: None,
            wall_ms: 1,
            transcript,
            stderr_log: None,
            files_changed: Vec::new(),
            final_message: None,
            failure: None,
        })
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_task_that_stops_ends_the_loop_after_one_rejected_run() {
    let f = fixture(5);
    let task = Arc::new(StopsOnReport {
        echo: Echo {
            sandbox: f.cx.job_dir.join("work/echo"),
        },
    });
    let err = tokio::time::timeout(
        Duration::from_secs(60),
        agent_stage::run(&f.cx, &f.agent, task, &Writes("model: cannot\n"), &limits()),
    )
    .await
    .expect("the loop wedged")
    .unwrap_err();
    assert!(
        matches!(&err, StageError::Permanent(m) if m.contains("the agent reports a DSL gap")),
        "{err}"
    );
    let ledger = Ledger::load(&f.cx.job_dir, Stage::Generate).unwrap();
    assert_eq!(ledger.attempts.len(), 1, "no second run after the stop");
    assert_eq!(ledger.attempts[0].valid, Some(false));
}
