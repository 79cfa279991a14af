//! MiniMax-M3: block-sparse attention and a vision tower in one checkpoint. Its text model's
//! sparse layers attend only the top 16 blocks of 128 positions that a per-KV-head indexer
//! selects (decode FLOPs and cache reads count min(k·block, context) positions per query, what
//! is stored still grows per token); its CLIP-style tower is an encoder of the image input, none
//! of it in the per-token figures. Every count here is written from the source's shapes
//! (modeling_minimax_m3_vl.py of transformers 5.23.0) and the bundled snapshot's config.

use harch_engine::{EvalOptions, ImageSize, Q, Repo, evaluate, evaluate_at};
use harch_guards::truth::Truth;
use harch_guards::{GuardSet, Report};
use harch_worker::{snapshot, source, specs, subject};

const M3: &str = "MiniMaxAI/MiniMax-M3";
const SPEC: &str = "specs/models/minimax_m3.yaml";

fn root() -> std::path::PathBuf {
    std::path::PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("..")
}

fn truth() -> Truth {
    let mut t = snapshot::load_snapshot(M3).unwrap();
    t.sources = source::resolve_native(&t.config)
        .expect("forward source: run scripts/fetch-transformers-src")
        .files;
    t
}

fn validate_files(files: std::collections::BTreeMap<String, String>) -> Report {
    let repo = Repo::from_files(files);
    let t = truth();
    harch_guards::validate(&repo, "minimax_m3", &t, &GuardSet::all()).0
}

fn codes(r: &Report) -> Vec<&str> {
    let mut c: Vec<&str> = r.errors.iter().map(|e| e.code).collect();
    c.sort_unstable();
    c.dedup();
    c
}

fn evaluated(image: Option<ImageSize>) -> harch_engine::Analysis {
    let s = subject::resolve(M3, None).unwrap();
    let ir = specs::load(&s.target).unwrap();
    let a = evaluate_at(&ir, &s.truth.config, EvalOptions::default(), image);
    assert!(a.ok(), "{}", subject::render_errors(&a.errors));
    a
}

fn text_cfg() -> serde_json::Value {
    snapshot::load_snapshot(M3).unwrap().config["text_config"].clone()
}

fn int(c: &serde_json::Value, path: &str) -> i128 {
    path.split('.')
        .fold(c, |v, k| &v[k])
        .as_i64()
        .unwrap_or_else(|| panic!("{path}")) as i128
}

/// Layers whose entry of a per-layer list of config is 1.
fn layers_with(c: &serde_json::Value, path: &str) -> i128 {
    path.split('.')
        .fold(c, |v, k| &v[k])
        .as_array()
        .unwrap()
        .iter()
        .filter(|v| v.as_i64() == Some(1))
        .count() as i128
}

#[test]
fn minimax_m3_validates_with_every_guard_and_every_tensor_claimed() {
    let r = validate_files(specs::read_spec_files(&root()).unwrap());
    assert!(r.valid, "{:#?}", r.errors);
    assert!(r.warnings.is_empty(), "{:#?}", r.warnings);
    assert_eq!(r.summary.checkpoint_tensors, 23_416);
    assert_eq!(r.summary.matched_tensors, 23_416);
    assert_eq!(r.summary.byte_diff, 0);
}

/// The tower's FLOPs for one image, from the source's shapes: MiniMaxM3VLVisionModel (Conv3d
/// patch embedding of 3 x 2 x 14 x 14 pixels, pre_layrnorm, 32 CLIP encoder layers with 3-D
/// rotary on 78 of each head's 80 channels), then MiniMaxM3VLMultiModalProjector (a GELU MLP per
/// patch to 6144, 2 x 2 patches side by side, a GELU MLP per merged token). Conventions are the
/// engine's (docs/conventions.md): a matmul is 2 x its MACs, a bias is free, LayerNorm 5 and
/// GELU 8 per element, a residual add 1, rope 3 per rotated channel, softmax 5 per score.
fn vision_flops(height: i128, width: i128) -> i128 {
    // An image is one temporal patch: the Conv3d's 2 frames.
    video_flops(2, height, width)
}

