//! DeepSeek-V4-Flash-0731 in the engine's one evaluation, against independent counts from its
//! safetensors headers and config (REFERENCE_NUMBERS.md "Frontier checkpoints"; the config is
//! copied into tests/fixtures): parameters, bytes by dtype, active parameters, and the caches
//! by their own laws (one compressed entry per 4 or 128 tokens, a sliding window, the
//! compressors' pending windows). The spec covers the main model; its three MTP layers (the
//! 0731 "dspark" heads, with no forward source) are not in it yet, so the figures are the main
//! model's.

mod support;

use harch_engine::{EvalOptions, Repo, evaluate};

const SPEC: &str = include_str!("fixtures/deepseek_v4/deepseek_v4.yaml");
const CONFIG: &str = include_str!("fixtures/deepseek_v4/config.json");

fn analysis() -> harch_engine::Analysis {
    let mut files = support::library_files();
    files.insert("specs/models/deepseek_v4.yaml".into(), SPEC.into());
    let repo = Repo::from_files(files);
    assert!(repo.file_errors.is_empty(), "{:?}", repo.file_errors);
    let ir = repo
        .load_model("deepseek_v4")
        .unwrap_or_else(|e| panic!("{e:#?}"));
    let config: serde_json::Value = serde_json::from_str(CONFIG).expect("config.json");
    let a = evaluate(&ir, &config, EvalOptions::default());
    assert!(a.ok(), "{:#?}", a.errors);
    a
}

#[test]
fn main_model_parameters_and_bytes_match_the_checkpoint() {
    let a = analysis();
    let s = a.summary();
    eprintln!("{}", serde_json::to_string_pretty(&s).unwrap());
    // Scales and the tid2eid buffer are not parameters; FP4 experts count two per I8 byte.
    assert_eq!(a.params_total().v, 284_332_240_471);
    assert_eq!(a.params_active().v, 13_270_101_591);
    let by: Vec<(String, i128)> = a.weight_bytes_by_dtype().into_iter().collect();
    let want: Vec<(String, i128)> = [
        ("BF16", 2_828_377_344),
        ("F32", 141_262_684),
        ("F8_E4M3", 5_857_345_536),
        ("F8_E8M0", 8_657_400_960),
        ("I64", 18_616_320),
        ("I8", 138_512_695_296),
    ]
    .into_iter()
    .map(|(k, v)| (k.to_string(), v))
    .collect();
    assert_eq!(by, want);
    assert_eq!(a.weight_bytes().v, 156_015_698_140);
}

#[test]
fn caches_follow_their_own_laws() {
    let a = analysis();
    // 21 CSA layers: 512 + 128 (indexer) bf16 values per entry, one entry per 4 tokens;
    // 20 HCA layers: 512 per entry, one per 128 tokens: 21 * (256 + 64) + 20 * 8.
    assert_eq!(a.kv_bytes_per_token().v, 6_880);
    // The sliding window: one 512-wide K = V entry on all 43 layers. The source keeps
    // sliding_window - 1 = 127 positions (`full[:, :, -self.sliding_window + 1 :, :]`) and
    // attends them with the current token; the independent count's 128 keeps one more.
    assert_eq!(a.kv_window_bytes_per_token().v, 43 * 1024);
    assert_eq!(a.kv_window_bytes_max().v, 43 * 1024 * 127);
    let kv_at = |ctx: i128| a.kv_bytes_per_token().v * ctx + a.kv_window_bytes_max().v;
    assert_eq!(kv_at(32_768), 231_079_936 - 43 * 1024);
    assert_eq!(kv_at(1 << 20), 7_219_838_976 - 43 * 1024);
    // The compressors' pending tokens, constant per sequence: CSA holds 3 tokens of kv and gate
    // (2 x 1024 wide) and the last window's first series (4 x 512, kv and gate), its indexer
    // the same at 128; HCA up to 127 tokens of kv and gate (512 wide).
    let csa = (3 * 2 * 1024 + 2 * 4 * 512) + (3 * 2 * 256 + 2 * 4 * 128);
    let hca = 127 * 2 * 512;
    assert_eq!(a.state_bytes_per_sequence().v, 2 * (21 * csa + 20 * hca));
    assert_eq!(
        a.cache_bytes_at(32_768) as i128,
        kv_at(32_768) + a.state_bytes_per_sequence().v
    );
}
