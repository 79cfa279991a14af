//! Shared by the analysis tests and benchmark: the spec library, the configs of the bundled
//! snapshots, and the hardware table, read from this repository.

#![allow(dead_code)]

use std::collections::BTreeMap;
use std::io::Read;
use std::path::{Path, PathBuf};

use harch_analysis::{HardwareTable, LayoutSpec, Request};
use harch_engine::analysis::Analysis;
use harch_engine::ir::ModelIr;
use harch_engine::{EvalOptions, Repo, evaluate};

pub fn workspace_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("..")
}

fn yaml_under(dir: &str) -> BTreeMap<String, String> {
    let root = workspace_root();
    let mut files = BTreeMap::new();
    let mut stack = vec![root.join(dir)];
    while let Some(dir) = stack.pop() {
        for e in std::fs::read_dir(&dir).expect("readable") {
            let path = e.expect("dir entry").path();
            if path.is_dir() {
                stack.push(path);
            } else if path.extension().is_some_and(|x| x == "yaml") {
                let key = path
                    .strip_prefix(&root)
                    .expect("under the root")
                    .to_string_lossy()
                    .replace('\\', "/");
                files.insert(key, std::fs::read_to_string(&path).expect("utf-8"));
            }
        }
    }
    files
}

pub fn hardware() -> HardwareTable {
    HardwareTable::from_files(&yaml_under("specs/hardware")).expect("the hardware table parses")
}

/// `config.json` of a bundled snapshot.
pub fn config(id: &str) -> serde_json::Value {
    let path = workspace_root()
        .join("specs/snapshots")
        .join(format!("{}.json.gz", id.replacen('/', "__", 1)));
    let gz = std::fs::read(&path).expect("snapshot is readable");
    let mut json = Vec::new();
    flate2::read::GzDecoder::new(&gz[..])
        .read_to_end(&mut json)
        .expect("snapshot is gzip");
    let snap: serde_json::Value = serde_json::from_slice(&json).expect("snapshot is JSON");
    snap["config"].clone()
}

/// The library spec serving a model id, evaluated once with formulas against its snapshot.
pub fn evaluated(id: &str) -> (ModelIr, Analysis, serde_json::Value) {
    let repo = Repo::from_files(yaml_under("specs"));
    let config = config(id);
    let arch = config["architectures"][0]
        .as_str()
        .expect("architectures")
        .to_string();
    let model = repo
        .model_for_architecture(&arch)
        .unwrap_or_else(|| panic!("no library spec serves {arch}"))
        .to_string();
    let ir = repo
        .load_model(&model)
        .unwrap_or_else(|e| panic!("{id}: {e:?}"));
    let a = evaluate(&ir, &config, EvalOptions { symbolic: true });
    assert!(a.ok(), "{id}: {:?}", a.errors);
    (ir, a, config)
}

pub const LIBRARY: [&str; 7] = [
    "meta-llama/Llama-3.1-8B",
    "Qwen/Qwen3-8B",
    "Qwen/Qwen3-30B-A3B",
    "deepseek-ai/DeepSeek-V3",
    "deepseek-ai/DeepSeek-V2-Lite",
    "openai/gpt-oss-20b",
    "Qwen/Qwen3-Next-80B-A3B",
];

/// HuggingArch's anchor: 8 × B200, attention data parallel 8 + expert parallel 8, 1024 input
/// and 1024 output tokens.
pub fn anchor_request() -> Request {
    let layout = LayoutSpec::parse("attn=dp8,moe=ep8")
        .unwrap()
        .resolve(Some(8))
        .unwrap();
    Request::new(hardware().find("B200").unwrap().clone(), layout, 1024, 1024)
}
