//! The spec library reproduces its checkpoints: every library spec, evaluated once against
//! the bundled snapshot of its model, gives the checkpoint's exact bytes, tensor count and
//! parameter count, the reference KV-cache sizes, and active-parameter counts within 2% of the
//! publishers' figures. The parameter-counting convention is written in docs/conventions.md.

use std::collections::HashMap;

use harch_engine::analysis::Analysis;
use harch_engine::expr::{self, Env, EvalError};
use harch_engine::{EvalOptions, Q, evaluate};
use harch_guards::truth::Truth;
use harch_library::{specs, subject};
use harch_truth::snapshot;

/// One library model's expected figures.
struct Expected {
    id: &'static str,
    params_total: i128,
    /// Bytes every token adds to the uncapped KV cache (main stack only).
    kv_bytes_per_token: i128,
    /// Per-token bytes of window-capped layers and the window they stop growing at.
    window: Option<(i128, i128)>,
    state_bytes_per_sequence: i128,
}

const LIBRARY: [Expected; 11] = [
    Expected {
        id: "meta-llama/Llama-3.1-8B",
        params_total: 8_030_261_248,
        kv_bytes_per_token: 131_072,
        window: None,
        state_bytes_per_sequence: 0,
    },
    Expected {
        id: "Qwen/Qwen3-8B",
        params_total: 8_190_735_360,
        kv_bytes_per_token: 147_456,
        window: None,
        state_bytes_per_sequence: 0,
    },
    Expected {
        id: "Qwen/Qwen3-30B-A3B",
        params_total: 30_532_122_624,
        kv_bytes_per_token: 98_304,
        window: None,
        state_bytes_per_sequence: 0,
    },
    Expected {
        id: "deepseek-ai/DeepSeek-V3",
        params_total: 684_489_845_504,
        // 61 main layers × (512 latent + 64 rope key) × 2 bytes; the MTP layer is not counted.
        kv_bytes_per_token: 70_272,
        window: None,
        state_bytes_per_sequence: 0,
    },
    Expected {
        id: "deepseek-ai/DeepSeek-V3.2",
        // REFERENCE_NUMBERS.md "Frontier checkpoints": V3 plus 62 indexers (MTP layer included).
        params_total: 685_355_329_792,
        // 61 × (576 latent and rope key + 128 indexer key) × 2 bytes.
        kv_bytes_per_token: 85_888,
        window: None,
        state_bytes_per_sequence: 0,
    },
    Expected {
        id: "deepseek-ai/DeepSeek-V2-Lite",
        params_total: 15_706_484_224,
        kv_bytes_per_token: 31_104,
        window: None,
        state_bytes_per_sequence: 0,
    },
    Expected {
        id: "openai/gpt-oss-20b",
        params_total: 20_914_757_184,
        kv_bytes_per_token: 24_576,
        window: Some((24_576, 128)),
        state_bytes_per_sequence: 0,
    },
    Expected {
        id: "Qwen/Qwen3-Next-80B-A3B",
        params_total: 81_324_862_720,
        kv_bytes_per_token: 24_576,
        window: None,
        // 36 DeltaNet layers: fp32 recurrent state 75,497,472 + bf16 conv state 1,769,472.
        state_bytes_per_sequence: 77_266_944,
    },
    Expected {
        id: "Qwen/Qwen3.5-35B-A3B",
        // Text 35,505,251,456 (MTP 844,640,768 included) + vision tower 446,571,248.
        params_total: 35_951_822_704,
        // 10 full-attention layers × 2 KV heads × 256 × 2 (k, v) × 2 bytes.
        kv_bytes_per_token: 20_480,
        window: None,
        // 30 DeltaNet layers: fp32 recurrent state 62,914,560 + bf16 conv state 1,474,560.
        state_bytes_per_sequence: 64_389_120,
    },
    Expected {
        id: "deepseek-ai/DeepSeek-V4-Flash-0731",
        // REFERENCE_NUMBERS.md "Frontier checkpoints": main 284,332,240,471 + 3 MTP layers.
        params_total: 304_178_091_454,
        // 21 CSA layers (one 512-wide entry and a 128-wide indexer key per 4 tokens) and 20 HCA
        // layers (one 512-wide entry per 128 tokens), bf16: 21 × (256 + 64) + 20 × 8.
        kv_bytes_per_token: 6_880,
        // One 512-wide K = V entry on all 43 layers; the source keeps sliding_window - 1 = 127
        // positions (`self.keys = full[:, :, -self.sliding_window + 1 :, :]`).
        window: Some((43 * 1_024, 127)),
        // The compressors' pending tokens (see engine/tests/deepseek_v4.rs).
        state_bytes_per_sequence: 5_739_520,
    },
    Expected {
        id: "moonshotai/Kimi-K2.6",
        // Packed int4 experts counted as 8 weights per stored I32 (the same sum
        // `kimi_k2_6_counts_follow_the_headers` takes from the snapshot's headers).
        params_total: 1_026_879_376_368,
        // 61 MLA layers × (512 latent + 64 rope key) × 2 bytes, as DeepSeek-V3.
        kv_bytes_per_token: 70_272,
        window: None,
        state_bytes_per_sequence: 0,
    },
];

