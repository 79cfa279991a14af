//! Hostile agents in the real sandbox, through the real `harch-worker` binary (a root worker
//! runs them as `nobody`): fake CLIs (tests/fixtures/agents, scenarios in model.sh) that link the
//! spec or a draft to a file only root can read, make the spec a FIFO or a link to /dev/zero,
//! write a huge spec, hard-link it, chmod the truth, hang. Each attempt fails with a clear reason
//! (the next prompt carries it and the fake then behaves), nothing outside the workspace is read
//! or changed, and the worker stays responsive to cancel, SIGTERM and SIGKILL throughout.
//!
//! Also the time and attempt accounting: every run is counted and labelled (a worker killed
//! mid-run, a provider hiccup that retries the stage), its files kept per attempt (failed jobs
//! included), `logs --attempt` and `status` show them, `retry` gets a fresh budget, and
//! incoherent timeouts are refused at start-up.

use crate::agent_env;

use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::PathBuf;
use std::time::Duration;

use agent_env::{
    Env, all_files, attempts, pid_alive, project_root, runs, stage, wait_exit, wait_until,
};
use harch_sandbox::testing::landlock_available;
use serde_json::Value;

/// A file only root can read, with content that must never appear in the job's files.
struct Secret {
    path: PathBuf,
    text: String,
}

fn secret(env: &Env) -> Secret {
    let path = env.tmp.path().join("secret.txt");
    let text = format!("TOPSECRET-{}", ulid::Ulid::generate());
    std::fs::write(&path, &text).unwrap();
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o600)).unwrap();
    Secret { path, text }
}

/// Runs a hostile scenario with two attempts: the first misbehaves, the second (told why the
/// first failed) writes the spec. Returns the env, the record and the secret.
fn hostile(scenario: &str) -> (Env, Value, Secret) {
    let env = Env::new("claude", scenario).set("HARCH_AGENT_ATTEMPTS", "2");
    let s = secret(&env);
    let env = env.set(
        "HARCH_PROMPT_NOTES",
        &format!("SCENARIO: {scenario} SECRET={}", s.path.display()),
    );
    let rec = env.job();
    (env, rec, s)
}

/// Nothing under the data dir holds the secret; the secret is as it was.
fn assert_nothing_leaked(env: &Env, s: &Secret) {
    for f in all_files(&env.data_dir()) {
        let bytes = std::fs::read(&f).unwrap_or_default();
        let text = String::from_utf8_lossy(&bytes);
        assert!(
            !text.contains(&s.text),
            "the secret leaked into {}",
            f.display()
        );
    }
    assert_eq!(std::fs::read_to_string(&s.path).unwrap(), s.text);
    let mode = std::fs::metadata(&s.path).unwrap().mode();
    assert_eq!(mode & 0o777, 0o600);
}

/// The job recovered on the second attempt; the first failed for `why`; the retry prompt said so.
fn assert_first_attempt_failed(env: &Env, rec: &Value, why: &str) -> Value {
    assert_eq!(rec["state"], "succeeded", "{rec:#}");
    let a = attempts(rec);
    assert_eq!(a.len(), 2, "{a:#?}");
    assert_ne!(a[0]["valid"], true);
    assert_eq!(a[0]["counted"], true);
    assert_eq!(a[1]["valid"], true);
    let p2 =
        std::fs::read_to_string(env.job_dir(rec).join("attempts/generate/2/prompt.md")).unwrap();
    assert!(p2.contains(why), "the retry prompt does not say `{why}`");
    a[0].clone()
}

fn hostile_log(env: &Env, rec: &Value) -> String {
    std::fs::read_to_string(
        env.job_dir(rec)
            .join("work/generate/sandbox/home/hostile.log"),
    )
    .unwrap_or_default()
}

#[test]
fn a_spec_linked_to_a_root_only_file_is_never_read() {
    let (env, rec, s) = hostile("symlink-spec");
    let log = hostile_log(&env, &rec);
    if landlock_available() {
        // The sandbox refuses the link and the hard link: nothing was written.
        assert!(log.contains("blocked: ln -s"), "{log}");
        assert!(log.contains("blocked: ln truth/config.json"), "{log}");
        let a = assert_first_attempt_failed(
            &env,
            &rec,
            "Nothing was written at `specs/models/llama.yaml`",
        );
        assert_eq!(a["written"], false);
    }
    assert_nothing_leaked(&env, &s);
}

#[test]
fn a_draft_linked_to_a_root_only_file_is_never_read() {
    let (env, rec, s) = hostile("symlink-draft");
    if landlock_available() {
        assert!(hostile_log(&env, &rec).contains("blocked: ln -s"));
    }
    let a = assert_first_attempt_failed(&env, &rec, "k_proj");
    assert_eq!(a["valid"], false, "{a:#}");
    // The accepted artifacts hold the spec and no draft.
    let spec = env.job_dir(&rec).join("generate/spec");
    assert!(!spec.join("components").exists());
    assert_nothing_leaked(&env, &s);
}

