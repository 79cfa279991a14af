//! The loop every agent stage runs (generate now; review and fix later): render a prompt, run
//! the backend in the sandbox, read back what it left as hostile input, check it in the worker,
//! record the attempt, and re-prompt with what the check found until it passes or the budget
//! (`agent.attempts`, `agent.max_cost_usd`) runs out. A stage says only what differs, by
//! implementing [`AgentTask`]: its workspace, its prompt, what to read back, how to check it and
//! what to keep.
//!
//! Accounting: every run is numbered and recorded in the stage's [`Ledger`] before it starts and
//! again the moment it returns, and its prompt, transcripts, report and files are kept in
//! `jobs/<id>/attempts/<stage>/<n>/` (never in the staging dir, so stage retries and failed jobs
//! keep them). A worker that dies during a run leaves it `running`: the next delivery records it
//! as interrupted and counted; one that dies after the run checks what the agent left without
//! running it again. A SIGTERM stops the run at once (not counted) and checkpoints the job. An
//! operator `retry` starts a new round with a fresh attempt and cost budget.

mod kept;
pub mod ledger;
pub mod readback;

use std::path::Path;
use std::sync::Arc;

use anyhow::anyhow;
use harch_agents::{AgentBackend, AgentLimits, AgentRequest};
use harch_sandbox::Workspace;
use serde_json::{Value, json};

use crate::pipeline::stage::{StageContext, StageError, StageOutput};
use crate::queue::store::JobStore;
use kept::Kept;
pub use ledger::{Attempt, Ledger, Phase};
pub use readback::{AgentFiles, ReadBack};

/// A rendered prompt and its size.
pub struct Prompt {
    pub text: String,
    pub bytes: usize,
    pub est_tokens: usize,
}

/// The worker's verdict on what an agent left.
#[derive(Clone, Debug)]
pub struct Checked {
    pub valid: bool,
    /// Kept with the attempt as [`AgentTask::report_file`].
    pub report: Value,
    pub errors: usize,
    /// The first error codes, for one-line summaries.
    pub error_codes: Vec<String>,
    /// What the next prompt tells the agent, one finding per line.
    pub feedback: Vec<String>,
    /// Findings not in `feedback`.
    pub feedback_more: usize,
}

/// What one agent stage contributes to the loop. Methods that do file I/O or heavy work are
/// called on blocking threads.
pub trait AgentTask: Send + Sync + 'static {
    /// The stage's name: labels its runs (`generate-3`) and names its records.
    fn name(&self) -> &'static str;
    /// The name the check's report is kept under in each attempt's directory.
    fn report_file(&self) -> &'static str;
    /// What to read back from the workspace after a run.
    fn read_back(&self) -> ReadBack;
    /// What is missing when the budget runs out ("no valid spec at specs/models/x.yaml").
    fn unmet(&self) -> String;
    /// The workspace for the next run: read-only parts staged afresh, the agent's files kept.
    fn workspace(&self) -> anyhow::Result<Workspace>;
    /// The prompt for the next run; `previous` is the last recorded attempt, whose `feedback`
    /// and [`Attempt::run_note`] say what went wrong.
    fn prompt(&self, previous: Option<&Attempt>) -> anyhow::Result<Prompt>;
    /// Checks what the agent left, in the worker. `Err` is the worker's own failure.
    fn check(&self, n: u32, files: &AgentFiles) -> anyhow::Result<Checked>;
    /// Writes the accepted result into the stage's output dir.
    fn keep(&self, files: &AgentFiles, checked: &Checked, out: &Path) -> anyhow::Result<()>;
    /// Stage-specific fields of the stage's summary in the job record.
    fn summary(&self) -> serde_json::Map<String, Value> {
        serde_json::Map::new()
    }
}

