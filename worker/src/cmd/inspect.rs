//! `harch-worker inspect MODEL|SPEC`: the model as one self-contained HTML page (harch-inspect),
//! or `--library --out DIR` a static site of every library model with an index page.

use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::bail;
use harch_analysis::{Model, analyze};
use harch_engine::EvalOptions;
use harch_inspect::{ModelData, PageOptions, site};
use harch_worker::subject::{self, Subject};

use super::analyze::{DeploymentArgs, hardware_table};

#[derive(clap::Args)]
pub struct Args {
    /// A spec file, a library model spec name, or a Hugging Face model id (not with --library).
    #[arg(required_unless_present = "library", conflicts_with = "library")]
    pub model: Option<String>,
    /// Truth directory (config.json, index, shard headers) to validate and evaluate against.
    #[arg(long)]
    pub truth: Option<PathBuf>,
    /// A second model shown beside the first, block by block.
    #[arg(long, value_name = "MODEL")]
    pub compare: Option<String>,
    /// Every library model with a bundled snapshot: a page each and index.html, in --out DIR.
    #[arg(long, requires = "out")]
    pub library: bool,
    /// The page to write (default `<spec>.html` here), or with --library the directory.
    #[arg(long)]
    pub out: Option<PathBuf>,
    /// With --gpu: the deployment panel, `analyze`'s figures for this GPU, layout and workload.
    #[command(flatten)]
    pub deployment: DeploymentArgs,
    /// With --gpu: the sweep the deployment panel plots, as `analyze --sweep` takes it.
    #[arg(long, requires = "gpu", default_value = "batch=1,2,...,256")]
    pub sweep: String,
    /// Print what was written (files, bytes, verdicts, the embedded figures) as JSON; errors
    /// are JSON too.
    #[arg(long)]
    pub json: bool,
}

/// The page's data of one model, as the command line names it.
fn collect(arg: &str, truth: Option<&std::path::Path>) -> anyhow::Result<(Subject, ModelData)> {
    let s = super::friendly::resolve(arg, truth)?;
    let data = harch_inspect::collect(arg, &s)?;
    Ok((s, data))
}

/// `analyze`'s report for the deployment panel, and the sweep it plots (`sweep.svg`, the plot
/// `analyze --sweep --svg` writes, with the points it was drawn from in `sweep.rows`).
fn deployment(
    args: &DeploymentArgs,
    sweep_text: &str,
    s: &Subject,
) -> anyhow::Result<Option<serde_json::Value>> {
    if args.gpu.is_none() {
        return Ok(None);
    }
    let table = hardware_table()?;
    let req = args.request(&table)?;
    let (ir, a) =
        subject::evaluated(s, EvalOptions { symbolic: true }).map_err(crate::cli::failed)?;
    let model = Model::new(&ir, &a, &s.truth.config)?;
    let (_, r) = analyze(&model, &req).map_err(|e| anyhow::anyhow!("{e}"))?;
    let mut v = serde_json::to_value(&r)?;
    let spec = harch_analysis::sweep::SweepSpec::parse(sweep_text)
        .map_err(|e| crate::cli::usage(anyhow::anyhow!("--sweep: {e}")))?;
    let rows = harch_analysis::sweep::run(&model, &req, &spec);
    let title = format!("{} on {}", model.a.model, req.gpu.gpu);
    let svg = harch_analysis::plot::svg(&spec, &rows, &title).map_err(anyhow::Error::msg)?;
    v["sweep"] = serde_json::json!({
        "spec": sweep_text,
        "svg": svg,
        "csv": harch_analysis::sweep::csv(&spec, &rows),
    });
    Ok(Some(v))
}

fn summary(data: &ModelData, file: &std::path::Path, bytes: usize) -> serde_json::Value {
    serde_json::json!({
        "model": data.title,
        "spec": data.spec,
        "file": file,
        "bytes": bytes,
        "valid": data.verdict.valid,
        "errors": data.verdict.errors,
        "figures": data.figures,
    })
}

pub fn run(args: Args) -> anyhow::Result<ExitCode> {
    let mut written = Vec::new();
    if args.library {
        if args.compare.is_some() || args.deployment.gpu.is_some() {
            bail!(
                "--library writes one page per model; --compare and --gpu are for one model's page"
            );
        }
        let Some(dir) = &args.out else {
            bail!("--library needs --out DIR");
        };
        let mut pages = Vec::new();
        for id in harch_worker::snapshot::snapshot_ids() {
            let (_, data) = collect(id, None)?;
            let html = harch_inspect::page(&data, &PageOptions::default())?;
            pages.push((data, html));
        }
        site::write(dir, &pages)?;
        for (data, html) in &pages {
            written.push(summary(
                data,
                &dir.join(site::page_file(&data.title)),
                html.len(),
            ));
        }
        let index = dir.join("index.html");
        if args.json {
            crate::cli::out::print_json(&serde_json::json!({ "pages": written, "index": index }))?;
        } else {
            for w in &written {
                outln!(
                    "{}  {} bytes",
                    w["file"].as_str().unwrap_or_default(),
                    w["bytes"]
                );
            }
            outln!("{}", index.display());
        }
        return Ok(ExitCode::SUCCESS);
    }
    let Some(arg) = &args.model else {
        bail!("inspect needs a model (or --library --out DIR)");
    };
    let (s, data) = collect(arg, args.truth.as_deref())?;
    let compare = match &args.compare {
        Some(b) => Some(collect(b, None)?.1),
        None => None,
    };
    let deployment = if data.verdict.valid {
        deployment(&args.deployment, &args.sweep, &s)?
    } else {
        None
    };
    let html = harch_inspect::page(
        &data,
        &PageOptions {
            compare,
            deployment,
        },
    )?;
    let out = args
        .out
        .clone()
        .unwrap_or_else(|| PathBuf::from(site::page_file(&data.spec)));
    site::write_file(&out, &html)?;
    if args.json {
        crate::cli::out::print_json(&summary(&data, &out, html.len()))?;
    } else {
        outln!(
            "{}  {} bytes, {}",
            out.display(),
            html.len(),
            if data.verdict.valid {
                "valid".to_string()
            } else {
                format!(
                    "INVALID ({} errors, shown on the page)",
                    data.verdict.errors.len()
                )
            }
        );
    }
    Ok(ExitCode::SUCCESS)
}
