//! The generate stage: an agent writes the model's spec in a sandbox, running `validate` on its
//! own as often as it likes; then the worker validates the spec itself. Valid: the spec becomes
//! the stage's artifact and the job moves on to verify. Invalid, missing or refused: the next
//! attempt's prompt carries the worker's errors, until `agent.attempts` runs out and the job
//! fails permanently with the last attempt as its reason. The loop itself is
//! [`agent_stage`](crate::agent_stage); this module says what generate reads back
//! (the model spec and draft components) and how it checks them (the full validate against the
//! job's truth, with the project's own library).
//!
//! Artifacts: `generate/spec/models/<model_type>.yaml` (+ `spec/components/drafts/`),
//! `generate/report.json` (the accepting validation), `generate/attempts.json`; per run,
//! `attempts/generate/<n>/` (prompt, transcripts, `validate.json`, the files read back). The
//! workspace itself is scratch, under `work/generate/`.

pub mod sealed_validate;
mod staging;

use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use harch_agents::{AgentBackend, AgentLimits, Credentials};
use harch_guards::GuardSet;
use harch_prompts::{GenerateInput, PriorErrors, render_generate};
use harch_sandbox::Workspace;
use serde_json::Value;

use crate::ablation::RunRecord;
pub use crate::ablation::decontaminate::{
    Decontaminated, Removed, decontaminate, removed_component_names,
};
use crate::agent_stage::{self, AgentFiles, AgentTask, Attempt, Checked, Prompt, ReadBack};
use crate::stage::{StageContext, StageError, StageOutput, fields_of};
use crate::summary::GenerateFields;
use harch_jobs::config::AgentSettings;
use harch_jobs::record::AblationRun;
use harch_jobs::stage::Stage;
use harch_library::candidate::{self, Candidate};
pub use staging::{
    AgentLibrary, EXAMPLES_DIR, StageRequest, Staged, agent_library, load_truth, prepare,
    spec_file_name,
};

/// The backend a job names, configured from the worker's settings and environment. Only that
/// backend's own credentials ever reach the agent.
pub fn backend_for(
    name: &str,
    s: &AgentSettings,
) -> Result<Box<dyn AgentBackend>, harch_agents::AgentError> {
    let config = harch_agents::BackendsConfig {
        claude: harch_agents::CliConfig {
            binary: s.claude_bin.clone().into(),
        },
        codex: harch_agents::CliConfig {
            binary: s.codex_bin.clone().into(),
        },
        kimi: harch_agents::CliConfig {
            binary: s.kimi_bin.clone().into(),
        },
        openai: harch_agents::OpenAiSettings {
            base_url: s.openai_base_url.clone(),
            model: s.openai_model.clone(),
            api_key_env: s.openai_api_key_env.clone(),
            input_usd_per_mtok: s.openai_input_usd_per_mtok,
            output_usd_per_mtok: s.openai_output_usd_per_mtok,
            ..harch_agents::OpenAiSettings::default()
        },
    };
    // Checked again here, in the worker's environment: enqueue ran elsewhere, or was told to
    // skip the check. A missing key fails the stage before any run is spent.
    crate::preflight::check_agent_credentials(s, name, |k| std::env::var(k).ok()).map_err(|e| {
        harch_agents::AgentError::Config {
            backend: "config",
            message: format!("{e:#}"),
        }
    })?;
    harch_agents::backend(name, &config, &Credentials::from_env())
}

/// One run's limits, from `[agent]`.
pub fn limits(s: &AgentSettings) -> AgentLimits {
    AgentLimits {
        max_turns: s.max_turns,
        wall_time: Duration::from_secs(s.timeout_s.max(1)),
        max_output_bytes: s.max_output_mib.max(1) << 20,
        ..AgentLimits::default()
    }
}

pub(crate) fn perm(e: impl std::fmt::Display) -> StageError {
    StageError::permanent(e.to_string())
}

