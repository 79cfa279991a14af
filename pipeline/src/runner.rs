//! Runs one delivery of a job: resumes after the last completed stage, retries transient
//! failures with backoff, fails at once on permanent ones, honours cancel and shutdown.
//!
//! Exactly-once effects rest on three rules: a stage writes only into a fresh staging dir; the
//! runner moves that dir into place *before* recording the stage done; a stage recorded done is
//! never run again. A crash between the move and the record reruns the stage, whose new output
//! replaces (never adds to) the old.

use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::Context;
use tokio::sync::watch;
use tracing::{Instrument, info, info_span};

use super::registry::StageRegistry;
use super::stage::{StageContext, StageError, list_files};
use harch_jobs::config::PipelineSettings;
use harch_jobs::record::{FailureKind, JobRecord, JobState, StageState, now_ms};
use harch_jobs::stage::Stage;
use harch_jobs::store::JobStore;
pub use harch_queue::pipeline::RunOutcome;

/// What a worker process shares with every job it runs.
pub struct WorkerState {
    pub settings: Arc<PipelineSettings>,
    pub store: JobStore,
    pub registry: StageRegistry,
    pub worker_name: String,
    /// Becomes true when the worker is asked to stop.
    pub shutdown: watch::Receiver<bool>,
}

enum StageEnd {
    Done,
    Failed(FailureKind, String),
    Cancelled,
    Checkpointed,
}

/// Runs job `id` as far as it goes in this delivery.
pub async fn run_job(st: &WorkerState, id: &str) -> anyhow::Result<RunOutcome> {
    let store = &st.store;
    let Some(_running) = store.try_run_lock(id)? else {
        // At-least-once delivery: a duplicate while a live worker holds the job is dropped.
        store.log(
            id,
            "duplicate delivery ignored: another worker is running this job",
        )?;
        return Ok(RunOutcome::Skipped("another worker is running this job"));
    };
    let (proceed, rec) = store.update(id, |r| {
        // Checked under the record's lock: `cancel` may have just finished a pending job.
        if r.state.is_final() || r.cancel_requested {
            return Ok(false);
        }
        r.state = JobState::Running;
        r.deliveries += 1;
        r.worker = Some(st.worker_name.clone());
        r.started_ms.get_or_insert(now_ms());
        for s in &mut r.stages {
            // A stage left "running" was interrupted by a crash: it starts over.
            if s.state == StageState::Running {
                s.state = StageState::Pending;
            }
        }
        Ok(true)
    })?;
    if rec.state.is_final() {
        return Ok(RunOutcome::Skipped("job already finished"));
    }
    if !proceed {
        return finish_cancelled(st, id).await;
    }
    let span = info_span!("job", id = %id, model = %rec.request.model_id, kind = rec.request.kind.as_str());
    run_stages(st, rec).instrument(span).await
}

async fn run_stages(st: &WorkerState, rec: JobRecord) -> anyhow::Result<RunOutcome> {
    let id = rec.id.clone();
    let store = &st.store;
    store.log(
        &id,
        &format!(
            "delivery {} on worker {}: stages {}",
            rec.deliveries,
            st.worker_name,
            Stage::join(&rec.request.stages, ",")
        ),
    )?;
    info!(delivery = rec.deliveries, "job started");
    for idx in 0..rec.stages.len() {
        let spec = rec.stages[idx].stage;
        if rec.stages[idx].state == StageState::Done {
            continue;
        }
        if *st.shutdown.borrow() {
            return checkpoint(st, &id, spec);
        }
        if store.load(&id)?.cancel_requested {
            return finish_cancelled(st, &id).await;
        }
        let end = run_stage(st, &id, idx, spec)
            .instrument(info_span!("stage", stage = %spec))
            .await?;
        match end {
            StageEnd::Done => {}
            StageEnd::Failed(kind, msg) => return finish_failed(st, &id, kind, msg),
            StageEnd::Cancelled => return finish_cancelled(st, &id).await,
            StageEnd::Checkpointed => return checkpoint(st, &id, spec),
        }
    }
    let (_, rec) = store.update(&id, |r| {
        r.state = JobState::Succeeded;
        r.finished_ms = Some(now_ms());
        r.last_error = None;
        r.failure = None;
        Ok(())
    })?;
    cleanup_staging(store, &id);
    store.release_active(&rec)?;
    store.log(&id, "job succeeded")?;
    info!("job succeeded");
    Ok(RunOutcome::Finished(JobState::Succeeded))
}

