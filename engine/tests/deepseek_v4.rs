//! DeepSeek-V4-Flash-0731's library spec in the engine's one evaluation, against independent
//! counts from its safetensors headers and config (REFERENCE_NUMBERS.md "Frontier checkpoints";
//! the config is copied into tests/fixtures): parameters, bytes by dtype, active parameters,
//! and the caches by their own laws (one compressed entry per 4 or 128 tokens, a sliding
//! window, the compressors' pending windows). The three MTP layers (the 0731 "dspark" heads,
//! with no forward source: deepseek_v4.gap.yaml) are claimed tensor by tensor; the figures of
//! the main model leave them out.

use crate::support;

use harch_engine::{EvalOptions, Repo, evaluate};

const SPEC: &str = include_str!("../../specs/models/deepseek_v4.yaml");
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
    assert_eq!(a.params_total().v, 304_178_091_454);
    assert_eq!(a.params_total().v - a.params_mtp().v, 284_332_240_471);
    assert_eq!(a.params_active().v, 13_270_101_591);
    let by: Vec<(String, i128)> = a.weight_bytes_by_dtype().into_iter().collect();
    let want: Vec<(String, i128)> = [
        ("BF16", 2_967_134_976),
        ("F32", 150_966_520),
        ("F8_E4M3", 6_304_038_912),
        ("F8_E8M0", 9_261_408_000),
        ("I64", 18_616_320),
        ("I8", 148_176_371_712),
    ]
    .into_iter()
    .map(|(k, v)| (k.to_string(), v))
    .collect();
    assert_eq!(by, want);
    assert_eq!(a.weight_bytes().v, 166_878_536_440);
    // The main model's tensors alone, as before the MTP layers were claimed: I8 138,512,695,296,
    // F8_E8M0 8,657,400,960, F8_E4M3 5,857,345,536, BF16 2,828,377,344, F32 141,262,684, I64
    // 18,616,320.
    let main: i128 = a
        .weights
        .iter()
        .filter(|w| a.is_main_row(w.node))
        .map(|w| a.weight_row_bytes(w).v)
        .sum();
    assert_eq!(main, 156_015_698_140);
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
        a.cache_bytes_at(32_768),
        kv_at(32_768) + a.state_bytes_per_sequence().v
    );
}

/// Evaluates the spec after replacing `from` with `to` in one file (`path`, a key of the spec
/// repository), and returns the errors of loading or evaluating it.
fn mutated(
    path: &str,
    from: &str,
    to: &str,
    config: Option<serde_json::Value>,
) -> Vec<harch_engine::SpecError> {
    let mut files = support::library_files();
    files.insert("specs/models/deepseek_v4.yaml".into(), SPEC.into());
    let text = files.get(path).unwrap_or_else(|| panic!("{path}")).clone();
    assert!(text.contains(from), "{path} has no `{from}`");
    files.insert(path.into(), text.replacen(from, to, 1));
    let repo = Repo::from_files(files);
    let ir = match repo.load_model("deepseek_v4") {
        Ok(ir) => ir,
        Err(e) => return e,
    };
    let config = config.unwrap_or_else(|| serde_json::from_str(CONFIG).expect("config.json"));
    evaluate(&ir, &config, EvalOptions::default()).errors
}

fn config_with(key: &str, value: serde_json::Value) -> Option<serde_json::Value> {
    let mut c: serde_json::Value = serde_json::from_str(CONFIG).expect("config.json");
    c[key] = value;
    Some(c)
}

fn find<'e>(errors: &'e [harch_engine::SpecError], code: &str) -> &'e harch_engine::SpecError {
    errors
        .iter()
        .find(|e| e.code == code)
        .unwrap_or_else(|| panic!("no {code} in {errors:#?}"))
}

const MODEL: &str = "specs/models/deepseek_v4.yaml";
const CSA: &str = "specs/components/library/compressed_sparse_attention.yaml";
const HASH_MOE: &str = "specs/components/library/moe_ffn_hash_shared.yaml";

