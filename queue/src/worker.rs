//! A worker process: takes tickets from the store and runs their jobs, until asked to stop
//! (SIGINT/SIGTERM: stop taking jobs, finish or checkpoint running ones) or, with `once`, until
//! no job is pending or running.

use std::sync::Arc;
use std::sync::OnceLock;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use apalis::prelude::*;
use tokio::sync::watch;
use tracing::{error, info, warn};

use super::backend::{JobTicket, QueueBackend};
use super::pipeline::{Delivery, Pipeline, RunOutcome};
use super::recover::requeue_lost;
use harch_jobs::config::Settings;
use harch_jobs::record::JobState;
use harch_jobs::store::JobStore;

/// What every delivery of one apalis worker shares.
struct Shared {
    delivery: Delivery,
    pipeline: Arc<dyn Pipeline>,
}

/// Builds and runs one apalis worker over a concrete store (the two stores have different
/// types, so this is a macro rather than a generic function with a page of bounds).
macro_rules! run_apalis {
    ($backend:expr, $name:expr, $concurrency:expr, $state:expr, $stop:expr) => {{
        let stop = $stop.clone();
        WorkerBuilder::new($name.as_str())
            .backend($backend)
            .concurrency($concurrency)
            // Without this every job shares one task: a job's file I/O would stall the others.
            .parallelize(tokio::spawn)
            .catch_panic()
            // A delivery's failure is logged by `handle_ticket` when it is one; apalis's own
            // ERROR would also fire for a clean stop, whose checkpoint returns an error so that
            // the store delivers the ticket again.
            .layer(apalis::layers::tracing::TraceLayer::new().on_failure(
                apalis::layers::tracing::DefaultOnFailure::new().level(tracing::Level::DEBUG),
            ))
            .data($state)
            .build(handle_ticket)
            .run_with_ctx(move |ctx| {
                let mut stop = stop.clone();
                async move {
                    let _ = stop.wait_for(|s| *s).await;
                    // `stop` refuses a worker that has not started yet; wait until it has.
                    while ctx.stop().is_err() {
                        tokio::time::sleep(Duration::from_millis(20)).await;
                    }
                    Ok(())
                }
            })
            .await
    }};
}

#[derive(Debug, Clone)]
pub struct WorkerOptions {
    pub concurrency: usize,
    /// Exit when no job is pending or running.
    pub once: bool,
    /// Exit when these jobs are all final (used by `revalidate`, which waits for its own jobs).
    pub until_final: Vec<String>,
    /// Also stop on SIGINT/SIGTERM (off in tests that run workers in-process).
    pub handle_signals: bool,
}

/// Runs a worker until it is told to stop or, with `once`, until the queue is drained.
pub async fn run_worker(
    settings: Arc<Settings>,
    pipeline: impl Pipeline,
    opts: WorkerOptions,
) -> anyhow::Result<()> {
    let pipeline: Arc<dyn Pipeline> = Arc::new(pipeline);
    // The pipeline gets its own sections, never the queue's.
    let pipeline_settings = Arc::new(settings.pipeline());
    let store = JobStore::open(settings.data_dir())?;
    let (stop_tx, stop_rx) = watch::channel(false);
    let stop_tx = Arc::new(stop_tx);
    if opts.handle_signals {
        tokio::spawn(stop_on_signal(listen_for_signals()?, stop_tx.clone()));
    }
    if opts.once {
        tokio::spawn(stop_when(store.clone(), stop_tx.clone(), Vec::new()));
    } else if !opts.until_final.is_empty() {
        tokio::spawn(stop_when(
            store.clone(),
            stop_tx.clone(),
            opts.until_final.clone(),
        ));
    }
    let mut generation = 0u32;
    loop {
        let name = worker_name(generation);
        let state = Arc::new(Shared {
            delivery: Delivery {
                settings: pipeline_settings.clone(),
                store: store.clone(),
                worker_name: name.clone(),
                shutdown: stop_rx.clone(),
            },
            pipeline: pipeline.clone(),
        });
        let mut backend = QueueBackend::connect(&settings).await?;
        backend.promote_due().await?;
        // A (re)connect may follow a store restart that lost every ticket.
        if let Err(e) = requeue_lost(&store, &mut backend, settings.lease()).await {
            warn!(error = %format!("{e:#}"), "cannot check the store for lost tickets");
        }
        sweep(&mut backend, &settings).await;
        let (maintenance_stop, maintenance_rx) = watch::channel(false);
        tokio::spawn(maintain(
            settings.clone(),
            store.clone(),
            backend.clone(),
            name.clone(),
            stop_rx.clone(),
            maintenance_rx,
        ));
        info!(worker = %name, backend = backend.name(), concurrency = opts.concurrency, "worker started");
        let mut housekeeping = backend.clone();
        let result = match backend {
            QueueBackend::Sqlite(b) => run_apalis!(b, name, opts.concurrency, state, stop_rx),
            QueueBackend::Redis(b) => run_apalis!(b, name, opts.concurrency, state, stop_rx),
        };
        let _ = maintenance_stop.send(true);
        // What this worker finished gets its lifetime now, not at the next worker's sweep.
        sweep(&mut housekeeping, &settings).await;
        if let Err(e) = housekeeping.deregister_worker(&name).await {
            warn!(worker = %name, error = %format!("{e:#}"), "cannot deregister the worker");
        }
        if *stop_rx.borrow() {
            info!(worker = %name, "worker stopped");
            return result.map_err(|e| anyhow::anyhow!("worker {name}: {e}"));
        }
        // The store went away under us (e.g. a Redis restart): start again under a new name,
        // since the store may still hold the old one as alive.
        generation += 1;
        match result {
            Ok(()) => warn!(worker = %name, "worker ended without being asked to; restarting"),
            Err(e) => error!(worker = %name, error = %e, "worker failed; restarting"),
        }
        tokio::time::sleep(Duration::from_secs(1)).await;
    }
}

