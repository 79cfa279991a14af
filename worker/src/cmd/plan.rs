//! `harch-worker plan`: the layouts a model can be served with on one GPU type
//! (harch_analysis::search over one evaluation), and the ones worth naming: the smallest that
//! fits, the most tokens/s per GPU, the fewest dollars per million tokens.

use std::process::ExitCode;

use anyhow::bail;
use harch_analysis::search::{self, Candidate, SearchSpec};
use harch_analysis::{LayoutSpec, Model};
use harch_engine::EvalOptions;

use super::analyze::{DeploymentArgs, hardware_table};

#[derive(clap::Args)]
pub struct Args {
    /// A spec file, a library model spec name, or a Hugging Face model id.
    pub spec: String,
    /// Truth directory to evaluate against [default: the bundled snapshot of the model].
    #[arg(long)]
    pub truth: Option<std::path::PathBuf>,
    #[command(flatten)]
    pub deployment: DeploymentArgs,
    /// The most GPUs a layout may use [default: 8 nodes].
    #[arg(long, value_parser = super::friendly::count)]
    pub max_gpus: Option<u64>,
    /// The most pipeline stages a layout may have.
    #[arg(long, default_value_t = 4)]
    pub max_pp: u32,
    /// Price of one GPU for an hour, in dollars (prices each layout per million tokens).
    #[arg(long)]
    pub price: Option<f64>,
    /// Latency target: the decode step (TPOT) at the estimate, e.g. `50ms` or `0.05`.
    #[arg(long, value_parser = seconds)]
    pub max_tpot: Option<f64>,
    /// Every layout analysed, not only the ones named.
    #[arg(long)]
    pub all: bool,
    /// Print the search as JSON; errors are JSON too.
    #[arg(long)]
    pub json: bool,
    /// Exact integers instead of human units (GiB) in the text output.
    #[arg(long)]
    pub bytes: bool,
    #[command(flatten)]
    pub what_if: super::whatif::WhatIfArgs,
    /// Answer (exit 0) even when the spec does not validate against its truth; the figures
    /// stay labelled NOT VERIFIED.
    #[arg(long)]
    pub unverified: bool,
}

/// `50ms`, `0.05s`, `0.05`: seconds.
fn seconds(t: &str) -> Result<f64, String> {
    let t = t.trim();
    let (num, scale) = if let Some(n) = t.strip_suffix("ms") {
        (n, 1e-3)
    } else if let Some(n) = t.strip_suffix("us").or_else(|| t.strip_suffix("µs")) {
        (n, 1e-6)
    } else if let Some(n) = t.strip_suffix('s') {
        (n, 1.0)
    } else {
        (t, 1.0)
    };
    match num.trim().parse::<f64>() {
        Ok(v) if v.is_finite() && v > 0.0 => Ok(v * scale),
        _ => Err(format!("`{t}` is not a duration (e.g. 50ms, 0.05s)")),
    }
}

