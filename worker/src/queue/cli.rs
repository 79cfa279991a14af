//! What every queue command does first: settings, an async runtime (logging is started by
//! `main` for every command).

use super::config::{QueueFlags, Settings};

/// Reads the settings the flags select, `[publish]` checked too (its refnames need git).
pub fn setup(flags: &QueueFlags) -> anyhow::Result<Settings> {
    let settings = Settings::load(flags)?;
    crate::publish::config::check(&settings.publish, &settings.agent)?;
    Ok(settings)
}

/// `setup` for commands that run a worker: `--concurrency`, when given, overrides
/// `worker.concurrency`.
pub fn setup_worker(flags: &QueueFlags, concurrency: Option<usize>) -> anyhow::Result<Settings> {
    let mut settings = setup(flags)?;
    if let Some(n) = concurrency {
        settings.worker.concurrency = n;
        settings.check()?;
    }
    Ok(settings)
}

/// Runs `f` to completion on a multi-threaded runtime (the commands themselves are sync).
/// Jobs do short blocking file I/O on the runtime's threads, so there are never fewer than
/// `concurrency + 2` of them.
pub fn block_on<F: std::future::Future>(concurrency: usize, f: F) -> anyhow::Result<F::Output> {
    let cores = std::thread::available_parallelism().map_or(2, |n| n.get());
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(cores.max(concurrency + 2))
        .enable_all()
        .build()
        .map_err(|e| anyhow::anyhow!("cannot start the async runtime: {e}"))?;
    Ok(rt.block_on(f))
}

/// `1.2 s`, `340 ms`, `2 min 5 s`.
pub fn fmt_ms(ms: u64) -> String {
    match ms {
        0..1000 => format!("{ms} ms"),
        1000..60_000 => format!("{:.1} s", ms as f64 / 1000.0),
        _ => format!("{} min {} s", ms / 60_000, (ms % 60_000) / 1000),
    }
}

/// An epoch-millisecond stamp as RFC 3339 (UTC, seconds).
pub fn fmt_time(ms: u64) -> String {
    let t = std::time::UNIX_EPOCH + std::time::Duration::from_millis(ms);
    humantime::format_rfc3339_seconds(t).to_string()
}
