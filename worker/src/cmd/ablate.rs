//! `harch-worker ablate`: queue a guard-tier ablation (one generate job per model, tier and
//! seed) and, with `--wait` or `ablate report DIR` later, collect it into a report.

use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::{Duration, Instant};

use harch_worker::ablation::experiment::{self, Progress};
use harch_worker::ablation::plan::{Config, Plan, Tier, prompt_hash};
use harch_worker::ablation::report::Report;
use harch_worker::pipeline::registry::StageRegistry;
use harch_worker::queue::cli::{block_on, setup};
use harch_worker::queue::config::{QueueFlags, Settings};
use harch_worker::queue::ops::enqueue;
use harch_worker::queue::preflight;
use harch_worker::queue::store::JobStore;

#[derive(clap::Args)]
#[command(args_conflicts_with_subcommands = true, subcommand_negates_reqs = true)]
pub struct Args {
    #[command(subcommand)]
    pub report: Option<Sub>,
    /// Hugging Face model ids, comma-separated.
    #[arg(long, value_delimiter = ',', required = true, value_name = "ID,ID")]
    pub models: Vec<String>,
    /// Guard tiers, cumulative, by name or number: off, weight, packing, shape, analysis,
    /// schedule, structural, axiom, source, all (default: every tier).
    #[arg(long, value_delimiter = ',', value_name = "TIER,TIER")]
    pub tiers: Option<Vec<String>>,
    /// An explicit guard set run as one more tier (comma-separated guard names).
    #[arg(long, value_name = "GUARD,GUARD")]
    pub guards: Option<String>,
    /// Runs per (model, tier).
    #[arg(long, default_value_t = 3)]
    pub seeds: u32,
    /// Agent backend (default: agent.default in queue.toml). Its credentials must be set
    /// here unless --skip-credential-check.
    #[arg(long, value_parser = clap::builder::PossibleValuesParser::new(harch_agents::BACKENDS))]
    pub agent: Option<String>,
    /// Model the agent runs (its `--model`; default: the backend's own).
    #[arg(long)]
    pub model: Option<String>,
    /// Output directory (plan, collected runs, report); the same directory resumes.
    #[arg(long, value_name = "DIR")]
    pub out: Option<PathBuf>,
    /// Branch, tag or commit of the model repositories.
    #[arg(long, default_value = "main")]
    pub revision: String,
    /// Use the bundled snapshots instead of the Hub.
    #[arg(long)]
    pub offline: bool,
    /// Higher runs first.
    #[arg(long, default_value_t = 0)]
    pub priority: u32,
    /// Queue even when the agent's credentials are not set here (workers elsewhere have them).
    #[arg(long)]
    pub skip_credential_check: bool,
    /// Wait for every run to finish (workers must be running), then write the report.
    #[arg(long)]
    pub wait: bool,
    /// Give up waiting after this long (`90m`, `12h`); exit 3 then, with the report of the
    /// finished runs written.
    #[arg(long, default_value = "24h", value_parser = humantime::parse_duration)]
    pub wait_timeout: Duration,
    /// Print what was queued (`out`, `runs_planned`, `finished`, `in_flight`, `queued` job
    /// ids) as JSON, or with --wait the report's figures (as `ablate report --json`); errors
    /// are JSON too.
    #[arg(long)]
    pub json: bool,
    #[command(flatten)]
    pub flags: QueueFlags,
}

#[derive(clap::Subcommand)]
pub enum Sub {
    /// Collect the finished runs of an ablation and write its report (runs.csv, tiers.csv,
    /// report.md, report.svg) into its directory.
    Report(ReportArgs),
}

#[derive(clap::Args)]
pub struct ReportArgs {
    /// The ablation's output directory.
    pub dir: PathBuf,
    /// Mark the report as a sample (for examples produced by fake agents).
    #[arg(long)]
    pub sample: bool,
    /// Print the report's figures as JSON instead of its markdown: `out`, `report`, `runs`,
    /// `finished`, `in_flight`, `missing`, `tiers` (tier, guards, planned, finished, passed,
    /// pass_rate, false_self_pass, false_self_pass_rate, error_classes, mean_turns,
    /// mean_tokens, mean_cost_usd, mean_wall_s); errors are JSON too.
    #[arg(long)]
    pub json: bool,
    #[command(flatten)]
    pub flags: QueueFlags,
}

