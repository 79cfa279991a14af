//! The one writer of standard output. `println!` panics when the reader has gone away
//! (`harch-worker enqueue … | head -1`); this writer ends the process quietly instead, with
//! the exit status a shell reports for a process killed by SIGPIPE, as Unix tools do. The
//! process keeps ignoring SIGPIPE itself: the stages talk to agents over pipes, where a closed
//! pipe is an error to handle, not the worker's death.

use std::io::Write;
use std::sync::atomic::{AtomicBool, Ordering};

use super::exit::STDOUT_CLOSED;

static JSON: AtomicBool = AtomicBool::new(false);

/// Whether the command was asked for JSON (`--json`): then errors are JSON too.
pub fn json() -> bool {
    JSON.load(Ordering::Relaxed)
}

pub fn set_json(on: bool) {
    JSON.store(on, Ordering::Relaxed);
}

/// Writes to stdout; a closed stdout ends the process quietly.
pub fn write(args: std::fmt::Arguments) {
    let mut out = std::io::stdout().lock();
    if let Err(e) = out.write_fmt(args) {
        closed(e);
    }
}

/// Writes bytes that may not be text (a kept file, whole) to stdout.
pub fn write_bytes(bytes: &[u8]) {
    if let Err(e) = std::io::stdout().lock().write_all(bytes) {
        closed(e);
    }
}

/// Flushes what `print!`-style writes left buffered (at the end of every command).
pub fn flush() {
    if let Err(e) = std::io::stdout().lock().flush() {
        closed(e);
    }
}

/// Prints a value as pretty JSON on its own lines.
pub fn print_json<T: serde::Serialize + ?Sized>(value: &T) -> anyhow::Result<()> {
    let text = serde_json::to_string_pretty(value)?;
    write(format_args!("{text}\n"));
    Ok(())
}

fn closed(e: std::io::Error) -> ! {
    if e.kind() == std::io::ErrorKind::BrokenPipe {
        std::process::exit(STDOUT_CLOSED);
    }
    // stderr may be gone too; nothing else can be said.
    let _ = writeln!(std::io::stderr(), "error: cannot write to stdout: {e}");
    std::process::exit(i32::from(super::exit::FAILED));
}

/// `println!` through [`write`].
macro_rules! outln {
    () => {
        $crate::cli::out::write(format_args!("\n"))
    };
    ($($arg:tt)*) => {
        $crate::cli::out::write(format_args!("{}\n", format_args!($($arg)*)))
    };
}

/// `print!` through [`write`].
macro_rules! out {
    ($($arg:tt)*) => {
        $crate::cli::out::write(format_args!($($arg)*))
    };
}
