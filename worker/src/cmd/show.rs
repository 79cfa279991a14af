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
        let mut v = serde_json::to_value(&sum)?;
        v["dims"] = serde_json::to_value(crate::cmd::dims::dims(&ir, &a))?;
        v["architecture"] = crate::cmd::dims::config_facts(&s.truth.config)
            .into_iter()
            .map(|(k, x)| (k.to_string(), x))
            .collect::<serde_json::Map<_, _>>()
            .into();
        crate::cli::out::print_json(&v)?;
        return Ok(ExitCode::SUCCESS);
    }
    outln!("{} — {}", ir.name, ir.summary);
    outln!("evaluated against {}\n", s.truth_origin);
    crate::cmd::dims::print(&ir, &a, &s.truth.config);
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
        ("decode FLOPs / token", sum.decode_flops_per_token),
    ];
    for (k, v) in rows {
        let at = if k.starts_with("decode FLOPs") {
            format!("   (one token attending {} positions)", sum.context)
        } else {
            String::new()
        };
        outln!("{k:<28} {:>24}{at}", group_digits(v));
    }
    outln!(
        "{:<28} {:>24}   (one sequence of {} tokens, logits at every position)",
        "prefill FLOPs",
        group_digits(sum.prefill_flops),
        sum.context
    );
    for (d, b) in &sum.weight_bytes_by_dtype {
        outln!("{:<28} {:>24}", format!("  bytes {d}"), group_digits(*b));
    }
    Ok(ExitCode::SUCCESS)
}

pub use harch_worker::text::group_digits;
