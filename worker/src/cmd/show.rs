use std::path::PathBuf;
use std::process::ExitCode;

use harch_engine::EvalOptions;
use harch_worker::subject;

#[derive(clap::Args)]
pub struct Args {
    /// A spec file, a library model spec name, or a Hugging Face model id.
    pub spec: String,
    /// Truth directory (config.json, index, shard headers) to evaluate against.
    #[arg(long)]
    pub truth: Option<PathBuf>,
    /// Print the summary as JSON (groups, params, bytes, KV, FLOPs); errors are JSON too.
    #[arg(long)]
    pub json: bool,
}

pub fn run(args: Args) -> anyhow::Result<ExitCode> {
    let s = crate::cmd::friendly::resolve(&args.spec, args.truth.as_deref())?;
    let (ir, a) = subject::evaluated(&s, EvalOptions::default()).map_err(crate::cli::failed)?;
    let sum = a.summary();
    if args.json {
        crate::cli::out::print_json(&sum)?;
        return Ok(ExitCode::SUCCESS);
    }
    outln!("{} — {}", ir.name, ir.summary);
    outln!("evaluated against {}\n", s.truth_origin);
    outln!(
        "{:<14} {:<14} {:<10} {:>18} {:>14} {:>16}",
        "stack",
        "block",
        "layers",
        "params",
        "KV B/token",
        "state B/seq"
    );
    for g in &sum.groups {
        outln!(
            "{:<14} {:<14} {:<10} {:>18} {:>14} {:>16}",
            g.stack,
            g.block,
            g.layers,
            group_digits(g.params),
            group_digits(g.kv_bytes_per_token),
            group_digits(g.state_bytes_per_sequence)
        );
    }
    outln!();
    let rows: [(&str, i128); 10] = [
        ("params total", sum.params_total),
        ("params active / token", sum.params_active),
        ("  with embedding", sum.params_active_with_embedding),
        ("params in MTP", sum.params_mtp),
        ("weight bytes", sum.weight_bytes),
        ("weight tensors", sum.weight_tensors),
        ("KV bytes / token", sum.kv_bytes_per_token),
        ("windowed KV bytes / token", sum.kv_window_bytes_per_token),
        ("state bytes / sequence", sum.state_bytes_per_sequence),
        ("decode FLOPs / token @ctx", sum.decode_flops_per_token),
    ];
    for (k, v) in rows {
        outln!("{k:<28} {:>24}", group_digits(v));
    }
    outln!(
        "{:<28} {:>24}",
        format!("prefill FLOPs @{}", sum.context),
        group_digits(sum.prefill_flops)
    );
    for (d, b) in &sum.weight_bytes_by_dtype {
        outln!("{:<28} {:>24}", format!("  bytes {d}"), group_digits(*b));
    }
    Ok(ExitCode::SUCCESS)
}

pub use harch_worker::text::group_digits;
