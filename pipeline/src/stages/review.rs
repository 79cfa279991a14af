//! The review stage: a review agent reads the job's spec against the forward source and writes
//! `review/review.yaml`, every conclusion with evidence; the worker reads the report as hostile
//! input and checks every claim against this job's config, checkpoint and staged source
//! ([`harch_review`]). A malformed report goes back to the agent as located errors, within
//! `agent.attempts`. A well-formed one is the stage's result whatever it concludes: the checked
//! review is recorded PASS only under the checker's rules, and a NO_PASS is the fix stage's
//! input, not a failure.
//!
//! The spec under review (the generate stage's, else the library's) is staged read-only at
//! `specs/reviewed/`, next to the job's truth; the agent may write only `review/` (and its
//! scratch). The fix stage's re-reviews run this same task, one cycle per round.
//!
//! Artifacts: `review/review.yaml` (as the agent wrote it), `review/checked.json` (the
//! checker's verdict on every claim, row and defect), `review/attempts.json`; per run,
//! `attempts/review/<n>/` (prompt, transcripts, `checked.json`, the report read back).

use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use harch_prompts::{PriorErrors, ReviewInput, render_review};
use harch_review::{Checked as Review, Facts, ReviewRound, ReviewSummary, SpecNodes};
use harch_sandbox::Workspace;
use serde_json::{Map, Value, json};

use super::generate::{backend_for, limits, notes, perm, prepare_staged, prior_errors};
use crate::agent_stage::{self, AgentFiles, AgentTask, Attempt, Checked, Prompt, ReadBack};
use crate::stage::{StageContext, StageError, StageOutput, fields_of};
use crate::summary::{AgentTaskFields, ReviewHistory, ReviewVerdict};
use harch_jobs::config::AgentSettings;
use harch_jobs::record::StageState;
use harch_jobs::stage::Stage;
use harch_jobs::store::write_atomic;
use harch_library::candidate::{self, Candidate};

/// The workspace directory the review agent may write (its report).
const REVIEW_DIR: &str = "review";
/// Where the agent writes its report, relative to the workspace root.
pub const REPORT_PATH: &str = "review/review.yaml";
/// The checked review in a stage's (or a round's) output dir.
pub const CHECKED_FILE: &str = "checked.json";
/// Where the spec under review is staged read-only, relative to `specs/`.
const REVIEWED_DIR: &str = "reviewed";

/// Runs the review stage with `[agent]`.
pub async fn run(cx: &StageContext, agent: &AgentSettings) -> Result<StageOutput, StageError> {
    let spec = job_spec(cx, Stage::Review)?;
    let done = review_spec(
        cx,
        agent,
        Round {
            cycle: 0,
            spec,
            previous: None,
            out: cx.out_dir.clone(),
        },
    )
    .await?;
    let mut output = done.output;
    let verdict = verdict_fields(&done.review, 0, Vec::new());
    merge(&mut output.summary, verdict);
    Ok(output)
}

/// The spec the job has now: the fix stage's, else the generate stage's, else (a job that runs
/// no generate) the library spec serving the model's architectures.
pub(crate) fn job_spec(cx: &StageContext, stage: Stage) -> Result<Candidate, StageError> {
    for earlier in [Stage::Fix, Stage::Generate] {
        let done = cx
            .job
            .stage(earlier)
            .is_some_and(|s| s.state == StageState::Done);
        let dir = cx.stage_dir(earlier).join("spec");
        if done && dir.join("models").is_dir() {
            return candidate::read_stage_spec(&dir).map_err(|e| perm(format!("{e:#}")));
        }
    }
    if cx.job.stage(Stage::Generate).is_some() {
        return Err(perm(format!(
            "{stage} needs a spec: the generate stage left none"
        )));
    }
    let truth = super::generate::truth_dir(cx, stage)?;
    let config: Value = std::fs::read(truth.join("config.json"))
        .map_err(|e| e.to_string())
        .and_then(|b| serde_json::from_slice(&b).map_err(|e| e.to_string()))
        .map_err(|e| perm(format!("{stage}: reading the truth's config.json: {e}")))?;
    candidate::library_spec(&harch_library::specs::root(), &config)
        .map_err(|e| perm(format!("{e:#}")))?
        .ok_or_else(|| {
            perm(format!(
                "{stage} needs a spec: select generate before {stage}, or a model the library serves"
            ))
        })
}

