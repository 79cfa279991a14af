//! Stages that do no model work, for the queue's tests and the benchmark: they make the
//! machinery (resume, retry, timeouts, cancel) observable without a network or an agent.

use std::time::Duration;

use crate::stage::{StageContext, StageError, StageOutput};

fn write(cx: &StageContext, file: &str, text: String) -> Result<(), StageError> {
    std::fs::write(cx.out(file), text)
        .map_err(|e| StageError::transient(format!("cannot write {file}: {e}")))
}

/// `noop` does nothing; the benchmark's stage.
pub async fn noop() -> Result<StageOutput, StageError> {
    Ok(StageOutput::default())
}

/// `sleep:MS` sleeps MS milliseconds, then writes `slept.txt`.
pub async fn sleep(cx: &StageContext, ms: u64) -> Result<StageOutput, StageError> {
    tokio::time::sleep(Duration::from_millis(ms)).await;
    write(
        cx,
        "slept.txt",
        format!("{ms} ms, attempt {}\n", cx.attempt),
    )?;
    Ok(StageOutput::default())
}

/// `flaky:N` fails transiently on its first N attempts, then writes `ok.txt`.
pub async fn flaky(cx: &StageContext, n: u64) -> Result<StageOutput, StageError> {
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
}

/// `fail` fails permanently.
pub async fn fail() -> Result<StageOutput, StageError> {
    Err(StageError::permanent("the `fail` stage always fails"))
}