/// The fetch stage's truth dir, which every agent stage needs.
pub(crate) fn truth_dir(cx: &StageContext, stage: Stage) -> Result<std::path::PathBuf, StageError> {
    let truth_dir = cx.stage_dir(Stage::Fetch).join("truth");
    if !truth_dir.is_dir() {
        return Err(perm(format!(
            "{stage} needs the fetch stage's truth dir ({} is missing): select fetch before {stage}",
            truth_dir.display()
        )));
    }
    Ok(truth_dir)
}

/// Prepares an agent workspace under `jobs/<id>/work/<work>/` on a blocking thread: the job's
/// truth, the library, the examples (the target's own spec left out when the job asks), and
/// `validate` on PATH.
pub(crate) async fn prepare_staged(
    cx: &StageContext,
    agent: &AgentSettings,
    stage: Stage,
    work: &str,
) -> Result<staging::Staged, StageError> {
    let truth_dir = truth_dir(cx, stage)?;
    let (model_id, work, settings) = (
        cx.job.request.model_id.clone(),
        cx.job_dir.join("work").join(work),
        agent.clone(),
    );
    let exclude = cx.job.request.exclude_library_spec;
    let ablation = cx.job.request.ablation.clone();
    let agent_bin = agent_bin(&cx.job.request.agent, agent);
    tokio::task::spawn_blocking(move || {
        staging::prepare(&staging::StageRequest {
            model_id: &model_id,
            truth_dir: &truth_dir,
            spec_root: &harch_library::specs::root(),
            work: &work,
            exclude_library_spec: exclude,
            settings: &settings,
            ablation: ablation.as_ref(),
            agent_bin,
            worker_exe: None,
        })
    })
    .await
    .map_err(perm)?
    .map_err(|e| perm(format!("{e:#}")))
}

/// Operator notes for every agent prompt, when there are any.
pub(crate) fn notes(agent: &AgentSettings) -> String {
    agent.prompt_notes.clone()
}

/// Runs the generate stage with `[agent]`.
pub async fn run(cx: &StageContext, agent: &AgentSettings) -> Result<StageOutput, StageError> {
    let req = &cx.job.request;
    truth_dir(cx, Stage::Generate)?;
    // An ablation run's check is its tier's; the full validate comes after the loop.
    let guards = match &req.ablation {
        Some(a) => GuardSet::list(&a.guards.join(",")).map_err(perm)?,
        None => candidate::guard_set(&req.guards).map_err(perm)?,
    };
    let backend = backend_for(&req.agent, agent).map_err(perm)?;
    let staged = prepare_staged(cx, agent, Stage::Generate, &Stage::Generate.dir_name()).await?;
    let task = Arc::new(Generate {
        staged,
        guards,
        model_id: req.model_id.clone(),
        agent: req.agent.clone(),
        notes: notes(agent),
    });
    let result = agent_stage::run(cx, agent, task.clone(), &*backend, &limits(agent)).await;
    if let Some(a) = &req.ablation {
        // A transient failure runs the stage again; its record is written when the loop ends.
        let ended = match &result {
            Ok(_) => Some(None),
            Err(StageError::Permanent(m)) => Some(Some(m.clone())),
            Err(StageError::Transient(_)) => None,
        };
        if let Some(stage_error) = ended {
            let (cx_job, job_dir, a) = (cx.job.clone(), cx.job_dir.clone(), a.clone());
            tokio::task::spawn_blocking(move || {
                record_ablation(&task, &cx_job, &job_dir, &a, stage_error)
            })
            .await
            .map_err(perm)?
            .map_err(|e| StageError::transient(format!("writing the ablation record: {e:#}")))?;
        }
    }
    result
}

/// The agent's executable for the backends that run one.
fn agent_bin(agent: &str, s: &AgentSettings) -> Option<std::path::PathBuf> {
    match agent {
        "claude" => Some(s.claude_bin.clone().into()),
        "codex" => Some(s.codex_bin.clone().into()),
        "kimi" => Some(s.kimi_bin.clone().into()),
        _ => None,
    }
}

