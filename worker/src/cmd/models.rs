//! `harch-worker models`: the library's model specs, the `architectures` each serves, and the
//! bundled snapshots (model ids answered offline) each serves.

use std::process::ExitCode;

use harch_worker::{snapshot, specs, subject};

#[derive(clap::Args)]
pub struct Args {
    /// Print the list as JSON; errors are JSON too.
    #[arg(long)]
    pub json: bool,
}

pub fn run(args: Args) -> anyhow::Result<ExitCode> {
    let repo = specs::read_repo(&specs::root(), &[])?;
    let mut snapshots: Vec<(String, Vec<String>)> = Vec::new();
    for id in snapshot::snapshot_ids() {
        if let Some(t) = snapshot::try_load_snapshot(id)? {
            snapshots.push((id.to_string(), subject::architectures(&t.config)));
        }
    }
    let rows: Vec<serde_json::Value> = repo
        .model_names()
        .into_iter()
        .map(|name| {
            let archs = repo.model_architectures(name).unwrap_or_default().to_vec();
            let bundled: Vec<&str> = snapshots
                .iter()
                .filter(|(_, a)| a.iter().any(|x| archs.contains(x)))
                .map(|(id, _)| id.as_str())
                .collect();
            serde_json::json!({
                "spec": name,
                "file": repo.model_file(name),
                "architectures": archs,
                "snapshots": bundled,
            })
        })
        .collect();
    if args.json {
        crate::cli::out::print_json(&serde_json::json!({ "models": rows }))?;
        return Ok(ExitCode::SUCCESS);
    }
    outln!("{:<14} {:<36} bundled snapshots", "spec", "architectures");
    for r in &rows {
        let list = |k: &str| {
            r[k].as_array()
                .map(|a| {
                    a.iter()
                        .filter_map(|x| x.as_str())
                        .collect::<Vec<_>>()
                        .join(", ")
                })
                .unwrap_or_default()
        };
        let snaps = list("snapshots");
        outln!(
            "{:<14} {:<36} {}",
            r["spec"].as_str().unwrap_or_default(),
            list("architectures"),
            if snaps.is_empty() {
                "—".to_string()
            } else {
                snaps
            }
        );
    }
    outln!(
        "\nA model id with a bundled snapshot answers offline; any other checkpoint of these architectures: `harch-worker fetch ORG/NAME --out DIR`, then `--truth DIR`."
    );
    Ok(ExitCode::SUCCESS)
}
