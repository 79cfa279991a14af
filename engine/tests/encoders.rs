//! Image inputs and encoders in the engine's one evaluation, on a small Llama-shaped text model
//! with a toy tower: patches from the resolution and patch sizes, positions divided by the
//! spatial merge, per-image FLOPs (bidirectional over the image's positions), nothing of the
//! tower in any per-token figure; and compressed-tensors packed storage.

use crate::support;

use harch_engine::{EvalOptions, ImageSize, Q, Repo, evaluate, evaluate_at};

const TEXT: &str = r#"model: toy_vl
summary: "a tiny vision-language model"
architectures: [ToyVL]
dims:
  d_model: 64
  n_vocab: 100
  n_layers: 2
  n_heads: 4
  n_kv_heads: 2
  d_head: 16
  d_ffn: 128
  d_vis: 32
  n_vis_heads: 2
  d_vis_head: 16
  d_vis_ffn: 48
  n_vis_layers: 3
  vis_patch: 4
  vis_merge: 2
  vis_channels: 3
attrs:
  rope_type: "'default'"
blocks:
  decoder:
    template: pre_norm_block
    fill: { attention: gqa_attention, ffn: swiglu_mlp }
  vision:
    template: layernorm_block
    fill: { attention: vision_attention, ffn: gelu_mlp }
    bind: { d_model: d_vis, n_heads: n_vis_heads, d_head: d_vis_head, d_ffn: d_vis_ffn }
QUANT
inputs:
  pixel_values: { kind: image, height: 32, width: 16, channels: vis_channels, patch: vis_patch, merge: vis_merge }
graph:
  patch_embed: { op: patch_embed, in: pixel_values, path: visual.patch_embed, args: { channels: vis_channels, out: d_vis, patch: vis_patch } }
  blocks: { in: patch_embed, stack: { repeat: n_vis_layers, path: "visual.blocks.{i}", schedule: [{ block: vision }], streams: { hidden: { carries: true } } } }
  merge: { op: spatial_merge, in: blocks, args: { merge: vis_merge } }
  proj: { op: linear, in: merge, path: visual.proj, args: { in: "vis_merge * vis_merge * d_vis", out: d_model } }
  embed_tokens: { op: embedding, in: input_ids, path: model.embed_tokens, args: { vocab: n_vocab, dim: d_model } }
  joined: { op: masked_scatter, in: [embed_tokens, proj] }
  layers: { in: joined, stack: { repeat: n_layers, path: "model.layers.{i}", schedule: [{ block: decoder }], streams: { hidden: { carries: true } } } }
  norm: { op: rmsnorm, in: layers, path: model.norm, args: { dim: d_model } }
  lm_head: { op: linear, in: norm, path: lm_head, args: { in: d_model, out: n_vocab } }
outputs: [lm_head]
"#;

fn repo(model: &str) -> Repo {
    let mut files = support::library_files();
    files.insert("specs/models/toy_vl.yaml".into(), model.to_string());
    Repo::from_files(files)
}

fn spec(quant: &str) -> String {
    TEXT.replace("QUANT\n", quant)
}

fn config() -> serde_json::Value {
    serde_json::json!({ "architectures": ["ToyVL"], "torch_dtype": "bfloat16" })
}