const MINIMAX_M3: &str = "MiniMaxAI/MiniMax-M3";

/// MiniMax-M3's figures, computed here from its bundled snapshot (the checkpoint's headers and
/// config.json), apart from the spec: every stored tensor is a parameter; KV per token is K and
/// V of every KV head on all 60 layers plus the indexer's one key on each sparse layer
/// (`sparse_attention_freq`), in the dtype the checkpoint keeps k_proj in.
fn minimax_m3_expected() -> Expected {
    let t = snapshot::load_snapshot(MINIMAX_M3).expect("MiniMax-M3 snapshot");
    let c = &t.config["text_config"];
    let int = |v: &serde_json::Value| v.as_i64().expect("an integer") as i128;
    let layers = int(&c["num_hidden_layers"]);
    let sparse: i128 = c["sparse_attention_config"]["sparse_attention_freq"]
        .as_array()
        .unwrap()
        .iter()
        .map(int)
        .sum();
    let k_proj = t
        .inventory
        .find("language_model.model.layers.0.self_attn.k_proj.weight")
        .unwrap();
    let kv_row = int(&c["num_key_value_heads"]) * int(&c["head_dim"]);
    assert_eq!(k_proj.shape[0] as i128, kv_row);
    let dtype_bytes = k_proj.dtype.size_bytes() as i128;
    let index_dim = int(&c["sparse_attention_config"]["sparse_index_dim"]);
    Expected {
        id: MINIMAX_M3,
        params_total: t.inventory.iter().map(|x| x.numel() as i128).sum(),
        kv_bytes_per_token: (layers * 2 * kv_row + sparse * index_dim) * dtype_bytes,
        window: None,
        state_bytes_per_sequence: 0,
    }
}

/// Every library model's expected figures: the table above, and those computed from a snapshot.
fn library() -> Vec<Expected> {
    LIBRARY
        .into_iter()
        .chain(std::iter::once(minimax_m3_expected()))
        .collect()
}

/// Loads the library spec serving `id` and evaluates it against the bundled snapshot.
fn evaluate_library(id: &str, symbolic: bool) -> (Analysis, Truth) {
    let s = subject::resolve(id, None).unwrap_or_else(|e| panic!("{id}: {e:#}"));
    let ir = specs::load(&s.target)
        .unwrap_or_else(|errs| panic!("{id}: {}", subject::render_errors(&errs)));
    let a = evaluate(&ir, &s.truth.config, EvalOptions { symbolic });
    assert!(a.ok(), "{id}: {}", subject::render_errors(&a.errors));
    assert!(
        a.axiom_failures.is_empty(),
        "{id}: axioms fail: {:?}",
        a.axiom_failures
    );
    (a, s.truth)
}

