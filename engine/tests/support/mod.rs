//! Shared by the engine's tests and benchmarks: the spec library as file contents and the
//! configs of the bundled snapshots (specs/snapshots/*.json.gz).

#![allow(dead_code)]

use std::collections::BTreeMap;
use std::io::Read;
use std::path::{Path, PathBuf};

pub fn workspace_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("..")
}

/// Every YAML file under specs/, keyed `specs/...` as the worker keys them.
pub fn library_files() -> BTreeMap<String, String> {
    let root = workspace_root();
    let mut files = BTreeMap::new();
    let mut stack = vec![root.join("specs")];
    while let Some(dir) = stack.pop() {
        for e in std::fs::read_dir(&dir).expect("specs/ is readable") {
            let path = e.expect("dir entry").path();
            if path.is_dir() {
                stack.push(path);
            } else if path.extension().is_some_and(|x| x == "yaml") {
                let key = path
                    .strip_prefix(&root)
                    .expect("under the root")
                    .to_string_lossy()
                    .replace('\\', "/");
                files.insert(key, std::fs::read_to_string(&path).expect("utf-8 spec"));
            }
        }
    }
    files
}

/// `(model id, config.json)` of every bundled snapshot, sorted by id.
pub fn snapshot_configs() -> Vec<(String, serde_json::Value)> {
    let dir = workspace_root().join("specs/snapshots");
    let mut out = Vec::new();
    for e in std::fs::read_dir(&dir).expect("specs/snapshots is readable") {
        let path = e.expect("dir entry").path();
        let Some(name) = path.file_name().and_then(|n| n.to_str()) else {
            continue;
        };
        let Some(stem) = name.strip_suffix(".json.gz") else {
            continue;
        };
        let gz = std::fs::read(&path).expect("snapshot is readable");
        let mut json = Vec::new();
        flate2::read::GzDecoder::new(&gz[..])
            .read_to_end(&mut json)
            .expect("snapshot is gzip");
        let snap: serde_json::Value = serde_json::from_slice(&json).expect("snapshot is JSON");
        out.push((stem.replacen("__", "/", 1), snap["config"].clone()));
    }
    out.sort_by(|a, b| a.0.cmp(&b.0));
    out
}

/// The config whose `architectures` the spec serves.
pub fn config_for<'c>(
    configs: &'c [(String, serde_json::Value)],
    architectures: &[String],
) -> Option<&'c serde_json::Value> {
    configs.iter().map(|(_, c)| c).find(|c| {
        c["architectures"]
            .as_array()
            .is_some_and(|a| a.iter().any(|x| architectures.iter().any(|s| x == s)))
    })
}
