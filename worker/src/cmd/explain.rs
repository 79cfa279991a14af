use std::path::PathBuf;
use std::process::ExitCode;

use harch_engine::EvalOptions;
use harch_engine::analysis::{QUANTITIES, REPORT_CONTEXT};
use harch_worker::subject;

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
}

pub fn run(args: Args) -> anyhow::Result<ExitCode> {
    let s = subject::resolve(&args.spec, args.truth.as_deref())?;
    // The same walk, with symbols bound: the formula and the value come out together.
    let (ir, a) =
        subject::evaluated(&s, EvalOptions { symbolic: true }).map_err(crate::cli::failed)?;
    if harch_analysis::explain::NAMES.contains(&args.quantity.as_str()) {
        return crate::cmd::analyze::explain(
            &args.deployment,
            &ir,
            &a,
            &s.truth.config,
            &args.quantity,
        );
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
    outln!("{} = {}", args.quantity, q.formula());
    outln!("  = {}", crate::cmd::show::group_digits(q.v));
    if let Some(d) = ir.dims.iter().find(|d| d.name == args.quantity) {
        outln!("  bound as `{}` in {}", d.raw, ir.file);
    }
    let mut shown = 0;
    for (name, v) in &a.dims {
        if q.formula()
            .split(|c: char| !(c.is_alphanumeric() || c == '_'))
            .any(|w| w == name)
        {
            if shown == 0 {
                outln!("where");
            }
            outln!("  {name} = {}", v.v);
            shown += 1;
        }
    }
    Ok(ExitCode::SUCCESS)
}