#[test]
fn mutations_of_the_v4_mechanisms_are_located_errors() {
    // One block for both compressed kinds: its ratio differs between its layers.
    let e = mutated(
        MODEL,
        r#"- { block: csa, where: "i >= n_hash_layers && config.compress_ratios[i] == 4" }
        - { block: hca, where: "i >= n_hash_layers && config.compress_ratios[i] == 128" }"#,
        r#"- { block: csa, where: "i >= n_hash_layers && config.compress_ratios[i] > 0" }"#,
        None,
    );
    let m = find(&e, "A002");
    assert!(
        m.message.contains("is 128 at layer 3 but 4 at layer 4")
            || m.message.contains("is 4 at layer 4 but 128 at layer 5"),
        "{}",
        m.message
    );
    assert!(m.location.file.as_deref() == Some(MODEL), "{m:?}");
    // The window put on the compressed cache.
    let e = mutated(
        CSA,
        "{ node: c_rope, kind: compressed_key_value, growth: per_token }",
        "{ node: c_rope, kind: compressed_key_value, growth: window, window: attn_window }",
        None,
    );
    let m = find(&e, "L015");
    assert!(
        m.message.contains("one entry per 4 tokens"),
        "{}",
        m.message
    );
    assert_eq!(m.location.file.as_deref(), Some(CSA));
    // A hash-routed layer given a router's selection bias: hash routing has none.
    let e = mutated(
        HASH_MOE,
        "      top_k: top_k\n      vocab: n_vocab",
        "      top_k: top_k\n      score_bias: router_score_bias\n      vocab: n_vocab",
        None,
    );
    let m = find(&e, "L012");
    assert!(
        m.message
            .contains("`hash_router` has no argument `score_bias`"),
        "{}",
        m.message
    );
    assert_eq!(m.location.file.as_deref(), Some(HASH_MOE));
    // A grouped output projection whose groups do not divide the heads' channels.
    let e = mutated(MODEL, "o_groups: config.o_groups", "o_groups: 3", None);
    assert!(!e.is_empty());
}

#[test]
fn bad_v4_configs_are_located_errors_not_panics() {
    let unknown = mutated(
        MODEL,
        "summary:",
        "summary:",
        config_with("scoring_func", "sqrt_softplus".into()),
    );
    let m = find(&unknown, "S002");
    assert!(m.message.contains("sqrt_softplus"), "{}", m.message);
    assert!(
        m.location
            .node
            .as_deref()
            .is_some_and(|n| n.ends_with("gate")),
        "{m:?}"
    );
    // hc_mult 0: no streams to expand.
    let zero = mutated(
        MODEL,
        "summary:",
        "summary:",
        config_with("hc_mult", 0.into()),
    );
    assert!(zero.iter().any(|e| e.code == "S002"), "{zero:#?}");
    // A compressed layer whose config ratio is 0 fits no block: the schedule says which layer.
    let mut ratios: Vec<i64> =
        serde_json::from_str::<serde_json::Value>(CONFIG).unwrap()["compress_ratios"]
            .as_array()
            .unwrap()
            .iter()
            .map(|v| v.as_i64().unwrap())
            .collect();
    ratios[5] = 0;
    let gap = mutated(
        MODEL,
        "summary:",
        "summary:",
        config_with("compress_ratios", ratios.into()),
    );
    let m = find(&gap, "A004");
    assert!(m.message.contains("layer 5"), "{}", m.message);
}

#[test]
fn equivalent_rewrites_of_the_v4_spec_give_the_same_numbers() {
    let base = analysis().summary();
    for (from, to) in [
        ("hc_mult: config.hc_mult", "hc_mult: \"config.hc_mult * 1\""),
        (
            "d_shared_ffn: \"config.moe_intermediate_size * config.n_shared_experts\"",
            "d_shared_ffn: \"config.n_shared_experts * config.moe_intermediate_size\"",
        ),
        (
            "bind: { compress_ratio: \"config.compress_ratios[i]\" }\n    template: hyper_connection_block\n    fill:\n      attention: heavily_compressed_attention",
            "bind: { compress_ratio: \"config.compress_ratios[i] + 0\" }\n    template: hyper_connection_block\n    fill:\n      attention: heavily_compressed_attention",
        ),
    ] {
        let mut files = support::library_files();
        assert!(SPEC.contains(from), "{from}");
        files.insert(
            "specs/models/deepseek_v4.yaml".into(),
            SPEC.replacen(from, to, 1),
        );
        let repo = Repo::from_files(files);
        let ir = repo.load_model("deepseek_v4").expect("loads");
        let config: serde_json::Value = serde_json::from_str(CONFIG).unwrap();
        let a = evaluate(&ir, &config, EvalOptions::default());
        assert!(a.ok(), "{to}: {:?}", a.errors);
        let s = a.summary();
        assert_eq!(
            (
                s.params_total,
                s.params_active,
                s.weight_bytes,
                s.kv_bytes_per_token,
                s.state_bytes_per_sequence,
                s.decode_flops_per_token
            ),
            (
                base.params_total,
                base.params_active,
                base.weight_bytes,
                base.kv_bytes_per_token,
                base.state_bytes_per_sequence,
                base.decode_flops_per_token
            ),
            "{to}"
        );
    }
}
