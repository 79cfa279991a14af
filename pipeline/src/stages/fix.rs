//! The fix stage (Agent Fix): after a NO_PASS review, up to `review.rounds` rounds of fix and
//! review. Each round validates the spec afresh and turns that validation's errors and the last
//! checked review into work orders (`harch_review::work_orders`: only verified findings carry a
//! fix; an unverified one is a place to look, a contradicted one a warning). When any order is
//! actionable, a fix agent edits the spec in the sandbox and the worker validates what it left:
//! a spec that does not validate is never kept, and the attempt is retried within
//! `agent.attempts` with its errors; when the budget runs out the job fails with the last
//! attempt's reason. Then the review runs again on the spec as it now stands; a recorded PASS
//! ends the rounds. A PASS review needs no fix: the stage records that and ends.
//!
//! A NO_PASS after the last round is a result, not a failure: the spec is valid, and publishing
//! opens its pull request as a draft with the review's reasons.
//!
//! Artifacts: `fix/spec/` (the last fixed spec, when a fix was accepted), `fix/rounds.json`;
//! per round `fix/fix-<k>/` (the accepted spec, its validation, the fix ledger) and
//! `fix/review-<k>/` (the re-review's report and checked review); per run,
//! `attempts/fix/<n>/` and `attempts/review/<n>/`.

use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use harch_guards::GuardSet;
use harch_prompts::{FixInput, render_fix};
use harch_review::{Checked as Review, WorkOrder, work_orders};
use harch_sandbox::Workspace;
use serde_json::{Map, Value};

use super::generate::{
    Staged, backend_for, limits, notes, perm, prepare_staged, prior_errors, validation_checked,
};
use super::review::{CHECKED_FILE, Round, job_spec, record_round, review_spec};
use crate::agent_stage::{self, AgentFiles, AgentTask, Attempt, Checked, Prompt, ReadBack};
use crate::stage::{StageContext, StageError, StageOutput, fields_of};
use crate::summary::{AgentTaskFields, FixRound, FixSummary};
use harch_jobs::config::{AgentSettings, ReviewSettings};
use harch_jobs::record::StageState;
use harch_jobs::stage::Stage;
use harch_jobs::store::write_atomic;
use harch_library::candidate::{self, Candidate};

/// The review stage's checked review; the fix stage cannot run without it.
fn first_review(cx: &StageContext) -> Result<Review, StageError> {
    let path = cx.stage_dir(Stage::Review).join(CHECKED_FILE);
    let done = cx
        .job
        .stage(Stage::Review)
        .is_some_and(|s| s.state == StageState::Done);
    if !done || !path.is_file() {
        return Err(perm(format!(
            "fix needs the review stage's checked review ({} is missing): select review before fix",
            path.display()
        )));
    }
    let bytes = std::fs::read(&path).map_err(|e| perm(format!("{}: {e}", path.display())))?;
    serde_json::from_slice(&bytes).map_err(|e| perm(format!("{}: {e}", path.display())))
}

/// Runs the fix stage with `[agent]` and `[review]` (its rounds).
pub async fn run(
    cx: &StageContext,
    agent: &AgentSettings,
    review: &ReviewSettings,
) -> Result<StageOutput, StageError> {
    let mut last = first_review(cx)?;
    if last.passed() {
        return StageOutput::with_summary(&FixSummary {
            runs: None,
            task: None,
            needed: false,
            fixed_in_round: None,
            recorded: last.recorded,
            rounds: Vec::new(),
        });
    }
    let req = &cx.job.request;
    let backend = backend_for(&req.agent, agent).map_err(perm)?;
    let guards = candidate::guard_set(&req.guards).map_err(perm)?;
    let mut spec = job_spec(cx, Stage::Fix)?;
    let mut rounds = Vec::new();
    let mut fixed_in = None;
    let mut fix_summary = Value::Null;
    for k in 1..=review.rounds {
        let staged = prepare_staged(
            cx,
            agent,
            Stage::Fix,
            &format!("{}-{k}", Stage::Fix.dir_name()),
        )
        .await?;
        // Work orders come from a validation run now, never from the one generate or verify saw.
        let (staged, orders) = tokio::task::spawn_blocking({
            let (spec, guards, last) = (spec.clone(), guards.clone(), last.clone());
            move || {
                let r = candidate::validate(&staged.library, &spec, &staged.truth, &guards);
                let orders = work_orders(Some(&last), &r.errors);
                (staged, orders)
            }
        })
        .await
        .map_err(perm)?;
        let actionable = orders.iter().filter(|o| o.is_actionable()).count();
        log(
            cx,
            &format!(
                "fix round {k}: {} work orders, {actionable} to act on",
                orders.len()
            ),
        );
        if actionable > 0 {
            let mut staged = staged;
            staged.seed(&spec.files);
            let task = Arc::new(FixTask {
                staged,
                guards: guards.clone(),
                spec: spec.clone(),
                orders: orders.clone(),
                review: last.clone(),
                model_id: req.model_id.clone(),
                agent: req.agent.clone(),
                notes: notes(agent),
                cycle: k,
                accepted: Mutex::new(None),
            });
            let out = agent_stage::run(cx, agent, task.clone(), &*backend, &limits(agent)).await?;
            fix_summary = out.summary;
            spec = task
                .accepted
                .lock()
                .map_err(|_| StageError::permanent("the accepted fix was lost"))?
                .take()
                .ok_or_else(|| StageError::permanent("the accepted fix was not kept"))?;
            fixed_in = Some(k);
        }
        let reviewed = review_spec(
            cx,
            agent,
            Round {
                cycle: k,
                spec: spec.clone(),
                previous: Some(last),
                out: cx.out_dir.join(format!("review-{k}")),
            },
        )
        .await?;
        last = reviewed.review;
        record_round(cx, &last, k);
        rounds.push(FixRound {
            round: k,
            work_orders: orders.len(),
            actionable,
            fixed: actionable > 0,
            recorded: last.recorded,
            rows: last.rows,
            defects: last.defect_tally,
        });
        if last.passed() {
            break;
        }
    }
    let out = cx.out_dir.clone();
    let keep = fixed_in.map(|_| spec.clone());
    let rounds_json = serde_json::to_vec_pretty(&rounds).map_err(perm)?;
    tokio::task::spawn_blocking(move || {
        if let Some(spec) = keep {
            spec.write(&out.join("spec"))?;
        }
        write_atomic(&out.join("rounds.json"), &rounds_json)
    })
    .await
    .map_err(perm)?
    .map_err(|e| StageError::transient(format!("{e:#}")))?;
    // The last fix loop's runs and task, as its loop recorded them (none when no round had
    // anything to fix).
    fn part<T: serde::de::DeserializeOwned>(v: &Value) -> Option<T> {
        T::deserialize(v).ok()
    }
    StageOutput::with_summary(&FixSummary {
        runs: part(&fix_summary),
        task: part(&fix_summary),
        needed: true,
        fixed_in_round: Some(fixed_in),
        recorded: last.recorded,
        rounds,
    })
}

