use std::process::ExitCode;

#[derive(clap::Args)]
pub struct Args {
    /// Print one object per op (name, summary, kind, inputs, args, shape, weights, params,
    /// flops, decode) as a JSON array.
    #[arg(long)]
    pub json: bool,
}

pub fn run(args: Args) -> anyhow::Result<ExitCode> {
    use harch_engine::ops;
    if !args.json {
        out!("{}", ops::registry_text());
        return Ok(ExitCode::SUCCESS);
    }
    let rows: Vec<serde_json::Value> = ops::all()
        .map(|o| {
            serde_json::json!({
                "name": o.name,
                "summary": o.summary,
                "kind": o.shape_kind.as_str(),
                // null: two or more
                "inputs": o.arity,
                "args": o.args,
                "shape": o.shape,
                "weights": o.weights,
                "params": o.params,
                "flops": o.flops,
                "decode": ops::history(o.name).describe(),
            })
        })
        .collect();
    crate::cli::out::print_json(&rows)?;
    Ok(ExitCode::SUCCESS)
}
