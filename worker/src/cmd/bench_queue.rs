//! `harch-worker bench-queue`: enqueue and drain N no-op jobs on each backend; reports jobs/s
//! and the per-job orchestration overhead (everything but the stages' own work). Runs in a
//! temporary data dir and a fresh queue name, and removes both afterwards. The embedded
//! backend only, unless Redis is named (`--backends sqlite,redis`, or `--queue redis://…`):
//! a benchmark must not write 10,000 jobs into whatever Redis happens to listen on 6379.
//! The first Ctrl-C stops the drain and reports what was measured so far, marked interrupted;
//! a second exits at once.

use std::process::ExitCode;
use std::sync::Arc;
use std::time::Instant;

use harch_worker::pipeline::registry::StageRegistry;
use harch_worker::queue::cli::{block_on, setup};
use harch_worker::queue::config::{QueueFlags, Settings};
use harch_worker::queue::ops::enqueue;
use harch_worker::queue::record::{JobKind, JobRequest, JobState};
use harch_worker::queue::stage::Stage;
use harch_worker::queue::store::JobStore;
use harch_worker::queue::worker::{WorkerOptions, interrupted, run_worker};

#[derive(clap::Args)]
pub struct Args {
    /// Jobs per backend.
    #[arg(long, default_value_t = 10_000)]
    pub jobs: usize,
    /// Backends to measure, comma-separated: sqlite, redis (Redis only when named here or by
    /// --queue). With --queue: that queue only.
    #[arg(long, value_delimiter = ',', default_value = "sqlite")]
    pub backends: Vec<String>,
    /// Redis to use for the redis backend.
    #[arg(long, default_value = "redis://127.0.0.1:6379")]
    pub redis_url: String,
    /// Jobs run at the same time.
    #[arg(long, default_value_t = 8)]
    pub concurrency: usize,
    /// Print one object per backend (backend, jobs, done, enqueue_per_s, drain_per_s, drain_s,
    /// overhead_per_job_ms, failed, interrupted) as a JSON array; errors are JSON too.
    #[arg(long)]
    pub json: bool,
    #[command(flatten)]
    pub flags: QueueFlags,
}

struct Figures {
    backend: String,
    jobs: usize,
    /// Jobs that succeeded (all of them, unless interrupted).
    done: usize,
    enqueue_s: f64,
    drain_s: f64,
    stage_work_ms: u64,
    failed: usize,
    /// Ctrl-C stopped the measurement: the figures cover what was done by then.
    interrupted: bool,
}