/// One review: which round, of which spec, after which previous checked review, kept where.
pub(crate) struct Round {
    /// 0: the review stage; k: the fix stage's round k.
    pub cycle: u32,
    pub spec: Candidate,
    pub previous: Option<Review>,
    pub out: PathBuf,
}

pub(crate) struct Reviewed {
    pub review: Review,
    pub output: StageOutput,
}

/// Runs the review loop on `round.spec` to a well-formed, checked report.
pub(crate) async fn review_spec(
    cx: &StageContext,
    agent: &AgentSettings,
    round: Round,
) -> Result<Reviewed, StageError> {
    let req = &cx.job.request;
    let backend = backend_for(&req.agent, agent).map_err(perm)?;
    let guards = candidate::guard_set(&req.guards).map_err(perm)?;
    let work = match round.cycle {
        0 => Stage::Review.dir_name(),
        k => format!("review-{k}"),
    };
    let staged = prepare_staged(cx, agent, Stage::Review, &work).await?;
    let reviewed_src = cx.job_dir.join("work").join(&work).join("reviewed-src");
    let spec = round.spec.clone();
    // The worker writes the spec it reviews and evaluates it for the node paths rows may name.
    let (staged, node_paths, unverified) = tokio::task::spawn_blocking(move || {
        let _ = std::fs::remove_dir_all(&reviewed_src);
        spec.write(&reviewed_src)?;
        let (report, analysis) =
            candidate::validate_with_analysis(&staged.library, &spec, &staged.truth, &guards);
        let Some(analysis) = analysis else {
            anyhow::bail!(
                "the spec to review does not load: {}",
                report
                    .errors
                    .iter()
                    .take(3)
                    .map(|d| d.one_line())
                    .collect::<Vec<_>>()
                    .join("; ")
            );
        };
        let mut staged = staged;
        staged.add_read_only(REVIEWED_DIR, reviewed_src);
        staged.add_writable(REVIEW_DIR);
        let paths: Vec<String> = analysis.nodes.iter().map(|n| n.id.clone()).collect();
        Ok((staged, paths, report.unverified))
    })
    .await
    .map_err(perm)?
    .map_err(|e| perm(format!("{e:#}")))?;
    let spec_path = format!(
        "specs/{REVIEWED_DIR}/{}",
        round
            .spec
            .model_key
            .strip_prefix("specs/")
            .unwrap_or(&round.spec.model_key)
    );
    let task = Arc::new(ReviewTask {
        nodes: SpecNodes::new(node_paths.iter().cloned()),
        node_paths,
        unverified,
        staged,
        spec: round.spec,
        spec_path,
        previous: round.previous,
        model_id: req.model_id.clone(),
        agent: req.agent.clone(),
        notes: notes(agent),
        cycle: round.cycle,
        out: round.out,
        accepted: Mutex::new(None),
    });
    let output = agent_stage::run(cx, agent, task.clone(), &*backend, &limits(agent)).await?;
    let review = task
        .accepted
        .lock()
        .map_err(|_| StageError::permanent("the accepted review was lost"))?
        .take()
        .ok_or_else(|| StageError::permanent("the accepted review was not kept"))?;
    Ok(Reviewed { review, output })
}

/// What the job record shows of a checked review: the verdict, its reasons and the counts, the
/// whole checked review under `checked` (the publish stage reads it from there), and the review
/// history with this round added.
pub(crate) fn verdict_fields(
    c: &Review,
    cycle: u32,
    mut history: Vec<ReviewRound>,
) -> Map<String, Value> {
    history.push(ReviewRound::of(c, cycle));
    fields_of(&ReviewVerdict {
        last: ReviewSummary::of(c, cycle),
        history,
    })
}

/// Sets `fields` in a summary object.
pub(crate) fn merge(summary: &mut Value, fields: Map<String, Value>) {
    match summary {
        Value::Object(m) => m.extend(fields),
        other => *other = Value::Object(fields),
    }
}

/// Records a later round's review in the review stage's record, so the job record and `status`
/// show the last verdict and every round's counts.
pub(crate) fn record_round(cx: &StageContext, review: &Review, cycle: u32) {
    let store = &cx.store;
    let res = store
        .update(&cx.job.id, |r| {
            if let Some(s) = r.stage_mut(Stage::Review) {
                let earlier = s.summary_as::<ReviewHistory>().unwrap_or_default();
                merge(
                    &mut s.summary,
                    verdict_fields(review, cycle, earlier.history),
                );
            }
            Ok(())
        })
        .and_then(|_| {
            store.log(
                &cx.job.id,
                &format!(
                    "review round {cycle}: recorded {} ({} of {} rows verified, {} defects)",
                    review.recorded,
                    review.rows.verified,
                    review.mapping.len(),
                    review.defects.len()
                ),
            )
        });
    if let Err(e) = res {
        tracing::warn!(error = %format!("{e:#}"), "cannot record the review round");
    }
}

