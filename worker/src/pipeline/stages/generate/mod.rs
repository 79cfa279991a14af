//! The generate stage: an agent writes the model's spec in a sandbox, running `validate` on its
//! own as often as it likes; then the worker validates the spec itself. Valid: the spec becomes
//! the stage's artifact (`generate/spec/…`) and the job moves on to verify. Invalid or missing:
//! the next attempt's prompt carries the worker's errors, until `agent.attempts` runs out and
//! the job fails permanently with the last errors as its reason.
//!
//! Artifacts: `spec/models/<model_type>.yaml` (+ `spec/components/drafts/`), `report.json`
//! (the accepting validation), `attempts.json`, `prompt-N.md`, `validate-N.json`, `logs/`
//! (the agents' transcripts). The workspace itself is scratch, under `work/generate/`.

mod attempts;
mod staging;

use std::path::Path;
use std::time::Duration;

use futures_util::future::BoxFuture;
use harch_agents::{AgentBackend, AgentLimits, AgentRequest, Credentials, FailureKind};
use harch_prompts::{GenerateInput, PriorErrors, render_generate};
use serde_json::json;

use crate::candidate::{self, Candidate};
use crate::pipeline::stage::{Stage, StageContext, StageError, StageOutput};
use crate::queue::config::AgentSettings;
use crate::queue::store::{JobStore, write_atomic};
use attempts::Attempt;
pub use staging::{AgentLibrary, EXAMPLES_DIR, agent_library, load_truth, spec_file_name};

pub struct GenerateStage;

impl Stage for GenerateStage {
    fn run<'a>(&'a self, cx: &'a StageContext) -> BoxFuture<'a, Result<StageOutput, StageError>> {
        Box::pin(generate(cx))
    }
}

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
    harch_agents::backend(name, &config, &Credentials::from_env())
}

fn limits(s: &AgentSettings) -> AgentLimits {
    AgentLimits {
        max_turns: s.max_turns,
        wall_time: Duration::from_secs(s.timeout_s.max(1)),
        max_output_bytes: s.max_output_mib.max(1) << 20,
        ..AgentLimits::default()
    }
}

fn perm(e: impl std::fmt::Display) -> StageError {
    StageError::permanent(e.to_string())
}

fn io(e: anyhow::Error) -> StageError {
    StageError::transient(format!("{e:#}"))
}

/// Stages the agent's workspace under `work` (file I/O, off the async threads).
async fn stage_workspace(
    cx: &StageContext,
    truth_dir: &Path,
    work: &Path,
) -> Result<staging::Staged, StageError> {
    let req = &cx.job.request;
    let (model_id, truth_dir, work, settings) = (
        req.model_id.clone(),
        truth_dir.to_path_buf(),
        work.to_path_buf(),
        cx.settings.clone(),
    );
    let exclude = req.exclude_library_spec;
    tokio::task::spawn_blocking(move || {
        staging::stage(&staging::StageRequest {
            model_id: &model_id,
            truth_dir: &truth_dir,
            spec_root: &crate::specs::root(),
            work: &work,
            exclude_library_spec: exclude,
            settings: &settings.agent,
        })
    })
    .await
    .map_err(perm)?
    .map_err(|e| perm(format!("{e:#}")))
}

