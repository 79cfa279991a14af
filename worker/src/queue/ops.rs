//! Operator actions on jobs: enqueue (with dedupe), cancel, retry.

use anyhow::{Context, bail};

use super::backend::QueueBackend;
use super::config::Settings;
use super::model_id::{check_model_id, check_revision};
use super::record::{FailureKind, JobRecord, JobRequest, JobState, StageState, now_ms};
use super::store::JobStore;
use crate::pipeline::registry::StageRegistry;

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
    registry: &StageRegistry,
    requests: Vec<JobRequest>,
) -> anyhow::Result<Vec<Enqueued>> {
    for r in &requests {
        check_model_id(&r.model_id)?;
        check_revision(&r.revision)?;
        registry
            .check_selection(&r.stages)
            .with_context(|| format!("{}: bad --stages", r.model_id))?;
    }
    let store = JobStore::open(settings.data_dir())?;
    let mut backend: Option<QueueBackend> = None;
    let mut out = Vec::with_capacity(requests.len());
    for request in requests {
        let priority = request.priority;
        let (rec, created) = store.create_or_existing(request)?;
        if created {
            if backend.is_none() {
                match QueueBackend::connect(settings).await {
                    Ok(b) => backend = Some(b),
                    Err(e) => {
                        abandon(&store, &rec, &e)?;
                        return Err(e);
                    }
                }
            }
            let queue = backend.as_mut().expect("connected above");
            match queue.push(&rec.id, priority).await {
                Ok(task) => {
                    store.update(&rec.id, |r| {
                        r.queue_tasks.push(task);
                        Ok(())
                    })?;
                    store.log(&rec.id, &format!("queued on {}", queue.name()))?;
                }
                Err(e) => {
                    abandon(&store, &rec, &e)?;
                    return Err(e);
                }
            }
        }
        out.push(Enqueued {
            id: rec.id,
            model_id: rec.request.model_id,
            created,
        });
    }
    Ok(out)
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
            s => bail!("job {id} is already {}", s.as_str()),
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
/// with a full attempt budget.
pub async fn retry(settings: &Settings, id: &str) -> anyhow::Result<JobRecord> {
    let store = JobStore::open(settings.data_dir())?;
    let rec = store.load(id)?;
    if !matches!(rec.state, JobState::Failed | JobState::Cancelled) {
        bail!(
            "job {id} is {}: only failed or cancelled jobs can be retried",
            rec.state.as_str()
        );
    }
    let mut backend = QueueBackend::connect(settings).await?;
    store.claim_active(&rec)?;
    let (_, rec) = store.update(id, |r| {
        r.state = JobState::Pending;
        r.cancel_requested = false;
        r.failure = None;
        r.last_error = None;
        r.finished_ms = None;
        for s in r.stages.iter_mut().filter(|s| s.state != StageState::Done) {
            s.state = StageState::Pending;
            s.attempts = 0;
            s.last_error = None;
        }
        Ok(())
    })?;
    let task = match backend.push(id, rec.request.priority).await {
        Ok(t) => t,
        Err(e) => {
            abandon(&store, &rec, &e)?;
            return Err(e);
        }
    };
    let (_, rec) = store.update(id, |r| {
        r.queue_tasks.push(task);
        Ok(())
    })?;
    store.log(id, "retried by operator")?;
    Ok(rec)
}
