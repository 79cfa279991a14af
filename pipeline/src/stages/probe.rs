//! Stages that do no model work, for the queue's tests and the benchmark: they make the
//! machinery (resume, retry, timeouts, cancel) observable without a network or an agent.

use std::time::Duration;

use anyhow::bail;
use futures_util::future::BoxFuture;

use crate::stage::{Stage, StageContext, StageError, StageOutput};

/// Does nothing; the benchmark's stage.
pub struct Noop;
/// `sleep:MS` sleeps MS milliseconds, then writes `slept.txt`.
pub struct Sleep;
/// `flaky:N` fails transiently on its first N attempts, then writes `ok.txt`.
pub struct Flaky;
/// Fails permanently.
pub struct Fail;

/// Checks a probe's `:argument`.
pub fn check_arg(name: &str, arg: Option<&str>) -> anyhow::Result<()> {
    match (name, arg) {
        ("sleep" | "flaky", Some(a)) if a.parse::<u64>().is_ok() => Ok(()),
        ("sleep" | "flaky", _) => bail!("stage `{name}` needs a number: `{name}:N`"),
        (_, Some(_)) => bail!("stage `{name}` takes no `:argument`"),
        _ => Ok(()),
    }
}

fn number(cx: &StageContext) -> Result<u64, StageError> {
    cx.arg
        .as_deref()
        .and_then(|a| a.parse().ok())
        .ok_or_else(|| StageError::permanent("probe stage needs `:N`"))
}

fn write(cx: &StageContext, file: &str, text: String) -> Result<(), StageError> {
    std::fs::write(cx.out(file), text)
        .map_err(|e| StageError::transient(format!("cannot write {file}: {e}")))
}

impl Stage for Noop {
    fn run<'a>(&'a self, _cx: &'a StageContext) -> BoxFuture<'a, Result<StageOutput, StageError>> {
        Box::pin(async { Ok(StageOutput::default()) })
    }
}

impl Stage for Sleep {
    fn run<'a>(&'a self, cx: &'a StageContext) -> BoxFuture<'a, Result<StageOutput, StageError>> {
        Box::pin(async move {
            let ms = number(cx)?;
            tokio::time::sleep(Duration::from_millis(ms)).await;
            write(
                cx,
                "slept.txt",
                format!("{ms} ms, attempt {}\n", cx.attempt),
            )?;
            Ok(StageOutput::default())
        })
    }
}

impl Stage for Flaky {
    fn run<'a>(&'a self, cx: &'a StageContext) -> BoxFuture<'a, Result<StageOutput, StageError>> {
        Box::pin(async move {
            let n = number(cx)?;
            if u64::from(cx.attempt) <= n {
                return Err(StageError::transient(format!(
                    "flaky stage: attempt {} of the first {n} fails",
                    cx.attempt
                )));
            }
            write(
                cx,
                "ok.txt",
                format!("succeeded on attempt {}\n", cx.attempt),
            )?;
            Ok(StageOutput::default())
        })
    }
}

impl Stage for Fail {
    fn run<'a>(&'a self, _cx: &'a StageContext) -> BoxFuture<'a, Result<StageOutput, StageError>> {
        Box::pin(async { Err(StageError::permanent("the `fail` stage always fails")) })
    }
}
