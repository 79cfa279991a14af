use std::path::PathBuf;
use std::process::ExitCode;

use harch_engine::EvalOptions;
use harch_engine::analysis::{QUANTITIES, REPORT_CONTEXT};
use harch_worker::subject;

#[derive(clap::Args)]
pub struct Args {
    /// A spec file, a library model spec name, or a Hugging Face model id.
    pub spec: String,
    /// A total (params_total, kv_bytes_per_token, ...), a dim, or `params:<node-id>` /
    /// `flops:<node-id>`.
    pub quantity: String,
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
    let (ir, a) = match subject::evaluated(&s, EvalOptions { symbolic: true }) {
        Ok(v) => v,
        Err(code) => return Ok(code),
    };
    if harch_analysis::explain::NAMES.contains(&args.quantity.as_str()) {
        return crate::cmd::analyze::explain(
            &args.deployment,
            &ir,
            &a,
            &s.truth.config,
            &args.quantity,
        );
    }
    let Some(q) = a.quantity(&args.quantity, args.ctx as i128) else {
        eprintln!(
            "unknown quantity `{}`; known: {}, any dim, params:<node>, flops:<node>; with --gpu and --layout: {}",
            args.quantity,
            QUANTITIES.join(", "),
            harch_analysis::explain::NAMES.join(", ")
        );
        return Ok(ExitCode::from(2));
    };
    println!("{} = {}", args.quantity, q.formula());
    println!("  = {}", crate::cmd::show::group_digits(q.v));
    if let Some(d) = ir.dims.iter().find(|d| d.name == args.quantity) {
        println!("  bound as `{}` in {}", d.raw, ir.file);
    }
    let mut shown = 0;
    for (name, v) in &a.dims {
        if q.formula()
            .split(|c: char| !(c.is_alphanumeric() || c == '_'))
            .any(|w| w == name)
        {
            if shown == 0 {
                println!("where");
            }
            println!("  {name} = {}", v.v);
            shown += 1;
        }
    }
    Ok(ExitCode::SUCCESS)
}