#[test]
fn the_library_covers_every_bundled_snapshot() {
    let mut ids = snapshot::snapshot_ids();
    ids.sort();
    let mut want: Vec<&str> = library().iter().map(|e| e.id).collect();
    want.sort();
    assert_eq!(ids, want);
}

#[test]
fn weights_match_the_checkpoint_byte_for_byte() {
    for e in &library() {
        let (a, truth) = evaluate_library(e.id, false);
        let tensor_bytes: u128 = truth.inventory.total_bytes();
        let total_size = truth
            .inventory
            .total_size
            .unwrap_or_else(|| panic!("{}: snapshot has no total_size", e.id));
        assert_eq!(a.weight_bytes().v, total_size as i128, "{}", e.id);
        assert_eq!(a.weight_bytes().v as u128, tensor_bytes, "{}", e.id);
        assert_eq!(
            a.weight_tensors().v,
            truth.inventory.len() as i128,
            "{}",
            e.id
        );
        let by_dtype: i128 = a.weight_bytes_by_dtype().values().sum();
        assert_eq!(by_dtype, a.weight_bytes().v, "{}: dtype split", e.id);
    }
}

#[test]
fn params_total_follows_the_documented_convention() {
    for e in &library() {
        let (a, _) = evaluate_library(e.id, false);
        assert_eq!(a.params_total().v, e.params_total, "{}", e.id);
        assert_eq!(a.summary().params_total, e.params_total, "{}", e.id);
    }
}

#[test]
fn quant_scales_are_stored_but_not_parameters() {
    // DeepSeek-V3 stores FP8 weights with F32 block scales: the scales add bytes, not params.
    let (a, _) = evaluate_library("deepseek-ai/DeepSeek-V3", false);
    let scale_elems: i128 = a
        .weights
        .iter()
        .flat_map(|w| w.stored.iter().map(move |s| (w, s)))
        .filter(|(_, s)| s.scale)
        .map(|(w, s)| Q::product(&s.shape).v * w.count.v)
        .sum();
    assert!(scale_elems > 0);
    let logical: i128 = a
        .weights
        .iter()
        .map(|w| w.logical_numel().v * w.count.v)
        .sum();
    assert_eq!(logical, a.params_total().v);
    // gpt-oss packs two MXFP4 values per U8 byte: the experts' parameters are twice their
    // `_blocks` bytes.
    let (a, _) = evaluate_library("openai/gpt-oss-20b", false);
    for w in a.weights.iter().filter(|w| w.format == "mxfp4") {
        let blocks = w
            .stored
            .iter()
            .find(|s| s.name.ends_with("_blocks"))
            .expect("mxfp4 stores _blocks");
        assert_eq!(blocks.dtype, "U8");
        assert_eq!(
            2 * Q::product(&blocks.shape).v,
            w.logical_numel().v,
            "{}",
            w.name
        );
    }
}

/// A multiple of every compression ratio in the library (DeepSeek-V4: one entry per 4 or 128
/// tokens), so that a compressed cache's growth over it is its per-token figure times it.
const SPAN: i128 = 128;

#[test]
fn kv_cache_and_state_sizes_match_the_reference() {
    for e in &library() {
        let (a, _) = evaluate_library(e.id, false);
        assert_eq!(a.kv_bytes_per_token().v, e.kv_bytes_per_token, "{}", e.id);
        assert_eq!(
            a.state_bytes_per_sequence().v,
            e.state_bytes_per_sequence,
            "{}",
            e.id
        );
        match e.window {
            Some((per_token, window)) => {
                assert_eq!(a.kv_window_bytes_per_token().v, per_token, "{}", e.id);
                assert_eq!(a.kv_window_bytes_max().v, per_token * window, "{}", e.id);
                // Past the window only the uncapped layers keep growing. Spans of SPAN
                // positions: a cache compressed in time adds whole entries over them.
                let at = |ctx| a.cache_bytes_at(ctx);
                assert_eq!(
                    at(4096 + SPAN) - at(4096),
                    e.kv_bytes_per_token * SPAN,
                    "{}: growth past the window",
                    e.id
                );
                assert_eq!(
                    at(SPAN) - at(0),
                    e.kv_bytes_per_token * SPAN + per_token * window.min(SPAN),
                    "{}: growth up to the window",
                    e.id
                );
            }
            None => {
                assert_eq!(a.kv_window_bytes_per_token().v, 0, "{}", e.id);
                assert_eq!(a.kv_window_bytes_max().v, 0, "{}", e.id);
            }
        }
    }
}