/// Writes `ablation.json` for an ablation run whose loop ended: the ledger's accounting and
/// claims, and the full validate (every guard, the same decontaminated library) of the last
/// spec the agent wrote.
fn record_ablation(
    task: &Generate,
    job: &harch_jobs::record::JobRecord,
    job_dir: &Path,
    a: &AblationRun,
    stage_error: Option<String>,
) -> anyhow::Result<()> {
    let ledger = agent_stage::Ledger::load(job_dir, Stage::Generate)?;
    let req = &job.request;
    let mut rec = RunRecord {
        model_id: req.model_id.clone(),
        tier: a.tier.clone(),
        guards: a.guards.clone(),
        seed: a.seed,
        agent: req.agent.clone(),
        agent_model: req.agent_model.clone(),
        job_id: job.id.clone(),
        removed: task
            .staged
            .decontamination
            .as_ref()
            .map(|d| d.removed.clone())
            .unwrap_or_default(),
        stage_error,
        ..RunRecord::default()
    };
    rec.account(&ledger.attempts);
    let last_written = ledger
        .attempts
        .iter()
        .rev()
        .find(|x| x.written && x.valid.is_some());
    if let Some(last) = last_written {
        let specs = job_dir.join(&last.dir).join("files/specs");
        if let Some(candidate) = Candidate::read(&specs, &task.staged.spec_file)? {
            let full = candidate::validate(
                &task.staged.library,
                &candidate,
                &task.staged.truth,
                &GuardSet::all(),
            );
            rec.full(&full);
        }
    }
    rec.write(&job_dir.join(crate::ablation::run::FILE))
}

/// Generate as an agent task.
struct Generate {
    staged: staging::Staged,
    guards: GuardSet,
    model_id: String,
    agent: String,
    notes: String,
}

impl Generate {
    /// Where the agent reports a DSL gap or a disputed guard: next to the spec,
    /// `specs/models/<model_type>.gap.yaml`.
    fn gap_path(&self) -> String {
        let spec = self.staged.spec_path();
        format!("{}.gap.yaml", spec.trim_end_matches(".yaml"))
    }
}

impl AgentTask for Generate {
    fn stage(&self) -> Stage {
        Stage::Generate
    }

