//! `harch-worker fetch`: write a model's truth directory from the Hub (or, offline, from the
//! bundled snapshot).

use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use harch_worker::hub::{self, FetchOptions};

#[derive(clap::Args)]
pub struct Args {
    /// Hub model id, `org/name`.
    pub model_id: String,
    /// Branch, tag or commit sha.
    #[arg(long, default_value = "main")]
    pub revision: String,
    /// Truth directory to write [default: .harch/truth/<org>__<name>].
    #[arg(long)]
    pub out: Option<PathBuf>,
    /// Print a JSON report (files, tensors, requests, bytes, retries, warnings, time by phase)
    /// instead of text; no progress bar.
    #[arg(long)]
    pub json: bool,
    /// Serve from the bundled snapshot (also when HF_HUB_OFFLINE=1).
    #[arg(long)]
    pub offline: bool,
    /// No progress or retry lines on stderr (errors are still printed).
    #[arg(short, long)]
    pub quiet: bool,
    /// Requests in flight at once.
    #[arg(long, default_value_t = 64)]
    pub concurrency: usize,
    /// Per-request timeout in seconds.
    #[arg(long, default_value_t = 30)]
    pub timeout: u64,
    /// Limit on the whole fetch in seconds, retries and waits included (0: none).
    #[arg(long, default_value_t = 600)]
    pub deadline: u64,
    /// Content-addressed cache directory [default: $HARCH_CACHE_DIR or ~/.cache/harch/hub].
    #[arg(long)]
    pub cache_dir: Option<PathBuf>,
    /// Do not read or write the cache.
    #[arg(long)]
    pub no_cache: bool,
    /// Replace --out even when it is a file, or a directory that is neither empty nor a truth
    /// directory of this model (without it such an --out is refused: nothing is deleted).
    #[arg(long)]
    pub force: bool,
}

pub fn run(args: Args) -> anyhow::Result<ExitCode> {
    let out = args
        .out
        .clone()
        .unwrap_or_else(|| PathBuf::from(".harch/truth").join(args.model_id.replace('/', "__")));
    if !args.force {
        harch_worker::truth_dir::check_out_dir(&out, &args.model_id).map_err(crate::cli::usage)?;
    }
    let mut opts = FetchOptions::from_env(&args.model_id, out);
    opts.revision = args.revision;
    opts.offline |= args.offline;
    opts.concurrency = args.concurrency.max(1);
    opts.timeout = Duration::from_secs(args.timeout.max(1));
    opts.deadline = (args.deadline > 0).then(|| Duration::from_secs(args.deadline));
    opts.progress = !args.json && !args.quiet;
    opts.notices = !args.json && !args.quiet;
    if args.no_cache {
        opts.cache_dir = None;
    } else if let Some(dir) = args.cache_dir {
        opts.cache_dir = Some(dir);
    }
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()?;
    match runtime.block_on(hub::fetch_truth(&opts)) {
        Ok(report) => {
            if args.json {
                crate::cli::out::print_json(&report)?;
            } else {
                outln!(
                    "{} @ {}: {} tensors ({} bytes) in {} shard headers -> {}",
                    report.model_id,
                    report.revision.as_deref().unwrap_or("snapshot"),
                    report.tensors,
                    report.total_bytes,
                    report.shards,
                    report.out.display()
                );
                outln!(
                    "{} requests, {} bytes transferred, {} retries ({} rate-limited), {} ms ({})",
                    report.requests,
                    report.bytes_transferred,
                    report.retries,
                    report.rate_limited,
                    report.elapsed_ms,
                    report.origin
                );
                let t = &report.timings;
                outln!(
                    "time: resolve {:.1} ms, index {:.1} ms, headers {:.1} ms, local work {:.1} ms",
                    t.resolve_ms,
                    t.index_ms,
                    t.headers_ms,
                    t.local_ms
                );
                for w in &report.warnings {
                    eprintln!("warning: {w}");
                }
            }
            Ok(ExitCode::SUCCESS)
        }
        // 3: try again later; 2: the id itself is wrong; 1: needs a person.
        Err(e) if e.is_transient() => Err(crate::cli::transient(e)),
        Err(e @ hub::FetchError::BadModelId { .. }) => Err(crate::cli::usage(e)),
        Err(e) => Err(crate::cli::failed(e)),
    }
}
