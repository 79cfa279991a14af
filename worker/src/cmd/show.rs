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
    /// Count image inputs at this resolution (HEIGHTxWIDTH pixels, e.g. 448x448); default each
    /// input's own.
    #[arg(long, value_name = "HxW")]
    pub image: Option<harch_engine::ImageSize>,
    /// Count a video of FRAMES frames at HEIGHTxWIDTH pixels (e.g. 16x448x448) on the image
    /// inputs that take videos (`video: true`): their encoder's FLOPs per video.
    #[arg(long, value_name = "FRAMESxHxW", value_parser = harch_engine::ImageSize::parse_video, conflicts_with = "image")]
    pub video: Option<harch_engine::ImageSize>,
    #[command(flatten)]
    pub what_if: crate::cmd::whatif::WhatIfArgs,
    /// Exact integers instead of human units (B for billions of parameters, GiB, GFLOP).
    #[arg(long)]
    pub bytes: bool,
}

pub fn run(args: Args) -> anyhow::Result<ExitCode> {
    crate::cmd::units::set_exact(args.bytes);
    let s = crate::cmd::friendly::resolve(&args.spec, args.truth.as_deref())?;
    let crate::cmd::whatif::Evaluated { ir, a, edits } =
        args.what_if
            .evaluate(&s, EvalOptions::default(), args.video.or(args.image))?;
    let sum = a.summary();
    // A what-if is shown beside the spec as it is: each changed figure as old → new.
    let before = if edits.is_empty() {
        None
    } else {
        let (_, a0) = subject::evaluated_at(&s, EvalOptions::default(), args.video.or(args.image))
            .map_err(crate::cli::failed)?;
        Some(a0.summary())
    };
    let gap = harch_worker::declared_gap::for_figures(&s.target.repo, &s.target.model, &s.truth);
    let declared = gap.as_ref().ok().and_then(Option::as_ref);
    if args.json {
        let mut v = serde_json::to_value(&sum)?;
        v["declared_gap"] = serde_json::to_value(declared)?;
        v["unverified"] = serde_json::json!(declared.map(|g| &g.affects));
        if let Err(why) = &gap {
            v["gap_report_error"] = serde_json::json!(why);
        }
        v["dims"] = serde_json::to_value(crate::cmd::dims::dims(&ir, &a))?;
        v["before"] = serde_json::to_value(&before)?;
        crate::cmd::whatif::annotate(&mut v, &edits);
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
    crate::cmd::whatif::print(&edits);
    if let Some(b) = &before {
        print_changes(b, &sum);
    }
    match &gap {
        Ok(Some(g)) => outln!("{}\n", harch_worker::declared_gap::line(g)),
        Ok(None) => {}
        Err(why) => outln!("note: {why}\n"),
    }
    // A figure the declared gap affects carries the label after its value.
    let label = |q: &str| {
        declared
            .and_then(|g| g.label(&[q]))
            .map(|l| format!("  {l}"))
            .unwrap_or_default()
    };
    crate::cmd::dims::print(&ir, &a, &s.truth.config);
    outln!(
        "{:<14} {:<14} {:<10} {:>18} {:>14} {:>16}",
        "stack",
        "block",
        "layers",
        "params",
        "KV / token",
        "state / seq"
    );
    for g in &sum.groups {
        outln!(
            "{:<14} {:<14} {:<10} {:>18} {:>14} {:>16}",
            g.stack,
            g.block,
            g.layers,
            count(g.params),
            bytes(g.kv_bytes_per_token),
            bytes(g.state_bytes_per_sequence)
        );
    }
    outln!();
    let rows: [(&str, &str, i128, Fmt); 10] = [
        ("params total", "params_total", sum.params_total, count),
        (
            "params active / token",
            "params_active",
            sum.params_active,
            count,
        ),
        (
            "  with embedding",
            "params_active_with_embedding",
            sum.params_active_with_embedding,
            count,
        ),
        ("params in MTP", "params_mtp", sum.params_mtp, count),
        ("weight bytes", "weight_bytes", sum.weight_bytes, bytes),
        (
            "weight tensors",
            "weight_tensors",
            sum.weight_tensors,
            group_digits,
        ),
        (
            "KV bytes / token",
            "kv_bytes_per_token",
            sum.kv_bytes_per_token,
            bytes,
        ),
        (
            "windowed KV bytes / token",
            "kv_window_bytes_per_token",
            sum.kv_window_bytes_per_token,
            bytes,
        ),
        (
            "state bytes / sequence",
            "state_bytes_per_sequence",
            sum.state_bytes_per_sequence,
            bytes,
        ),
        (
            "decode FLOPs / token",
            "decode_flops_per_token",
            sum.decode_flops_per_token,
            flops,
        ),
    ];
    for (k, q, v, fmt) in rows {
        let at = if q == "decode_flops_per_token" {
            format!("   (one token attending {} positions)", sum.context)
        } else {
            String::new()
        };
        outln!("{k:<28} {:>24}{at}{}", fmt(v), label(q));
    }
    outln!(
        "{:<28} {:>24}   (one sequence of {} tokens, logits at every position){}",
        "prefill FLOPs",
        flops(sum.prefill_flops),
        sum.context,
        label("prefill_flops")
    );
    for (d, b) in &sum.weight_bytes_by_dtype {
        outln!("{:<28} {:>24}", format!("  bytes {d}"), bytes(*b));
    }
    if !args.bytes {
        outln!("(human units; --bytes for exact integers, --json for every figure)");
    }
    if !sum.encoders.is_empty() {
        outln!();
        outln!("{:<28} {:>24}", "text model params", count(sum.params_text));
        // A run with `--video` counts each input that takes videos at that video.
        let unit = if args.video.is_some() {
            "video"
        } else {
            "image"
        };
        for e in &sum.encoders {
            let frames = if args.video.is_some() {
                format!("{} frames of ", e.frames)
            } else {
                String::new()
            };
            outln!(
                "encoder of `{}` at {frames}{}x{} ({} patches, {} tokens per {unit})",
                e.input,
                e.height,
                e.width,
                group_digits(e.patches),
                group_digits(e.tokens_per_image)
            );
            outln!("{:<28} {:>24}", "  params", count(e.params));
            outln!("{:<28} {:>24}", "  weight bytes", bytes(e.weight_bytes));
            outln!(
                "{:<28} {:>24}",
                format!("  FLOPs / {unit}"),
                flops(e.flops_per_image)
            );
        }
    }
    Ok(ExitCode::SUCCESS)
}

/// Each figure a what-if changed, as old → new: the groups' parameters and caches, then the
/// totals.
fn print_changes(b: &harch_engine::analysis::Summary, a: &harch_engine::analysis::Summary) {
    outln!("changed by the what-if (old → new):");
    for g in &a.groups {
        let old = b
            .groups
            .iter()
            .find(|o| o.stack == g.stack && o.block == g.block);
        let (p, kv) = old.map_or((0, 0), |o| (o.params, o.kv_bytes_per_token));
        if p != g.params || kv != g.kv_bytes_per_token {
            outln!(
                "  {}[{}]: params {} → {}, KV / token {} → {}",
                g.stack,
                g.block,
                count(p),
                count(g.params),
                bytes(kv),
                bytes(g.kv_bytes_per_token)
            );
        }
    }
    let rows: [(&str, i128, i128, Fmt); 7] = [
        ("params total", b.params_total, a.params_total, count),
        (
            "params active / token",
            b.params_active,
            a.params_active,
            count,
        ),
        ("weight bytes", b.weight_bytes, a.weight_bytes, bytes),
        (
            "KV bytes / token",
            b.kv_bytes_per_token,
            a.kv_bytes_per_token,
            bytes,
        ),
        (
            "state bytes / sequence",
            b.state_bytes_per_sequence,
            a.state_bytes_per_sequence,
            bytes,
        ),
        (
            "decode FLOPs / token",
            b.decode_flops_per_token,
            a.decode_flops_per_token,
            flops,
        ),
        ("prefill FLOPs", b.prefill_flops, a.prefill_flops, flops),
    ];
    for (k, old, new, fmt) in rows {
        if old != new {
            outln!("  {k}: {} → {}", fmt(old), fmt(new));
        }
    }
    outln!();
}

use crate::cmd::units::{bytes, count, flops};

/// How a figure is written (human units, or digits).
type Fmt = fn(i128) -> String;
use harch_worker::text::group_digits;
