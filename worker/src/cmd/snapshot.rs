//! `harch-worker snapshot`: build a bundled offline snapshot from a truth directory.

use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::Context;
use harch_worker::{snapshot, truth_dir};

#[derive(clap::Args)]
pub struct Args {
    /// Truth directory (as written by `fetch`, or laid out like it).
    pub truth_dir: PathBuf,
    /// Hub model id [default: truth.json's, else the directory name with `__` as `/`].
    #[arg(long)]
    pub model_id: Option<String>,
    /// Output file, e.g. specs/snapshots/<org>__<name>.json.gz.
    #[arg(long)]
    pub out: PathBuf,
    /// Print `model_id`, `tensors`, `total_bytes`, `inventory_lines`, `out`, `file_bytes` as
    /// JSON; errors are JSON too.
    #[arg(long)]
    pub json: bool,
}

pub fn run(args: Args) -> anyhow::Result<ExitCode> {
    let truth = truth_dir::load_truth_dir(&args.truth_dir)?;
    let model_id = match (&args.model_id, &truth.model_id) {
        (Some(id), _) | (None, Some(id)) => id.clone(),
        (None, None) => args
            .truth_dir
            .file_name()
            .map(|n| n.to_string_lossy().replacen("__", "/", 1))
            .context("cannot tell the model id: pass --model-id")?,
    };
    let snap = snapshot::from_truth(&model_id, &truth)?;
    let bytes = snapshot::encode(&snap)?;
    // Prove the file reproduces the truth before it replaces anything.
    let back = snapshot::to_truth(&snapshot::decode(&bytes)?)?;
    anyhow::ensure!(
        back.inventory.len() == truth.inventory.len()
            && back.inventory.total_bytes() == truth.inventory.total_bytes(),
        "snapshot does not reproduce the inventory"
    );
    truth_dir::write_file_atomically(&args.out, &bytes)
        .with_context(|| format!("writing {}", args.out.display()))?;
    if args.json {
        crate::cli::out::print_json(&serde_json::json!({
            "model_id": model_id,
            "tensors": snap.tensor_count,
            "total_bytes": snap.total_bytes,
            "inventory_lines": snap.inventory.len(),
            "out": args.out.display().to_string(),
            "file_bytes": bytes.len(),
        }))?;
        return Ok(ExitCode::SUCCESS);
    }
    outln!(
        "{model_id}: {} tensors, {} bytes, {} lines -> {} ({} bytes)",
        snap.tensor_count,
        snap.total_bytes,
        snap.inventory.len(),
        args.out.display(),
        bytes.len()
    );
    Ok(ExitCode::SUCCESS)
}