/// Runs one stage until it is done, fails for good, or the job is cancelled or checkpointed.
async fn run_stage(
    st: &WorkerState,
    id: &str,
    idx: usize,
    spec: Stage,
) -> anyhow::Result<StageEnd> {
    let store = &st.store;
    let settings = &st.settings;
    let name = spec.name();
    let job_dir = store.job_dir(id)?;
    let final_dir = job_dir.join(spec.dir_name());
    let staging = job_dir.join(".staging").join(spec.dir_name());
    let limit = settings.stage_timeout(spec);
    loop {
        let (attempt, job) = store.update(id, |r| {
            r.attempts += 1;
            let s = &mut r.stages[idx];
            s.attempts += 1;
            s.state = StageState::Running;
            s.started_ms.get_or_insert(now_ms());
            Ok(s.attempts)
        })?;
        fresh_dir(&staging)?;
        store.log(id, &format!("stage {spec}: attempt {attempt} started"))?;
        info!(attempt, "stage started");
        let cx = StageContext {
            job,
            job_dir: job_dir.clone(),
            out_dir: staging.clone(),
            attempt,
            store: store.clone(),
            shutdown: st.shutdown.clone(),
        };
        let started = Instant::now();
        let result = tokio::select! {
            r = tokio::time::timeout(limit, st.registry.run(spec, &cx, settings)) => match r {
                Ok(r) => r,
                Err(_) => Err(StageError::transient(format!(
                    "timed out after {} s (stages.timeout_s.{name})", limit.as_secs()
                ))),
            },
            _ = cancel_requested(store, id, settings.cancel_poll_ms) => {
                drop(cx);
                let _ = std::fs::remove_dir_all(&staging);
                return Ok(StageEnd::Cancelled);
            }
        };
        let work_ms = started.elapsed().as_millis() as u64;
        match result {
            Ok(out) => {
                if final_dir.exists() {
                    // Left by a run that crashed after committing its files but before recording.
                    std::fs::remove_dir_all(&final_dir)
                        .with_context(|| format!("cannot replace {}", final_dir.display()))?;
                }
                std::fs::rename(&staging, &final_dir)
                    .with_context(|| format!("cannot move {} into place", staging.display()))?;
                let artifacts = list_files(&final_dir, &job_dir);
                store.update(id, |r| {
                    let s = &mut r.stages[idx];
                    s.state = StageState::Done;
                    s.finished_ms = Some(now_ms());
                    s.work_ms += work_ms;
                    s.artifacts = artifacts;
                    s.last_error = None;
                    s.usage.add(&out.usage);
                    s.summary = out.summary;
                    Ok(())
                })?;
                store.log(id, &format!("stage {spec}: done in {work_ms} ms"))?;
                info!(work_ms, "stage done");
                return Ok(StageEnd::Done);
            }
            Err(StageError::Permanent(msg)) => {
                add_work(store, id, idx, work_ms)?;
                mark_stage_failed(store, id, idx, &msg)?;
                store.log(id, &format!("stage {spec}: permanent failure: {msg}"))?;
                info!(error = %msg, "stage failed permanently");
                return Ok(StageEnd::Failed(
                    FailureKind::Permanent,
                    format!("stage {spec}: {msg}"),
                ));
            }
            Err(StageError::Transient(_)) if *st.shutdown.borrow() => {
                // The stage stopped because the worker is stopping: not a failure of the stage.
                store.update(id, |r| {
                    let s = &mut r.stages[idx];
                    s.work_ms += work_ms;
                    s.attempts = s.attempts.saturating_sub(1);
                    s.state = StageState::Pending;
                    Ok(())
                })?;
                return Ok(StageEnd::Checkpointed);
            }
            Err(StageError::Transient(msg)) => {
                add_work(store, id, idx, work_ms)?;
                let max = settings.retry.max_attempts;
                if attempt >= max {
                    mark_stage_failed(store, id, idx, &msg)?;
                    store.log(
                        id,
                        &format!("stage {spec}: gave up after {attempt} attempts: {msg}"),
                    )?;
                    info!(error = %msg, attempt, "stage gave up");
                    return Ok(StageEnd::Failed(
                        FailureKind::Transient,
                        format!("stage {spec}: gave up after {attempt} attempts: {msg}"),
                    ));
                }
                let wait = settings.retry.backoff(attempt);
                store.update(id, |r| {
                    r.stages[idx].state = StageState::Pending;
                    r.stages[idx].last_error = Some(msg.clone());
                    r.last_error = Some(format!("stage {spec}: {msg}"));
                    Ok(())
                })?;
                store.log(
                    id,
                    &format!(
                        "stage {spec}: attempt {attempt} failed (transient): {msg}; retry in {} ms",
                        wait.as_millis()
                    ),
                )?;
                info!(error = %msg, attempt, retry_in_ms = wait.as_millis() as u64, "stage failed, will retry");
                let mut shutdown = st.shutdown.clone();
                tokio::select! {
                    _ = tokio::time::sleep(wait) => {}
                    _ = shutdown.wait_for(|stop| *stop) => return Ok(StageEnd::Checkpointed),
                    _ = cancel_requested(store, id, settings.cancel_poll_ms) => return Ok(StageEnd::Cancelled),
                }
            }
        }
    }
}

