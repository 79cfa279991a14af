//! The packing guard's reading of `quantization_config` on a toy model: compressed-tensors
//! groups (int4 and int8 pack-quantized, fp8 float-quantized) with `targets` and `ignore`, and
//! fp8 block configs, against the storage schemes a spec chose tensor by tensor.

use harch_engine::{EvalOptions, Repo, evaluate};
use harch_guards::Diagnostic;
use serde_json::{Value, json};

const TOY: &str = r#"model: toy_q
summary: "a tiny Llama-shaped model for quantization configs"
architectures: [ToyQ]
dims:
  d_model: 128
  n_vocab: 100
  n_layers: 2
  n_heads: 4
  n_kv_heads: 2
  d_head: 32
  d_ffn: 256
attrs:
  rope_type: "'default'"
blocks:
  decoder:
    template: pre_norm_block
    fill: { attention: gqa_attention, ffn: swiglu_mlp }
quant_context:
  default: bf16
QUANT
graph:
  embed_tokens: { op: embedding, in: input_ids, path: model.embed_tokens, args: { vocab: n_vocab, dim: d_model } }
  layers: { in: embed_tokens, stack: { repeat: n_layers, path: "model.layers.{i}", schedule: [{ block: decoder }], streams: { hidden: { carries: true } } } }
  norm: { op: rmsnorm, in: layers, path: model.norm, args: { dim: d_model } }
  lm_head: { op: linear, in: norm, path: lm_head, args: { in: d_model, out: n_vocab } }
outputs: [lm_head]
"#;

/// The guard's findings for the toy with `quant` (lines under `quant_context:`) and `config`.
fn check(quant: &str, config: Value) -> Vec<Diagnostic> {
    let root = std::path::PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("..");
    let mut files = harch_library::specs::read_spec_files(&root).unwrap();
    files.insert(
        "specs/models/toy_q.yaml".into(),
        TOY.replace("QUANT\n", quant),
    );
    let repo = Repo::from_files(files);
    let ir = repo.load_model("toy_q").unwrap();
    let a = evaluate(&ir, &config, EvalOptions::default());
    assert!(a.ok(), "{:?}", a.errors);
    harch_guards::quant_config::check(&ir, &a, &config)
}

fn ct(format: &str, weights: Value, ignore: Value) -> Value {
    json!({ "quantization_config": {
        "quant_method": "compressed-tensors",
        "format": format,
        "config_groups": { "group_0": { "targets": ["Linear"], "weights": weights } },
        "ignore": ignore,
    }})
}

fn int8() -> Value {
    ct(
        "pack-quantized",
        json!({"type": "int", "num_bits": 8, "strategy": "group", "group_size": 128, "symmetric": true}),
        json!(["re:.*self_attn.*", "lm_head"]),
    )
}

const MLP_INT8: &str =
    "  overrides:\n    - { leaf: \"model.layers.*.mlp.*\", format: ct_int8_group128 }\n";

fn codes(d: &[Diagnostic]) -> Vec<&str> {
    d.iter().map(|d| d.code).collect()
}

#[test]
fn int8_pack_quantized_mlp_matches_its_group() {
    assert_eq!(check(MLP_INT8, int8()), []);
}

#[test]
fn a_targeted_linear_in_another_scheme_is_located_at_its_override() {
    let d = check(
        "  overrides:\n    - { leaf: \"model.layers.*.mlp.*\", format: ct_int4_group32 }\n",
        int8(),
    );
    assert_eq!(codes(&d), ["P004", "P004", "P004"], "{d:#?}");
    let m = &d[0].message;
    assert!(
        m.contains("group `group_0`") && m.contains("num_bits: 8"),
        "{m}"
    );
    assert!(m.contains("(2 tensors of this row)"), "{m}");
    assert_eq!(
        d[0].location.file.as_deref(),
        Some("specs/models/toy_q.yaml")
    );
}

#[test]
fn an_ignored_module_stored_quantized_is_refused() {
    let quant = format!("  per_role: {{ attention: ct_int8_group128 }}\n{MLP_INT8}");
    let d = check(&quant, int8());
    assert_eq!(codes(&d), ["P004"; 4], "{d:#?}");
    assert!(
        d.iter()
            .all(|d| d.message.contains("`ignore` leaves module")
                && d.message.contains(".self_attn.")),
        "{d:#?}"
    );
}

#[test]
fn a_targeted_linear_left_unquantized_is_refused() {
    // Nothing ignores the MLP: bf16 there contradicts the group.
    let d = check("", int8());
    assert_eq!(codes(&d), ["P004"; 3], "{d:#?}");
    assert!(d[0].message.contains("stored `bf16`"), "{}", d[0].message);
}

#[test]
fn fp8_float_quantized_channels_match_their_scheme() {
    let fp8 = ct(
        "float-quantized",
        json!({"type": "float", "num_bits": 8, "strategy": "channel"}),
        json!(["re:.*self_attn.*", "re:.*lm_head"]),
    );
    let mlp = |scheme: &str| {
        format!("  overrides:\n    - {{ leaf: \"model.layers.*.mlp.*\", format: {scheme} }}\n")
    };
    assert_eq!(check(&mlp("ct_fp8_channel"), fp8.clone()), []);
    assert_eq!(codes(&check(&mlp("ct_int8_group128"), fp8)), ["P004"; 3]);
}

#[test]
fn a_group_no_scheme_implements_and_a_bad_pattern_are_p005() {
    let d = check(
        MLP_INT8,
        ct(
            "pack-quantized",
            json!({"type": "int", "num_bits": 8, "strategy": "group", "group_size": 64}),
            json!(["re:.*self_attn.*", "lm_head"]),
        ),
    );
    assert_eq!(codes(&d), ["P005", "P004", "P004", "P004"], "{d:#?}");
    assert!(d[0].message.contains("group_size: 64"), "{}", d[0].message);
    let d = check(
        MLP_INT8,
        ct(
            "pack-quantized",
            json!({"type": "int", "num_bits": 8, "strategy": "group", "group_size": 128}),
            json!(["re:(", "re:.*self_attn.*", "lm_head"]),
        ),
    );
    assert_eq!(codes(&d), ["P005"], "{d:#?}");
    assert!(d[0].message.contains("`re:(`"), "{}", d[0].message);
}

#[test]
fn fp8_block_configs_hold_fp8_schemes_to_their_block() {
    let quant = "  per_role: { ffn_dense: fp8_block128 }\n";
    let fp8 = |block: u32| json!({"quantization_config": {"quant_method": "fp8", "weight_block_size": [block, block]}});
    assert_eq!(check(quant, fp8(128)), []);
    let d = check(quant, fp8(64));
    assert_eq!(codes(&d), ["P005", "P004", "P004", "P004"], "{d:#?}");
    // A method the guard does not read states nothing it can hold a spec to.
    assert_eq!(
        check(
            quant,
            json!({"quantization_config": {"quant_method": "awq"}})
        ),
        []
    );
}