#[test]
fn a_fifo_or_a_link_to_dev_zero_as_the_spec_cannot_wedge_the_worker() {
    for scenario in ["fifo-spec", "devzero-spec"] {
        let (env, rec, s) = hostile(scenario);
        if landlock_available() {
            let log = hostile_log(&env, &rec);
            assert!(log.starts_with("blocked: "), "{scenario}: {log}");
            assert_first_attempt_failed(&env, &rec, "Nothing was written");
        } else {
            let a = assert_first_attempt_failed(&env, &rec, "refused to read your files");
            assert!(
                a["rejected"]
                    .as_str()
                    .unwrap()
                    .contains("not a regular file")
            );
        }
        assert_nothing_leaked(&env, &s);
    }
}

#[test]
fn a_huge_spec_is_refused_unread() {
    let (env, rec, s) = hostile("huge-spec");
    let a = assert_first_attempt_failed(
        &env,
        &rec,
        "The worker refused to read your files: `specs/models/llama.yaml` is larger than the 4194304-byte limit",
    );
    assert_eq!(a["written"], false);
    assert!(a["rejected"].as_str().unwrap().contains("larger than"));
    // Nothing of it was kept.
    assert!(!env.job_dir(&rec).join("attempts/generate/1/files").exists());
    assert_nothing_leaked(&env, &s);
}

#[test]
fn a_hard_linked_spec_is_refused() {
    let (env, rec, s) = hostile("hardlink-spec");
    let a = assert_first_attempt_failed(&env, &rec, "has 2 hard links");
    assert!(
        a["rejected"]
            .as_str()
            .unwrap()
            .contains("`specs/models/llama.yaml` has 2 hard links")
    );
    assert_nothing_leaked(&env, &s);
}

/// The agent chmods the staged truth, the fetched truth, the job record and the jobs dir: none
/// of it changes (a sandboxed chmod is a no-op), and the worker validates with its own truth.
#[test]
fn chmod_of_the_truth_changes_nothing() {
    let (env, rec, s) = hostile("chmod-truth");
    assert_eq!(rec["state"], "succeeded", "{rec:#}");
    assert_eq!(attempts(&rec).len(), 1);
    let log = hostile_log(&env, &rec);
    assert!(log.contains("chmod 000"), "the agent did not try: {log}");
    let job = env.job_dir(&rec);
    for (path, want) in [
        (
            job.join("work/generate/sandbox/workspace/truth/config.json"),
            None,
        ),
        (job.join("fetch/truth/config.json"), None),
        (job.join("job.json"), None),
        (env.data_dir().join("jobs"), Some(0o755)),
    ] {
        let mode = std::fs::metadata(&path).unwrap().mode() & 0o777;
        assert!(
            mode != 0o000 && mode != 0o777,
            "{} is now {mode:o}",
            path.display()
        );
        if let Some(want) = want {
            assert_eq!(mode, want, "{}", path.display());
        }
    }
    assert_eq!(
        std::fs::metadata(job.join("work/generate/sandbox/workspace/truth/config.json"))
            .unwrap()
            .mode()
            & 0o777,
        0o444
    );
    assert_nothing_leaked(&env, &s);
}

/// `cancel` during a hanging run: the worker stops the run within its poll interval, records
/// it as interrupted with its transcript, and kills the agent's whole process group.
#[test]
fn cancel_stops_a_hanging_agent() {
    let env = Env::new("claude", "hang").set("HARCH_AGENT_TIMEOUT_S", "600");
    let id = env.enqueue();
    let mut worker = env.spawn_worker();
    let child_pid = |rec: &Value| {
        env.job_dir(rec)
            .join("work/generate/sandbox/home/child.pid")
    };
    wait_until("the agent runs", Duration::from_secs(120), || {
        let rec = env.record(&id);
        child_pid(&rec).exists()
            && runs(&env, &id)
                .first()
                .is_some_and(|a| a["phase"] == "running")
    });
    env.run(&["cancel", &id]);
    wait_exit(
        &mut worker,
        "the worker ends after cancel",
        Duration::from_secs(60),
    );
    let rec = env.record(&id);
    assert_eq!(rec["state"], "cancelled", "{rec:#}");
    let a = attempts(&rec);
    assert_eq!(a[0]["phase"], "interrupted", "{a:#?}");
    assert!(a[0]["failure_message"].as_str().unwrap().contains("cancel"));
    assert!(
        !pid_alive(&child_pid(&rec)),
        "the agent's child survived the cancel"
    );
    assert!(
        env.job_dir(&rec)
            .join("attempts/generate/1/generate-1.claude.jsonl")
            .is_file()
    );
}