/// The apalis handler: one delivery of one job.
async fn handle_ticket(ticket: JobTicket, state: Data<Arc<Shared>>) -> Result<(), BoxDynError> {
    match state.pipeline.run(&state.delivery, &ticket.job_id).await {
        Ok(RunOutcome::Checkpointed) => {
            // An error makes the store deliver the ticket again; the record says where to resume.
            Err("worker stopping: job checkpointed, resumes on its next delivery".into())
        }
        Ok(_) => Ok(()),
        Err(e) => {
            error!(job = %ticket.job_id, error = %format!("{e:#}"), "job delivery failed");
            Err(e.into())
        }
    }
}

/// Housekeeping while one apalis worker runs, on its store connection: promotes due Redis
/// tickets every heartbeat (so a large enqueue while all job slots are busy does not pile up
/// more due tickets than apalis-redis can promote), and every `recover_interval` queues again
/// jobs whose tickets the store lost. Ends with the worker (`stop`) or with this generation of
/// it (`done`).
async fn maintain(
    settings: Arc<Settings>,
    store: JobStore,
    mut backend: QueueBackend,
    name: String,
    mut stop: watch::Receiver<bool>,
    mut done: watch::Receiver<bool>,
) {
    let mut last_recover = tokio::time::Instant::now();
    loop {
        tokio::select! {
            _ = tokio::time::sleep(settings.heartbeat()) => {}
            _ = stop.wait_for(|s| *s) => return,
            _ = done.wait_for(|s| *s) => return,
        }
        if let Err(e) = backend.promote_due().await {
            warn!(error = %format!("{e:#}"), "cannot promote due tickets");
        }
        if let Err(e) = backend.renew_worker(&name).await {
            warn!(error = %format!("{e:#}"), "cannot renew the worker's keys");
        }
        if last_recover.elapsed() >= settings.recover_interval() {
            last_recover = tokio::time::Instant::now();
            if let Err(e) = requeue_lost(&store, &mut backend, settings.lease()).await {
                warn!(error = %format!("{e:#}"), "cannot check the store for lost tickets");
            }
            sweep(&mut backend, &settings).await;
        }
    }
}

/// Expires what finished tickets and dead workers left in the store (Redis; docs/queue.md).
async fn sweep(backend: &mut QueueBackend, settings: &Settings) {
    match backend
        .sweep(super::redis_keys::KeyLifetimes::of(settings))
        .await
    {
        Ok((0, 0)) => {}
        Ok((tickets, workers)) => {
            info!(
                tickets,
                workers, "removed expired tickets and dead workers from the store"
            )
        }
        Err(e) => warn!(error = %format!("{e:#}"), "cannot expire old keys in the store"),
    }
}

static INTERRUPTED: AtomicBool = AtomicBool::new(false);
static SIGNALS: OnceLock<watch::Receiver<bool>> = OnceLock::new();

/// Whether this process got SIGINT or SIGTERM (after [`listen_for_signals`]): `bench-queue`
/// then reports what it measured as interrupted.
pub fn interrupted() -> bool {
    INTERRUPTED.load(Ordering::Relaxed)
}

