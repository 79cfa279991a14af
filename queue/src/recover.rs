//! Re-queues jobs whose tickets the store lost.
//!
//! The job record is the truth about a job; the store only carries its tickets. A Redis server
//! restarted without persistence (or flushed, or evicting keys) forgets every ticket, and a
//! ticket the store gave up on (too many deliveries) is never delivered again: either way a
//! job would sit "pending" forever. Workers therefore compare, at start and every
//! `queue.recover_interval_s`, the jobs that should be moving with the tickets the store still
//! holds, and queue a fresh ticket for each job that has none.
//!
//! Two workers may do this at the same time and both queue a ticket for the same job; that is
//! harmless, because a delivery of a job another worker runs, or of a finished job, is dropped
//! (`pipeline::runner::run_job`).

use std::time::Duration;

use tracing::warn;

use super::backend::QueueBackend;
use harch_jobs::record::{JobState, now_ms};
use harch_jobs::store::JobStore;

/// Tickets queued per store round trip.
const PUSH_CHUNK: usize = 500;

/// Queues a new ticket for every pending job (and every running job no live process runs)
/// that has no ticket the store will deliver. Jobs changed within `grace` are left for the next
/// round: `enqueue` and `retry` write the record just before they push its ticket. Returns the
/// ids of the jobs queued again.
pub async fn requeue_lost(
    store: &JobStore,
    backend: &mut QueueBackend,
    grace: Duration,
) -> anyhow::Result<Vec<String>> {
    let settled = now_ms().saturating_sub(grace.as_millis() as u64);
    let mut candidates = Vec::new();
    for rec in store.active_jobs()? {
        if rec.updated_ms > settled {
            continue;
        }
        let waiting = match rec.state {
            JobState::Pending => true,
            // A running job whose run lock is free was left by a dead worker: it moves again
            // only through a ticket. One whose lock is held is in a live worker's hands.
            JobState::Running => store.try_run_lock(&rec.id)?.is_some(),
            _ => false,
        };
        if waiting {
            candidates.push(rec);
        }
    }
    if candidates.is_empty() {
        return Ok(Vec::new());
    }
    let tickets: Vec<String> = candidates
        .iter()
        .flat_map(|r| r.queue_tasks.iter().cloned())
        .collect();
    let live = backend.live_tickets(&tickets).await?;
    let mut fresh: Vec<(String, u32, String)> = Vec::new();
    for rec in candidates {
        if rec.queue_tasks.iter().any(|t| live.contains(t)) {
            continue;
        }
        let task = QueueBackend::new_task_id();
        // Recorded before it is pushed (as `enqueue` does): a crash in between leaves a ticket
        // id the store never saw, which the next round finds lost again.
        let (still_lost, rec) = store.update(&rec.id, |r| {
            if r.state.is_final() || r.queue_tasks != rec.queue_tasks {
                // Finished, cancelled, or re-queued by someone else since we looked.
                return Ok(false);
            }
            r.queue_tasks.push(task.clone());
            Ok(true)
        })?;
        if still_lost {
            fresh.push((rec.id.clone(), rec.request.priority, task));
        }
    }
    for chunk in fresh.chunks(PUSH_CHUNK) {
        backend.push_many(chunk).await?;
        for (id, _, task) in chunk {
            store.log(
                id,
                &format!(
                    "the {} store had no ticket for this job (restarted or flushed?): queued again as {task}",
                    backend.name()
                ),
            )?;
        }
    }
    if !fresh.is_empty() {
        warn!(
            jobs = fresh.len(),
            backend = backend.name(),
            "queued again jobs whose tickets the store had lost"
        );
    }
    Ok(fresh.into_iter().map(|(id, _, _)| id).collect())
}