/// SIGTERM during a hanging run: the run is stopped at once (not counted), the job is
/// checkpointed, and the next worker resumes it with a new, separately labelled run.
#[test]
fn sigterm_checkpoints_a_running_agent_and_the_job_resumes() {
    let env = Env::new("claude", "hang").set("HARCH_AGENT_TIMEOUT_S", "600");
    let id = env.enqueue();
    let mut worker = env.spawn_worker();
    wait_until("the agent runs", Duration::from_secs(120), || {
        runs(&env, &id)
            .first()
            .is_some_and(|a| a["phase"] == "running")
    });
    let job = env.data_dir().join("jobs").join(&id);
    wait_until("the agent's child starts", Duration::from_secs(30), || {
        job.join("work/generate/sandbox/home/child.pid").exists()
    });
    // SAFETY: signalling our own child.
    unsafe { libc::kill(worker.id() as i32, libc::SIGTERM) };
    let status = wait_exit(
        &mut worker,
        "the worker exits on SIGTERM",
        Duration::from_secs(60),
    );
    assert!(status.success(), "{status:?}");
    let rec = env.record(&id);
    assert_eq!(rec["state"], "pending", "{rec:#}");
    assert_eq!(stage(&rec, "generate")["state"], "pending");
    let a = attempts(&rec);
    assert_eq!(
        (a[0]["phase"].clone(), a[0]["counted"].clone()),
        ("interrupted".into(), false.into())
    );
    assert!(!pid_alive(
        &job.join("work/generate/sandbox/home/child.pid")
    ));

    let env = env.set("HARCH_PROMPT_NOTES", "SCENARIO: fix");
    env.run(&["run", "--once", "--concurrency", "1"]);
    let rec = env.record(&id);
    assert_eq!(rec["state"], "succeeded", "{rec:#}");
    let a = attempts(&rec);
    assert_eq!(a.len(), 2);
    assert_eq!(a[1]["label"], "generate-2");
    assert_eq!(a[1]["valid"], true);
    for n in [1, 2] {
        assert!(
            job.join(format!("attempts/generate/{n}/prompt.md"))
                .is_file()
        );
        assert!(
            job.join(format!("attempts/generate/{n}/generate-{n}.claude.jsonl"))
                .is_file()
        );
    }
}

/// A worker killed with SIGKILL during a run: the run is counted (it may have been the agent's
/// doing), its process group, still running, is killed before the workspace is used again, and
/// the next run gets the next number: no transcript is overwritten.
#[test]
fn a_worker_killed_mid_run_leaves_no_uncounted_run_and_no_orphan() {
    let env = Env::new("claude", "hang")
        .set("HARCH_AGENT_TIMEOUT_S", "600")
        .set("HARCH_MISSED_HEARTBEATS", "2");
    let id = env.enqueue();
    let mut worker = env.spawn_worker();
    let job = env.data_dir().join("jobs").join(&id);
    let child = job.join("work/generate/sandbox/home/child.pid");
    wait_until("the agent runs", Duration::from_secs(120), || {
        child.exists()
    });
    worker.kill().unwrap();
    worker.wait().unwrap();
    assert!(
        pid_alive(&child),
        "the orphaned agent should still run until a worker cleans up"
    );
    let before =
        std::fs::read(job.join("work/generate/sandbox/logs/generate-1.claude.jsonl")).unwrap();

    let env = env.set("HARCH_PROMPT_NOTES", "SCENARIO: fix");
    env.run(&["run", "--once", "--concurrency", "1"]);
    let rec = env.record(&id);
    assert_eq!(rec["state"], "succeeded", "{rec:#}");
    assert!(!pid_alive(&child), "the orphaned agent was not killed");
    let a = attempts(&rec);
    assert_eq!(a.len(), 2, "{a:#?}");
    assert_eq!(a[0]["phase"], "interrupted");
    assert_eq!(a[0]["counted"], true);
    assert_eq!(
        (a[0]["label"].clone(), a[1]["label"].clone()),
        ("generate-1".into(), "generate-2".into())
    );
    let kept1 = std::fs::read(job.join("attempts/generate/1/generate-1.claude.jsonl")).unwrap();
    assert!(
        kept1.starts_with(&before),
        "run 1's transcript was overwritten"
    );
    assert!(
        job.join("attempts/generate/2/generate-2.claude.jsonl")
            .is_file()
    );
}

