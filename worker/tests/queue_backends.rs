//! The queue end to end, through the real `harch-worker` binary, on both stores: enqueue and
//! dedupe, run to completion, cancel, retry, transient vs permanent failure, graceful stop, and
//! a worker killed with SIGKILL mid-stage whose job another worker completes exactly once,
//! tickets the store lost (and a real Redis restart mid-run) that workers queue again.
//!
//! Redis tests need a server at 127.0.0.1:6379 (or $HARCH_TEST_REDIS_URL). When it is absent
//! they fail with a message saying so, unless HARCH_SKIP_REDIS=1 asks to skip them.

use std::io::{Read, Write};
use std::net::TcpStream;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

use serde_json::Value;

const BIN: &str = env!("CARGO_BIN_EXE_harch-worker");

#[derive(Clone, Copy, Debug)]
enum Backend {
    Sqlite,
    Redis,
}

fn redis_url() -> String {
    std::env::var("HARCH_TEST_REDIS_URL").unwrap_or_else(|_| "redis://127.0.0.1:6379".into())
}

/// True when a Redis server answers PING.
fn redis_up(url: &str) -> bool {
    let addr = url
        .trim_start_matches("redis://")
        .split('/')
        .next()
        .unwrap_or("127.0.0.1:6379")
        .to_string();
    let Ok(addrs) = std::net::ToSocketAddrs::to_socket_addrs(&addr) else {
        return false;
    };
    addrs.into_iter().any(|a| {
        let Ok(mut s) = TcpStream::connect_timeout(&a, Duration::from_secs(1)) else {
            return false;
        };
        let _ = s.set_read_timeout(Some(Duration::from_secs(1)));
        let mut buf = [0u8; 7];
        s.write_all(b"PING\r\n").is_ok() && s.read_exact(&mut buf).is_ok() && &buf == b"+PONG\r\n"
    })
}

/// One isolated queue: its own data dir and, on Redis, its own queue name.
struct Env {
    _tmp: tempfile::TempDir,
    dir: PathBuf,
    backend: Backend,
    url: String,
    queue: String,
    extra_env: Vec<(String, String)>,
}

impl Env {
    /// None only when Redis is absent and HARCH_SKIP_REDIS=1.
    fn new(backend: Backend) -> Option<Env> {
        Env::on(backend, redis_url())
    }

    /// An environment whose Redis store is at `redis` (ignored for SQLite).
    fn on(backend: Backend, redis: String) -> Option<Env> {
        let tmp = tempfile::tempdir().unwrap();
        let dir = tmp.path().to_path_buf();
        let url = match backend {
            Backend::Sqlite => format!("sqlite://{}", dir.join("queue.sqlite").display()),
            Backend::Redis => {
                let url = redis;
                if !redis_up(&url) {
                    if std::env::var("HARCH_SKIP_REDIS").as_deref() == Ok("1") {
                        eprintln!(
                            "SKIPPED: Redis is not reachable at {url} and HARCH_SKIP_REDIS=1"
                        );
                        return None;
                    }
                    panic!(
                        "Redis is not reachable at {url}: start redis-server (CI provides one), \
                         or set HARCH_SKIP_REDIS=1 to skip the Redis queue tests explicitly"
                    );
                }
                url
            }
        };
        Some(Env {
            _tmp: tmp,
            dir,
            backend,
            url,
            queue: format!("harch-test-{}", ulid::Ulid::generate()),
            extra_env: Vec::new(),
        })
    }

    fn with_env(mut self, k: &str, v: &str) -> Env {
        self.extra_env.push((k.into(), v.into()));
        self
    }

    fn data(&self) -> PathBuf {
        self.dir.join("data")
    }

    fn cmd(&self, args: &[&str]) -> Command {
        let mut c = Command::new(BIN);
        c.args(args).current_dir(&self.dir);
        for (k, _) in std::env::vars() {
            if k.starts_with("HARCH_") {
                c.env_remove(k);
            }
        }
        c.env("HARCH_QUEUE_URL", &self.url)
            .env("HARCH_QUEUE_NAME", &self.queue)
            .env("HARCH_DATA_DIR", self.data())
            // Short leases so a killed worker's job moves on within seconds.
            .env("HARCH_HEARTBEAT_MS", "1000")
            .env("HARCH_MISSED_HEARTBEATS", "2")
            .env("HARCH_RETRY_BACKOFF_INITIAL_MS", "50")
            .env("HARCH_RETRY_BACKOFF_MAX_MS", "200")
            .env("HARCH_CANCEL_POLL_MS", "50")
            .env("RUST_LOG", "warn,harch_worker=info");
        for (k, v) in &self.extra_env {
            c.env(k, v);
        }
        c
    }

