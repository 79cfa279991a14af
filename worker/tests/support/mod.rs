//! Helpers shared by the Hub fetcher tests.
#![allow(dead_code)]

pub mod mock_hub;

use std::path::Path;
use std::time::Duration;

use harch_worker::hub::{FetchOptions, RetryPolicy};
use mock_hub::{MockFile, MockRepo, header_json};

pub const MINILM_HEAD: &[u8] =
    include_bytes!("../fixtures/all-MiniLM-L6-v2/model.safetensors.head");
pub const MINILM_CONFIG: &[u8] = include_bytes!("../fixtures/all-MiniLM-L6-v2/config.json");
/// Length of the real model.safetensors the head was cut from.
pub const MINILM_FILE_LEN: u64 = 90_868_376;

/// Options against the mock: no cache, fast retries, no env.
pub fn options(endpoint: &str, model_id: &str, out: &Path) -> FetchOptions {
    FetchOptions {
        model_id: model_id.into(),
        revision: "main".into(),
        out: out.to_path_buf(),
        endpoint: endpoint.into(),
        token: None,
        offline: false,
        cache_dir: None,
        concurrency: 8,
        timeout: Duration::from_secs(10),
        retry: RetryPolicy {
            max_retries: 2,
            base_delay: Duration::from_millis(5),
            max_delay: Duration::from_secs(5),
        },
        deadline: Some(Duration::from_secs(120)),
        progress: false,
        budget: harch_net_budget(),
        notices: false,
    }
}

/// The mock's faults (resets, truncations, 5xx) get the full retry cap, as before budgets.
fn harch_net_budget() -> harch_worker::hub::Budget {
    harch_worker::hub::Budget {
        refused: 2,
        dns: 2,
        tls: 2,
        connect_timeout: 2,
        timeout: 2,
        ..Default::default()
    }
}

/// A llama-like config; no auto_map, so sources are looked up locally (none in tests).
pub fn config() -> Vec<u8> {
    br#"{"model_type": "harch_test_arch", "hidden_size": 8, "num_hidden_layers": 2}"#.to_vec()
}

/// A sharded repo: `shards` shards, two tensors each, with a consistent index.
pub fn sharded_repo(shards: usize) -> MockRepo {
    let mut repo = MockRepo::default();
    let mut weight_map = serde_json::Map::new();
    let mut total = 0u64;
    for s in 0..shards {
        let file = format!("model-{:05}-of-{shards:05}.safetensors", s + 1);
        let a = format!("model.layers.{s}.mlp.up_proj.weight");
        let b = format!("model.layers.{s}.input_layernorm.weight");
        let (json, payload) = header_json(&[(&a, "BF16", &[16, 8]), (&b, "F32", &[8])], 0);
        total += payload;
        weight_map.insert(a, file.clone().into());
        weight_map.insert(b, file.clone().into());
        repo.files.insert(file, MockFile::shard(&json, payload));
    }
    let index = serde_json::json!({"metadata": {"total_size": total}, "weight_map": weight_map});
    repo.files.insert(
        "model.safetensors.index.json".into(),
        MockFile::small(serde_json::to_vec(&index).unwrap()),
    );
    repo.files
        .insert("config.json".into(), MockFile::small(config()));
    repo
}

pub fn minilm_repo() -> MockRepo {
    let mut repo = MockRepo::default();
    repo.files.insert(
        "config.json".into(),
        MockFile::small(MINILM_CONFIG.to_vec()),
    );
    repo.files.insert(
        "model.safetensors".into(),
        MockFile {
            prefix: MINILM_HEAD.to_vec(),
            len: MINILM_FILE_LEN,
        },
    );
    repo
}