fn log(cx: &StageContext, line: &str) {
    cx.store.log(&cx.job.id, line).ok();
    tracing::info!("{line}");
}

/// Fix as an agent task: the workspace of generate with the spec seeded into the writable area,
/// the work orders as the prompt, and the worker's full validation as the check.
struct FixTask {
    staged: Staged,
    guards: GuardSet,
    /// The spec as it stood before this round (what was seeded).
    spec: Candidate,
    orders: Vec<WorkOrder>,
    review: Review,
    model_id: String,
    agent: String,
    notes: String,
    cycle: u32,
    accepted: Mutex<Option<Candidate>>,
}

impl AgentTask for FixTask {
    fn stage(&self) -> Stage {
        Stage::Fix
    }

    fn report_file(&self) -> &'static str {
        "validate.json"
    }

    fn read_back(&self) -> ReadBack {
        let mut r = ReadBack::new(self.spec.model_key.clone());
        r.dirs.push((
            format!("specs/{}", harch_sandbox::DRAFTS_DIR),
            vec!["yaml", "yml"],
        ));
        r
    }

    fn unmet(&self) -> String {
        format!(
            "no valid fixed spec at {} (review round {})",
            self.spec.model_key, self.cycle
        )
    }

    fn workspace(&self) -> anyhow::Result<Workspace> {
        self.staged.workspace()
    }

    fn prompt(&self, previous: Option<&Attempt>) -> anyhow::Result<Prompt> {
        let errors = previous.map(|a| prior_errors(a, &self.spec.model_key));
        let spec_text = self
            .spec
            .files
            .get(&self.spec.model_key)
            .map(String::as_str)
            .unwrap_or_default();
        let p = render_fix(&FixInput {
            model_id: &self.model_id,
            spec_path: &self.spec.model_key,
            spec_text,
            work_orders: &self.orders,
            review: Some(&self.review),
            errors: errors.as_ref(),
            truth: &self.staged.truth,
            notes: Some(self.notes.as_str()).filter(|n| !n.trim().is_empty()),
        })?;
        Ok(Prompt {
            bytes: p.size.bytes,
            est_tokens: p.size.est_tokens,
            text: p.text,
        })
    }

    fn check(&self, n: u32, files: &AgentFiles) -> anyhow::Result<Checked> {
        let candidate = Candidate {
            model_key: self.spec.model_key.clone(),
            files: files.clone(),
        };
        let r = candidate::validate(
            &self.staged.library,
            &candidate,
            &self.staged.truth,
            &self.guards,
        );
        validation_checked(n, &r)
    }

    fn keep(&self, files: &AgentFiles, checked: &Checked, out: &Path) -> anyhow::Result<()> {
        let candidate = Candidate {
            model_key: self.spec.model_key.clone(),
            files: files.clone(),
        };
        candidate.write(&out.join("spec"))?;
        write_atomic(
            &out.join("report.json"),
            &serde_json::to_vec_pretty(&checked.report)?,
        )?;
        *self
            .accepted
            .lock()
            .map_err(|_| anyhow::anyhow!("poisoned"))? = Some(candidate);
        Ok(())
    }

    fn out_dir(&self, stage_out: &Path) -> PathBuf {
        stage_out.join(format!("fix-{}", self.cycle))
    }

    fn summary(&self) -> Map<String, Value> {
        fields_of(&AgentTaskFields {
            agent: self.agent.clone(),
            spec: self.spec.model_key.clone(),
        })
    }

    fn cycle(&self) -> u32 {
        self.cycle
    }
}