    fn run(&self, args: &[&str]) -> Output {
        let out = self.cmd(args).output().unwrap();
        assert!(
            out.status.success() || drained_with_failures(args, &out),
            "[{:?}] harch-worker {args:?} failed: {}\n{}",
            self.backend,
            out.status,
            String::from_utf8_lossy(&out.stderr)
        );
        out
    }

    fn enqueue(&self, models: &[&str], stages: &str) -> Vec<String> {
        let mut args = vec![
            "enqueue",
            "--kind",
            "revalidate",
            "--offline",
            "--stages",
            stages,
        ];
        args.extend_from_slice(models);
        let out = self.run(&args);
        String::from_utf8(out.stdout)
            .unwrap()
            .lines()
            .map(str::to_string)
            .collect()
    }

    fn status(&self, id: &str) -> Value {
        serde_json::from_slice(&self.run(&["status", id, "--json"]).stdout).unwrap()
    }

    fn all(&self) -> Vec<Value> {
        serde_json::from_slice::<Vec<Value>>(&self.run(&["status", "--json"]).stdout).unwrap()
    }

    fn drain(&self) {
        self.run(&["run", "--once", "--concurrency", "2"]);
    }

    fn spawn_worker(&self) -> Child {
        self.cmd(&["run", "--concurrency", "2"])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap()
    }

    fn job_dir(&self, id: &str) -> PathBuf {
        self.data().join("jobs").join(id)
    }

    /// Polls the job record until `pred` holds.
    fn wait_for(
        &self,
        id: &str,
        what: &str,
        limit: Duration,
        pred: impl Fn(&Value) -> bool,
    ) -> Value {
        let start = Instant::now();
        loop {
            let rec = self.status(id);
            if pred(&rec) {
                return rec;
            }
            assert!(
                start.elapsed() < limit,
                "[{:?}] job {id}: waited {limit:?} for {what}; record: {rec:#}",
                self.backend
            );
            std::thread::sleep(Duration::from_millis(50));
        }
    }
}

impl Env {
    /// Makes the store forget every ticket of this queue, as a Redis restart without persistence
    /// does (on SQLite: the rows are deleted). Returns how many keys or rows went.
    fn lose_tickets(&self) -> usize {
        match self.backend {
            Backend::Redis => delete_redis_keys(&self.url, &self.queue),
            Backend::Sqlite => {
                let rt = tokio::runtime::Builder::new_current_thread()
                    .enable_all()
                    .build()
                    .unwrap();
                rt.block_on(async {
                    let pool = sqlx::sqlite::SqlitePool::connect(&self.url).await.unwrap();
                    let done = sqlx::query("DELETE FROM Jobs")
                        .execute(&pool)
                        .await
                        .unwrap();
                    pool.close().await;
                    done.rows_affected() as usize
                })
            }
        }
    }
}

/// Deletes every key of `queue` on the Redis server at `url`; returns how many there were.
fn delete_redis_keys(url: &str, queue: &str) -> usize {
    let Ok(mut conn) = ::redis::Client::open(url).and_then(|c| c.get_connection()) else {
        return 0;
    };
    let keys: Vec<String> = ::redis::cmd("KEYS")
        .arg(format!("{queue}:*"))
        .query(&mut conn)
        .unwrap_or_default();
    if !keys.is_empty() {
        let _: ::redis::RedisResult<()> = ::redis::cmd("DEL").arg(&keys).query(&mut conn);
    }
    keys.len()
}

impl Drop for Env {
    /// Removes the test queue's keys so repeated runs do not grow the Redis database.
    fn drop(&mut self) {
        if matches!(self.backend, Backend::Redis) {
            delete_redis_keys(&self.url, &self.queue);
        }
    }
}

/// A Redis server of the test's own, configured like CI's (nothing kept on disk), so that the
/// test can kill and restart it without disturbing other tests.
struct OwnRedis {
    port: u16,
    dir: tempfile::TempDir,
    child: Option<Child>,
}

