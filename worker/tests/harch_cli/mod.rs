//! Running the `harch-worker` binary from the answering commands' tests: from the repository
//! root (where the spec library is), with the inventory cache off and the Hub offline (a model
//! id that is not bundled would be fetched; these tests stay offline).
#![allow(dead_code)]

use std::path::PathBuf;
use std::process::Command;

pub fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("..")
}

/// Exit code, stdout and stderr.
pub fn run(args: &[&str]) -> (i32, String, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_harch-worker"))
        .current_dir(root())
        .env("HARCH_INVENTORY_CACHE", "off")
        .env("HF_HUB_OFFLINE", "1")
        .args(args)
        .output()
        .unwrap();
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into(),
        String::from_utf8_lossy(&out.stderr).into(),
    )
}

/// A command's stdout as its one JSON document.
pub fn json(out: &str) -> serde_json::Value {
    serde_json::from_str(out).unwrap_or_else(|e| panic!("{e}: {out}"))
}