async fn generate(cx: &StageContext) -> Result<StageOutput, StageError> {
    let req = &cx.job.request;
    let agent = &cx.settings.agent;
    let truth_dir = cx.stage_dir("fetch").join("truth");
    if !truth_dir.is_dir() {
        return Err(perm(format!(
            "generate needs the fetch stage's truth dir ({} is missing): select fetch before generate",
            truth_dir.display()
        )));
    }
    let guards = candidate::guard_set(&req.guards).map_err(perm)?;
    let backend = backend_for(&req.agent, agent).map_err(perm)?;
    let work = cx.job_dir.join("work").join("generate");
    let staged = stage_workspace(cx, &truth_dir, &work).await?;
    let spec_path = staged.spec_path();
    let store = JobStore::open(cx.settings.data_dir()).map_err(io)?;
    let mut limits = limits(agent);
    let mut history = attempts::load(&work);
    let mut previous = history.last().map(|a| note_for(a, &spec_path));
    let mut spent_usd: f64 = history.iter().filter_map(|a| a.cost_usd).sum();

    loop {
        if attempts::counted(&history) >= agent.attempts {
            return Err(out_of_budget(&history, agent.attempts, &spec_path));
        }
        if agent.max_cost_usd > 0.0 && spent_usd >= agent.max_cost_usd {
            return Err(perm(format!(
                "agent cost budget spent: ${spent_usd:.2} of agent.max_cost_usd ${:.2} after {} attempts, no valid spec",
                agent.max_cost_usd,
                history.len()
            )));
        }
        let n = history.len() as u32 + 1;
        // Staged afresh each attempt: read-only parts reset, the agent's own files kept.
        let ws = if n == 1 {
            staged.ws.clone()
        } else {
            stage_workspace(cx, &truth_dir, &work).await?.ws
        };
        let notes = Some(agent.prompt_notes.as_str()).filter(|n| !n.trim().is_empty());
        let mut input = GenerateInput::new(
            &req.model_id,
            &staged.truth,
            &staged.prompt_repo,
            &spec_path,
        );
        input.previous = previous.as_ref();
        input.notes = notes;
        let prompt = render_generate(&input).map_err(perm)?;
        write_atomic(&cx.out(&format!("prompt-{n}.md")), prompt.text.as_bytes()).map_err(io)?;
        let label = format!("generate-{n}");
        // The run itself stops at what is left of the stage's budget, not only the next check.
        limits.max_cost_usd = (agent.max_cost_usd > 0.0).then_some(agent.max_cost_usd - spent_usd);
        tracing::info!(attempt = n, agent = backend.name(), prompt = %prompt.size, "generate attempt");
        let outcome = backend
            .run(&AgentRequest {
                prompt: &prompt.text,
                workspace: &ws,
                limits: &limits,
                model: None,
                label: &label,
            })
            .await
            .map_err(|e| perm(format!("agent {} could not run: {e}", backend.name())))?;
        let mut attempt = Attempt::from_outcome(n, &outcome);
        attempt.prompt_bytes = prompt.size.bytes;
        attempt.prompt_est_tokens = prompt.size.est_tokens;
        spent_usd += outcome.cost_usd.unwrap_or(0.0);
        copy_logs(&ws.logs_dir(), &cx.out("logs"));

        let candidate = Candidate::read(&ws.specs_dir(), &staged.spec_file)
            .map_err(|e| io(e.context("reading the agent's spec")))?;
        attempt.spec_written = candidate.is_some();
        let report = match &candidate {
            Some(c) => {
                let (library, c, truth, guards) = (
                    staged.library.clone(),
                    c.clone(),
                    staged.truth.clone(),
                    guards.clone(),
                );
                let r = tokio::task::spawn_blocking(move || {
                    candidate::validate(&library, &c, &truth, &guards)
                })
                .await
                .map_err(|e| perm(format!("validation crashed: {e}")))?;
                attempt.valid = Some(r.valid);
                attempt.errors = r.errors.len();
                attempt.error_codes = r
                    .errors
                    .iter()
                    .take(8)
                    .map(|d| d.code.to_string())
                    .collect();
                let json = serde_json::to_vec_pretty(&r).map_err(perm)?;
                write_atomic(&cx.out(&format!("validate-{n}.json")), &json).map_err(io)?;
                Some(r)
            }
            None => None,
        };
        let provider_hiccup = outcome
            .failure
            .as_ref()
            .is_some_and(|f| matches!(f.kind, FailureKind::RateLimited | FailureKind::Transient));
        attempt.counted = !(provider_hiccup && attempt.valid != Some(true));
        history.push(attempt);
        attempts::save(&work, &history).map_err(io)?;
        let summary = summary(&history, &staged, backend.name(), &spec_path, &req.agent);
        record_progress(&store, cx, &summary, &history);
        store
            .log(
                &cx.job.id,
                &format!("generate: {}", attempt_line(history.last().unwrap())),
            )
            .ok();

        if let (Some(c), Some(r)) = (&candidate, &report)
            && r.valid
        {
            c.write(&cx.out("spec")).map_err(io)?;
            let json = serde_json::to_vec_pretty(r).map_err(perm)?;
            write_atomic(&cx.out("report.json"), &json).map_err(io)?;
            write_atomic(
                &cx.out("attempts.json"),
                &serde_json::to_vec_pretty(&history).map_err(perm)?,
            )
            .map_err(io)?;
            return Ok(StageOutput {
                // Usage went into the job record attempt by attempt; adding it here would count
                // it twice.
                usage: Default::default(),
                summary,
            });
        }
        if let Some(f) = &outcome.failure
            && f.kind == FailureKind::Auth
        {
            return Err(perm(format!(
                "agent {} was refused by its provider: {}",
                backend.name(),
                f.message
            )));
        }
        if provider_hiccup {
            let f = outcome.failure.as_ref().unwrap();
            return Err(StageError::transient(format!(
                "agent {}: {} ({})",
                backend.name(),
                f.message,
                serde_json::to_value(f.kind).unwrap_or_default()
            )));
        }
        previous = Some(match &report {
            Some(r) => {
                let mut p = PriorErrors::from_diagnostics(n, &r.errors);
                p.note = claim_note(history.last().unwrap());
                p
            }
            None => note_for(history.last().unwrap(), &spec_path),
        });
    }
}