/// Review as an agent task.
struct ReviewTask {
    staged: super::generate::Staged,
    spec: Candidate,
    /// Where the agent finds the spec (read-only).
    spec_path: String,
    nodes: SpecNodes,
    node_paths: Vec<String>,
    /// What validation could not compare with the source; the prompt asks for a row each.
    unverified: Vec<String>,
    previous: Option<Review>,
    model_id: String,
    agent: String,
    notes: String,
    cycle: u32,
    out: PathBuf,
    accepted: Mutex<Option<Review>>,
}

impl AgentTask for ReviewTask {
    fn stage(&self) -> Stage {
        Stage::Review
    }

    fn report_file(&self) -> &'static str {
        CHECKED_FILE
    }

    fn read_back(&self) -> ReadBack {
        let mut r = ReadBack::new(REPORT_PATH);
        r.max_file_bytes = harch_review::MAX_REPORT_BYTES as u64;
        r
    }

    fn unmet(&self) -> String {
        format!("no well-formed review report at {REPORT_PATH}")
    }

    fn workspace(&self) -> anyhow::Result<Workspace> {
        self.staged.workspace()
    }

    fn prompt(&self, previous: Option<&Attempt>) -> anyhow::Result<Prompt> {
        let report_errors: Option<PriorErrors> = previous.map(|a| prior_errors(a, REPORT_PATH));
        let drafts: Vec<(String, String)> = self
            .spec
            .files
            .iter()
            .filter(|(k, _)| **k != self.spec.model_key)
            .map(|(k, t)| (k.rsplit('/').next().unwrap_or(k).to_string(), t.clone()))
            .collect();
        let spec_text = self
            .spec
            .files
            .get(&self.spec.model_key)
            .map(String::as_str)
            .unwrap_or_default();
        let p = render_review(&ReviewInput {
            model_id: &self.model_id,
            spec_path: &self.spec_path,
            spec_text,
            drafts: &drafts,
            truth: &self.staged.truth,
            report_path: REPORT_PATH,
            node_paths: &self.node_paths,
            previous: self.previous.as_ref(),
            report_errors: report_errors.as_ref(),
            notes: Some(self.notes.as_str()).filter(|n| !n.trim().is_empty()),
            unverified: &self.unverified,
        })?;
        Ok(Prompt {
            bytes: p.size.bytes,
            est_tokens: p.size.est_tokens,
            text: p.text,
        })
    }

    fn check(&self, n: u32, files: &AgentFiles) -> anyhow::Result<Checked> {
        let text = files.get(REPORT_PATH).map(String::as_str).unwrap_or("");
        let facts = Facts::from_truth(&self.staged.truth);
        Ok(
            match harch_review::review(REPORT_PATH, text, &self.nodes, &facts) {
                Ok(review) => Checked {
                    valid: true,
                    report: serde_json::to_value(&review)?,
                    errors: 0,
                    error_codes: Vec::new(),
                    feedback: Vec::new(),
                    feedback_more: 0,
                },
                Err(errors) => {
                    let prior = PriorErrors::from_diagnostics(n, &errors);
                    Checked {
                        valid: false,
                        report: json!({ "errors": errors }),
                        errors: errors.len(),
                        error_codes: errors.iter().take(8).map(|d| d.code.to_string()).collect(),
                        feedback: prior.lines,
                        feedback_more: prior.more,
                    }
                }
            },
        )
    }

    fn keep(&self, files: &AgentFiles, checked: &Checked, out: &Path) -> anyhow::Result<()> {
        let review: Review = serde_json::from_value(checked.report.clone())?;
        if let Some(text) = files.get(REPORT_PATH) {
            write_atomic(&out.join("review.yaml"), text.as_bytes())?;
        }
        write_atomic(
            &out.join(CHECKED_FILE),
            &serde_json::to_vec_pretty(&checked.report)?,
        )?;
        *self
            .accepted
            .lock()
            .map_err(|_| anyhow::anyhow!("poisoned"))? = Some(review);
        Ok(())
    }

    fn out_dir(&self, _stage_out: &Path) -> PathBuf {
        self.out.clone()
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