fn add_work(store: &JobStore, id: &str, idx: usize, work_ms: u64) -> anyhow::Result<()> {
    store.update(id, |r| {
        r.stages[idx].work_ms += work_ms;
        Ok(())
    })?;
    Ok(())
}

fn mark_stage_failed(store: &JobStore, id: &str, idx: usize, msg: &str) -> anyhow::Result<()> {
    store.update(id, |r| {
        let s = &mut r.stages[idx];
        s.state = StageState::Failed;
        s.finished_ms = Some(now_ms());
        s.last_error = Some(msg.to_string());
        Ok(())
    })?;
    Ok(())
}

/// Resolves once `cancel` has flagged the job (polled: the flag may come from another process).
async fn cancel_requested(store: &JobStore, id: &str, poll_ms: u64) {
    loop {
        tokio::time::sleep(Duration::from_millis(poll_ms.max(10))).await;
        if store.load(id).is_ok_and(|r| r.cancel_requested) {
            return;
        }
    }
}

fn fresh_dir(dir: &Path) -> anyhow::Result<()> {
    if dir.exists() {
        std::fs::remove_dir_all(dir).with_context(|| format!("cannot clear {}", dir.display()))?;
    }
    std::fs::create_dir_all(dir).with_context(|| format!("cannot create {}", dir.display()))
}

fn cleanup_staging(store: &JobStore, id: &str) {
    if let Ok(dir) = store.job_dir(id) {
        let _ = std::fs::remove_dir_all(dir.join(".staging"));
    }
}

fn finish_failed(
    st: &WorkerState,
    id: &str,
    kind: FailureKind,
    msg: String,
) -> anyhow::Result<RunOutcome> {
    let (_, rec) = st.store.update(id, |r| {
        r.state = JobState::Failed;
        r.finished_ms = Some(now_ms());
        r.last_error = Some(msg.clone());
        r.failure = Some(kind);
        Ok(())
    })?;
    cleanup_staging(&st.store, id);
    st.store.release_active(&rec)?;
    st.store.log(id, &format!("job failed: {msg}"))?;
    // Info, not a warning: `run` says each failure once, with its cause, and `status` keeps it.
    info!(error = %msg, "job failed");
    Ok(RunOutcome::Finished(JobState::Failed))
}

async fn finish_cancelled(st: &WorkerState, id: &str) -> anyhow::Result<RunOutcome> {
    let (_, rec) = st.store.update(id, |r| {
        r.state = JobState::Cancelled;
        r.cancel_requested = false;
        r.finished_ms = Some(now_ms());
        r.last_error = Some("cancelled by operator".into());
        for s in &mut r.stages {
            if s.state == StageState::Running {
                s.state = StageState::Pending;
            }
        }
        Ok(())
    })?;
    cleanup_staging(&st.store, id);
    st.store.release_active(&rec)?;
    st.store.log(id, "job cancelled")?;
    info!("job cancelled");
    Ok(RunOutcome::Finished(JobState::Cancelled))
}

fn checkpoint(st: &WorkerState, id: &str, next: Stage) -> anyhow::Result<RunOutcome> {
    st.store.update(id, |r| {
        r.state = JobState::Pending;
        Ok(())
    })?;
    st.store.log(
        id,
        &format!("worker stopping: job checkpointed, resumes at stage {next}"),
    )?;
    info!(next = %next, "job checkpointed");
    Ok(RunOutcome::Checkpointed)
}