/// Runs `task`'s loop with `backend` to an accepted result, a spent budget, or a stop.
pub async fn run<T: AgentTask>(
    cx: &StageContext,
    task: Arc<T>,
    backend: &dyn AgentBackend,
    limits: &AgentLimits,
) -> Result<StageOutput, StageError> {
    let stage = task.name();
    let store = JobStore::open(cx.settings.data_dir()).map_err(transient)?;
    let mirror = Mirror {
        store: store.clone(),
        job_id: cx.job.id.clone(),
        stage,
        backend: backend.name(),
        round: cx.job.retries,
        extra: task.summary(),
    };
    let agent = &cx.settings.agent;
    let mut ledger = Ledger::load(&cx.job_dir, stage).map_err(transient)?;
    // A run a dead worker left: counted, and its logs kept once the workspace is rebuilt (which
    // kills whatever of it still runs).
    let mut orphaned = None;
    if let Some(last) = ledger.last_mut()
        && last.phase == Phase::Running
    {
        last.interrupt(
            true,
            "the worker stopped during the run (killed, crashed, or past the stage timeout)",
        );
        let line = last.line();
        orphaned = Some((last.label.clone(), last.dir.clone()));
        mirror.save(&ledger);
        mirror.log(&line);
    }
    // A run that returned but was never checked is checked now, not run again.
    let mut unchecked = ledger
        .attempts
        .last()
        .filter(|a| a.phase == Phase::Ran)
        .map(|a| a.n);
    let mut shutdown = cx.shutdown.clone();

    loop {
        if *shutdown.borrow() {
            return Err(stopping());
        }
        let ws = blocking({
            let task = task.clone();
            move || task.workspace()
        })
        .await
        .map_err(|e| StageError::permanent(format!("staging the workspace: {e:#}")))?;
        if let Some((label, dir)) = orphaned.take() {
            let kept = Kept::new(&cx.job_dir, &dir).map_err(transient)?;
            keep_logs(&ws, &kept, &label, limits).await;
        }
        let n = match unchecked.take() {
            Some(n) => n,
            None => {
                let spent = ledger.counted(mirror.round);
                if spent >= agent.attempts {
                    return Err(out_of_budget(&ledger, &*task, agent.attempts));
                }
                let cost = ledger.cost(mirror.round);
                if agent.max_cost_usd > 0.0 && cost >= agent.max_cost_usd {
                    return Err(StageError::permanent(format!(
                        "{}: agent cost budget spent, ${cost:.2} of agent.max_cost_usd ${:.2} after {spent} attempts",
                        task.unmet(),
                        agent.max_cost_usd
                    )));
                }
                let previous = ledger
                    .attempts
                    .iter()
                    .rev()
                    .find(|a| matches!(a.phase, Phase::Checked | Phase::Interrupted))
                    .cloned();
                let prompt = blocking({
                    let task = task.clone();
                    move || task.prompt(previous.as_ref())
                })
                .await
                .map_err(|e| StageError::permanent(format!("rendering the prompt: {e:#}")))?;
                let n = ledger.next_n();
                let mut a = Attempt::started(stage, n, mirror.round, backend.name());
                a.prompt_bytes = prompt.bytes;
                a.prompt_est_tokens = prompt.est_tokens;
                let kept = Kept::new(&cx.job_dir, &a.dir).map_err(transient)?;
                kept.write(kept::PROMPT, prompt.text.as_bytes())
                    .map_err(transient)?;
                ledger.attempts.push(a);
                mirror.save(&ledger);
                tracing::info!(
                    attempt = n,
                    agent = backend.name(),
                    prompt_bytes = prompt.bytes,
                    "{stage} attempt"
                );
                let label = format!("{stage}-{n}");
                let request = AgentRequest {
                    prompt: &prompt.text,
                    workspace: &ws,
                    limits,
                    model: None,
                    label: &label,
                };
                // Dropped mid-run (cancel, stage timeout): the guard records the interruption.
                let guard = InterruptGuard {
                    mirror: &mirror,
                    job_dir: &cx.job_dir,
                    n,
                    logs: ws.logs_dir(),
                    max_log_bytes: max_log_bytes(limits),
                    armed: true,
                };
                let outcome = tokio::select! {
                    r = backend.run(&request) => r,
                    _ = stopped(&mut shutdown) => {
                        guard.disarm();
                        let a = ledger.last_mut().expect("pushed above");
                        a.interrupt(false, "the worker was asked to stop (SIGTERM); not counted");
                        let line = a.line();
                        keep_logs(&ws, &Kept::new(&cx.job_dir, &a.dir).map_err(transient)?, &label, limits).await;
                        mirror.save(&ledger);
                        mirror.log(&line);
                        return Err(stopping());
                    }
                };
                guard.disarm();
                let a = ledger.last_mut().expect("pushed above");
                match outcome {
                    Ok(o) => a.ran(&o),
                    Err(e) => {
                        a.phase = Phase::Checked;
                        a.failure = Some("not_started".into());
                        a.failure_message = Some(e.to_string());
                        a.counted = false;
                        let line = a.line();
                        mirror.save(&ledger);
                        mirror.log(&line);
                        return Err(StageError::permanent(format!(
                            "agent {} could not run: {e}",
                            backend.name()
                        )));
                    }
                }
                mirror.save(&ledger);
                n
            }
        };

        let a = ledger
            .attempts
            .iter_mut()
            .find(|a| a.n == n)
            .expect("the attempt is in the ledger");
        let kept = Kept::new(&cx.job_dir, &a.dir).map_err(transient)?;
        keep_logs(&ws, &kept, &a.label.clone(), limits).await;
        let (files, checked) = match readback::read_back(ws.root(), task.read_back()).await {
            Err(refusal) => {
                a.rejected = Some(refusal);
                (None, None)
            }
            Ok(None) => (None, None),
            Ok(Some(files)) => {
                a.written = true;
                let checked = blocking({
                    let (task, files) = (task.clone(), files.clone());
                    move || task.check(n, &files)
                })
                .await
                .map_err(|e| StageError::permanent(format!("checking the result: {e:#}")))?;
                keep_check(&kept, &*task, &files, &checked).map_err(transient)?;
                a.valid = Some(checked.valid);
                a.errors = checked.errors;
                a.error_codes = checked.error_codes.clone();
                a.feedback = checked.feedback.clone();
                a.feedback_more = checked.feedback_more;
                (Some(files), Some(checked))
            }
        };
        a.phase = Phase::Checked;
        a.counted = !a.provider_hiccup();
        let attempt = a.clone();
        mirror.save(&ledger);
        mirror.log(&attempt.line());

        if let (Some(files), Some(checked)) = (&files, &checked)
            && checked.valid
        {
            let out = cx.out_dir.clone();
            blocking({
                let (task, files, checked) = (task.clone(), files.clone(), checked.clone());
                let attempts = serde_json::to_vec_pretty(&ledger.attempts).map_err(|e| anyhow!(e));
                move || {
                    task.keep(&files, &checked, &out)?;
                    crate::queue::store::write_atomic(&out.join("attempts.json"), &attempts?)
                }
            })
            .await
            .map_err(transient)?;
            return Ok(StageOutput {
                // Usage went into the job record run by run; adding it here would count it twice.
                usage: Default::default(),
                summary: mirror.summary(&ledger),
            });
        }
        match attempt.failure.as_deref() {
            Some("auth") => {
                return Err(StageError::permanent(format!(
                    "agent {} was refused by its provider: {}",
                    backend.name(),
                    attempt.failure_message.unwrap_or_default()
                )));
            }
            Some(kind) if attempt.provider_hiccup() => {
                return Err(StageError::transient(format!(
                    "agent {}: {} ({kind})",
                    backend.name(),
                    attempt.failure_message.unwrap_or_default()
                )));
            }
            _ => {}
        }
    }
}

