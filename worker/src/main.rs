//! `harch-worker`: the command line of harch. Every subcommand lives in `cmd/`.

use std::process::ExitCode;

use clap::{Parser, Subcommand};

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
}

#[derive(Subcommand)]
enum Command {
    /// Print the primitive op registry.
    Ops(cmd::ops::Args),
    /// Print the evaluated summary of a spec.
    Show(cmd::show::Args),
    /// Print a quantity's formula and value.
    Explain(cmd::explain::Args),
    /// Fetch a model's ground truth from the Hub into a truth directory (no weight bytes).
    Fetch(cmd::fetch::Args),
    /// Build a bundled offline snapshot from a truth directory.
    Snapshot(cmd::snapshot::Args),
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    let result = match cli.command {
        Command::Ops(a) => cmd::ops::run(a),
        Command::Show(a) => cmd::show::run(a),
        Command::Explain(a) => cmd::explain::run(a),
        Command::Fetch(a) => cmd::fetch::run(a),
        Command::Snapshot(a) => cmd::snapshot::run(a),
    };
    match result {
        Ok(code) => code,
        Err(e) => {
            eprintln!("error: {e:#}");
            ExitCode::from(2)
        }
    }
}
