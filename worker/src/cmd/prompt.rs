//! `harch-worker prompt <MODEL-ID>`: the generate prompt an agent would get for a model, and its
//! size (bytes, estimated tokens, largest fragments) on stderr.

use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::Context;
use harch_prompts::{GenerateInput, render_generate};
use harch_worker::pipeline::stages::generate::{
    agent_library, decontaminate, load_truth, spec_file_name,
};
use harch_worker::{snapshot, source, specs};

#[derive(clap::Args)]
pub struct Args {
    /// Hugging Face model id (its bundled snapshot is used unless --truth is given).
    pub model: String,
    /// Truth directory (as `fetch` writes it).
    #[arg(long)]
    pub truth: Option<PathBuf>,
    /// Hide the library's own spec of this model, as `enqueue --fresh` does.
    #[arg(long)]
    pub fresh: bool,
    /// The prompt of an ablation run: the decontaminated library (no model specs, no
    /// components of the target's kinds).
    #[arg(long)]
    pub ablation: bool,
    /// Print only the size.
    #[arg(long)]
    pub size_only: bool,
    /// Print `model_id`, `spec_path`, `size` (bytes, est_tokens, fragments) and `text` (unless
    /// --size-only) as JSON; errors are JSON too.
    #[arg(long)]
    pub json: bool,
}

pub fn run(args: Args) -> anyhow::Result<ExitCode> {
    let truth = match &args.truth {
        Some(dir) => load_truth(dir)?,
        None => {
            let mut t = snapshot::try_load_snapshot(&args.model)?.with_context(|| {
                format!(
                    "no bundled snapshot of `{}`: fetch it and pass --truth DIR",
                    args.model
                )
            })?;
            if let Some(set) = source::resolve_native(&t.config) {
                t.sources = set.files;
            }
            t
        }
    };
    let repo = if args.ablation {
        let all = specs::read_spec_files(&specs::root())?;
        let d = decontaminate(&all, &harch_worker::subject::architectures(&truth.config))?;
        harch_engine::Repo::from_files(d.library)
    } else {
        agent_library(&specs::root(), &truth, args.fresh)?.prompt_repo
    };
    let spec_path = format!(
        "specs/models/{}",
        spec_file_name(&args.model, &truth.config)
    );
    let prompt = render_generate(&GenerateInput::new(&args.model, &truth, &repo, &spec_path))?;
    if args.json {
        crate::cli::out::print_json(&serde_json::json!({
            "model_id": args.model,
            "spec_path": spec_path,
            "size": prompt.size,
            "text": (!args.size_only).then_some(&prompt.text),
        }))?;
        return Ok(ExitCode::SUCCESS);
    }
    if !args.size_only {
        out!("{}", prompt.text);
    }
    eprintln!("{}: {}", args.model, prompt.size);
    Ok(ExitCode::SUCCESS)
}
