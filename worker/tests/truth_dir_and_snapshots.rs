//! Truth directories load exactly what they hold (or say precisely what is wrong), and the
//! bundled snapshots reproduce each library model's recorded inventory.

use std::path::Path;

use harch_worker::snapshot::{self, load_snapshot, snapshot_ids};
use harch_worker::truth_dir::{FileRecord, TruthMeta, load_truth_dir, write_from_truth};

const MINILM_HEAD: &[u8] = include_bytes!("fixtures/all-MiniLM-L6-v2/model.safetensors.head");
const MINILM_CONFIG: &[u8] = include_bytes!("fixtures/all-MiniLM-L6-v2/config.json");
const MINILM_FILE_LEN: u64 = 90_868_376;

/// Tensor count and payload bytes of each library checkpoint, from its real safetensors headers
/// (payload bytes = the index's metadata.total_size).
const LIBRARY: [(&str, usize, u64); 12] = [
    ("meta-llama/Llama-3.1-8B", 291, 16_060_522_496),
    ("deepseek-ai/DeepSeek-V3.2", 92_425, 689_471_107_200),
    ("Qwen/Qwen3-8B", 399, 16_381_470_720),
    ("Qwen/Qwen3-30B-A3B", 18_867, 61_064_245_248),
    ("deepseek-ai/DeepSeek-V3", 91_991, 688_574_839_360),
    ("deepseek-ai/DeepSeek-V2-Lite", 5_291, 31_412_968_448),
    ("openai/gpt-oss-20b", 459, 13_761_264_768),
    ("Qwen/Qwen3-Next-80B-A3B", 75_944, 162_649_725_440),
    ("Qwen/Qwen3.5-35B-A3B", 1_811, 71_903_655_008),
    ("MiniMaxAI/MiniMax-M3", 23_416, 854_172_958_720),
    ("moonshotai/Kimi-K2.6", 208_550, 595_148_192_736),
    (
        "deepseek-ai/DeepSeek-V4-Flash-0731",
        72_317,
        166_878_536_440,
    ),
];

#[test]
fn every_library_model_has_a_snapshot_that_round_trips() {
    let mut ids = snapshot_ids();
    ids.sort();
    let mut want: Vec<&str> = LIBRARY.iter().map(|(id, _, _)| *id).collect();
    want.sort();
    assert_eq!(ids, want);
    for (id, tensors, bytes) in LIBRARY {
        let truth = load_snapshot(id).unwrap_or_else(|| panic!("{id}: snapshot does not load"));
        assert_eq!(truth.inventory.len(), tensors, "{id}");
        assert_eq!(truth.inventory.total_bytes(), bytes as u128, "{id}");
        assert_eq!(truth.inventory.total_size, Some(bytes), "{id}");
        assert!(
            truth.config.get("model_type").is_some(),
            "{id}: config lost"
        );
        // Encoding what we decoded gives the same inventory back.
        let again = snapshot::to_truth(
            &snapshot::decode(
                &snapshot::encode(&snapshot::from_truth(id, &truth).unwrap()).unwrap(),
            )
            .unwrap(),
        )
        .unwrap();
        assert_eq!(again.inventory, truth.inventory, "{id}");
    }
    assert!(load_snapshot("org/not-bundled").is_none());
}

#[test]
fn deepseek_v3_compresses_to_a_few_dozen_lines() {
    let truth = load_snapshot("deepseek-ai/DeepSeek-V3").unwrap();
    let snap = snapshot::from_truth("deepseek-ai/DeepSeek-V3", &truth).unwrap();
    assert!(snap.inventory.len() < 100, "{} lines", snap.inventory.len());
    assert!(
        snap.inventory.contains(
            &"model.layers.{3-61}.mlp.experts.{0-255}.down_proj.weight F8_E4M3 [7168, 2048]"
                .to_string()
        )
    );
}

#[test]
fn corrupt_snapshots_are_refused() {
    let truth = load_snapshot("Qwen/Qwen3-8B").unwrap();
    let mut snap = snapshot::from_truth("Qwen/Qwen3-8B", &truth).unwrap();
    snap.tensor_count += 1;
    let err = snapshot::to_truth(&snap).unwrap_err();
    assert!(err.to_string().contains("expands to 399 tensors"), "{err}");
    assert!(snapshot::decode(b"not gzip").is_err());
}

fn write(dir: &Path, rel: &str, bytes: &[u8]) {
    let p = dir.join(rel);
    std::fs::create_dir_all(p.parent().unwrap()).unwrap();
    std::fs::write(p, bytes).unwrap();
}

