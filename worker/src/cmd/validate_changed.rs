//! `harch-worker validate-changed --base REF`: validate every model spec a change affects
//! against the truth its provenance records; the spec repository's CI runs it on each pull
//! request (see `.github/workflows/validate-specs.yml`).

use std::path::PathBuf;
use std::process::ExitCode;

use harch_worker::publish::{changed, recheck};

#[derive(clap::Args)]
pub struct Args {
    /// The branch or commit the change is compared with (its merge base with HEAD).
    #[arg(long)]
    pub base: String,
    /// Truth directory to use for a spec (repeatable), instead of fetching.
    #[arg(long)]
    pub truth: Vec<PathBuf>,
    /// Use the bundled snapshots instead of fetching from the Hub.
    #[arg(long)]
    pub offline: bool,
    /// Where fetched truth is kept.
    #[arg(long, default_value = ".harch/truth")]
    pub fetch_dir: PathBuf,
    /// Also write the Markdown report (the pull request comment) here.
    #[arg(long)]
    pub markdown: Option<PathBuf>,
    /// Also write each affected spec's Inspector page (one HTML file per model) into DIR.
    #[arg(long, value_name = "DIR")]
    pub pages: Option<PathBuf>,
    /// Print JSON instead of Markdown.
    #[arg(long)]
    pub json: bool,
}

pub fn run(args: Args) -> anyhow::Result<ExitCode> {
    let root = harch_worker::specs::root();
    let changed_paths = changed::changed_paths(&root, &args.base)?;
    let mut files = harch_worker::specs::read_spec_files(&root)?;
    files.extend(recheck::read_provenance(&root));
    let specs = changed::affected_specs(&files, &changed_paths);
    let opts = recheck::TruthOptions {
        dirs: args.truth,
        offline: args.offline,
        fetch_dir: args.fetch_dir,
    };
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()?;
    let results = runtime.block_on(changed::check_all(&files, &specs, &opts));
    let mut md = changed::markdown(&results, changed_paths.len());
    if let Some(dir) = &args.pages {
        let pages = runtime.block_on(changed::write_pages(&files, &specs, &opts, dir))?;
        md.push_str(&format!(
            "\nInspector pages: {} written to `{}`.\n",
            pages.len(),
            dir.display()
        ));
    }
    if let Some(path) = &args.markdown {
        std::fs::write(path, &md)?;
    }
    if args.json {
        crate::cli::out::print_json(&results)?;
    } else {
        out!("{md}");
    }
    Ok(if results.iter().all(|r| r.valid) {
        ExitCode::SUCCESS
    } else {
        ExitCode::from(1)
    })
}