#[test]
fn deepseek_v3_mtp_layer_holds_a_cache_that_kv_bytes_leave_out() {
    let (a, _) = evaluate_library("deepseek-ai/DeepSeek-V3", false);
    let mtp: i128 = a
        .caches
        .iter()
        .filter(|c| a.nodes[c.node].top_role.as_deref() == Some("mtp"))
        .map(|c| c.elements.v * c.dtype_bytes as i128 * c.count.v)
        .sum();
    // One MTP layer caches its own latent and rope key: (512 + 64) × 2 bytes.
    assert_eq!(mtp, 1_152);
    assert_eq!(a.kv_bytes_per_token().v, 70_272);
}

#[test]
fn qwen3_next_state_splits_into_recurrent_and_conv_state() {
    let (a, _) = evaluate_library("Qwen/Qwen3-Next-80B-A3B", false);
    let by_kind = |kind: &str| -> i128 {
        a.caches
            .iter()
            .filter(|c| c.kind == kind && a.nodes[c.node].top_role.as_deref() != Some("mtp"))
            .map(|c| c.elements.v * c.dtype_bytes as i128 * c.count.v)
            .sum()
    };
    assert_eq!(by_kind("recurrent_state"), 75_497_472);
    assert_eq!(by_kind("conv_state"), 1_769_472);
}

/// MiniMax-M3 against counts taken from its headers and config alone: the vision tower and its
/// projector (everything under `vision_tower.`, `multi_modal_projector.`, `patch_merge_mlp.`)
/// are the encoder; a token uses every text weight except the embedding table and, on each MoE
/// layer (`moe_layer_freq`), the experts beyond its top k.
#[test]
fn minimax_m3_counts_follow_its_headers() {
    let (a, t) = evaluate_library(MINIMAX_M3, false);
    let c = &t.config["text_config"];
    let int = |v: &serde_json::Value| v.as_i64().expect("an integer") as i128;
    let sum = |f: &dyn Fn(&str) -> bool, bytes: bool| -> i128 {
        t.inventory
            .iter()
            .filter(|x| f(x.name))
            .map(|x| if bytes { x.nbytes() } else { x.numel() } as i128)
            .sum()
    };
    let vision = |n: &str| {
        [
            "vision_tower.",
            "multi_modal_projector.",
            "patch_merge_mlp.",
        ]
        .iter()
        .any(|p| n.starts_with(p))
    };
    let total = sum(&|_| true, false);
    let params_vision = sum(&vision, false);
    let bytes_vision = sum(&vision, true);
    let embed = sum(&|n| n.ends_with("embed_tokens.weight"), false);
    let moe_layers: i128 = c["moe_layer_freq"]
        .as_array()
        .unwrap()
        .iter()
        .map(int)
        .sum();
    let one_expert = sum(
        &|n| n.starts_with("language_model.model.layers.3.block_sparse_moe.experts.0."),
        false,
    );
    let idle = int(&c["num_local_experts"]) - int(&c["num_experts_per_tok"]);
    let s = a.summary();
    assert_eq!(s.params_total, total);
    assert_eq!(s.params_text, total - params_vision);
    assert_eq!(s.weight_bytes, sum(&|_| true, true));
    assert_eq!(s.weight_tensors, t.inventory.len() as i128);
    assert_eq!(
        s.params_active,
        total - params_vision - embed - moe_layers * idle * one_expert
    );
    assert_eq!(s.params_mtp, 0, "the checkpoint holds no MTP layer");
    assert_eq!(
        s.kv_bytes_per_token,
        minimax_m3_expected().kv_bytes_per_token
    );
    let [e] = s.encoders.as_slice() else {
        panic!("one encoder: {:?}", s.encoders)
    };
    assert_eq!((e.params, e.weight_bytes), (params_vision, bytes_vision));
    // The figures themselves, as this test computes them.
    assert_eq!((total, params_vision), (427_040_140_160, 865_567_232));
    assert_eq!(s.params_active, 24_733_280_640);
    assert_eq!(s.kv_bytes_per_token, 137_472);
}

