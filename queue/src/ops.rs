//! Operator actions on jobs: enqueue (with dedupe), cancel, retry.

use anyhow::bail;

use super::backend::QueueBackend;
use super::pipeline::Pipeline;
use harch_jobs::config::Settings;
use harch_jobs::model_id::{check_model_id, check_revision};
use harch_jobs::record::{FailureKind, JobRecord, JobRequest, JobState, StageState, now_ms};
use harch_jobs::store::JobStore;

/// One line of `enqueue`'s answer.
#[derive(Debug, Clone)]
pub struct Enqueued {
    pub id: String,
    pub model_id: String,
    /// False when a pending or running job of the same model revision was returned instead.
    pub created: bool,
}

/// Checks every request, then queues each (or finds its pending/running twin). Nothing is
/// queued when any request is invalid.
pub async fn enqueue(
    settings: &Settings,
    pipeline: &dyn Pipeline,
    requests: Vec<JobRequest>,
) -> anyhow::Result<Vec<Enqueued>> {
    let pipeline_settings = settings.pipeline();
    for r in &requests {
        check_model_id(&r.model_id)?;
        check_revision(&r.revision)?;
        pipeline.check(&pipeline_settings, r)?;
    }
    let store = JobStore::open(settings.data_dir())?;
    let mut backend = None;
    let mut out = Vec::with_capacity(requests.len());
    // Records first (cheap, local), then one store round trip per chunk of new tickets.
    let mut fresh: Vec<(String, u32, String)> = Vec::new();
    for request in requests {
        let priority = request.priority;
        let task = QueueBackend::new_task_id();
        let (rec, created) = store.create_or_existing(request, &task)?;
        if created {
            fresh.push((rec.id.clone(), priority, task));
        }
        out.push(Enqueued {
            id: rec.id,
            model_id: rec.request.model_id,
            created,
        });
    }
    for (i, chunk) in fresh.chunks(PUSH_CHUNK).enumerate() {
        if backend.is_none() {
            match QueueBackend::connect(settings).await {
                Ok(b) => backend = Some(b),
                Err(e) => return Err(abandon_all(&store, chunk_ids(&fresh), e)),
            }
        }
        let queue = backend.as_mut().expect("connected above");
        if let Err(e) = queue.push_many(chunk).await {
            // This chunk and all later ones were never queued.
            return Err(abandon_all(&store, chunk_ids(&fresh[i * PUSH_CHUNK..]), e));
        }
        let name = queue.name();
        for (id, _, _) in chunk {
            store.log(id, &format!("queued on {name}"))?;
        }
    }
    Ok(out)
}

/// Tickets pushed to the store in one round trip.
const PUSH_CHUNK: usize = 500;

fn chunk_ids(tickets: &[(String, u32, String)]) -> Vec<&str> {
    tickets.iter().map(|(id, _, _)| id.as_str()).collect()
}

/// Marks jobs whose tickets could not be queued as failed, and returns the error.
fn abandon_all(store: &JobStore, ids: Vec<&str>, e: anyhow::Error) -> anyhow::Error {
    for id in ids {
        if let Ok(rec) = store.load(id)
            && let Err(e2) = abandon(store, &rec, &e)
        {
            return e2.context(format!("{e:#}"));
        }
    }
    e
}

/// A job whose ticket could not be queued must not block its revision's dedupe slot.
fn abandon(store: &JobStore, rec: &JobRecord, e: &anyhow::Error) -> anyhow::Result<()> {
    let (_, rec) = store.update(&rec.id, |r| {
        r.state = JobState::Failed;
        r.failure = Some(FailureKind::Transient);
        r.finished_ms = Some(now_ms());
        r.last_error = Some(format!("could not be queued: {e:#}"));
        Ok(())
    })?;
    store.release_active(&rec)
}

/// Cancels a job: a pending one at once, a running one at its worker's next check.
pub fn cancel(settings: &Settings, id: &str) -> anyhow::Result<JobRecord> {
    let store = JobStore::open(settings.data_dir())?;
    let (_, rec) = store.update(id, |r| {
        match r.state {
            JobState::Pending => {
                r.state = JobState::Cancelled;
                r.finished_ms = Some(now_ms());
                r.last_error = Some("cancelled by operator before it ran".into());
            }
            JobState::Running => r.cancel_requested = true,
            s => bail!("job {id} has already {}", s.past_tense()),
        }
        Ok(())
    })?;
    if rec.state == JobState::Cancelled {
        store.release_active(&rec)?;
        store.log(id, "cancelled by operator")?;
    } else {
        store.log(id, "cancel requested by operator")?;
    }
    Ok(rec)
}

/// Queues a failed or cancelled job again. Completed stages stay done; the others start over
/// with a full attempt budget, and agent stages with a fresh round of agent attempts and cost
/// (their earlier runs stay recorded).
pub async fn retry(settings: &Settings, id: &str) -> anyhow::Result<JobRecord> {
    let store = JobStore::open(settings.data_dir())?;
    let rec = store.load(id)?;
    if !matches!(rec.state, JobState::Failed | JobState::Cancelled) {
        bail!(
            "job {id} {}: only failed or cancelled jobs can be retried",
            rec.state.is_phrase()
        );
    }
    let mut backend = QueueBackend::connect(settings).await?;
    store.claim_active(&rec)?;
    let task = QueueBackend::new_task_id();
    let (_, rec) = store.update(id, |r| {
        // Checked again under the lock: a concurrent retry must not queue the job twice.
        if !matches!(r.state, JobState::Failed | JobState::Cancelled) {
            bail!("job {id} {} now", r.state.is_phrase());
        }
        r.state = JobState::Pending;
        r.retries += 1;
        r.cancel_requested = false;
        r.failure = None;
        r.last_error = None;
        r.finished_ms = None;
        r.queue_tasks.push(task.clone());
        for s in r.stages.iter_mut().filter(|s| s.state != StageState::Done) {
            s.state = StageState::Pending;
            s.attempts = 0;
            s.last_error = None;
        }
        Ok(())
    })?;
    if let Err(e) = backend
        .push_many(&[(id.to_string(), rec.request.priority, task)])
        .await
    {
        abandon(&store, &rec, &e)?;
        return Err(e);
    }
    store.log(id, "retried by operator")?;
    Ok(rec)
}