/// The same for a video of `frames` frames: `(frames / 2) * (height / 14) * (width / 14)`
/// patches, attended all together (`self.merge_temporal = True`: one sequence per video).
fn video_flops(frames: i128, height: i128, width: i128) -> i128 {
    let (d, heads, ffn, depth) = (1280, 16, 5120, 32);
    let (text, proj) = (6144, 6144);
    let head_dim = d / heads;
    // `spatial_dim = 2 * ((dim // 3) // 2)` per axis, three axes: 78 channels rotate.
    let rotary = 3 * (2 * ((head_dim / 3) / 2));
    let pixels = 3 * 2 * 14 * 14;
    let patches = (frames / 2) * (height / 14) * (width / 14);
    let merged = patches / 4;
    let per_patch = 2 * pixels * d     // embeddings.proj (Conv3d, kernel = stride, no bias)
        + 5 * d                        // pre_layrnorm
        + 2 * d * proj + 8 * proj + 2 * proj * text; // linear_1, GELU, linear_2
    let per_layer_patch = 5 * d        // layer_norm1
        + 3 * 2 * d * d                // q_proj, k_proj, v_proj
        + 2 * 3 * rotary * heads       // rope on q and k
        + 2 * d * d                    // out_proj
        + d                            // residual
        + 5 * d                        // layer_norm2
        + 2 * d * ffn + 8 * ffn + 2 * ffn * d // fc1, GELU, fc2
        + d; // residual
    // Bidirectional over the image's patches (`is_causal = False`): q.k, softmax, p.v.
    let per_layer_pair = 2 * d + 5 * heads + 2 * d;
    // merge_linear_1 (patch_merge_mlp.linear_1) over 4 x 6144, GELU, merge_linear_2.
    let per_merged = 2 * (4 * text) * proj + 8 * proj + 2 * proj * text;
    patches * per_patch
        + depth * (patches * per_layer_patch + patches * patches * per_layer_pair)
        + merged * per_merged
}

#[test]
fn vision_flops_per_image_follow_the_source_shapes() {
    // The default: vision_config.image_size, 2016 x 2016 = 144 x 144 patches.
    let a = evaluated(None);
    let [e] = a.encoder_summaries().try_into().unwrap();
    assert_eq!((e.height, e.width), (2016, 2016));
    assert_eq!((e.patches, e.tokens_per_image), (20_736, 5_184));
    assert_eq!(e.flops_per_image, vision_flops(2016, 2016));
    assert_eq!(e.flops_per_image, 101_595_613_298_688);
    let a = evaluated(Some(ImageSize {
        height: 448,
        width: 448,
        frames: None,
    }));
    let [e] = a.encoder_summaries().try_into().unwrap();
    assert_eq!((e.patches, e.tokens_per_image), (1_024, 256));
    assert_eq!(e.flops_per_image, vision_flops(448, 448));
}

fn eval_errors(size: ImageSize) -> Vec<(String, String)> {
    let s = subject::resolve(M3, None).unwrap();
    let ir = specs::load(&s.target).unwrap();
    let a = evaluate_at(&ir, &s.truth.config, EvalOptions::default(), Some(size));
    a.errors
        .iter()
        .map(|e| {
            (
                e.message.clone(),
                e.location.node.clone().unwrap_or_default(),
            )
        })
        .collect()
}

#[test]
fn vision_flops_per_video_follow_the_source_shapes() {
    let video = |s: &str| ImageSize::parse_video(s).unwrap();
    let a = evaluated(Some(video("16x448x448")));
    let [e] = a.encoder_summaries().try_into().unwrap();
    assert_eq!((e.frames, e.height, e.width), (16, 448, 448));
    // 8 temporal patches of 32 x 32: 8,192 patches, 2,048 tokens after the 2 x 2 merge.
    assert_eq!((e.patches, e.tokens_per_image), (8_192, 2_048));
    assert_eq!(e.flops_per_image, video_flops(16, 448, 448));
    assert_eq!(e.flops_per_image, 23_037_200_039_936);
    // Two frames are one temporal patch: the image's count.
    let a = evaluated(Some(video("2x448x448")));
    assert_eq!(
        a.encoder_summaries()[0].flops_per_image,
        vision_flops(448, 448)
    );
    // Bad videos are located errors at the input, never a number.
    for (size, says) in [
        (
            "15x448x448",
            "15 frames are not a whole number of 2-frame patches",
        ),
        ("16x450x448", "not a whole number of 14-pixel patches"),
        (
            "16x42x42",
            "a spatial merge of 2x2 patches does not divide the 3x3 patch grid",
        ),
    ] {
        let errs = eval_errors(video(size));
        assert!(
            errs.iter()
                .any(|(m, node)| m.contains(says) && node == "inputs.pixel_values"),
            "{size}: {errs:?}"
        );
    }
    assert!(ImageSize::parse_video("448x448").is_err());
    assert!(ImageSize::parse_video("0x448x448").is_err());
}

