//! `harch-worker`: the command line of harch. Every subcommand lives in `cmd/`.

use std::process::ExitCode;

use clap::{CommandFactory, FromArgMatches, Parser, Subcommand};

#[macro_use]
mod cli;
mod cmd;

#[derive(Parser)]
#[command(
    name = "harch-worker",
    version,
    about = "Verified structural specs of Hugging Face models"
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
    /// More log lines on stderr: -v info, -vv debug (default: warnings and errors; RUST_LOG
    /// overrides).
    #[arg(short, long, global = true, action = clap::ArgAction::Count)]
    verbose: u8,
    /// Log as JSON lines instead of human-readable text.
    #[arg(long, global = true)]
    log_json: bool,
}

#[derive(Subcommand)]
enum Command {
    /// Print the primitive op registry.
    Ops(cmd::ops::Args),
    /// Print the evaluated summary of a spec.
    Show(cmd::show::Args),
    /// Check a spec against ground truth with every guard (exit 0 valid, 1 invalid, 2 usage).
    Validate(cmd::validate::Args),
    /// Print a quantity's formula and value.
    Explain(cmd::explain::Args),
    /// What a model costs to serve: memory, communication, bound and estimate per phase.
    Analyze(cmd::analyze::Args),
    /// Search layouts for a model on a GPU type: the smallest that fits, the best per GPU and
    /// per dollar.
    Plan(cmd::plan::Args),
    /// Models side by side: every show figure, and with --gpu every analyze figure.
    Compare(cmd::compare::Args),
    /// Write a model's page: one self-contained HTML file with its overview, architecture
    /// graph, breakdown and cost lens (`--library --out DIR`: every library model).
    Inspect(cmd::inspect::Args),
    /// List the library's model specs, the architectures each serves and the bundled snapshots.
    Models(cmd::models::Args),
    /// Fetch a model's ground truth from the Hub into a truth directory (no weight bytes).
    Fetch(cmd::fetch::Args),
    /// Build a bundled offline snapshot from a truth directory.
    Snapshot(cmd::snapshot::Args),
    /// Queue jobs for models (prints one job id per model).
    Enqueue(cmd::enqueue::Args),
    /// Run a worker: take jobs from the queue and run their stages.
    Run(cmd::run::Args),
    /// Show one job, or all jobs.
    Status(cmd::status::Args),
    /// Cancel a pending or running job.
    Cancel(cmd::cancel::Args),
    /// Queue a failed or cancelled job again; it resumes after its last completed stage, and its
    /// agent stages get a fresh budget (agent.attempts runs, agent.max_cost_usd).
    Retry(cmd::retry::Args),
    /// Print a job's event log, or one agent run (`--attempt N`): prompt, transcript, findings.
    Logs(cmd::logs::Args),
    /// Re-validate the whole spec library and print a summary table.
    Revalidate(cmd::revalidate::Args),
    /// Benchmark the queue: enqueue and drain no-op jobs on each backend.
    BenchQueue(cmd::bench_queue::Args),
    /// Print the generate prompt an agent would get for a model, and its size (on stderr).
    Prompt(cmd::prompt::Args),
    /// Check a review report's evidence against a truth directory (exit 0 when it would be
    /// recorded PASS, 1 otherwise, 2 on usage errors).
    Evidence(cmd::evidence::Args),
    /// Move a reviewed draft component into the library (git move), updating the specs that
    /// list it; refuses when a spec using it no longer validates.
    Promote(cmd::promote::Args),
    /// Validate every model spec a change affects against the truth its provenance records
    /// (the spec repository's CI; exit 0 all valid, 1 not, 2 usage).
    ValidateChanged(cmd::validate_changed::Args),
    /// Queue a guard-tier ablation, one generate job per model, tier and seed (`ablate report
    /// DIR` writes its report)
    Ablate(cmd::ablate::Args),
}

