//! Log output on stderr: warnings and errors by default (a command's answer is on stdout, and a
//! newcomer should see it, not the worker's chatter), more with `-v`; human-readable text,
//! coloured only on a terminal without `NO_COLOR`, or JSON lines with `--log-json`. `RUST_LOG`
//! overrides the levels.

use std::io::IsTerminal;

use tracing_subscriber::EnvFilter;

/// The crates whose events `-v` turns up: harch's own that do I/O (the pure core logs nothing).
const OURS: &[&str] = &[
    "harch_worker",
    "harch_pipeline",
    "harch_publish",
    "harch_queue",
    "harch_jobs",
    "harch_hub",
    "harch_library",
    "harch_truth",
    "harch_agents",
    "harch_sandbox",
];

/// The filter for `verbosity` `-v` flags.
pub fn default_filter(verbosity: u8) -> String {
    let (base, ours) = match verbosity {
        0 => return "warn".to_string(),
        1 => ("warn", "info"),
        2 => ("info", "debug"),
        _ => ("debug", "trace"),
    };
    let mut filter = base.to_string();
    for krate in OURS {
        filter.push_str(&format!(",{krate}={ours}"));
    }
    filter
}

/// Whether stderr gets ANSI colour: a terminal, and `NO_COLOR` unset or empty
/// (<https://no-color.org>).
pub fn colour() -> bool {
    std::io::stderr().is_terminal() && std::env::var_os("NO_COLOR").is_none_or(|v| v.is_empty())
}

static JSON_LINES: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);

/// Whether stderr carries JSON lines only (`--log-json`): commands then print no plain lines
/// there.
pub fn json_lines() -> bool {
    JSON_LINES.load(std::sync::atomic::Ordering::Relaxed)
}

pub fn init(json: bool, verbosity: u8) {
    JSON_LINES.store(json, std::sync::atomic::Ordering::Relaxed);
    let filter = EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| EnvFilter::new(default_filter(verbosity)));
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_ansi(colour())
        .with_writer(std::io::stderr);
    // A second init (tests running commands in-process) keeps the first subscriber.
    let _ = if json {
        builder
            .json()
            .with_current_span(true)
            .with_span_list(true)
            .try_init()
    } else {
        builder.try_init()
    };
}
