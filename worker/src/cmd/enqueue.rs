//! `harch-worker enqueue`: queue one job per model id and print its id.

use std::process::ExitCode;

use harch_worker::pipeline::registry::StageRegistry;
use harch_worker::queue::cli::{block_on, setup};
use harch_worker::queue::config::QueueFlags;
use harch_worker::queue::ops::enqueue;
use harch_worker::queue::record::{JobKind, JobRequest};

#[derive(clap::Args)]
pub struct Args {
    /// Hugging Face model ids (org/name).
    #[arg(required = true, value_name = "MODEL-ID")]
    pub models: Vec<String>,
    /// Branch, tag or commit of the model repository.
    #[arg(long, default_value = "main")]
    pub revision: String,
    /// Agent backend for generate and fix (default: agent.default in queue.toml).
    #[arg(long)]
    pub agent: Option<String>,
    /// Model the agent backend runs (its `--model`; default: the backend's own).
    #[arg(long = "agent-model", value_name = "MODEL")]
    pub model: Option<String>,
    /// Guard tier for validation (default: agent.guards in queue.toml).
    #[arg(long)]
    pub guards: Option<String>,
    /// Stages to run, comma-separated, in pipeline order (default: all of the kind's stages).
    #[arg(long, value_delimiter = ',')]
    pub stages: Option<Vec<String>>,
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
    #[command(flatten)]
    pub flags: QueueFlags,
}

pub fn run(args: Args) -> anyhow::Result<ExitCode> {
    let settings = setup(&args.flags)?;
    let stages = args.stages.clone().unwrap_or_else(|| {
        args.kind
            .default_stages()
            .iter()
            .map(|s| s.to_string())
            .collect()
    });
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
    let registry = StageRegistry::builtin();
    let queued = block_on(1, enqueue(&settings, &registry, requests))??;
    for q in queued {
        if !q.created {
            eprintln!("{}: already pending or running as job {}", q.model_id, q.id);
        }
        println!("{}", q.id);
    }
    Ok(ExitCode::SUCCESS)
}