    fn report_file(&self) -> &'static str {
        "validate.json"
    }

    fn read_back(&self) -> ReadBack {
        let mut r = ReadBack::new(self.staged.spec_path());
        r.optional.push(self.gap_path());
        r.dirs.push((
            format!("specs/{}", harch_sandbox::DRAFTS_DIR),
            vec!["yaml", "yml"],
        ));
        r
    }

    fn unmet(&self) -> String {
        format!("no valid spec at {}", self.staged.spec_path())
    }

    fn workspace(&self) -> anyhow::Result<Workspace> {
        self.staged.workspace()
    }

    fn prompt(&self, previous: Option<&Attempt>) -> anyhow::Result<Prompt> {
        let spec_path = self.staged.spec_path();
        let prior = previous.map(|a| prior_errors(a, &spec_path));
        let mut input = GenerateInput::new(
            &self.model_id,
            &self.staged.truth,
            &self.staged.prompt_repo,
            &spec_path,
        );
        input.previous = prior.as_ref();
        input.notes = Some(self.notes.as_str()).filter(|n| !n.trim().is_empty());
        let p = render_generate(&input)?;
        Ok(Prompt {
            bytes: p.size.bytes,
            est_tokens: p.size.est_tokens,
            text: p.text,
        })
    }

    fn check(&self, n: u32, files: &AgentFiles) -> anyhow::Result<Checked> {
        let mut spec_files = files.clone();
        spec_files.remove(&self.gap_path());
        let candidate = Candidate {
            model_key: self.staged.spec_path(),
            files: spec_files,
        };
        let r = candidate::validate(
            &self.staged.library,
            &candidate,
            &self.staged.truth,
            &self.guards,
        );
        let mut checked = validation_checked(n, &r)?;
        // A gap report is read whether or not the spec validates, and counts only with
        // verified evidence: beside an invalid spec it ends the stage, beside a valid one the
        // spec is kept as valid with a declared gap (its `affects` labelled downstream).
        if let Some(text) = files.get(&self.gap_path()) {
            let raised: Vec<&str> = r.errors.iter().map(|d| d.code).collect();
            let facts = harch_review::Facts::from_truth(&self.staged.truth);
            match harch_review::gap::check_declared(&self.gap_path(), text, &facts, &raised) {
                Ok(gap) => {
                    let mut v = serde_json::to_value(&gap)?;
                    v["line"] = Value::String(gap.line());
                    checked.report["gap"] = v;
                }
                Err(diags) => {
                    checked.valid = false;
                    let mut errors = r.errors.clone();
                    errors.extend(diags);
                    let prior = PriorErrors::from_diagnostics(n, &errors);
                    checked.errors = errors.len();
                    checked.error_codes =
                        errors.iter().take(8).map(|d| d.code.to_string()).collect();
                    checked.feedback = prior.lines;
                    checked.feedback_more = prior.more;
                }
            }
        }
        Ok(checked)
    }

    fn keep(&self, files: &AgentFiles, checked: &Checked, out: &Path) -> anyhow::Result<()> {
        let mut spec_files = files.clone();
        // A gap report that holds stays beside the spec (publish and verify read it there).
        if checked.report.get("gap").is_none() {
            spec_files.remove(&self.gap_path());
        }
        let candidate = Candidate {
            model_key: self.staged.spec_path(),
            files: spec_files,
        };
        candidate.write(&out.join("spec"))?;
        harch_jobs::store::write_atomic(
            &out.join("report.json"),
            &serde_json::to_vec_pretty(&checked.report)?,
        )
    }

    fn stop(&self, checked: &Checked) -> Option<String> {
        if checked.valid {
            return None;
        }
        let line = checked.report.get("gap")?.get("line")?.as_str()?;
        Some(format!(
            "{line}; the job stops here (see {} in the last attempt)",
            self.gap_path()
        ))
    }

    fn summary(&self) -> serde_json::Map<String, Value> {
        fields_of(&GenerateFields {
            agent: self.agent.clone(),
            spec: format!(
                "{}/spec/models/{}",
                Stage::Generate.dir_name(),
                self.staged.spec_file
            ),
            workspace_spec: self.staged.spec_path(),
            excluded_library_spec: self.staged.excluded.clone(),
            decontamination: self
                .staged
                .decontamination
                .as_ref()
                .map(|d| d.removed.clone()),
        })
    }
}

/// The loop's verdict on attempt `n` from the worker's validation of the spec it left (generate,
/// fix).
pub(crate) fn validation_checked(n: u32, r: &harch_guards::Report) -> anyhow::Result<Checked> {
    let prior = PriorErrors::from_diagnostics(n, &r.errors);
    Ok(Checked {
        valid: r.valid,
        errors: r.errors.len(),
        error_codes: r
            .errors
            .iter()
            .take(8)
            .map(|d| d.code.to_string())
            .collect(),
        feedback: prior.lines,
        feedback_more: prior.more,
        report: serde_json::to_value(r)?,
    })
}

/// What the next prompt says about an attempt: the worker's errors when it checked a spec,
/// and what happened in the run.
pub(crate) fn prior_errors(a: &Attempt, spec_path: &str) -> PriorErrors {
    let note = a.run_note(spec_path);
    if a.feedback.is_empty() {
        return PriorErrors::note(a.n, note.unwrap_or_default());
    }
    PriorErrors {
        attempt: a.n,
        lines: a.feedback.clone(),
        more: a.feedback_more,
        note,
    }
}