pub fn run(args: Args) -> anyhow::Result<ExitCode> {
    let base = setup(&args.flags)?;
    // From here on a Ctrl-C stops the measurement instead of killing the process.
    harch_worker::queue::worker::listen_for_signals()?;
    // `--queue URL` measures that queue; `--data-dir DIR` holds the temporary records.
    let backends = match &args.flags.queue_url {
        Some(url) => vec![
            harch_worker::queue::config::QueueUrl::parse(url)?
                .backend_name()
                .to_string(),
        ],
        None => args.backends.clone(),
    };
    let mut rows = Vec::new();
    if !args.json {
        outln!(
            "{:<7} {:>7} {:>11} {:>11} {:>10} {:>16} {:>7}",
            "BACKEND",
            "JOBS",
            "ENQUEUE/S",
            "DRAIN/S",
            "DRAIN S",
            "OVERHEAD/JOB MS",
            "FAILED"
        );
    }
    let mut failed = 0;
    let mut stopped = false;
    for backend in &backends {
        let tmp = match &args.flags.data_dir {
            Some(dir) => {
                std::fs::create_dir_all(dir)?;
                tempfile::tempdir_in(dir)?
            }
            None => tempfile::tempdir()?,
        };
        let mut settings = base.clone();
        settings.worker.data_dir = tmp.path().to_path_buf();
        settings.worker.concurrency = args.concurrency;
        settings.queue.name = format!("harch-bench-{}", ulid::Ulid::generate());
        settings.queue.url = match backend.as_str() {
            "sqlite" => format!("sqlite://{}", tmp.path().join("queue.sqlite").display()),
            "redis" => args
                .flags
                .queue_url
                .clone()
                .unwrap_or(args.redis_url.clone()),
            other => anyhow::bail!("unknown backend `{other}` (sqlite, redis)"),
        };
        settings.check()?;
        eprintln!(
            "{backend}: {} no-op jobs, concurrency {}",
            args.jobs, args.concurrency
        );
        let figures = block_on(
            args.concurrency,
            measure(Arc::new(settings.clone()), backend, args.jobs),
        )?;
        if backend == "redis" {
            block_on(
                1,
                drop_redis_queue(&settings.queue.url, &settings.queue.name),
            )??;
        }
        let f = figures?;
        // Slot-time a job held minus its stages' own work, per job done.
        let slot_ms = f.drain_s * 1000.0 * args.concurrency as f64;
        let per = |x: f64, n: usize| if n == 0 { 0.0 } else { x / n as f64 };
        let overhead = per(slot_ms - f.stage_work_ms as f64, f.done);
        let drain_per_s = if f.drain_s > 0.0 {
            f.done as f64 / f.drain_s
        } else {
            0.0
        };
        rows.push(serde_json::json!({
            "backend": f.backend,
            "jobs": f.jobs,
            "done": f.done,
            "enqueue_per_s": f.jobs as f64 / f.enqueue_s,
            "drain_per_s": drain_per_s,
            "drain_s": f.drain_s,
            "overhead_per_job_ms": overhead,
            "failed": f.failed,
            "interrupted": f.interrupted,
        }));
        failed += f.failed;
        if !args.json {
            let jobs = match f.interrupted {
                true => format!("{}/{}", f.done, f.jobs),
                false => f.jobs.to_string(),
            };
            outln!(
                "{:<7} {:>7} {:>11.0} {:>11.0} {:>10.2} {:>16.2} {:>7}{}",
                f.backend,
                jobs,
                f.jobs as f64 / f.enqueue_s,
                drain_per_s,
                f.drain_s,
                overhead,
                f.failed,
                if f.interrupted { "  interrupted" } else { "" }
            );
        }
        if f.interrupted {
            stopped = true;
            break;
        }
    }
    if args.json {
        crate::cli::out::print_json(&rows)?;
    }
    if stopped {
        eprintln!(
            "interrupted: the figures cover the jobs done before Ctrl-C; later backends were not run"
        );
        return Ok(ExitCode::from(
            harch_worker::queue::worker::EXIT_INTERRUPTED as u8,
        ));
    }
    Ok(if failed == 0 {
        ExitCode::SUCCESS
    } else {
        ExitCode::from(1)
    })
}

async fn measure(settings: Arc<Settings>, backend: &str, n: usize) -> anyhow::Result<Figures> {
    let registry = StageRegistry::builtin();
    let requests: Vec<JobRequest> = (0..n)
        .map(|i| JobRequest {
            model_id: format!("bench/model-{i:06}"),
            revision: "main".into(),
            kind: JobKind::Revalidate,
            agent: "none".into(),
            guards: "all".into(),
            stages: vec![Stage::Noop],
            priority: 0,
            offline: true,
            exclude_library_spec: false,
            agent_model: None,
            ablation: None,
        })
        .collect();
    let t = Instant::now();
    enqueue(&settings, &registry, requests).await?;
    let enqueue_s = t.elapsed().as_secs_f64();
    let t = Instant::now();
    let opts = WorkerOptions {
        concurrency: settings.worker.concurrency,
        once: true,
        until_final: Vec::new(),
        handle_signals: true,
    };
    // Interrupted while enqueueing: nothing to drain.
    if !interrupted() {
        run_worker(settings.clone(), registry, opts).await?;
    }
    let drain_s = t.elapsed().as_secs_f64();
    let records = JobStore::open(settings.data_dir())?.list()?;
    let count = |state: JobState| records.iter().filter(|r| r.state == state).count();
    let stage_work_ms = records
        .iter()
        .flat_map(|r| r.stages.iter().map(|s| s.work_ms))
        .sum();
    Ok(Figures {
        backend: backend.to_string(),
        jobs: n,
        done: count(JobState::Succeeded),
        enqueue_s,
        drain_s,
        stage_work_ms,
        // Jobs an interrupt left waiting did not fail.
        failed: count(JobState::Failed) + count(JobState::Cancelled),
        interrupted: interrupted(),
    })
}

/// Deletes the benchmark queue's keys so repeated runs do not grow the Redis database.
async fn drop_redis_queue(url: &str, queue: &str) -> anyhow::Result<()> {
    let client = redis::Client::open(url)?;
    let mut conn = client.get_multiplexed_async_connection().await?;
    let keys: Vec<String> = redis::cmd("KEYS")
        .arg(format!("{queue}:*"))
        .query_async(&mut conn)
        .await?;
    for chunk in keys.chunks(500) {
        let _: () = redis::cmd("DEL").arg(chunk).query_async(&mut conn).await?;
    }
    Ok(())
}