/// What the decode step reads from earlier positions, derived from the dataflow alone (never
/// from the cache declarations), gives the reference cache sizes: the declared caches are held
/// to this by the semantic guard.
#[test]
fn caches_derived_from_decode_reads_match_the_reference() {
    use harch_engine::ir::Growth;
    for e in &library() {
        let (a, _) = evaluate_library(e.id, false);
        let main = |r: &&harch_engine::dataflow::DecodeRead| {
            a.nodes[r.reader].top_role.as_deref() != Some("mtp")
        };
        let reads = a.decode_reads();
        // A read of entries compressed in time (one per `stride` tokens, DeepSeek-V4's CSA and
        // HCA) adds one entry every `stride` tokens.
        let elements = |g: Growth| -> i128 {
            reads
                .iter()
                .filter(main)
                .filter(|r| r.growth == g)
                .map(|r| {
                    let stride = a.nodes[r.reader].stride.as_ref().map_or(1, |s| s.v);
                    r.elements.v * a.nodes[r.node].count.v / stride
                })
                .sum()
        };
        // Every library model keeps K/V (or latent) in bf16.
        assert_eq!(
            2 * elements(Growth::PerToken),
            e.kv_bytes_per_token,
            "{}",
            e.id
        );
        let window = e.window.map_or(0, |(per_token, _)| per_token);
        assert_eq!(2 * elements(Growth::Window), window, "{}", e.id);
        if let Some((_, w)) = e.window {
            // The attention's window: DeepSeek-V4's cache keeps one position fewer than its
            // attention reads (the current token joins the 127 kept, anchored by M055).
            let attends = if e.id == "deepseek-ai/DeepSeek-V4-Flash-0731" {
                w + 1
            } else {
                w
            };
            assert!(
                reads
                    .iter()
                    .filter(main)
                    .filter(|r| r.growth == Growth::Window)
                    .all(|r| r.window.as_ref().map(|q| q.v) == Some(attends)),
                "{}",
                e.id
            );
        }
        let state = match e.id {
            // 36 layers × (32 × 128 × 128 recurrent + 8192 × 3 conv).
            "Qwen/Qwen3-Next-80B-A3B" => 36 * (32 * 128 * 128 + 8192 * 3),
            // 30 DeltaNet layers of the same shape (the vision tower reads nothing back).
            "Qwen/Qwen3.5-35B-A3B" => 30 * (32 * 128 * 128 + 8192 * 3),
            // The compressors' pending tokens: 21 CSA layers hold 3 tokens of kv and gate (2 ×
            // 1024 wide) and the last window's first series (4 × 512, kv and gate), their
            // indexers the same at 128; 20 HCA layers up to 127 tokens of kv and gate (512).
            "deepseek-ai/DeepSeek-V4-Flash-0731" => {
                let csa = (3 * 2 * 1024 + 2 * 4 * 512) + (3 * 2 * 256 + 2 * 4 * 128);
                21 * csa + 20 * (127 * 2 * 512)
            }
            _ => 0,
        };
        assert_eq!(elements(Growth::Constant), state, "{}", e.id);
    }
    // MLA: the decode variant reads the latent and the shared rope key, nothing per head.
    let (a, _) = evaluate_library("deepseek-ai/DeepSeek-V3", false);
    let mut dense: Vec<(String, i128)> = a
        .decode_reads()
        .iter()
        .filter(|r| a.nodes[r.node].id.starts_with("layers[dense]."))
        .map(|r| (a.nodes[r.node].id.clone(), r.elements.v))
        .collect();
    dense.sort();
    assert_eq!(
        dense,
        [
            ("layers[dense].attention.k_pe_rope".to_string(), 64),
            ("layers[dense].attention.kv_a_layernorm".to_string(), 512)
        ]
    );
}