/// Resolves when the worker is asked to stop (never, if the sender is gone).
async fn stopped(rx: &mut tokio::sync::watch::Receiver<bool>) {
    if rx.wait_for(|stop| *stop).await.is_err() {
        std::future::pending::<()>().await;
    }
}

/// Runs `f` on a blocking thread.
async fn blocking<R: Send + 'static>(
    f: impl FnOnce() -> anyhow::Result<R> + Send + 'static,
) -> anyhow::Result<R> {
    tokio::task::spawn_blocking(f)
        .await
        .map_err(|e| anyhow!("worker thread failed: {e}"))?
}

fn transient(e: anyhow::Error) -> StageError {
    StageError::transient(format!("{e:#}"))
}

fn stopping() -> StageError {
    StageError::transient("the worker is stopping; the job resumes on its next delivery")
}

fn out_of_budget<T: AgentTask>(ledger: &Ledger, task: &T, budget: u32) -> StageError {
    let last = ledger
        .attempts
        .iter()
        .rev()
        .find(|a| a.counted)
        .map(Attempt::line)
        .unwrap_or_default();
    StageError::permanent(format!(
        "{} after {budget} agent attempts (agent.attempts); last: {last}",
        task.unmet()
    ))
}

/// The most of one log file that is kept: the sandbox caps what it writes to this, less the
/// slack.
fn max_log_bytes(limits: &AgentLimits) -> u64 {
    limits.max_output_bytes + (1 << 20)
}