/// The spec with the tower cut out: the token embedding feeds the layers directly.
fn text_only_files() -> std::collections::BTreeMap<String, String> {
    let mut files = specs::read_spec_files(&root()).unwrap();
    let text = files.get_mut(SPEC).unwrap();
    let mut cut = text.replace("    in: inputs_embeds\n", "    in: embed_tokens\n");
    let start = cut.find("  patch_embed:").unwrap();
    let end = cut.find("  embed_tokens:").unwrap();
    cut.replace_range(start..end, "");
    cut = cut.replace(
        "  inputs_embeds: { op: masked_scatter, in: [embed_tokens, merge_fc2] }\n",
        "",
    );
    let i = cut.find("inputs:\n").unwrap();
    let j = cut.find("blocks:\n").unwrap();
    cut.replace_range(i..j, "");
    *text = cut;
    files
}

#[test]
fn the_tower_changes_no_per_token_figure() {
    let full = evaluated(None);
    let repo = Repo::from_files(text_only_files());
    let t = truth();
    let ir = repo.load_model("minimax_m3").unwrap();
    let text_only = evaluate(&ir, &t.config, EvalOptions::default());
    assert!(text_only.ok(), "{:?}", text_only.errors);
    for ctx in [4096, 65_536] {
        let ctx = Q::lit(ctx);
        assert_eq!(full.decode_flops(&ctx).v, text_only.decode_flops(&ctx).v);
        assert_eq!(full.prefill_flops(&ctx).v, text_only.prefill_flops(&ctx).v);
        assert_eq!(
            full.kv_bytes_read_at(&ctx).v,
            text_only.kv_bytes_read_at(&ctx).v
        );
    }
    assert_eq!(full.params_active().v, text_only.params_active().v);
    assert_eq!(
        full.kv_bytes_per_token().v,
        text_only.kv_bytes_per_token().v
    );
    assert_eq!(
        full.params_total().v - text_only.params_total().v,
        865_567_232
    );
    // Images in the prompt: their tokens join the text model's prefill, encoding is per image.
    let (tokens, encode) = full.images_in_context(1);
    assert_eq!(tokens, 5_184);
    assert_eq!(encode.v, vision_flops(2016, 2016));
}

/// Decode FLOPs of one token at `ctx`, from the source's shapes: 2 FLOPs per weight of every
/// matmul a token runs (attention projections, the indexer's q and k projections on its sparse
/// layers, dense MLPs, the routed top-k and the shared expert, the router, lm_head), plus the
/// attention: on the full layers q.k and p.v over every position; on the sparse layers over the
/// min(topk_blocks × block_size, ctx) selected positions, and the indexer's q.k over every
/// position for each index head. Norms, RoPE, softmax and the activations are left out (well
/// under 1%).
fn decode_flops_from_source(c: &serde_json::Value, ctx: i128) -> i128 {
    let d = int(c, "hidden_size");
    let (h, kv, hd) = (
        int(c, "num_attention_heads"),
        int(c, "num_key_value_heads"),
        int(c, "head_dim"),
    );
    let (ih, id) = (
        int(c, "sparse_attention_config.sparse_num_index_heads"),
        int(c, "sparse_attention_config.sparse_index_dim"),
    );
    let selected = (int(c, "sparse_attention_config.sparse_topk_blocks")
        * int(c, "sparse_attention_config.sparse_block_size"))
    .min(ctx);
    let layers = int(c, "num_hidden_layers");
    let sparse = layers_with(c, "sparse_attention_config.sparse_attention_freq");
    let moe = layers_with(c, "moe_layer_freq");
    let attention_weights = d * h * hd + 2 * d * kv * hd + h * hd * d;
    let indexer_weights = d * ih * id + d * id;
    let dense_mlp = 3 * d * int(c, "dense_intermediate_size");
    let moe_mlp = int(c, "num_experts_per_tok") * 3 * d * int(c, "intermediate_size")
        + 3 * d * int(c, "shared_intermediate_size")
        + int(c, "num_local_experts") * d;
    let weights = layers * attention_weights
        + sparse * indexer_weights
        + (layers - moe) * dense_mlp
        + moe * moe_mlp
        + d * int(c, "vocab_size");
    let attention = (layers - sparse) * (2 * 2 * h * hd * ctx)
        + sparse * (2 * 2 * h * hd * selected + 2 * ih * id * ctx);
    2 * weights + attention
}