pub fn run(args: Args) -> anyhow::Result<ExitCode> {
    super::units::set_exact(args.bytes);
    if args.deployment.layout.is_some() || args.deployment.gpus.is_some() {
        bail!(
            "plan searches layouts and GPU counts; give --max-gpus to bound it, or `harch-worker analyze` for one layout"
        );
    }
    if let Some(p) = args.price
        && !(p.is_finite() && p > 0.0)
    {
        bail!("--price {p}: dollars per GPU-hour, a positive number");
    }
    let table = hardware_table()?;
    let gpu = args.deployment.gpu(&table)?;
    let one = LayoutSpec::parse("attn=tp1")
        .and_then(|s| s.resolve(Some(1)))
        .map_err(|e| anyhow::anyhow!("{e}"))?;
    let base = args.deployment.workload(gpu, one)?;
    let node = gpu.node_size().unwrap_or(8);
    let spec = SearchSpec {
        node,
        max_gpus: match args.max_gpus {
            Some(n) if (1..=harch_analysis::layout::MAX_GPUS as u64).contains(&n) => n as u32,
            Some(n) => bail!("--max-gpus {n}: 1 to {}", harch_analysis::layout::MAX_GPUS),
            None => node * 8,
        },
        max_pp: args.max_pp.max(1),
        usd_per_gpu_hour: args.price,
        max_tpot_s: args.max_tpot,
    };
    let s = super::friendly::resolve(&args.spec, args.truth.as_deref())?;
    let super::whatif::Evaluated { ir, a, edits } =
        args.what_if
            .evaluate(&s, EvalOptions { symbolic: true }, None)?;
    let verification = super::verdict::verify(&s);
    let model = Model::new(&ir, &a, &s.truth.config)?;
    let found = search::search(&model, &base, &spec);
    let named = [
        ("smallest that fits", found.smallest),
        ("most tokens/s per GPU", found.best_tokens_per_s_per_gpu),
        (
            "fewest $ per million tokens",
            found.best_usd_per_million_tokens,
        ),
    ];
    if args.json {
        let pick = |i: Option<usize>| i.map(|i| &found.candidates[i]);
        let mut doc = serde_json::json!({
            "model": model.a.model,
            "gpu": gpu.gpu,
            "node_size": node,
            "max_gpus": spec.max_gpus,
            "usd_per_gpu_hour": spec.usd_per_gpu_hour,
            "max_tpot_s": spec.max_tpot_s,
            "evaluated": found.evaluated,
            "rejected_by_dims": found.rejected_by_dims,
            "by_gpus": found.by_gpus,
            "smallest": pick(found.smallest),
            "best_tokens_per_s_per_gpu": pick(found.best_tokens_per_s_per_gpu),
            "best_usd_per_million_tokens": pick(found.best_usd_per_million_tokens),
            "status": if found.smallest.is_some() { "ok" } else { harch_analysis::report::DOES_NOT_FIT },
        });
        if args.all {
            doc["candidates"] = serde_json::to_value(&found.candidates)?;
        }
        super::verdict::annotate(&mut doc, &verification);
        super::whatif::annotate(&mut doc, &edits);
        crate::cli::out::print_json(&doc)?;
    } else {
        super::whatif::print(&edits);
        if !verification.valid {
            outln!(
                "NOT VERIFIED: the spec does not validate against {} ({} errors); every figure below is from an unverified spec",
                verification.truth,
                verification.errors.len()
            );
        }
        outln!(
            "{} (spec {}) on {} (nodes of {node}), input {} / output {} tokens, context {}{}",
            args.spec,
            model.a.model,
            gpu.gpu,
            base.input,
            base.output,
            base.context(),
            spec.max_tpot_s
                .map(|t| format!(", TPOT at most {}", harch_analysis::explain::seconds(t)))
                .unwrap_or_default()
        );
        outln!(
            "{} layouts analysed up to {} GPUs ({} more do not divide the model's dims)",
            found.evaluated,
            spec.max_gpus,
            found.rejected_by_dims
        );
        let too_small: Vec<String> = found
            .by_gpus
            .iter()
            .filter(|g| g.fitting == 0)
            .map(|g| g.gpus.to_string())
            .collect();
        if !too_small.is_empty() {
            outln!(
                "does not fit on {} GPUs (no layout leaves room for one request)",
                too_small.join(", ")
            );
        }
        outln!();
        match found.smallest {
            None => outln!(
                "DOES NOT FIT: no layout of up to {} GPUs fits{}",
                spec.max_gpus,
                if spec.max_tpot_s.is_some() {
                    " and meets the latency target"
                } else {
                    ""
                }
            ),
            Some(_) => {
                for (what, i) in named {
                    if let Some(i) = i {
                        print_candidate(what, &found.candidates[i]);
                    }
                }
                if spec.usd_per_gpu_hour.is_some()
                    && found.best_usd_per_million_tokens == found.best_tokens_per_s_per_gpu
                {
                    outln!(
                        "(at one price per GPU-hour, cost per token follows tokens/s per GPU: the same layout)"
                    );
                }
            }
        }
        if args.all {
            outln!();
            for c in &found.candidates {
                print_candidate("", c);
            }
        }
        outln!(
            "\n`harch-worker analyze {} --gpu {} --gpus N --layout L` gives every figure of one of them",
            args.spec,
            gpu.id
        );
    }
    // An unverified spec, or no layout that fits: the answer is no.
    Ok(
        if (!verification.valid && !args.unverified) || found.smallest.is_none() {
            ExitCode::from(1)
        } else {
            ExitCode::SUCCESS
        },
    )
}

fn print_candidate(what: &str, c: &Candidate) {
    let sec = |v: Option<f64>| {
        v.map(harch_analysis::explain::seconds)
            .unwrap_or_else(|| "—".into())
    };
    let n = |v: Option<f64>| {
        v.map(|v| harch_worker::text::group_digits(v.round() as i128))
            .unwrap_or_else(|| "—".into())
    };
    if !what.is_empty() {
        outln!("{what}:");
    }
    outln!(
        "  {} GPUs ({} node{}), --layout {}",
        c.gpus,
        c.nodes,
        if c.nodes == 1 { "" } else { "s" },
        c.layout
    );
    let fits = match c.verdict {
        Some(harch_analysis::Fit::Fits) => "fits",
        Some(harch_analysis::Fit::DoesNotFit) => "does not fit",
        None => "unknown",
    };
    outln!(
        "    {fits}: weights {} per GPU, KV budget {}, {} decode requests per replica (batch {})",
        c.weights_bytes_per_gpu
            .map(super::units::bytes)
            .unwrap_or_default(),
        c.kv_budget_bytes
            .map(super::units::bytes)
            .unwrap_or_default(),
        c.max_decode_requests
            .map(harch_worker::text::group_digits)
            .unwrap_or_default(),
        c.decode_batch
    );
    outln!(
        "    TPOT bound {} / estimate {}; TTFT bound {} / estimate {}; tokens/s per GPU {} (ceiling) / {} (estimate)",
        sec(c.tpot_bound_s),
        sec(c.tpot_estimate_s),
        sec(c.ttft_bound_s),
        sec(c.ttft_estimate_s),
        n(c.tokens_per_s_per_gpu_bound),
        n(c.tokens_per_s_per_gpu_estimate)
    );
    if let Some(u) = c.usd_per_million_tokens_estimate {
        outln!(
            "    ${u:.3} per million tokens at the estimate (${:.3} at the bound)",
            c.usd_per_million_tokens_bound.unwrap_or(f64::NAN)
        );
    }
}