/// Attention FLOPs grow with the context on full layers (an attention with `window: 0` is a
/// full attention, not one that attends nothing).
#[test]
fn full_attention_flops_grow_with_the_context() {
    let (a, _) = evaluate_library("meta-llama/Llama-3.1-8B", false);
    let step = a.decode_flops(&Q::lit(4096)).v - a.decode_flops(&Q::lit(4095)).v;
    // 32 layers × (scores 2·32·128 + softmax 5·32 + apply 2·32·128) per attended position.
    assert_eq!(step, 32 * (2 * 32 * 128 + 5 * 32 + 2 * 32 * 128));
}

fn assert_within(id: &str, what: &str, got: i128, published: f64, tolerance: f64) {
    let rel = (got as f64 - published).abs() / published;
    assert!(
        rel <= tolerance,
        "{id}: {what} = {got} is {:.2}% off the published {published}",
        rel * 100.0
    );
}

#[test]
fn active_parameters_match_the_published_figures() {
    // Each publisher's convention: DeepSeek and OpenAI leave the embedding table out of the
    // activated count, Qwen counts it.
    let (a, _) = evaluate_library("deepseek-ai/DeepSeek-V3", false);
    assert_within(
        "DeepSeek-V3",
        "params_active",
        a.params_active().v,
        36.6e9,
        0.02,
    );
    let (a, _) = evaluate_library("openai/gpt-oss-20b", false);
    assert_within(
        "gpt-oss-20b",
        "params_active",
        a.params_active().v,
        3.6e9,
        0.02,
    );
    let (a, _) = evaluate_library("Qwen/Qwen3-30B-A3B", false);
    assert_within(
        "Qwen3-30B-A3B",
        "params_active_with_embedding",
        a.params_active_with_embedding().v,
        3.3e9,
        0.02,
    );
    // Kimi-K2.6's card: "32B activated" (the DeepSeek convention, the embedding left out).
    let (a, _) = evaluate_library("moonshotai/Kimi-K2.6", false);
    assert_within(
        "Kimi-K2.6",
        "params_active",
        a.params_active().v,
        32e9,
        0.02,
    );
    // DeepSeek-V2-Lite's model card says "2.4B activated". Ours is 2,451,435,008, 2.1% above
    // 2.4e9: the card gives two significant digits and truncates, so a figure it would print as
    // 2.4B lies in [2.4e9, 2.5e9). We assert that interval rather than a 2% band.
    let (a, _) = evaluate_library("deepseek-ai/DeepSeek-V2-Lite", false);
    let v2 = a.params_active().v;
    assert!(
        (2_400_000_000..2_500_000_000).contains(&v2),
        "DeepSeek-V2-Lite params_active = {v2}, outside [2.4B, 2.5B)"
    );
}

/// Binds a formula's atoms: dims by name, and `layers(<block>)` by the group's layer count.
struct FormulaEnv {
    atoms: HashMap<String, Q>,
    config: serde_json::Value,
}

impl Env for FormulaEnv {
    fn name(&self, name: &str) -> Result<Q, EvalError> {
        self.atoms
            .get(name)
            .cloned()
            .ok_or_else(|| EvalError::UnknownName(name.to_string()))
    }
    fn config(&self) -> &serde_json::Value {
        &self.config
    }
}