#[test]
fn patches_positions_and_per_image_flops() {
    let r = repo(&spec(""));
    let ir = r.load_model("toy_vl").unwrap();
    let a = evaluate(&ir, &config(), EvalOptions::default());
    assert!(a.ok(), "{:?}", a.errors);
    let [img] = a.images.as_slice() else { panic!() };
    // 32 x 16 pixels in 4-pixel patches: 8 x 4 patches; a 2 x 2 merge gives 8 tokens.
    assert_eq!((img.patches, img.tokens), (32, 8));
    let (p, m, d, f, h, dh) = (32i128, 8i128, 32i128, 48i128, 2i128, 16i128);
    let block = 5 * d
        + 2 * d * 3 * d
        + 2 * 3 * h * dh
        + 2 * d * d
        + d
        + 5 * d
        + 2 * d * f
        + 8 * f
        + 2 * f * d
        + d;
    let pair = 2 * h * dh + 5 * h + 2 * h * dh;
    let want = p * (2 * 3 * 16 * d) + 3 * (p * block + p * p * pair) + m * (2 * 4 * d * 64);
    assert_eq!(a.encoder_flops_per_image("pixel_values").v, want);
    // The tower's weights are part of the model, none of them active per token.
    let tower: i128 = d * 3 * 4 * 4
        + 3 * (2 * 2 * d + 3 * d * d + 3 * d + d * d + d + d * f + f + f * d + d)
        + 4 * d * 64;
    assert_eq!(a.params_encoder("pixel_values").v, tower);
    assert_eq!(a.params_total().v - a.params_text().v, tower);
    let text_active = a.params_active().v;
    assert_eq!(a.params_active().v + tower, a.params_total().v - 100 * 64);
    // Decode is the text model's alone.
    let no_tower = spec("")
        .replace(
            "  joined: { op: masked_scatter, in: [embed_tokens, proj] }\n",
            "",
        )
        .replace("in: joined,", "in: embed_tokens,");
    let cut: String = no_tower
        .lines()
        .filter(|l| {
            ![
                "  patch_embed:",
                "  blocks:",
                "  merge:",
                "  proj:",
                "inputs:",
                "  pixel_values:",
            ]
            .iter()
            .any(|p| l.starts_with(p))
        })
        .map(|l| format!("{l}\n"))
        .collect();
    let r2 = repo(&cut);
    let ir2 = r2.load_model("toy_vl").unwrap();
    let b = evaluate(&ir2, &config(), EvalOptions::default());
    assert!(b.ok(), "{:?}", b.errors);
    let ctx = Q::lit(512);
    assert_eq!(a.decode_flops(&ctx).v, b.decode_flops(&ctx).v);
    assert_eq!(a.prefill_flops(&ctx).v, b.prefill_flops(&ctx).v);
    assert_eq!(text_active, b.params_active().v);
    assert_eq!(a.kv_bytes_per_token().v, b.kv_bytes_per_token().v);
    // Another resolution: 16 x 16 is 16 patches, 4 tokens.
    let a = evaluate_at(
        &ir,
        &config(),
        EvalOptions::default(),
        Some(ImageSize {
            height: 16,
            width: 16,
            frames: None,
        }),
    );
    assert_eq!((a.images[0].patches, a.images[0].tokens), (16, 4));
}

#[test]
fn sizes_that_do_not_cut_are_located_errors() {
    let r = repo(&spec(""));
    let ir = r.load_model("toy_vl").unwrap();
    let at = |h, w| {
        evaluate_at(
            &ir,
            &config(),
            EvalOptions::default(),
            Some(ImageSize {
                height: h,
                width: w,
                frames: None,
            }),
        )
    };
    let a = at(30, 16);
    assert_eq!(a.errors[0].code, "A002");
    assert!(
        a.errors[0]
            .message
            .contains("not a whole number of 4-pixel patches"),
        "{}",
        a.errors[0].message
    );
    assert_eq!(
        a.errors[0].location.node.as_deref(),
        Some("inputs.pixel_values")
    );
    let a = at(12, 16);
    assert!(
        a.errors[0]
            .message
            .contains("does not divide the 3x4 patch grid"),
        "{}",
        a.errors[0].message
    );
    // The token stream into a patch embedding: an encoder without an image input.
    let bad = spec("").replace(
        "in: pixel_values, path: visual.patch_embed",
        "in: embed_tokens, path: visual.patch_embed",
    );
    let r = repo(&bad);
    let ir = r.load_model("toy_vl");
    let errs = match ir {
        Err(e) => e,
        Ok(ir) => evaluate(&ir, &config(), EvalOptions::default()).errors,
    };
    let unread = errs
        .iter()
        .find(|e| e.code == "L007")
        .unwrap_or_else(|| panic!("{errs:#?}"));
    assert_eq!(unread.location.node.as_deref(), Some("inputs.pixel_values"));
    assert!(
        unread
            .hint
            .as_deref()
            .is_some_and(|h| h.contains("an image input feeds its encoder")),
        "{unread:?}"
    );
    // A cache on an encoder is refused with what an encoder is.
    let cached = spec("").replace(
        "fill: { attention: vision_attention, ffn: gelu_mlp }",
        "fill: { attention: gqa_attention, ffn: gelu_mlp }",
    );
    let r = repo(&cached);
    let ir = r.load_model("toy_vl").unwrap();
    let a = evaluate(&ir, &config(), EvalOptions::default());
    let e = a
        .errors
        .iter()
        .find(|e| e.code == "L015")
        .expect("an encoder's cache is refused");
    assert!(e.message.contains("runs once per image"), "{}", e.message);
}

