use std::process::ExitCode;

#[derive(clap::Args)]
pub struct Args {}

pub fn run(_args: Args) -> anyhow::Result<ExitCode> {
    out!("{}", harch_engine::ops::registry_text());
    Ok(ExitCode::SUCCESS)
}
