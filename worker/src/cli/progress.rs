//! Progress bars for long work (a revalidation of many models, a queue drain), on stderr and
//! only on a terminal: none when stderr is piped or redirected, and none under `--json`.

use std::io::IsTerminal;
use std::time::Duration;

use harch_worker::queue::cli::fmt_ms;
use harch_worker::queue::record::{JobRecord, JobState, StageState};
use harch_worker::queue::store::JobStore;

/// A bar of `len` steps labelled `what`; hidden unless `enabled` and stderr is a terminal.
pub fn bar(enabled: bool, len: usize, what: &str) -> indicatif::ProgressBar {
    if !enabled || len == 0 || !std::io::stderr().is_terminal() {
        return indicatif::ProgressBar::hidden();
    }
    let bar = indicatif::ProgressBar::new(len as u64);
    if let Ok(style) =
        indicatif::ProgressStyle::with_template(&format!("[{{bar:30}}] {{pos}}/{{len}} {what}"))
    {
        bar.set_style(style.progress_chars("=> "));
    }
    bar
}

/// Moves the bar as the jobs `ids` reach a final state (until the task is aborted).
pub async fn follow(store: JobStore, ids: Vec<String>, bar: indicatif::ProgressBar) {
    loop {
        let done = ids
            .iter()
            .filter(|id| store.load(id).is_ok_and(|r| r.state.is_final()))
            .count();
        bar.set_position(done as u64);
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
}

/// What `run` says as its jobs move: one line per stage transition and one per final state,
/// each failure once with its cause. Polls the records (the runner may be another process's).
#[derive(Default)]
pub struct Transitions {
    /// Per job: each stage's (state, attempts), and the job's state, as last seen.
    seen: std::collections::HashMap<String, Seen>,
}

struct Seen {
    stages: Vec<(StageState, u32)>,
    state: JobState,
}

impl Transitions {
    /// Starts from the jobs `ids` as they are now: what they did before is not said again.
    pub fn seed(&mut self, store: &JobStore, ids: &[String]) {
        for id in ids {
            if let Ok(rec) = store.load(id) {
                self.update(&rec, &mut Vec::new());
            }
        }
    }

    /// Lines for what changed since the last call, for the jobs waiting or running now and
    /// those seen before that are not final yet.
    pub fn tick(&mut self, store: &JobStore) -> Vec<String> {
        let mut ids: Vec<String> = store
            .active_jobs()
            .map(|v| v.into_iter().map(|r| r.id).collect())
            .unwrap_or_default();
        for (id, s) in &self.seen {
            if !s.state.is_final() && !ids.contains(id) {
                ids.push(id.clone());
            }
        }
        ids.sort();
        let mut lines = Vec::new();
        for id in ids {
            if let Ok(rec) = store.load(&id) {
                self.update(&rec, &mut lines);
            }
        }
        lines
    }

    fn update(&mut self, rec: &JobRecord, lines: &mut Vec<String>) {
        let who = format!("{} {}", rec.id, rec.request.model_id);
        let now: Vec<(StageState, u32)> =
            rec.stages.iter().map(|s| (s.state, s.attempts)).collect();
        let before = self.seen.get(&rec.id);
        for (i, s) in rec.stages.iter().enumerate() {
            let (was, was_attempts) = before
                .and_then(|b| b.stages.get(i).copied())
                .unwrap_or((StageState::Pending, s.attempts.saturating_sub(1)));
            match s.state {
                StageState::Running if was != StageState::Running || s.attempts > was_attempts => {
                    lines.push(format!(
                        "{who}: {} started (attempt {})",
                        s.stage, s.attempts
                    ));
                }
                StageState::Done if was != StageState::Done => {
                    lines.push(format!("{who}: {} done in {}", s.stage, fmt_ms(s.work_ms)));
                }
                // A transient failure: the stage waits for its next attempt.
                StageState::Pending if was == StageState::Running && !rec.state.is_final() => {
                    if let Some(e) = &s.last_error {
                        lines.push(format!(
                            "{who}: {} attempt {} failed, will retry: {e}",
                            s.stage, s.attempts
                        ));
                    }
                }
                _ => {}
            }
        }
        let was = before.map(|b| b.state);
        if rec.state.is_final() && was != Some(rec.state) {
            let line = match rec.state {
                JobState::Succeeded => format!("{who}: succeeded"),
                state => format!(
                    "{who}: {}: {}",
                    state.as_str(),
                    rec.last_error.as_deref().unwrap_or("no reason recorded")
                ),
            };
            lines.push(line);
        }
        self.seen.insert(
            rec.id.clone(),
            Seen {
                stages: now,
                state: rec.state,
            },
        );
    }
}