/// `layers(moe)` is an atom of the formula, not a function call: rewrite it to `layers__moe`.
fn atoms_to_names(formula: &str) -> String {
    let mut out = String::new();
    let mut rest = formula;
    while let Some(at) = rest.find("layers(") {
        out.push_str(&rest[..at]);
        let after = &rest[at + "layers(".len()..];
        let close = after.find(')').expect("atom closes");
        out.push_str("layers__");
        out.push_str(&after[..close]);
        rest = &after[close + 1..];
    }
    out.push_str(rest);
    out
}

#[test]
fn explain_formula_evaluates_to_the_number() {
    let (a, _) = evaluate_library("deepseek-ai/DeepSeek-V3", true);
    let q = a
        .quantity("kv_bytes_per_token", 4096)
        .expect("known quantity");
    assert_eq!(q.v, 70_272);
    let formula = q.formula();
    assert!(formula.contains("d_kv_lora"), "{formula}");
    assert!(formula.contains("layers(moe)"), "{formula}");
    let mut atoms: HashMap<String, Q> = a
        .dims
        .iter()
        .map(|(k, v)| (k.clone(), Q::lit(v.v)))
        .collect();
    for g in a.groups.iter().filter(|g| g.top_role.is_none()) {
        let prev = atoms.insert(
            format!("layers__{}", g.block),
            Q::lit(g.layers.len() as i128),
        );
        assert!(prev.is_none(), "block `{}` names two groups", g.block);
    }
    let parsed = expr::parse(&atoms_to_names(&formula))
        .unwrap_or_else(|e| panic!("formula `{formula}` does not parse: {e}"));
    let env = FormulaEnv {
        atoms,
        config: serde_json::Value::Null,
    };
    let value = expr::eval_int(&parsed, &env).unwrap_or_else(|e| panic!("`{formula}`: {e}"));
    assert_eq!(value.v, q.v, "`{formula}`");
    // The symbolic walk gives the same numbers as the plain one.
    let (plain, _) = evaluate_library("deepseek-ai/DeepSeek-V3", false);
    assert_eq!(plain.summary().params_total, a.summary().params_total);
    assert_eq!(plain.kv_bytes_per_token().v, q.v);
}

/// Kimi-K2.6's counts taken from its checkpoint headers alone (the bundled snapshot): a
/// compressed-tensors `weight_packed` I32 holds eight int4 weights, its `weight_scale` and
/// `weight_shape` are metadata (stored, not parameters), every other tensor is a parameter per
/// element. The spec's totals must equal these, and its vision tower's the `vision_tower.` and
/// `mm_projector.` tensors'.
#[test]
fn kimi_k2_6_counts_follow_the_headers() {
    let (a, truth) = evaluate_library("moonshotai/Kimi-K2.6", false);
    let logical = |t: &harch_guards::truth::Tensor<'_>| -> i128 {
        let n = t.numel() as i128;
        if t.name.ends_with(".weight_packed") {
            assert_eq!(t.dtype.as_str(), "I32", "{}", t.name);
            8 * n
        } else if t.name.ends_with(".weight_scale") || t.name.ends_with(".weight_shape") {
            0
        } else {
            n
        }
    };
    let tower = |name: &str| name.starts_with("vision_tower.") || name.starts_with("mm_projector.");
    let params: i128 = truth.inventory.iter().map(|t| logical(&t)).sum();
    let bytes: i128 = truth.inventory.iter().map(|t| t.nbytes() as i128).sum();
    let tower_params: i128 = truth
        .inventory
        .iter()
        .filter(|t| tower(t.name))
        .map(|t| logical(&t))
        .sum();
    let tower_bytes: i128 = truth
        .inventory
        .iter()
        .filter(|t| tower(t.name))
        .map(|t| t.nbytes() as i128)
        .sum();
    let packed = truth
        .inventory
        .iter()
        .filter(|t| t.name.ends_with(".weight_packed"))
        .count();
    // 60 MoE layers × 384 experts × gate, up and down.
    assert_eq!(packed, 60 * 384 * 3);
    let sum = a.summary();
    assert_eq!(sum.params_total, params);
    assert_eq!(sum.weight_bytes, bytes);
    assert_eq!(sum.weight_tensors, truth.inventory.len() as i128);
    assert_eq!(sum.params_text, params - tower_params);
    let [e] = sum.encoders.as_slice() else {
        panic!("one encoder: {:?}", sum.encoders)
    };
    assert_eq!(e.input, "pixel_values");
    assert_eq!((e.params, e.weight_bytes), (tower_params, tower_bytes));
    assert_eq!((tower_params, tower_bytes), (471_143_920, 942_287_840));
    // One int4 expert projection of 2048 x 7168: 917,504 I32 words, 229,376 BF16 scales (one
    // per 32 weights) and the two-element I32 shape.
    let (int4, scales, shapes): (i128, i128, i128) =
        (2048 * 7168 / 8 * 4, 2048 * 7168 / 32 * 2, 2 * 4);
    assert_eq!(
        a.weight_bytes_by_dtype().get("I32").copied().unwrap_or(0),
        60 * 384 * 3 * (int4 + shapes)
    );
    assert!(a.weight_bytes_by_dtype()["BF16"] > 60 * 384 * 3 * scales);
}