pub fn run(args: Args) -> anyhow::Result<ExitCode> {
    if let Some(Sub::Report(r)) = args.report {
        let settings = setup(&r.flags)?;
        let store = JobStore::open(settings.data_dir())?;
        let plan = Plan::load(&r.dir)?.ok_or_else(|| {
            anyhow::anyhow!("{}: no ablation here (no plan.json)", r.dir.display())
        })?;
        let progress = experiment::collect(&plan, &r.dir, &store)?;
        write_report(plan, &r.dir, r.sample, &progress, r.json)?;
        return Ok(ExitCode::SUCCESS);
    }
    let settings = setup(&args.flags)?;
    let config = config(&args, &settings).map_err(crate::cli::usage)?;
    let out = args.out.clone().unwrap_or_else(|| {
        let model = config
            .agent_model
            .as_deref()
            .map(|m| format!("-{}", m.replace('/', "_")))
            .unwrap_or_default();
        PathBuf::from(format!("ablations/{}{model}", config.agent))
    });
    let plan = match Plan::load(&out)? {
        Some(old) => Plan::resume(old, config)?,
        None => Plan::new(config),
    };
    let mut plan = plan;
    let store = JobStore::open(settings.data_dir())?;
    let before = experiment::collect(&plan, &out, &store)?;
    let todo = experiment::needing_jobs(&plan, &out, &store);
    let requests = todo
        .iter()
        .map(|&i| experiment::request(&plan, &plan.runs[i], args.priority))
        .collect::<anyhow::Result<Vec<_>>>()?;
    if !args.skip_credential_check
        && let Some(r) = requests.first()
    {
        preflight::check_credentials(&settings.agent, r).map_err(crate::cli::usage)?;
    }
    let registry = StageRegistry::builtin();
    let queued =
        block_on(1, enqueue(&settings, &registry, requests))?.map_err(crate::cli::usage)?;
    for (&i, q) in todo.iter().zip(&queued) {
        plan.runs[i].job_id = Some(q.id.clone());
    }
    plan.save(&out)?;
    eprintln!(
        "{}: {} runs planned, {} finished, {} in flight, {} queued now",
        out.display(),
        plan.runs.len(),
        before.finished,
        before.in_flight,
        queued.len()
    );
    if args.json && !args.wait {
        crate::cli::out::print_json(&serde_json::json!({
            "out": out.display().to_string(),
            "runs_planned": plan.runs.len(),
            "finished": before.finished,
            "in_flight": before.in_flight,
            "queued": queued.iter().map(|q| q.id.as_str()).collect::<Vec<_>>(),
        }))?;
        return Ok(ExitCode::SUCCESS);
    }
    if !args.wait {
        eprintln!(
            "run workers (`harch-worker run`), then: harch-worker ablate report {}",
            out.display()
        );
        return Ok(ExitCode::SUCCESS);
    }
    let deadline = Instant::now() + args.wait_timeout;
    loop {
        let p = experiment::collect(&plan, &out, &store)?;
        if p.done() {
            write_report(plan, &out, false, &p, args.json)?;
            return Ok(ExitCode::SUCCESS);
        }
        if Instant::now() >= deadline {
            eprintln!(
                "gave up waiting after {}: {} runs still in flight",
                humantime::format_duration(args.wait_timeout),
                p.in_flight
            );
            write_report(plan, &out, false, &p, args.json)?;
            return Ok(ExitCode::from(crate::cli::exit::RETRY));
        }
        std::thread::sleep(Duration::from_secs(2));
    }
}

fn config(args: &Args, settings: &Settings) -> anyhow::Result<Config> {
    let mut tiers = Vec::new();
    let names = args.tiers.clone().unwrap_or_else(|| {
        harch_guards::tiers::tier_names()
            .iter()
            .map(|s| s.to_string())
            .collect()
    });
    for t in names {
        let tier = Tier::named(t.trim()).map_err(anyhow::Error::msg)?;
        if !tiers.contains(&tier) {
            tiers.push(tier);
        }
    }
    if let Some(g) = &args.guards {
        tiers.push(Tier::custom(g).map_err(anyhow::Error::msg)?);
    }
    if args.seeds == 0 {
        anyhow::bail!("--seeds must be at least 1");
    }
    Ok(Config {
        agent: args
            .agent
            .clone()
            .unwrap_or_else(|| settings.agent.default.clone()),
        agent_model: args.model.clone(),
        models: args.models.clone(),
        tiers,
        seeds: args.seeds,
        revision: args.revision.clone(),
        offline: args.offline,
        guard_set: harch_guards::tiers::GUARDS
            .iter()
            .map(|g| g.to_string())
            .collect(),
        harch_version: env!("CARGO_PKG_VERSION").to_string(),
        prompt_hash: prompt_hash(),
    })
}

fn write_report(
    plan: Plan,
    out: &Path,
    sample: bool,
    p: &Progress,
    json: bool,
) -> anyhow::Result<()> {
    let runs = plan.records(out)?;
    let report = Report::build(plan, runs);
    report.write(out, sample)?;
    if json {
        let tiers: Vec<serde_json::Value> = report
            .tiers
            .iter()
            .map(|t| {
                serde_json::json!({
                    "tier": t.tier,
                    "guards": t.guards,
                    "planned": t.planned,
                    "finished": t.finished,
                    "passed": t.passed,
                    "pass_rate": t.pass_rate(),
                    "false_self_pass": t.false_self_pass,
                    "false_self_pass_rate": t.false_self_pass_rate(),
                    "error_classes": t.error_classes,
                    "mean_turns": t.mean_turns,
                    "mean_tokens": t.mean_tokens,
                    "mean_cost_usd": t.mean_cost_usd,
                    "mean_wall_s": t.mean_wall_s,
                })
            })
            .collect();
        return crate::cli::out::print_json(&serde_json::json!({
            "out": out.display().to_string(),
            "report": out.join("report.md").display().to_string(),
            "runs": report.runs.len(),
            "finished": p.finished,
            "in_flight": p.in_flight,
            "missing": p.missing,
            "tiers": tiers,
        }));
    }
    crate::cli::out::write(format_args!("{}", report.markdown(sample)));
    eprintln!(
        "{} of {} runs finished ({} in flight, {} without a record); report in {}",
        p.finished,
        report.runs.len(),
        p.in_flight,
        p.missing,
        out.join("report.md").display()
    );
    Ok(())
}