/// The exit status of a process ended by a second interrupt (128 + SIGINT, as shells report).
pub const EXIT_INTERRUPTED: i32 = 130;

/// Listens for SIGINT/SIGTERM for the rest of the process, from the moment this returns; the
/// receiver turns true at the first signal. The first stops every worker cleanly (running
/// stages finish or checkpoint); a second ends the process at once: the jobs it was running
/// stay `running` until their lease runs out, and are then delivered again from their last
/// completed stage. Listening on a thread of its own keeps it alive between runtimes (a
/// signal handler, once installed, swallows signals nobody reads).
pub fn listen_for_signals() -> anyhow::Result<watch::Receiver<bool>> {
    if let Some(rx) = SIGNALS.get() {
        return Ok(rx.clone());
    }
    use tokio::signal::unix::{SignalKind, signal};
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(|e| anyhow::anyhow!("cannot start the signal listener: {e}"))?;
    // Installed here, before returning: a signal from now on is ours.
    let (term, int) = {
        let _in_rt = rt.enter();
        (
            signal(SignalKind::terminate()),
            signal(SignalKind::interrupt()),
        )
    };
    let (Ok(mut term), Ok(mut int)) = (term, int) else {
        anyhow::bail!("cannot listen for SIGTERM/SIGINT");
    };
    let (tx, rx) = watch::channel(false);
    let rx = SIGNALS.get_or_init(|| rx).clone();
    std::thread::Builder::new()
        .name("harch-signals".into())
        .spawn(move || {
            rt.block_on(async move {
                let first = tokio::select! {
                    _ = term.recv() => "SIGTERM",
                    _ = int.recv() => "SIGINT",
                };
                INTERRUPTED.store(true, Ordering::Relaxed);
                // Said whatever the log level: the operator pressed a key and waits.
                eprintln!(
                    "{first}: stopping: running stages finish or checkpoint, no new jobs are \
                     taken (Ctrl-C again to exit at once)"
                );
                info!(signal = first, "stopping");
                let _ = tx.send(true);
                tokio::select! {
                    _ = term.recv() => {}
                    _ = int.recv() => {}
                }
                eprintln!(
                    "second interrupt: exiting now; running jobs are delivered again once \
                     their lease runs out"
                );
                std::process::exit(EXIT_INTERRUPTED);
            })
        })
        .map_err(|e| anyhow::anyhow!("cannot start the signal listener: {e}"))?;
    Ok(rx)
}

/// Sends `stop` once the process is interrupted.
async fn stop_on_signal(mut signals: watch::Receiver<bool>, stop: Arc<watch::Sender<bool>>) {
    if signals.wait_for(|s| *s).await.is_ok() {
        let _ = stop.send(true);
    }
}

/// Stops the worker once the queue is drained (`jobs` empty) or once `jobs` are all final.
async fn stop_when(store: JobStore, stop: Arc<watch::Sender<bool>>, jobs: Vec<String>) {
    loop {
        tokio::time::sleep(Duration::from_millis(200)).await;
        let done = if jobs.is_empty() {
            drained(&store)
        } else {
            all_final(&store, &jobs)
        };
        match done {
            Ok(true) => {
                info!("queue drained");
                let _ = stop.send(true);
                return;
            }
            Ok(false) => {}
            Err(e) => warn!(error = %format!("{e:#}"), "cannot tell whether the queue is drained"),
        }
    }
}

fn all_final(store: &JobStore, jobs: &[String]) -> anyhow::Result<bool> {
    for id in jobs {
        if !store.load(id)?.state.is_final() {
            return Ok(false);
        }
    }
    Ok(true)
}

/// True when no job is pending or running. Repairs dedupe entries left by a crash between a
/// job's final record and its release.
pub fn drained(store: &JobStore) -> anyhow::Result<bool> {
    let n = store.active_count()?;
    if n == 0 {
        return Ok(true);
    }
    if n > 64 {
        return Ok(false);
    }
    let mut live = 0;
    for rec in store.active_jobs()? {
        if rec.state.is_final() {
            store.release_active(&rec)?;
        } else if rec.state == JobState::Pending || rec.state == JobState::Running {
            live += 1;
        }
    }
    Ok(live == 0)
}

/// Unique per process and restart: the stores refuse a name that still looks alive.
fn worker_name(generation: u32) -> String {
    let host = std::fs::read_to_string("/etc/hostname")
        .ok()
        .map(|h| h.trim().to_string())
        .filter(|h| !h.is_empty())
        .unwrap_or_else(|| "host".into());
    format!("harch-{host}-{}-{generation}", std::process::id())
}
