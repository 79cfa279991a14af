//! One table of exit codes for every command (docs/cli.md, and each command's `--help`).

/// The command did what was asked; the answer is yes (valid, succeeded).
pub const OK: u8 = 0;
/// The command ran and the answer is no: the spec is invalid, a job failed, the fetch failed
/// for a reason that will not go away by itself.
pub const FAILED: u8 = 1;
/// Usage: bad arguments, an unknown model or spec, a settings file or input that cannot be
/// used. Nothing was done.
pub const USAGE: u8 = 2;
/// No answer yet: a transient failure (network, rate limit, the queue store unreachable; try
/// again later) or missing evidence (`analyze` without a hardware figure).
pub const RETRY: u8 = 3;
/// Standard output was closed before everything was written (as if killed by SIGPIPE).
pub const STDOUT_CLOSED: i32 = 141;

/// The table as the help texts show it.
pub const TABLE: &str = "\
Exit codes:
  0    success (valid, succeeded)
  1    failed: invalid spec, failed job, permanent error
  2    usage: bad arguments or input; nothing was done
  3    try again later: transient failure or missing evidence
  141  stdout closed early (as if killed by SIGPIPE)";

/// An error that says which exit code it ends the command with. Errors without one are usage
/// errors (2): they come from arguments and inputs checked before any work.
#[derive(Debug)]
pub struct Exit {
    pub code: u8,
    pub error: anyhow::Error,
}

impl std::fmt::Display for Exit {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{:#}", self.error)
    }
}

impl std::error::Error for Exit {}

pub fn usage(e: impl Into<anyhow::Error>) -> anyhow::Error {
    Exit {
        code: USAGE,
        error: e.into(),
    }
    .into()
}

pub fn failed(e: impl Into<anyhow::Error>) -> anyhow::Error {
    Exit {
        code: FAILED,
        error: e.into(),
    }
    .into()
}

pub fn transient(e: impl Into<anyhow::Error>) -> anyhow::Error {
    Exit {
        code: RETRY,
        error: e.into(),
    }
    .into()
}

/// The exit code an error ends the command with.
pub fn code_of(e: &anyhow::Error) -> u8 {
    e.chain()
        .find_map(|c| c.downcast_ref::<Exit>())
        .map_or(USAGE, |x| x.code)
}

/// What the word for a code is in JSON error objects.
pub fn kind(code: u8) -> &'static str {
    match code {
        OK => "ok",
        FAILED => "failed",
        USAGE => "usage",
        _ => "retry",
    }
}