/// A provider hiccup ends the run and retries the stage: the run is recorded (not counted),
/// and its prompt survives the stage retry next to the next run's.
#[test]
fn runs_are_kept_across_stage_retries() {
    let env = Env::new("claude", "ratelimit");
    let rec = env.job();
    assert_eq!(rec["state"], "succeeded", "{rec:#}");
    let a = attempts(&rec);
    assert_eq!(a[0]["failure"], "rate_limited", "{a:#?}");
    assert_eq!(a[0]["counted"], false);
    assert_eq!(a[1]["valid"], true);
    assert_eq!(stage(&rec, "generate")["attempts"], 2);
    let job = env.job_dir(&rec);
    for n in [1, 2] {
        assert!(
            job.join(format!("attempts/generate/{n}/prompt.md"))
                .is_file()
        );
    }
}

/// A job that spent its attempts keeps each run's prompt, transcript and validate report;
/// `logs --attempt` and `status` show them; `retry` gives it a fresh budget and it succeeds.
#[test]
fn failed_jobs_keep_their_runs_and_retry_gets_a_fresh_budget() {
    let env = Env::new("claude", "claim").set("HARCH_AGENT_ATTEMPTS", "1");
    let rec = env.job();
    let id = rec["id"].as_str().unwrap().to_string();
    assert_eq!(rec["state"], "failed", "{rec:#}");
    let run1 = env.job_dir(&rec).join("attempts/generate/1");
    for f in [
        "prompt.md",
        "generate-1.claude.jsonl",
        "validate.json",
        "files/specs/models/llama.yaml",
    ] {
        assert!(run1.join(f).is_file(), "{f} was not kept");
    }
    let report: Value =
        serde_json::from_slice(&std::fs::read(run1.join("validate.json")).unwrap()).unwrap();
    assert_eq!(report["valid"], false);

    let out = env.run(&["logs", &id, "--attempt", "1"]);
    let text = String::from_utf8(out.stdout).unwrap();
    assert!(
        text.contains("generate run 1 (round 0, label generate-1)"),
        "{text}"
    );
    assert!(text.contains("invalid ("), "{text}");
    assert!(
        text.contains("the worker's findings:") && text.contains("k_proj"),
        "{text}"
    );
    assert!(
        text.contains("transcript (generate-1.claude.jsonl"),
        "{text}"
    );
    let prompt = env
        .run(&["logs", &id, "--attempt", "1", "--show", "prompt"])
        .stdout;
    assert_eq!(prompt, std::fs::read(run1.join("prompt.md")).unwrap());
    let shown: Value = serde_json::from_slice(
        &env.run(&["logs", &id, "--attempt", "1", "--show", "report"])
            .stdout,
    )
    .unwrap();
    assert_eq!(shown["valid"], false);
    let missing = env.cmd(&["logs", &id, "--attempt", "7"]).output().unwrap();
    assert!(!missing.status.success());
    assert!(String::from_utf8_lossy(&missing.stderr).contains("has no agent run 7"));
    let status = String::from_utf8(env.run(&["status", &id]).stdout).unwrap();
    assert!(status.contains("attempt 1 (claude): invalid"), "{status}");
    assert!(status.contains("kept in attempts/generate/1/"), "{status}");

    let help = String::from_utf8(env.run(&["retry", "--help"]).stdout).unwrap();
    assert!(help.contains("fresh budget"), "{help}");
    let out = String::from_utf8(env.run(&["retry", &id]).stdout).unwrap();
    assert!(out.contains("fresh budget of 1 runs"), "{out}");
    env.run(&["run", "--once", "--concurrency", "1"]);
    let rec = env.record(&id);
    assert_eq!(rec["state"], "succeeded", "{rec:#}");
    assert_eq!(rec["retries"], 1);
    let a = attempts(&rec);
    assert_eq!(a.len(), 2, "{a:#?}");
    assert_eq!(
        (a[0]["round"].clone(), a[1]["round"].clone()),
        (0.into(), 1.into())
    );
    assert_eq!(a[1]["valid"], true);
    let status = String::from_utf8(env.run(&["status", &id]).stdout).unwrap();
    assert!(
        status.contains("round 1: attempt 2 (claude): valid"),
        "{status}"
    );
}

/// A stage timeout that cannot hold its agent runs is refused before the worker starts.
#[test]
fn incoherent_timeouts_are_refused_at_start_up() {
    let env = Env::new("claude", "fix");
    let toml = std::fs::read_to_string(project_root().join("queue.toml"))
        .unwrap()
        .replace(
            "[stages.timeout_s]\n",
            "[stages.timeout_s]\ngenerate = 60\n",
        );
    let config = env.tmp.path().join("queue.toml");
    std::fs::write(&config, toml).unwrap();
    let out = env
        .cmd(&["run", "--once", "--config", config.to_str().unwrap()])
        .output()
        .unwrap();
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("stages.timeout_s.generate = 60 s cannot hold its agent runs"),
        "{err}"
    );
    assert!(
        err.contains("agent.attempts (3) × (agent.timeout_s (60)"),
        "{err}"
    );
}
