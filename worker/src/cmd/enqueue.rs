//! `harch-worker enqueue`: queue one job per model id and print its id.

use std::process::ExitCode;

use harch_worker::pipeline::registry::StageRegistry;
use harch_worker::queue::cli::{block_on, setup};
use harch_worker::queue::config::QueueFlags;
use harch_worker::queue::ops::enqueue;
use harch_worker::queue::preflight;
use harch_worker::queue::record::{JobKind, JobRequest};
use harch_worker::queue::stage::Stage;

#[derive(clap::Args)]
pub struct Args {
    /// Hugging Face model ids (org/name).
    #[arg(required = true, value_name = "MODEL-ID")]
    pub models: Vec<String>,
    /// Branch, tag or commit of the model repository.
    #[arg(long, default_value = "main")]
    pub revision: String,
    /// Agent backend for the agent stages (default: agent.default in queue.toml). Its
    /// credentials must be set (see README); they are checked now and when the job starts.
    #[arg(long, value_parser = clap::builder::PossibleValuesParser::new(harch_agents::BACKENDS))]
    pub agent: Option<String>,
    /// Model the agent backend runs (its `--model`; default: the backend's own).
    #[arg(long = "agent-model", value_name = "MODEL")]
    pub model: Option<String>,
    /// Guard tier for validation (default: agent.guards in queue.toml).
    #[arg(long)]
    pub guards: Option<String>,
    /// Stages to run, comma-separated, in pipeline order: fetch, generate, verify, review, fix,
    /// publish (those this build has); a stage's needs must be selected too (verify needs
    /// fetch). Default: the kind's stages (generate: all; revalidate: fetch,verify).
    #[arg(long, value_delimiter = ',')]
    pub stages: Option<Vec<Stage>>,
    /// Higher runs first.
    #[arg(long, default_value_t = 0)]
    pub priority: u32,
    /// Use the bundled snapshots instead of the Hub.
    #[arg(long)]
    pub offline: bool,
    /// Generate as if the library had no spec of this model (its own spec is hidden from the
    /// agent), e.g. to check that a library model can be regenerated.
    #[arg(long, alias = "exclude-library-spec")]
    pub fresh: bool,
    /// What the job does.
    #[arg(long, value_enum, default_value = "generate")]
    pub kind: JobKind,
    /// Queue even when the agent's credentials are not set here (a worker elsewhere has them).
    #[arg(long)]
    pub skip_credential_check: bool,
    /// Print one JSON object per model: {"id", "model_id", "created"}, as a list.
    #[arg(long)]
    pub json: bool,
    #[command(flatten)]
    pub flags: QueueFlags,
}

pub fn run(args: Args) -> anyhow::Result<ExitCode> {
    let settings = setup(&args.flags)?;
    let registry = StageRegistry::builtin();
    let stages = args
        .stages
        .clone()
        .unwrap_or_else(|| registry.default_stages(args.kind));
    let requests = args
        .models
        .iter()
        .map(|m| JobRequest {
            model_id: m.clone(),
            revision: args.revision.clone(),
            kind: args.kind,
            agent: args.agent.clone().unwrap_or(settings.agent.default.clone()),
            guards: args.guards.clone().unwrap_or(settings.agent.guards.clone()),
            stages: stages.clone(),
            priority: args.priority,
            offline: args.offline,
            exclude_library_spec: args.fresh,
            agent_model: args.model.clone(),
            ablation: None,
        })
        .collect();
    if !args.skip_credential_check {
        for r in &requests {
            preflight::check_credentials(&settings.agent, r).map_err(crate::cli::usage)?;
        }
    }
    let queued =
        block_on(1, enqueue(&settings, &registry, requests))?.map_err(crate::cli::usage)?;
    if args.json {
        let list: Vec<_> = queued
            .iter()
            .map(|q| serde_json::json!({"id": q.id, "model_id": q.model_id, "created": q.created}))
            .collect();
        crate::cli::out::print_json(&list)?;
        return Ok(ExitCode::SUCCESS);
    }
    for q in queued {
        if !q.created {
            eprintln!(
                "{}: a {} job is already pending or running: returning it ({})",
                q.model_id,
                args.kind.as_str(),
                q.id
            );
        }
        outln!("{}", q.id);
    }
    Ok(ExitCode::SUCCESS)
}