/// What the next prompt says about an attempt that left no report, or one that ended oddly.
fn note_for(a: &Attempt, spec_path: &str) -> PriorErrors {
    let mut parts = Vec::new();
    if let Some(f) = &a.failure {
        parts.push(match f.as_str() {
            "timeout" => format!(
                "The run was stopped at its time limit after {} s.",
                a.wall_ms / 1000
            ),
            "output_limit" => {
                "The run was stopped because its output exceeded the cap: keep command output short."
                    .to_string()
            }
            "max_turns" => "The run used up its turn limit.".to_string(),
            other => format!(
                "The run ended with `{other}`: {}",
                a.failure_message.as_deref().unwrap_or("")
            ),
        });
    }
    if !a.spec_written {
        parts.push(format!("No spec was written at `{spec_path}`."));
    } else if a.valid == Some(false) {
        parts.push(format!(
            "The worker's validation found {} errors ({}); run `validate` to see them.",
            a.errors,
            a.error_codes.join(", ")
        ));
    }
    if let Some(c) = claim_note(a) {
        parts.push(c);
    }
    PriorErrors::note(a.n, parts.join(" "))
}

fn claim_note(a: &Attempt) -> Option<String> {
    (a.claimed_success && a.valid != Some(true)).then(|| {
        "The agent reported success, but the worker's own validation did not accept the spec."
            .to_string()
    })
}

fn attempt_line(a: &Attempt) -> String {
    let verdict = match a.valid {
        Some(true) => "valid".to_string(),
        Some(false) => format!("invalid ({} errors: {})", a.errors, a.error_codes.join(",")),
        None => "no spec written".to_string(),
    };
    format!(
        "attempt {} ({}): {verdict}; exit {:?}, claimed {}, {} turns, {}+{} tokens, ${:.4}, {} ms{}",
        a.n,
        a.backend,
        a.exit_code,
        a.claimed_success,
        a.turns.map_or("?".into(), |t| t.to_string()),
        a.input_tokens.map_or("?".into(), |t| t.to_string()),
        a.output_tokens.map_or("?".into(), |t| t.to_string()),
        a.cost_usd.unwrap_or(0.0),
        a.wall_ms,
        a.failure
            .as_ref()
            .map(|f| format!(", ended: {f}"))
            .unwrap_or_default()
    )
}

fn out_of_budget(history: &[Attempt], budget: u32, spec_path: &str) -> StageError {
    let last = history
        .iter()
        .rev()
        .find(|a| a.counted)
        .map(attempt_line)
        .unwrap_or_default();
    StageError::permanent(format!(
        "no valid spec at {spec_path} after {budget} agent attempts (agent.attempts); last: {last}"
    ))
}

fn summary(
    history: &[Attempt],
    staged: &staging::Staged,
    backend: &str,
    spec_path: &str,
    agent: &str,
) -> serde_json::Value {
    let last = history.last();
    json!({
        "agent": agent,
        "backend": backend,
        "spec": format!("generate/spec/models/{}", staged.spec_file),
        "workspace_spec": spec_path,
        "valid": last.and_then(|a| a.valid).unwrap_or(false),
        "excluded_library_spec": staged.excluded,
        "attempts": history,
    })
}

/// Mirrors the attempts into the job record so `status` shows them while the stage runs.
fn record_progress(
    store: &JobStore,
    cx: &StageContext,
    summary: &serde_json::Value,
    history: &[Attempt],
) {
    let total = attempts::total_usage(history);
    let name = cx
        .job
        .stages
        .iter()
        .find(|s| s.name == "generate")
        .map(|s| s.name.clone());
    let Some(name) = name else { return };
    let res = store.update(&cx.job.id, |r| {
        if let Some(s) = r.stages.iter_mut().find(|s| s.name == name) {
            s.summary = summary.clone();
            s.usage = total.clone();
        }
        Ok(())
    });
    if let Err(e) = res {
        tracing::warn!(error = %e, "could not record generate progress");
    }
}

fn copy_logs(from: &Path, to: &Path) {
    let Ok(entries) = std::fs::read_dir(from) else {
        return;
    };
    let _ = std::fs::create_dir_all(to);
    for e in entries.flatten() {
        if e.path().is_file() {
            let _ = std::fs::copy(e.path(), to.join(e.file_name()));
        }
    }
}
