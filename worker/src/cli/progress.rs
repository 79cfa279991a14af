//! Progress bars for long work (a revalidation of many models, a queue drain), on stderr and
//! only on a terminal: none when stderr is piped or redirected, and none under `--json`.

use std::io::IsTerminal;
use std::time::Duration;

use harch_worker::queue::store::JobStore;

/// A bar of `len` steps labelled `what`; hidden unless `enabled` and stderr is a terminal.
pub fn bar(enabled: bool, len: usize, what: &str) -> indicatif::ProgressBar {
    if !enabled || len == 0 || !std::io::stderr().is_terminal() {
        return indicatif::ProgressBar::hidden();
    }
    let bar = indicatif::ProgressBar::new(len as u64);
    if let Ok(style) =
        indicatif::ProgressStyle::with_template(&format!("[{{bar:30}}] {{pos}}/{{len}} {what}"))
    {
        bar.set_style(style.progress_chars("=> "));
    }
    bar
}

/// Moves the bar as the jobs `ids` reach a final state (until the task is aborted).
pub async fn follow(store: JobStore, ids: Vec<String>, bar: indicatif::ProgressBar) {
    loop {
        let done = ids
            .iter()
            .filter(|id| store.load(id).is_ok_and(|r| r.state.is_final()))
            .count();
        bar.set_position(done as u64);
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
}