/// Copies the run's logs into its attempt directory, off the async threads.
async fn keep_logs(ws: &Workspace, kept: &Kept, label: &str, limits: &AgentLimits) {
    let (logs, dir, label) = (ws.logs_dir(), kept.dir.clone(), label.to_string());
    let max = max_log_bytes(limits);
    let copied = tokio::task::spawn_blocking(move || Kept { dir }.logs(&logs, &label, max)).await;
    if let Ok((_, refused)) = copied
        && !refused.is_empty()
    {
        tracing::warn!(?refused, "some logs of the run were not kept");
    }
}

fn keep_check<T: AgentTask>(
    kept: &Kept,
    task: &T,
    files: &AgentFiles,
    checked: &Checked,
) -> anyhow::Result<()> {
    kept.files(files)?;
    kept.write(
        task.report_file(),
        &serde_json::to_vec_pretty(&checked.report)?,
    )
}

/// Saves the ledger and mirrors it into the job record, so `status` shows every run as it
/// happens. Failures to mirror are logged, not fatal: the ledger file is the record.
struct Mirror {
    store: JobStore,
    job_id: String,
    stage: &'static str,
    backend: &'static str,
    round: u32,
    extra: serde_json::Map<String, Value>,
}

impl Mirror {
    fn summary(&self, ledger: &Ledger) -> Value {
        let mut s = json!({
            "backend": self.backend,
            "round": self.round,
            "valid": ledger.attempts.last().and_then(|a| a.valid).unwrap_or(false),
            "attempts": ledger.attempts,
        });
        if let Value::Object(m) = &mut s {
            m.extend(self.extra.clone());
        }
        s
    }

    fn save(&self, ledger: &Ledger) {
        if let Err(e) = ledger.save() {
            tracing::error!(error = %format!("{e:#}"), "cannot save the attempt ledger");
        }
        let summary = self.summary(ledger);
        let usage = ledger.total_usage();
        let res = self.store.update(&self.job_id, |r| {
            if let Some(s) = r.stages.iter_mut().find(|s| s.name == self.stage) {
                s.summary = summary;
                s.usage = usage;
            }
            Ok(())
        });
        if let Err(e) = res {
            tracing::warn!(error = %format!("{e:#}"), "cannot mirror the attempts into the job record");
        }
    }

    fn log(&self, line: &str) {
        self.store
            .log(&self.job_id, &format!("{}: {line}", self.stage))
            .ok();
    }
}

/// Records a run as interrupted if the loop's future is dropped during it (cancel, the runner's
/// stage timeout): the ledger on disk then says what happened instead of `running`.
struct InterruptGuard<'a> {
    mirror: &'a Mirror,
    job_dir: &'a Path,
    n: u32,
    logs: std::path::PathBuf,
    max_log_bytes: u64,
    armed: bool,
}

impl InterruptGuard<'_> {
    fn disarm(mut self) {
        self.armed = false;
    }
}

impl Drop for InterruptGuard<'_> {
    fn drop(&mut self) {
        if !self.armed {
            return;
        }
        let Ok(mut ledger) = Ledger::load(self.job_dir, self.mirror.stage) else {
            return;
        };
        if let Some(a) = ledger
            .attempts
            .iter_mut()
            .find(|a| a.n == self.n && a.phase == Phase::Running)
        {
            a.interrupt(
                true,
                "the stage was stopped during the run (cancel or stage timeout)",
            );
            let line = a.line();
            if let Ok(kept) = Kept::new(self.job_dir, &a.dir) {
                kept.logs(&self.logs, &a.label, self.max_log_bytes);
            }
            self.mirror.save(&ledger);
            self.mirror.log(&line);
        }
    }
}