/// Bytes a decode step reads from the caches at `ctx`: K and V of every position on the full
/// layers, of the selected positions on the sparse ones, and every indexer key.
fn kv_read_from_source(c: &serde_json::Value, ctx: i128) -> i128 {
    let kv = 2 * int(c, "num_key_value_heads") * int(c, "head_dim") * 2;
    let index_key = int(c, "sparse_attention_config.sparse_index_dim") * 2;
    let selected = (int(c, "sparse_attention_config.sparse_topk_blocks")
        * int(c, "sparse_attention_config.sparse_block_size"))
    .min(ctx);
    let layers = int(c, "num_hidden_layers");
    let sparse = layers_with(c, "sparse_attention_config.sparse_attention_freq");
    (layers - sparse) * kv * ctx + sparse * (kv * selected + index_key * ctx)
}

#[test]
fn sparse_layers_attend_the_selected_blocks_and_store_every_position() {
    let a = evaluated(None);
    let c = text_cfg();
    for ctx in [65_536, 1_048_576] {
        let q = Q::lit(ctx);
        let decode = a.decode_flops(&q).v;
        let want = decode_flops_from_source(&c, ctx);
        assert!(
            (decode as f64 / want as f64 - 1.0).abs() <= 0.01,
            "{ctx}: {decode} vs {want}"
        );
        assert_eq!(
            a.kv_bytes_read_at(&q).v,
            kv_read_from_source(&c, ctx),
            "{ctx}"
        );
        // What is stored still grows with every token: 137,472 B each.
        assert_eq!(a.cache_bytes_at(ctx), 137_472 * ctx, "{ctx}");
    }
    // At 64K: 3 full layers read 402,653,184 B, 57 sparse layers 239,075,328 B of selected K/V
    // and 956,301,312 B of indexer keys.
    assert_eq!(
        a.kv_bytes_read_at(&Q::lit(65_536)).v,
        402_653_184 + 239_075_328 + 956_301_312
    );
    // Below k·block every position is selected: reads equal what is stored.
    assert_eq!(a.kv_bytes_read_at(&Q::lit(2000)).v, a.cache_bytes_at(2000));
    assert!(
        (a.decode_flops(&Q::lit(2000)).v as f64 / decode_flops_from_source(&c, 2000) as f64 - 1.0)
            .abs()
            <= 0.01
    );
}

#[test]
fn the_tower_as_an_extra_output_of_the_token_embedding_is_rejected() {
    // What a spec without image inputs could do: run the tower on a slice of the token
    // embedding and hand the projector out as a second output. Shapes agree; the tower's
    // weights would count as active and its FLOPs per decoded token.
    let mut files = specs::read_spec_files(&root()).unwrap();
    let text = files.get_mut(SPEC).unwrap();
    let i = text.find("inputs:\n").unwrap();
    let j = text.find("blocks:\n").unwrap();
    text.replace_range(i..j, "");
    let start = text.find("  patch_embed:").unwrap();
    let end = text.find("  pre_layrnorm:").unwrap();
    text.replace_range(
        start..end,
        "  tower_in: { op: slice, in: embed_tokens, args: { out: d_vis } }\n",
    );
    *text = text
        .replace("in: patch_embed, path: vision_tower", "in: tower_in, path: vision_tower")
        .replace(
            "  inputs_embeds: { op: masked_scatter, in: [embed_tokens, merge_fc2] }\n",
            "",
        )
        .replace("    in: inputs_embeds\n", "    in: embed_tokens\n")
        .replace(
            "  patch_merge: { op: spatial_merge, in: projector_fc2, args: { merge: vis_merge } }\n",
            "  patch_merge: { op: concat, in: [projector_fc2, projector_fc2, projector_fc2, projector_fc2] }\n",
        )
        .replace("outputs: [lm_head]", "outputs: [lm_head, merge_fc2]");
    let r = validate_files(files);
    assert!(!r.valid);
    assert!(codes(&r).contains(&"M030"), "{:#?}", r.errors);
    // The tower itself (`self.vision_tower = MiniMaxM3VLVisionModel(config.vision_config)`),
    // and the projector's modules the source builds from the vision config.
    for module in ["`vision_tower`", "`linear_1`"] {
        let e = r
            .errors
            .iter()
            .find(|e| e.code == "M030" && e.message.contains(module))
            .unwrap_or_else(|| panic!("{module}: {:#?}", r.errors));
        assert!(
            e.message.contains("encoder of an image input"),
            "{}",
            e.message
        );
    }
}
