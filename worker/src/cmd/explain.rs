use std::path::PathBuf;
use std::process::ExitCode;

use harch_engine::EvalOptions;
use harch_engine::analysis::{QUANTITIES, REPORT_CONTEXT};

#[derive(clap::Args)]
pub struct Args {
    /// A spec file, a library model spec name, or a Hugging Face model id.
    pub spec: String,
    /// What to explain: a total (params_total, params_active, weight_bytes, kv_bytes_per_token,
    /// state_bytes_per_sequence, decode_flops_per_token, prefill_flops, ...), a dim of the spec
    /// (d_model, n_layers, ...), `params:<path>` or `flops:<path>` of a node or a component
    /// (`params:embed_tokens`, `params:layers[moe].ffn`: a component sums its ops), or, with
    /// --gpu, a deployment figure (decode.estimate_s, weights_bytes_per_gpu, ...). An unknown
    /// name is an error that lists the known ones.
    pub quantity: String,
    /// Truth directory (config.json, index, shard headers) to evaluate against [default: the
    /// bundled snapshot of the spec's model].
    #[arg(long)]
    pub truth: Option<PathBuf>,
    /// Context length for FLOPs.
    #[arg(long, default_value_t = REPORT_CONTEXT as u64)]
    pub ctx: u64,
    /// For deployment figures (`decode.estimate_s`, `weights_bytes_per_gpu`, ...): the GPU,
    /// layout and workload, as `analyze` takes them.
    #[command(flatten)]
    pub deployment: crate::cmd::analyze::DeploymentArgs,
    /// Every term of a long sum (a cache total lists its entries folded by layer group
    /// otherwise) and the whole expression.
    #[arg(long)]
    pub full: bool,
    /// Print `quantity`, `formula`, `value`, `bound` (where a dim is bound) and `where` (the
    /// dims the formula uses) as JSON; errors are JSON too.
    #[arg(long)]
    pub json: bool,
    #[command(flatten)]
    pub what_if: crate::cmd::whatif::WhatIfArgs,
}

pub fn run(args: Args) -> anyhow::Result<ExitCode> {
    let s = crate::cmd::friendly::resolve(&args.spec, args.truth.as_deref())?;
    // The same walk, with symbols bound: the formula and the value come out together.
    let crate::cmd::whatif::Evaluated { ir, a, edits } =
        args.what_if
            .evaluate(&s, EvalOptions { symbolic: true }, None)?;
    if !args.json {
        crate::cmd::whatif::print(&edits);
    }
    if harch_analysis::explain::NAMES.contains(&args.quantity.as_str()) {
        return crate::cmd::analyze::explain(
            &args.deployment,
            &ir,
            &a,
            &s.truth.config,
            &args.quantity,
            args.json,
        );
    }
    if let Some(code) =
        crate::cmd::explain_terms::explain(&a, &args.quantity, args.full, args.json)?
    {
        return Ok(code);
    }
    if let Some((kind @ ("params" | "flops"), path)) = args.quantity.split_once(':')
        && a.quantity(&args.quantity, args.ctx as i128).is_none()
    {
        let paths = harch_engine::analysis::node_paths(&a, 2);
        return Err(crate::cli::usage(anyhow::anyhow!(
            "`{path}` is no node or component of {}: {kind}: takes one of {}",
            ir.name,
            paths.join(", ")
        )));
    }
    let Some(q) = a.quantity(&args.quantity, args.ctx as i128) else {
        return Err(crate::cli::usage(anyhow::anyhow!(
            "unknown quantity `{}`; known: {}, any dim, params:<node>, flops:<node>; with --gpu and --layout: {}",
            args.quantity,
            QUANTITIES.join(", "),
            harch_analysis::explain::NAMES.join(", ")
        )));
    };
    let formula = q.formula();
    // A quantity a declared gap affects is shown, and labelled unverified.
    let gap = harch_worker::declared_gap::for_figures(&s.target.repo, &s.target.model, &s.truth);
    let unverified = match &gap {
        Ok(Some(g)) => g.label(&[args.quantity.as_str()]),
        _ => None,
    };
    let bound = ir
        .dims
        .iter()
        .find(|d| d.name == args.quantity)
        .map(|d| format!("`{}` in {}", d.raw, s.target.user_path(&ir.file)));
    let used: Vec<(&String, i128)> = a
        .dims
        .iter()
        .filter(|(name, _)| {
            formula
                .split(|c: char| !(c.is_alphanumeric() || c == '_'))
                .any(|w| w == name.as_str())
        })
        .map(|(name, v)| (name, v.v))
        .collect();
    if args.json {
        let dims: serde_json::Map<String, serde_json::Value> = used
            .iter()
            .map(|(n, v)| ((*n).clone(), serde_json::json!(v)))
            .collect();
        crate::cli::out::print_json(&serde_json::json!({
            "quantity": args.quantity,
            "formula": formula,
            "value": q.v,
            "bound": bound,
            "where": dims,
            "unverified": unverified,
            "what_if": edits,
        }))?;
        return Ok(ExitCode::SUCCESS);
    }
    outln!("{} = {formula}", args.quantity);
    outln!("  = {}", harch_worker::text::group_digits(q.v));
    if let Some(l) = &unverified {
        outln!("  {l}");
    }
    if let Err(why) = &gap {
        outln!("  note: {why}");
    }
    if let Some(b) = &bound {
        outln!("  bound as {b}");
    }
    if !used.is_empty() {
        outln!("where");
    }
    for (name, v) in &used {
        outln!("  {name} = {v}");
    }
    Ok(ExitCode::SUCCESS)
}
