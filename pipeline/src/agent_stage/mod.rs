//! The loop every agent stage runs (generate, review, fix): render a prompt, run
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
use serde_json::Value;

use crate::stage::{StageContext, StageError, StageOutput};
use harch_jobs::config::AgentSettings;
use harch_jobs::stage::Stage;
use harch_jobs::store::JobStore;
use harch_jobs::summary::AgentRuns;
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
    /// The stage the loop serves: labels its runs (`generate-3`) and names its records.
    fn stage(&self) -> Stage;
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
    /// Writes the accepted result into `out` ([`AgentTask::out_dir`]).
    fn keep(&self, files: &AgentFiles, checked: &Checked, out: &Path) -> anyhow::Result<()>;
    /// Where the accepted result and `attempts.json` go: the stage's output dir, or a directory
    /// under it when one stage runs several loops (the fix stage's rounds).
    fn out_dir(&self, stage_out: &Path) -> std::path::PathBuf {
        stage_out.to_path_buf()
    }
    /// Stage-specific fields of the stage's summary in the job record (a part of one of
    /// [`crate::summary`]'s types, as [`crate::stage::fields_of`] gives it).
    fn summary(&self) -> serde_json::Map<String, Value> {
        serde_json::Map::new()
    }
    /// The review round this task serves (0: the stage's own run; k: the fix stage's round k,
    /// its fix and its re-review). `agent.attempts` is a budget per cycle, so every round gets
    /// its own; the cost cap stays one per stage round.
    fn cycle(&self) -> u32 {
        0
    }
    /// Why the loop must end after a rejected result instead of re-prompting (the agent
    /// reported, with verified evidence, that the task cannot be done as asked): the stage
    /// fails permanently with this message. None: re-prompt.
    fn stop(&self, checked: &Checked) -> Option<String> {
        let _ = checked;
        None
    }
}

/// Runs `task`'s loop with `backend` to an accepted result, a spent budget, or a stop.
/// `agent` gives the loop's budget (`agent.attempts`, `agent.max_cost_usd`); `limits`, each run's.
pub async fn run<T: AgentTask>(
    cx: &StageContext,
    agent: &AgentSettings,
    task: Arc<T>,
    backend: &dyn AgentBackend,
    limits: &AgentLimits,
) -> Result<StageOutput, StageError> {
    let mirror = Mirror {
        store: cx.store.clone(),
        job_id: cx.job.id.clone(),
        stage: task.stage(),
        backend: backend.name(),
        round: cx.job.retries,
        extra: task.summary(),
    };
    let ledger = Ledger::load(&cx.job_dir, task.stage()).map_err(transient)?;
    let mut l = Loop {
        cx,
        agent,
        task,
        backend,
        limits,
        mirror,
        ledger,
    };
    let mut orphaned = l.adopt_orphan();
    // A run that returned but was never checked is checked now, not run again (if it served
    // this cycle: another round's run left its files in another workspace).
    let cycle = l.task.cycle();
    let mut unchecked = l
        .ledger
        .attempts
        .last()
        .filter(|a| a.phase == Phase::Ran && a.cycle == cycle)
        .map(|a| a.n);
    let mut shutdown = cx.shutdown.clone();
    loop {
        if *shutdown.borrow() {
            return Err(stopping());
        }
        let spent = unchecked.is_none().then(|| l.budget_spent()).flatten();
        // A dead worker's run still gets its process group killed and its logs kept.
        if let Some(e) = &spent
            && orphaned.is_none()
        {
            return Err(e.clone());
        }
        let ws = blocking({
            let task = l.task.clone();
            move || task.workspace()
        })
        .await
        .map_err(|e| StageError::permanent(format!("staging the workspace: {e:#}")))?;
        if let Some((label, dir)) = orphaned.take() {
            let kept = Kept::new(&cx.job_dir, &dir).map_err(transient)?;
            keep_logs(&ws, &kept, &label, limits).await;
        }
        if let Some(e) = spent {
            return Err(e);
        }
        let n = match unchecked.take() {
            Some(n) => n,
            None => l.start(&ws, &mut shutdown).await?,
        };
        if let Some(accepted) = l.check(&ws, n).await? {
            return Ok(accepted);
        }
    }
}

/// One agent stage's loop, between runs.
struct Loop<'a, T: AgentTask> {
    cx: &'a StageContext,
    agent: &'a AgentSettings,
    task: Arc<T>,
    backend: &'a dyn AgentBackend,
    limits: &'a AgentLimits,
    mirror: Mirror,
    ledger: Ledger,
}