/// Kimi-K2.6's MoonViT FLOPs for one image, written out from the source's shapes:
/// Kimi_K25VisionModel at the learned grid's size (64 x 64 patches of 14 px: 896 x 896),
/// 27 blocks, then `mm_projector` over 2 x 2 merged patches. Conventions are the engine's
/// (docs/conventions.md): a matmul is 2 x its MACs, a bias is free, LayerNorm 5 and GELU 8 per
/// element, a residual add 1, rope 3 per rotated channel, softmax 5 per score, an interpolated
/// position 2 per tap and the add.
fn kimi_k2_6_vision_flops(height: i128, width: i128) -> i128 {
    let (d, heads, ffn, depth, out) = (1152, 16, 4304, 27, 7168);
    let pixels = 3 * 14 * 14;
    let patches = (height / 14) * (width / 14);
    let merged = patches / 4;
    let per_patch = 2 * pixels * d   // patch_embed.proj (Conv2d, kernel = stride)
        + (2 * 16 + 1) * d           // pos_emb: bicubic, 16 taps of the 64 x 64 grid, added
        + 5 * d                      // final_layernorm
        + 5 * d; // mm_projector.pre_norm, before the merge
    let per_block_patch = 5 * d      // norm0
        + 2 * d * 3 * d              // wqkv
        + 2 * 3 * d                  // 2-D rope on q and k (the whole head dim)
        + 2 * d * d                  // wo
        + d                          // residual
        + 5 * d                      // norm1
        + 2 * d * ffn + 8 * ffn + 2 * ffn * d // mlp.fc0, GELU, mlp.fc1
        + d; // residual
    // Bidirectional: every patch attends to every patch of its image (q.k, softmax, p.v).
    let per_block_pair = 2 * d + 5 * heads + 2 * d;
    let per_merged = 2 * (4 * d) * (4 * d) + 8 * (4 * d) + 2 * (4 * d) * out;
    patches * per_patch
        + depth * (patches * per_block_patch + patches * patches * per_block_pair)
        + merged * per_merged
}

#[test]
fn kimi_k2_6_vision_flops_per_image_follow_the_source_shapes() {
    let (a, _) = evaluate_library("moonshotai/Kimi-K2.6", false);
    let [e] = a.encoder_summaries().try_into().unwrap();
    assert_eq!((e.height, e.width), (896, 896));
    assert_eq!((e.patches, e.tokens_per_image), (4_096, 1_024));
    assert_eq!(e.flops_per_image, kimi_k2_6_vision_flops(896, 896));
}
