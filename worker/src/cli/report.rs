//! How a command's failure reaches the user: `error: …` on stderr, or one JSON object on
//! stdout under `--json`, with the exit code of [`exit`](super::exit)'s table.

use super::{exit, out};

/// Reports an error: `error: …` on stderr, or under `--json` an object on stdout
/// (`{"error": "…", "kind": "usage", "transient": false, "exit_code": 2}`).
pub fn report(e: &anyhow::Error) -> std::process::ExitCode {
    let code = exit::code_of(e);
    report_message(&format!("{e:#}"), code)
}

pub fn report_message(message: &str, code: u8) -> std::process::ExitCode {
    if out::json() {
        let v = serde_json::json!({
            "error": message,
            "kind": exit::kind(code),
            "transient": code == exit::RETRY,
            "exit_code": code,
        });
        let _ = out::print_json(&v);
    } else {
        eprintln!("error: {message}");
    }
    std::process::ExitCode::from(code)
}