impl OwnRedis {
    /// None only when `redis-server` is not installed and HARCH_SKIP_REDIS=1.
    fn start() -> Option<OwnRedis> {
        let installed = Command::new("redis-server")
            .arg("--version")
            .output()
            .is_ok_and(|o| o.status.success());
        if !installed {
            if std::env::var("HARCH_SKIP_REDIS").as_deref() == Ok("1") {
                eprintln!("SKIPPED: redis-server is not installed and HARCH_SKIP_REDIS=1");
                return None;
            }
            panic!(
                "redis-server is not installed: this test runs a Redis of its own to restart it \
                 (install redis-server, or set HARCH_SKIP_REDIS=1 to skip the Redis tests)"
            );
        }
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port();
        let mut r = OwnRedis {
            port,
            dir: tempfile::tempdir().unwrap(),
            child: None,
        };
        r.spawn();
        Some(r)
    }

    fn url(&self) -> String {
        format!("redis://127.0.0.1:{}", self.port)
    }

    /// Starts the server (empty: it keeps nothing on disk) and waits until it answers.
    fn spawn(&mut self) {
        let child = Command::new("redis-server")
            .args(["--port", &self.port.to_string(), "--bind", "127.0.0.1"])
            .args(["--save", "", "--appendonly", "no"])
            .arg("--dir")
            .arg(self.dir.path())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        self.child = Some(child);
        let start = Instant::now();
        while !redis_up(&self.url()) {
            assert!(
                start.elapsed() < Duration::from_secs(10),
                "own redis-server on port {} did not come up",
                self.port
            );
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// SIGKILL: whatever the server held is gone.
    fn kill(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

impl Drop for OwnRedis {
    fn drop(&mut self) {
        self.kill();
    }
}

fn state(rec: &Value) -> &str {
    rec["state"].as_str().unwrap()
}

fn stage(rec: &Value, i: usize) -> &Value {
    &rec["stages"][i]
}

fn files_under(dir: &Path) -> Vec<String> {
    let mut out = Vec::new();
    fn walk(d: &Path, base: &Path, out: &mut Vec<String>) {
        for e in std::fs::read_dir(d).unwrap().filter_map(Result::ok) {
            let p = e.path();
            if p.is_dir() {
                walk(&p, base, out);
            } else {
                out.push(p.strip_prefix(base).unwrap().to_string_lossy().into_owned());
            }
        }
    }
    walk(dir, dir, &mut out);
    out.sort();
    out
}

fn kill_term(child: &Child) {
    let ok = Command::new("kill")
        .args(["-TERM", &child.id().to_string()])
        .status()
        .unwrap()
        .success();
    assert!(ok, "kill -TERM failed");
}

// ---- scenarios -----------------------------------------------------------------------------

fn enqueue_dedupes_and_validates(b: Backend) {
    let Some(env) = Env::new(b) else { return };
    let a = env.enqueue(&["org/a", "org/b"], "noop");
    assert_eq!(a.len(), 2);
    assert_ne!(a[0], a[1]);
    let again = env.enqueue(&["org/a"], "noop");
    assert_eq!(
        again,
        vec![a[0].clone()],
        "same model and revision while pending: same job"
    );
    let other_rev = env.run(&[
        "enqueue",
        "--kind",
        "revalidate",
        "--stages",
        "noop",
        "--revision",
        "v2",
        "org/a",
    ]);
    let other_rev = String::from_utf8(other_rev.stdout).unwrap();
    assert_ne!(other_rev.trim(), a[0], "another revision is another job");

    // One bad id among good ones: nothing at all is queued, and the reason names the id.
    for bad in [
        "../etc/passwd",
        "org/..",
        "-org/x",
        "org/x y",
        "noslash",
        "org/a/b",
    ] {
        let out = env
            .cmd(&["enqueue", "--stages", "noop", "--", "org/fine", bad])
            .output()
            .unwrap();
        assert!(!out.status.success(), "{bad} accepted");
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(err.contains(bad), "error for {bad} does not name it: {err}");
    }
    let out = env
        .cmd(&["enqueue", "--stages", "fecth", "org/c"])
        .output()
        .unwrap();
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("unknown stage `fecth`"));
    let out = env
        .cmd(&["enqueue", "--stages", "noop", "--guards", "bogus", "org/c"])
        .output()
        .unwrap();
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("bad --guards `bogus`"));
    assert_eq!(env.all().len(), 3, "rejected requests left records behind");
}

fn runs_jobs_to_completion(b: Backend) {
    let Some(env) = Env::new(b) else { return };
    let ids = env.enqueue(&["org/a", "org/b", "org/c"], "noop,sleep:100");
    env.drain();
    for id in &ids {
        let rec = env.status(id);
        assert_eq!(state(&rec), "succeeded", "{rec:#}");
        assert_eq!(rec["deliveries"], 1);
        for i in 0..2 {
            assert_eq!(stage(&rec, i)["state"], "done");
            assert_eq!(stage(&rec, i)["attempts"], 1);
        }
        assert_eq!(stage(&rec, 1)["artifacts"][0], "sleep-100/slept.txt");
        assert!(env.job_dir(id).join("sleep-100/slept.txt").is_file());
        assert!(!env.job_dir(id).join(".staging").exists());
    }
    // A finished job no longer blocks its model: enqueueing again makes a new job.
    let again = env.enqueue(&["org/a"], "noop");
    assert_ne!(again[0], ids[0]);
    let human = String::from_utf8(env.run(&["status"]).stdout).unwrap();
    assert!(
        human.contains("succeeded") && human.contains("org/a@main"),
        "{human}"
    );
    let logs = String::from_utf8(env.run(&["logs", &ids[0]]).stdout).unwrap();
    assert!(logs.contains("stage sleep:100: done"), "{logs}");
    assert!(logs.contains("job succeeded"), "{logs}");
}

fn transient_retries_permanent_fails_at_once(b: Backend) {
    let Some(env) = Env::new(b) else { return };
    let env = env.with_env("HARCH_RETRY_MAX_ATTEMPTS", "3");
    let flaky = env.enqueue(&["org/flaky"], "flaky:2,noop")[0].clone();
    let exhausted = env.enqueue(&["org/exhausted"], "flaky:9")[0].clone();
    let permanent = env.enqueue(&["org/permanent"], "noop,fail")[0].clone();
    env.drain();

    let rec = env.status(&flaky);
    assert_eq!(state(&rec), "succeeded", "{rec:#}");
    assert_eq!(
        stage(&rec, 0)["attempts"],
        3,
        "two transient failures, then success"
    );
    let logs = String::from_utf8(env.run(&["logs", &flaky]).stdout).unwrap();
    assert_eq!(logs.matches("failed (transient)").count(), 2, "{logs}");

    let rec = env.status(&exhausted);
    assert_eq!(state(&rec), "failed");
    assert_eq!(rec["failure"], "transient");
    assert_eq!(stage(&rec, 0)["attempts"], 3);
    assert!(
        rec["last_error"]
            .as_str()
            .unwrap()
            .contains("gave up after 3 attempts")
    );

    let rec = env.status(&permanent);
    assert_eq!(state(&rec), "failed");
    assert_eq!(rec["failure"], "permanent");
    assert_eq!(
        stage(&rec, 1)["attempts"],
        1,
        "a permanent failure is not retried"
    );
    assert!(rec["last_error"].as_str().unwrap().contains("always fails"));
}

fn cancel_and_retry(b: Backend) {
    let Some(env) = Env::new(b) else { return };
    // Pending: cancelled at once, never runs; retry queues it again and it completes.
    let pending = env.enqueue(&["org/pending"], "noop")[0].clone();
    env.run(&["cancel", &pending]);
    assert_eq!(state(&env.status(&pending)), "cancelled");
    let out = env.cmd(&["cancel", &pending]).output().unwrap();
    assert!(
        !out.status.success(),
        "cancelling a cancelled job must fail"
    );

    // Failed permanently after a completed stage: retry resumes after that stage.
    let failing = env.enqueue(&["org/failing"], "sleep:50,fail")[0].clone();
    env.drain();
    assert_eq!(state(&env.status(&pending)), "cancelled");
    assert_eq!(stage(&env.status(&pending), 0)["attempts"], 0);
    assert_eq!(state(&env.status(&failing)), "failed");

    env.run(&["retry", &pending]);
    env.run(&["retry", &failing]);
    let out = env.cmd(&["retry", &failing]).output().unwrap();
    assert!(!out.status.success(), "retrying a pending job must fail");
    env.drain();
    let rec = env.status(&pending);
    assert_eq!(state(&rec), "succeeded", "{rec:#}");
    let rec = env.status(&failing);
    assert_eq!(state(&rec), "failed");
    assert_eq!(rec["deliveries"], 2);
    assert_eq!(
        stage(&rec, 0)["attempts"],
        1,
        "the completed stage did not run again"
    );
    assert_eq!(
        stage(&rec, 1)["attempts"],
        1,
        "retry gives the failed stage a fresh budget"
    );

    // Running: the stage is stopped within the cancel poll, the job ends cancelled.
    let running = env.enqueue(&["org/running"], "sleep:30000")[0].clone();
    let mut worker = env.spawn_worker();
    env.wait_for(
        &running,
        "the stage to start",
        Duration::from_secs(20),
        |r| stage(r, 0)["state"] == "running",
    );
    let t = Instant::now();
    env.run(&["cancel", &running]);
    let rec = env.wait_for(&running, "cancel", Duration::from_secs(10), |r| {
        state(r) == "cancelled"
    });
    assert!(
        t.elapsed() < Duration::from_secs(5),
        "cancel took {:?}",
        t.elapsed()
    );
    assert_ne!(stage(&rec, 0)["state"], "done");
    kill_term(&worker);
    assert!(worker.wait().unwrap().success());
}

fn sigkill_mid_stage_resumes_exactly_once(b: Backend) {
    let Some(env) = Env::new(b) else { return };
    let id = env.enqueue(&["org/crash"], "sleep:200,sleep:2500,noop")[0].clone();
    let mut first = env.spawn_worker();
    env.wait_for(&id, "stage 2 to start", Duration::from_secs(20), |r| {
        stage(r, 1)["state"] == "running"
    });
    first.kill().unwrap(); // SIGKILL: no chance to checkpoint
    first.wait().unwrap();
    assert_eq!(
        state(&env.status(&id)),
        "running",
        "the dead worker still holds the job"
    );

    // A new worker picks the job up once the dead one's lease runs out (2 s here).
    let t = Instant::now();
    env.run(&["run", "--once"]);
    let rec = env.status(&id);
    assert_eq!(state(&rec), "succeeded", "{rec:#}");
    assert!(
        t.elapsed() < Duration::from_secs(30),
        "resume took {:?}",
        t.elapsed()
    );
    assert_eq!(rec["deliveries"], 2);
    assert_eq!(stage(&rec, 0)["attempts"], 1, "completed stage ran again");
    assert_eq!(stage(&rec, 1)["attempts"], 2, "interrupted stage resumes");
    assert_eq!(stage(&rec, 2)["attempts"], 1);
    let files: Vec<String> = files_under(&env.job_dir(&id))
        .into_iter()
        .filter(|f| !f.ends_with(".lock"))
        .collect();
    assert_eq!(
        files,
        vec![
            "job.json",
            "job.log",
            "sleep-200/slept.txt",
            "sleep-2500/slept.txt"
        ],
        "artifacts duplicated or staging left behind"
    );
    let second = std::fs::read_to_string(env.job_dir(&id).join("sleep-2500/slept.txt")).unwrap();
    assert!(second.contains("attempt 2"), "{second}");
    let logs = String::from_utf8(env.run(&["logs", &id]).stdout).unwrap();
    assert_eq!(logs.matches("stage sleep:200: done").count(), 1, "{logs}");
    assert_eq!(logs.matches("job succeeded").count(), 1, "{logs}");
}

fn sigterm_checkpoints_between_stages(b: Backend) {
    let Some(env) = Env::new(b) else { return };
    let id = env.enqueue(&["org/graceful"], "sleep:1000,noop")[0].clone();
    let mut worker = env.spawn_worker();
    env.wait_for(&id, "stage 1 to start", Duration::from_secs(20), |r| {
        stage(r, 0)["state"] == "running"
    });
    kill_term(&worker);
    let status = worker.wait().unwrap();
    assert!(status.success(), "worker exited with {status}");
    let rec = env.status(&id);
    assert_eq!(
        stage(&rec, 0)["state"],
        "done",
        "the running stage was let finish: {rec:#}"
    );
    assert_eq!(state(&rec), "pending", "the job was checkpointed");
    env.run(&["run", "--once"]);
    let rec = env.status(&id);
    assert_eq!(state(&rec), "succeeded", "{rec:#}");
    assert_eq!(stage(&rec, 0)["attempts"], 1);
}

fn lost_tickets_are_queued_again(b: Backend) {
    let Some(env) = Env::new(b) else { return };
    let env = env.with_env("HARCH_RECOVER_INTERVAL_S", "1");
    let ids = env.enqueue(&["org/l1", "org/l2", "org/l3"], "noop");
    let lost = env.lose_tickets();
    assert!(
        lost >= 3,
        "[{b:?}] expected the tickets to be there to lose, found {lost}"
    );
    // The worker finds three pending jobs that no ticket carries and queues them again.
    let mut worker = env.spawn_worker();
    for id in &ids {
        env.wait_for(
            id,
            "the job to be queued again and run",
            Duration::from_secs(30),
            |r| state(r) == "succeeded",
        );
    }
    kill_term(&worker);
    assert!(worker.wait().unwrap().success());
    for id in &ids {
        let rec = env.status(id);
        assert_eq!(rec["deliveries"], 1, "{rec:#}");
        assert_eq!(rec["queue_tasks"].as_array().unwrap().len(), 2, "{rec:#}");
        let logs = String::from_utf8(env.run(&["logs", id]).stdout).unwrap();
        assert_eq!(
            logs.matches("had no ticket for this job").count(),
            1,
            "{logs}"
        );
    }
}

/// A Redis restart (SIGKILL, then an empty server on the same port) while a worker runs: jobs
/// that were waiting lose their tickets, running ones their leases; every job still completes,
/// once, without duplicated artifacts.
#[test]
fn redis_restart_mid_run_loses_no_job() {
    let Some(mut redis) = OwnRedis::start() else {
        return;
    };
    let env = Env::on(Backend::Redis, redis.url())
        .expect("own Redis is up")
        .with_env("HARCH_RECOVER_INTERVAL_S", "1")
        .with_env("HARCH_BATCH_SIZE", "1");
    let models: Vec<String> = (0..8).map(|i| format!("org/restart-{i}")).collect();
    let models: Vec<&str> = models.iter().map(String::as_str).collect();
    let ids = env.enqueue(&models, "sleep:800,noop");
    let mut worker = env.spawn_worker();
    let start = Instant::now();
    let waiting = loop {
        let all = env.all();
        let done = all.iter().filter(|r| state(r) == "succeeded").count();
        if done >= 1 {
            break all.iter().filter(|r| state(r) == "pending").count();
        }
        assert!(
            start.elapsed() < Duration::from_secs(30),
            "no job finished before the restart"
        );
        std::thread::sleep(Duration::from_millis(50));
    };
    assert!(
        waiting >= 2,
        "too few jobs left waiting to test the restart ({waiting})"
    );
    redis.kill();
    std::thread::sleep(Duration::from_millis(300));
    redis.spawn();

    for id in &ids {
        env.wait_for(
            id,
            "success after the Redis restart",
            Duration::from_secs(60),
            |r| state(r) == "succeeded",
        );
    }
    kill_term(&worker);
    worker.wait().unwrap();
    let mut requeued = 0;
    for id in &ids {
        let logs = String::from_utf8(env.run(&["logs", id]).stdout).unwrap();
        assert_eq!(logs.matches("job succeeded").count(), 1, "{logs}");
        requeued += logs.matches("had no ticket for this job").count();
        let files: Vec<String> = files_under(&env.job_dir(id))
            .into_iter()
            .filter(|f| !f.ends_with(".lock"))
            .collect();
        assert_eq!(
            files,
            vec!["job.json", "job.log", "sleep-800/slept.txt"],
            "artifacts duplicated or staging left behind"
        );
    }
    // Tickets the worker had already fetched (up to its batch) still ran from memory; the rest
    // of the waiting jobs existed only in their records and were queued again.
    assert!(
        requeued >= 1,
        "{waiting} jobs were waiting when Redis died, yet none was queued again"
    );
}

/// apalis-redis promotes every due ticket with one Lua `unpack`, which fails past ~8,000; the
/// worker promotes in chunks first. 9,000 tickets due at once all reach the active list.
#[test]
fn redis_promotes_more_due_tickets_than_lua_can_unpack() {
    use harch_worker::queue::backend::QueueBackend;
    use harch_worker::queue::config::{DEFAULT_TOML, Settings};
    let Some(env) = Env::new(Backend::Redis) else {
        return;
    };
    let mut settings = Settings::parse(DEFAULT_TOML, "default").unwrap();
    settings.queue.url = env.url.clone();
    settings.queue.name = env.queue.clone();
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(async {
        let mut backend = QueueBackend::connect(&settings).await.unwrap();
        let tickets: Vec<(String, u32, String)> = (0..9000)
            .map(|i| (format!("job-{i}"), 0, QueueBackend::new_task_id()))
            .collect();
        for chunk in tickets.chunks(500) {
            backend.push_many(chunk).await.unwrap();
        }
        let QueueBackend::Redis(storage) = &mut backend else {
            unreachable!()
        };
        let config = storage.get_config().clone();
        let mut conn = storage.get_connection().clone();
        let due: usize = ::redis::cmd("ZCARD")
            .arg(config.scheduled_jobs_set())
            .query_async(&mut conn)
            .await
            .unwrap();
        assert_eq!(due, 9000, "apalis-redis schedules every pushed ticket");
        assert_eq!(backend.promote_due().await.unwrap(), 9000);
        let active: usize = ::redis::cmd("LLEN")
            .arg(config.active_jobs_list())
            .query_async(&mut conn)
            .await
            .unwrap();
        let due: usize = ::redis::cmd("ZCARD")
            .arg(config.scheduled_jobs_set())
            .query_async(&mut conn)
            .await
            .unwrap();
        assert_eq!((active, due), (9000, 0));
        let live = backend
            .live_tickets(&tickets.iter().map(|t| t.2.clone()).collect::<Vec<_>>())
            .await
            .unwrap();
        assert_eq!(live.len(), 9000, "promoted tickets are still live");
    });
}

/// Every key a worker leaves in Redis is under the queue's prefix, and none is kept forever:
/// finished tickets and dead workers get lifetimes (queue.finished_ttl_s,
/// queue.dead_worker_ttl_s), and what expired is swept away. On a Redis of the test's own, so
/// that `KEYS *` sees only this test's keys.
#[test]
fn redis_keys_expire_and_stay_under_the_prefix() {
    let Some(redis) = OwnRedis::start() else {
        return;
    };
    let env = Env::on(Backend::Redis, redis.url())
        .expect("own Redis is up")
        .with_env("HARCH_FINISHED_TTL_S", "3600")
        .with_env("HARCH_DEAD_WORKER_TTL_S", "1");
    let mut conn = ::redis::Client::open(redis.url())
        .unwrap()
        .get_connection()
        .unwrap();
    let keys = |conn: &mut ::redis::Connection| -> Vec<String> {
        let mut k: Vec<String> = ::redis::cmd("KEYS").arg("*").query(conn).unwrap();
        k.sort();
        k
    };
    let ttl = |conn: &mut ::redis::Connection, key: &str| -> i64 {
        ::redis::cmd("TTL").arg(key).query(conn).unwrap()
    };
    let prefix = format!("{}:", env.queue);
    let registered = |conn: &mut ::redis::Connection| -> Vec<String> {
        ::redis::cmd("ZRANGE")
            .arg(format!("{prefix}workers"))
            .arg(0)
            .arg(-1)
            .query(conn)
            .unwrap()
    };
    let ids = env.enqueue(&["org/k1", "org/k2"], "noop");
    env.drain();
    for id in &ids {
        assert_eq!(state(&env.status(id)), "succeeded");
    }
    let all = keys(&mut conn);
    let outside: Vec<&String> = all.iter().filter(|k| !k.starts_with(&prefix)).collect();
    assert!(outside.is_empty(), "keys outside `{prefix}`: {outside:?}");
    // Each finished ticket's meta hash expires; the stopped worker left no keys of its own.
    let meta: Vec<&String> = all
        .iter()
        .filter(|k| k.starts_with(&format!("{prefix}meta:")))
        .collect();
    assert_eq!(meta.len(), 2, "{all:?}");
    for k in &meta {
        let t = ttl(&mut conn, k);
        assert!(t > 0 && t <= 3600, "{k}: TTL {t}");
    }
    assert!(
        !all.iter().any(|k| k.contains(":workers:metadata:")),
        "a stopped worker's metadata stayed: {all:?}"
    );
    let workers = registered(&mut conn);
    assert!(
        workers.is_empty(),
        "a stopped worker stayed registered: {workers:?}"
    );

    // A worker killed with SIGKILL: its metadata hash has a lifetime from the start.
    let mut worker = env.spawn_worker();
    let deadline = Instant::now() + Duration::from_secs(30);
    let metadata = loop {
        if let Some(k) = keys(&mut conn)
            .into_iter()
            .find(|k| k.contains(":workers:metadata:"))
        {
            break k;
        }
        assert!(
            Instant::now() < deadline,
            "the worker registered no metadata in 30 s"
        );
        std::thread::sleep(Duration::from_millis(50));
    };
    let t = ttl(&mut conn, &metadata);
    // lease (1 s × 2) + dead_worker_ttl_s (1)
    assert!(t > 0 && t <= 3, "{metadata}: TTL {t}");
    worker.kill().unwrap();
    worker.wait().unwrap();
    std::thread::sleep(Duration::from_millis(3500));
    assert_eq!(
        ttl(&mut conn, &metadata),
        -2,
        "the dead worker's key outlived its TTL"
    );

    // Finished tickets whose meta hash expired leave the done set and the data hash at the
    // next sweep (here: a drain's, at its start and end).
    for k in &meta {
        let _: () = ::redis::cmd("EXPIRE")
            .arg(*k)
            .arg(1)
            .query(&mut conn)
            .unwrap();
    }
    std::thread::sleep(Duration::from_millis(1500));
    env.drain();
    let done: Vec<String> = ::redis::cmd("SMEMBERS")
        .arg(format!("{prefix}done"))
        .query(&mut conn)
        .unwrap();
    let data: usize = ::redis::cmd("HLEN")
        .arg(format!("{prefix}data"))
        .query(&mut conn)
        .unwrap();
    assert!(
        done.is_empty() && data == 0,
        "done {done:?}, {data} data fields"
    );
    let workers = registered(&mut conn);
    assert!(
        workers.is_empty(),
        "the dead worker stayed registered: {workers:?}"
    );
    let outside: Vec<String> = keys(&mut conn)
        .into_iter()
        .filter(|k| !k.starts_with(&prefix))
        .collect();
    assert!(outside.is_empty(), "{outside:?}");
}

/// The committed benchmark still runs and reports its figures (at a size tests can afford).
#[test]
fn bench_queue_reports_figures() {
    let backends = if Env::new(Backend::Redis).is_some() {
        "sqlite,redis"
    } else {
        "sqlite"
    };
    let Some(env) = Env::new(Backend::Sqlite) else {
        return;
    };
    let out = env.run(&[
        "bench-queue",
        "--jobs",
        "40",
        "--backends",
        backends,
        "--redis-url",
        &redis_url(),
    ]);
    let table = String::from_utf8(out.stdout).unwrap();
    assert!(
        table.contains("DRAIN/S") && table.contains("OVERHEAD/JOB MS"),
        "{table}"
    );
    for b in backends.split(',') {
        let row = table
            .lines()
            .find(|l| l.starts_with(b))
            .unwrap_or_else(|| panic!("no {b} row in {table}"));
        let cols: Vec<&str> = row.split_whitespace().collect();
        assert_eq!(cols[1], "40", "{row}");
        assert_eq!(cols.last(), Some(&"0"), "failed jobs in {row}");
    }
}

macro_rules! on_both_backends {
    ($($name:ident),* $(,)?) => {
        mod sqlite {
            $(#[test] fn $name() { super::$name(super::Backend::Sqlite) })*
        }
        mod redis {
            $(#[test] fn $name() { super::$name(super::Backend::Redis) })*
        }
    };
}

on_both_backends!(
    enqueue_dedupes_and_validates,
    runs_jobs_to_completion,
    transient_retries_permanent_fails_at_once,
    cancel_and_retry,
    sigkill_mid_stage_resumes_exactly_once,
    sigterm_checkpoints_between_stages,
    lost_tickets_are_queued_again,
);

/// `run --once` exits 1 when a job it drained failed: the tests read the job's record for that.
fn drained_with_failures(args: &[&str], out: &Output) -> bool {
    args.starts_with(&["run", "--once"]) && out.status.code() == Some(1)
}