impl<T: AgentTask> Loop<'_, T> {
    /// A run a dead worker left `running` is counted as interrupted; returns its label and
    /// directory, to keep its logs once the workspace is rebuilt (which kills what still runs).
    fn adopt_orphan(&mut self) -> Option<(String, String)> {
        let last = self.ledger.last_mut()?;
        if last.phase != Phase::Running {
            return None;
        }
        last.interrupt(
            true,
            "the worker stopped during the run (killed, crashed, or past the stage timeout)",
        );
        let (line, orphan) = (last.line(), (last.label.clone(), last.dir.clone()));
        self.mirror.save(&self.ledger);
        self.mirror.log(&line);
        Some(orphan)
    }

    /// Why no further run may start in this round, if so: `agent.attempts` or
    /// `agent.max_cost_usd`.
    fn budget_spent(&self) -> Option<StageError> {
        let (agent, round, task) = (self.agent, self.mirror.round, &self.task);
        let cycle = task.cycle();
        let spent = self.ledger.counted_in(round, cycle);
        if spent >= agent.attempts {
            let last = self
                .ledger
                .attempts
                .iter()
                .rev()
                .find(|a| a.counted && a.cycle == cycle)
                .map(Attempt::line)
                .unwrap_or_default();
            return Some(StageError::permanent(format!(
                "{} after {} agent attempts (agent.attempts); last: {last}",
                task.unmet(),
                agent.attempts
            )));
        }
        let cost = self.ledger.cost(round);
        (agent.max_cost_usd > 0.0 && cost >= agent.max_cost_usd).then(|| {
            StageError::permanent(format!(
                "{}: agent cost budget spent, ${cost:.2} of agent.max_cost_usd ${:.2} after {spent} attempts",
                task.unmet(),
                agent.max_cost_usd
            ))
        })
    }

    /// Renders the prompt, records the run, runs the agent, records what it returned; returns
    /// the run's number. A SIGTERM stops the run at once.
    async fn start(
        &mut self,
        ws: &Workspace,
        shutdown: &mut tokio::sync::watch::Receiver<bool>,
    ) -> Result<u32, StageError> {
        let (cx, stage, cycle) = (self.cx, self.task.stage(), self.task.cycle());
        let previous = self
            .ledger
            .attempts
            .iter()
            .rev()
            .find(|a| a.cycle == cycle && matches!(a.phase, Phase::Checked | Phase::Interrupted))
            .cloned();
        let prompt = blocking({
            let task = self.task.clone();
            move || task.prompt(previous.as_ref())
        })
        .await
        .map_err(|e| StageError::permanent(format!("rendering the prompt: {e:#}")))?;
        let n = self.ledger.next_n();
        let mut a = Attempt::started(stage, n, self.mirror.round, self.backend.name());
        a.cycle = cycle;
        a.prompt_bytes = prompt.bytes;
        a.prompt_est_tokens = prompt.est_tokens;
        let kept = Kept::new(&cx.job_dir, &a.dir).map_err(transient)?;
        kept.write(kept::PROMPT, prompt.text.as_bytes())
            .map_err(transient)?;
        let label = a.label.clone();
        // The run itself stops at what is left of the round's cost budget, not only the check
        // before the next run.
        let agent = self.agent;
        let mut limits = self.limits.clone();
        limits.max_cost_usd = (agent.max_cost_usd > 0.0)
            .then(|| agent.max_cost_usd - self.ledger.cost(self.mirror.round));
        self.ledger.attempts.push(a);
        self.mirror.save(&self.ledger);
        tracing::info!(
            attempt = n,
            agent = self.backend.name(),
            prompt_bytes = prompt.bytes,
            "{stage} run"
        );
        let request = AgentRequest {
            prompt: &prompt.text,
            workspace: ws,
            limits: &limits,
            model: cx.job.request.agent_model.as_deref(),
            label: &label,
        };
        // Dropped mid-run (cancel, stage timeout): the guard records the interruption.
        let guard = InterruptGuard {
            mirror: &self.mirror,
            job_dir: &cx.job_dir,
            n,
            logs: ws.logs_dir(),
            max_log_bytes: max_log_bytes(self.limits),
            armed: true,
        };
        // Whichever branch loses is dropped: a stopped run's process group is killed here.
        let outcome = tokio::select! {
            r = self.backend.run(&request) => Some(r),
            _ = stopped(shutdown) => None,
        };
        guard.disarm();
        let a = self.ledger.last_mut().expect("pushed above");
        let Some(outcome) = outcome else {
            a.interrupt(false, "the worker was asked to stop (SIGTERM); not counted");
            let line = a.line();
            keep_logs(ws, &kept, &label, self.limits).await;
            self.mirror.save(&self.ledger);
            self.mirror.log(&line);
            return Err(stopping());
        };
        let result = match outcome {
            Ok(o) => {
                ledger::ran(a, &o);
                Ok(n)
            }
            Err(e) => {
                a.phase = Phase::Checked;
                a.failure = Some("not_started".into());
                a.failure_message = Some(e.to_string());
                a.counted = false;
                Err(StageError::permanent(format!(
                    "agent {} could not run: {e}",
                    self.backend.name()
                )))
            }
        };
        let line = a.line();
        self.mirror.save(&self.ledger);
        self.mirror.log(&line);
        result
    }

    /// Keeps run `n`'s logs, reads back what it left, checks it and records the verdict.
    /// Returns the stage's output when the check accepted it; an error when the stage must end
    /// (a refused credential is permanent, a provider hiccup transient); else None: re-prompt.
    async fn check(&mut self, ws: &Workspace, n: u32) -> Result<Option<StageOutput>, StageError> {
        let (cx, task) = (self.cx, self.task.clone());
        let a = self
            .ledger
            .attempts
            .iter_mut()
            .find(|a| a.n == n)
            .expect("the attempt is in the ledger");
        let kept = Kept::new(&cx.job_dir, &a.dir).map_err(transient)?;
        keep_logs(ws, &kept, &a.label.clone(), self.limits).await;
        let mut accepted = None;
        let mut stop = None;
        match readback::read_back(ws.root(), task.read_back()).await {
            Err(refusal) => a.rejected = Some(refusal),
            Ok(None) => {}
            Ok(Some(files)) => {
                a.written = true;
                let checked = blocking({
                    let (task, files) = (task.clone(), files.clone());
                    move || task.check(n, &files)
                })
                .await
                .map_err(|e| StageError::permanent(format!("checking the result: {e:#}")))?;
                kept.files(&files).map_err(transient)?;
                kept.write(
                    task.report_file(),
                    &serde_json::to_vec_pretty(&checked.report).unwrap_or_default(),
                )
                .map_err(transient)?;
                a.valid = Some(checked.valid);
                a.errors = checked.errors;
                a.error_codes = checked.error_codes.clone();
                a.feedback = checked.feedback.clone();
                a.feedback_more = checked.feedback_more;
                if checked.valid {
                    accepted = Some((files, checked));
                } else {
                    stop = task.stop(&checked);
                }
            }
        }
        a.phase = Phase::Checked;
        a.counted = !a.provider_hiccup();
        let attempt = a.clone();
        self.mirror.save(&self.ledger);
        self.mirror.log(&attempt.line());

        if let Some((files, checked)) = accepted {
            let out = task.out_dir(&cx.out_dir);
            let attempts = serde_json::to_vec_pretty(&self.ledger.attempts)
                .map_err(|e| StageError::permanent(e.to_string()))?;
            blocking(move || {
                std::fs::create_dir_all(&out)?;
                task.keep(&files, &checked, &out)?;
                harch_jobs::store::write_atomic(&out.join("attempts.json"), &attempts)
            })
            .await
            .map_err(transient)?;
            return Ok(Some(StageOutput {
                // Usage went into the job record run by run; adding it here would count it twice.
                usage: Default::default(),
                summary: self.mirror.summary(&self.ledger),
            }));
        }
        if let Some(reason) = stop {
            self.mirror.log(&reason);
            return Err(StageError::permanent(reason));
        }
        let backend = self.backend.name();
        let message = attempt.failure_message.clone().unwrap_or_default();
        match attempt.failure.as_deref() {
            Some("auth") => Err(StageError::permanent(format!(
                "agent {backend} was refused by its provider: {message}"
            ))),
            // Another run cannot reach it either: fail once, saying what to fix, instead of
            // spending every stage attempt and backoff on the same refused connection.
            Some("unreachable") => Err(StageError::permanent(format!(
                "agent {backend} cannot reach its provider: {message}"
            ))),
            Some(kind) if attempt.provider_hiccup() => Err(StageError::transient(format!(
                "agent {backend}: {message} ({kind})"
            ))),
            _ => Ok(None),
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

/// Saves the ledger and mirrors it into the job record, so `status` shows every run as it
/// happens. Failures to mirror are logged, not fatal: the ledger file is the record.
struct Mirror {
    store: JobStore,
    job_id: String,
    stage: Stage,
    backend: &'static str,
    round: u32,
    extra: serde_json::Map<String, Value>,
}

impl Mirror {
    fn summary(&self, ledger: &Ledger) -> Value {
        let mut s = crate::stage::fields_of(&AgentRuns {
            backend: self.backend.to_string(),
            round: self.round,
            valid: ledger
                .attempts
                .last()
                .and_then(|a| a.valid)
                .unwrap_or(false),
            attempts: ledger.attempts.clone(),
        });
        s.extend(self.extra.clone());
        Value::Object(s)
    }

    fn save(&self, ledger: &Ledger) {
        if let Err(e) = ledger.save() {
            tracing::error!(error = %format!("{e:#}"), "cannot save the attempt ledger");
        }
        let summary = self.summary(ledger);
        let usage = ledger.total_usage();
        let res = self.store.update(&self.job_id, |r| {
            if let Some(s) = r.stage_mut(self.stage) {
                // Merged, not replaced: a stage's own fields (a review's verdict) stay while a
                // later round's runs are mirrored.
                match (&mut s.summary, summary) {
                    (Value::Object(old), Value::Object(new)) => old.extend(new),
                    (old, new) => *old = new,
                }
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