#[test]
fn a_real_safetensors_file_is_read_by_its_header_only() {
    let dir = tempfile::tempdir().unwrap();
    write(dir.path(), "config.json", MINILM_CONFIG);
    // The fixture is the file's head only: its offsets run past the end of this file.
    write(dir.path(), "model.safetensors", MINILM_HEAD);
    let err = load_truth_dir(dir.path()).unwrap_err();
    assert!(
        format!("{err:#}").contains("but the payload is 0 bytes"),
        "{err:#}"
    );
    // With the payload present (sparse zeros) it loads.
    let f = std::fs::OpenOptions::new()
        .write(true)
        .open(dir.path().join("model.safetensors"))
        .unwrap();
    f.set_len(MINILM_FILE_LEN).unwrap();
    let truth = load_truth_dir(dir.path()).unwrap();
    assert_eq!(truth.inventory.len(), 104);
    assert_eq!(truth.model_id, None);
}

#[test]
fn header_json_with_recorded_file_size_checks_the_payload_end() {
    let dir = tempfile::tempdir().unwrap();
    write(dir.path(), "config.json", MINILM_CONFIG);
    write(
        dir.path(),
        "shards/model.safetensors.header.json",
        &MINILM_HEAD[8..],
    );
    let meta = |size: u64| TruthMeta {
        model_id: "sentence-transformers/all-MiniLM-L6-v2".into(),
        revision: Some("a".repeat(40)),
        origin: "hub".into(),
        files: vec![FileRecord {
            path: "model.safetensors".into(),
            etag: None,
            size: Some(size),
        }],
        ..Default::default()
    };
    write(
        dir.path(),
        "truth.json",
        &serde_json::to_vec(&meta(MINILM_FILE_LEN)).unwrap(),
    );
    let truth = load_truth_dir(dir.path()).unwrap();
    assert_eq!(truth.inventory.len(), 104);
    assert_eq!(truth.revision.as_deref(), Some("a".repeat(40).as_str()));
    write(
        dir.path(),
        "truth.json",
        &serde_json::to_vec(&meta(MINILM_FILE_LEN + 4)).unwrap(),
    );
    let err = load_truth_dir(dir.path()).unwrap_err();
    assert!(format!("{err:#}").contains("trailing bytes"), "{err:#}");
}

#[test]
fn index_and_headers_must_agree() {
    let dir = tempfile::tempdir().unwrap();
    write(dir.path(), "config.json", b"{}");
    write(
        dir.path(),
        "model.safetensors.index.json",
        br#"{"metadata":{"total_size":8},"weight_map":{"a":"s1.safetensors","b":"s2.safetensors"}}"#,
    );
    write(
        dir.path(),
        "shards/s1.safetensors.header.json",
        br#"{"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]}}"#,
    );
    let err = load_truth_dir(dir.path()).unwrap_err();
    assert!(
        format!("{err:#}").contains("names shard `s2.safetensors`"),
        "{err:#}"
    );
    write(
        dir.path(),
        "shards/s2.safetensors.header.json",
        br#"{"b":{"dtype":"F32","shape":[0],"data_offsets":[0,0]}}"#,
    );
    assert_eq!(load_truth_dir(dir.path()).unwrap().inventory.len(), 2);
    write(
        dir.path(),
        "shards/stray.safetensors.header.json",
        br#"{"c":{"dtype":"F32","shape":[0],"data_offsets":[0,0]}}"#,
    );
    let err = load_truth_dir(dir.path()).unwrap_err();
    assert!(
        format!("{err:#}").contains("which the index does not list"),
        "{err:#}"
    );
}

#[test]
fn snapshot_truth_dir_round_trips_through_the_compressed_inventory() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("gpt-oss");
    let mut truth = load_snapshot("openai/gpt-oss-20b").unwrap();
    truth.sources.insert(
        "modeling_gpt_oss.py".into(),
        "class GptOssModel: ...".into(),
    );
    let meta = TruthMeta {
        model_id: "openai/gpt-oss-20b".into(),
        origin: "snapshot".into(),
        total_bytes: Some(13_761_264_768),
        ..Default::default()
    };
    write_from_truth(&out, &truth, &meta).unwrap();
    let back = load_truth_dir(&out).unwrap();
    assert_eq!(back.inventory, truth.inventory);
    assert_eq!(back.config, truth.config);
    assert_eq!(back.sources, truth.sources);
    assert_eq!(back.model_id.as_deref(), Some("openai/gpt-oss-20b"));
    // A recorded total that the inventory does not reach is an error.
    let wrong = TruthMeta {
        total_bytes: Some(1),
        ..meta
    };
    write_from_truth(&out, &truth, &wrong).unwrap();
    assert!(load_truth_dir(&out).is_err());
}