fn main() -> ExitCode {
    let sealed = match seal_environment() {
        Ok(s) => s,
        Err(e) => return cli::report::report(&e),
    };
    // Known before parsing, so that a usage error of a `--json` command is JSON too.
    let args: Vec<std::ffi::OsString> = std::env::args_os().collect();
    cli::out::set_json(
        args.iter()
            .skip(1)
            .take_while(|a| *a != "--")
            .any(|a| a == "--json"),
    );
    let matches = match cli::help::decorate(Cli::command()).try_get_matches_from(&args) {
        Ok(m) => m,
        Err(e) => return usage_error(e),
    };
    let cli = match Cli::from_arg_matches(&matches) {
        Ok(c) => c,
        Err(e) => return usage_error(e),
    };
    harch_worker::queue::logging::init(cli.log_json, cli.verbose);
    if sealed && !matches!(cli.command, Command::Validate(_)) {
        return cli::report::report_message(
            "this harch-worker is an ablation workspace's sealed validate: it runs `validate` only",
            cli::exit::USAGE,
        );
    }
    let result = match cli.command {
        Command::Ops(a) => cmd::ops::run(a),
        Command::Show(a) => cmd::show::run(a),
        Command::Validate(a) => cmd::validate::run(a),
        Command::Explain(a) => cmd::explain::run(a),
        Command::Analyze(a) => cmd::analyze::run(a),
        Command::Plan(a) => cmd::plan::run(a),
        Command::Compare(a) => cmd::compare::run(a),
        Command::Inspect(a) => cmd::inspect::run(a),
        Command::Models(a) => cmd::models::run(a),
        Command::Fetch(a) => cmd::fetch::run(a),
        Command::Snapshot(a) => cmd::snapshot::run(a),
        Command::Enqueue(a) => cmd::enqueue::run(a),
        Command::Run(a) => cmd::run::run(a),
        Command::Status(a) => cmd::status::run(a),
        Command::Cancel(a) => cmd::cancel::run(a),
        Command::Retry(a) => cmd::retry::run(a),
        Command::Logs(a) => cmd::logs::run(a),
        Command::Revalidate(a) => cmd::revalidate::run(a),
        Command::BenchQueue(a) => cmd::bench_queue::run(a),
        Command::Prompt(a) => cmd::prompt::run(a),
        Command::Evidence(a) => cmd::evidence::run(a),
        Command::Promote(a) => cmd::promote::run(a),
        Command::ValidateChanged(a) => cmd::validate_changed::run(a),
        Command::Ablate(a) => cmd::ablate::run(a),
    };
    cli::out::flush();
    match result {
        Ok(code) => code,
        Err(e) => cli::report::report(&e),
    }
}

/// A sealed copy (an ablation's `validate`) sets the stage's settings over whatever environment
/// it was started with, before anything reads it. Returns whether this binary is sealed.
fn seal_environment() -> anyhow::Result<bool> {
    let Some(seal) = harch_worker::pipeline::stages::generate::sealed_validate::running()? else {
        return Ok(false);
    };
    for (name, value) in seal.env() {
        // SAFETY: the first thing main does, before any thread is started.
        unsafe { std::env::set_var(name, value) };
    }
    Ok(true)
}

/// Help and version go to stdout (exit 0); usage errors exit 2, as JSON under `--json`.
fn usage_error(e: clap::Error) -> ExitCode {
    if !e.use_stderr() {
        let _ = e.print();
        return ExitCode::SUCCESS;
    }
    if !cli::out::json() {
        let _ = e.print();
        return ExitCode::from(cli::exit::USAGE);
    }
    // clap's first line is `error: …`; the rest is the usage line and a pointer to --help.
    let text = e.render().to_string();
    let message = text.lines().next().unwrap_or_default();
    cli::report::report_message(
        message.strip_prefix("error: ").unwrap_or(message),
        cli::exit::USAGE,
    )
}