#[test]
fn pack_quantized_int4_stores_eight_values_per_int32() {
    let quant = "quant_context:\n  default: bf16\n  overrides:\n    - { leaf: \"model.layers.*.mlp.*\", format: ct_int4_group32 }\n";
    let r = repo(&spec(quant));
    let ir = r.load_model("toy_vl").unwrap();
    let a = evaluate(&ir, &config(), EvalOptions::default());
    assert!(a.ok(), "{:?}", a.errors);
    let w = a
        .weights
        .iter()
        .find(|w| w.name == "model.layers.{i}.mlp.down_proj.weight")
        .unwrap();
    assert_eq!(w.format, "ct_int4_group32");
    let shapes: Vec<(String, String, Vec<i128>)> = w
        .stored
        .iter()
        .map(|s| {
            (
                s.name.clone(),
                s.dtype.clone(),
                s.shape.iter().map(|q| q.v).collect(),
            )
        })
        .collect();
    assert_eq!(
        shapes,
        [
            (
                "model.layers.{i}.mlp.down_proj.weight_packed".to_string(),
                "I32".to_string(),
                vec![64, 16]
            ),
            (
                "model.layers.{i}.mlp.down_proj.weight_scale".to_string(),
                "BF16".to_string(),
                vec![64, 4]
            ),
            (
                "model.layers.{i}.mlp.down_proj.weight_shape".to_string(),
                "I32".to_string(),
                vec![2]
            ),
        ]
    );
    // Logical parameters stay [64, 128]; bytes are the packed ones.
    assert_eq!(w.logical_numel().v, 64 * 128);
    assert_eq!(
        a.weight_row_bytes(w).v,
        2 * (64 * 16 * 4 + 64 * 4 * 2 + 2 * 4)
    );
}

/// A stored tensor: its name's suffix after the module, dtype and shape.
type Stored = (String, String, Vec<i128>);

/// The stored tensors of `model.layers.{i}.mlp.down_proj.weight` (logical [64, 128]) in
/// `scheme`, its logical elements and the row's bytes.
fn down_proj_in(scheme: &str) -> (Vec<Stored>, i128, i128) {
    let quant = format!(
        "quant_context:\n  default: bf16\n  overrides:\n    - {{ leaf: \"model.layers.*.mlp.down_proj.*\", format: {scheme} }}\n"
    );
    let r = repo(&spec(&quant));
    let ir = r.load_model("toy_vl").unwrap();
    let a = evaluate(&ir, &config(), EvalOptions::default());
    assert!(a.ok(), "{:?}", a.errors);
    let w = a
        .weights
        .iter()
        .find(|w| w.name == "model.layers.{i}.mlp.down_proj.weight")
        .unwrap();
    assert_eq!(w.format, scheme);
    let shapes = w
        .stored
        .iter()
        .map(|s| {
            let name = s.name.trim_start_matches("model.layers.{i}.mlp.down_proj.");
            (
                name.to_string(),
                s.dtype.clone(),
                s.shape.iter().map(|q| q.v).collect(),
            )
        })
        .collect();
    (shapes, w.logical_numel().v, a.weight_row_bytes(w).v)
}

#[test]
fn pack_quantized_int8_stores_four_values_per_int32() {
    let (shapes, logical, bytes) = down_proj_in("ct_int8_group128");
    assert_eq!(
        shapes,
        [
            ("weight_packed".to_string(), "I32".to_string(), vec![64, 32]),
            ("weight_scale".to_string(), "BF16".to_string(), vec![64, 1]),
            ("weight_shape".to_string(), "I32".to_string(), vec![2]),
        ]
    );
    assert_eq!(logical, 64 * 128);
    // Two layers of the toy: packed words, one scale per 128 values, the shape.
    assert_eq!(bytes, 2 * (64 * 32 * 4 + 64 * 2 + 2 * 4));
}

#[test]
fn float_quantized_fp8_stores_one_byte_per_value_and_a_scale_per_channel() {
    let (shapes, logical, bytes) = down_proj_in("ct_fp8_channel");
    assert_eq!(
        shapes,
        [
            ("weight".to_string(), "F8_E4M3".to_string(), vec![64, 128]),
            ("weight_scale".to_string(), "BF16".to_string(), vec![64, 1]),
        ]
    );
    assert_eq!(logical, 64 * 128);
    assert_eq!(bytes, 2 * (64 * 128 + 64 * 2));
}
