//! `harch-worker promote <component>`: move a reviewed draft component into the library (see
//! `harch_worker::publish::promote`).

use std::path::PathBuf;
use std::process::ExitCode;

use harch_worker::publish::{promote, recheck::TruthOptions};

#[derive(clap::Args)]
pub struct Args {
    /// The draft component's name (its `component:` field).
    pub component: String,
    /// Truth directory for a spec that uses the component (repeatable); otherwise a spec's
    /// provenance record names the truth to fetch, or the bundled snapshot serves it.
    #[arg(long)]
    pub truth: Vec<PathBuf>,
    /// Use the bundled snapshots instead of fetching from the Hub.
    #[arg(long)]
    pub offline: bool,
    /// Where fetched truth is kept.
    #[arg(long, default_value = ".harch/truth")]
    pub fetch_dir: PathBuf,
    /// Check and print what would change, and change nothing.
    #[arg(long)]
    pub dry_run: bool,
    /// Print `component`, `from`, `to`, `checks` (spec, truth), `edited_specs`, `dry_run` and
    /// `staged` as JSON; errors are JSON too.
    #[arg(long)]
    pub json: bool,
}

pub fn run(args: Args) -> anyhow::Result<ExitCode> {
    let root = harch_worker::specs::root();
    let opts = TruthOptions {
        dirs: args.truth,
        offline: args.offline,
        fetch_dir: args.fetch_dir,
    };
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()?;
    let plan = runtime
        .block_on(promote::plan(&root, &args.component, &opts))
        .map_err(crate::cli::failed)?;
    if args.json {
        let staged = !args.dry_run && promote::apply(&root, &plan)?;
        let checks: Vec<serde_json::Value> = plan
            .checks
            .iter()
            .map(|c| serde_json::json!({ "spec": c.spec, "truth": c.truth }))
            .collect();
        crate::cli::out::print_json(&serde_json::json!({
            "component": plan.component,
            "from": plan.from,
            "to": plan.to,
            "checks": checks,
            "edited_specs": plan.edited_specs,
            "dry_run": args.dry_run,
            "staged": staged,
        }))?;
        return Ok(ExitCode::SUCCESS);
    }
    for c in &plan.checks {
        outln!(
            "✓ {} validates with it in the library (truth: {})",
            c.spec,
            c.truth
        );
    }
    if plan.checks.is_empty() {
        outln!("no model spec uses `{}`", plan.component);
    }
    if args.dry_run {
        outln!("would move {} → {}", plan.from, plan.to);
        for s in &plan.edited_specs {
            outln!("would remove `{}` from drafts: in {s}", plan.component);
        }
        return Ok(ExitCode::SUCCESS);
    }
    let staged = promote::apply(&root, &plan)?;
    outln!("moved {} → {}", plan.from, plan.to);
    for s in &plan.edited_specs {
        outln!("removed `{}` from drafts: in {s}", plan.component);
    }
    if staged {
        outln!("staged in git: review with `git diff --cached` and commit");
    }
    Ok(ExitCode::SUCCESS)
}
