//! Vision-language checkpoints: the vision tower is part of the model (every tensor claimed,
//! its parameters and bytes in the totals) and an encoder of the image input (its cost per
//! image, none of it per decoded token). Qwen/Qwen3.5-35B-A3B against its bundled snapshot;
//! the counts are REFERENCE_NUMBERS.md's "Frontier checkpoints", computed apart from harch.

use harch_engine::{EvalOptions, ImageSize, Repo, evaluate_at};
use harch_guards::truth::Truth;
use harch_guards::{GuardSet, Report};
use harch_worker::{snapshot, source, specs, subject};

const QWEN35: &str = "Qwen/Qwen3.5-35B-A3B";

fn root() -> std::path::PathBuf {
    std::path::PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("..")
}

fn truth(id: &str) -> Truth {
    let mut t = snapshot::load_snapshot(id).unwrap();
    t.sources = source::resolve_native(&t.config)
        .expect("forward source: run scripts/fetch-transformers-src")
        .files;
    t
}

/// Validate the library spec of `id` with `patches` (file, find, replace) applied.
fn validate(id: &str, patches: &[(&str, &str, &str)]) -> Report {
    let mut files = specs::read_spec_files(&root()).unwrap();
    for (file, find, replace) in patches {
        let text = files.get_mut(*file).unwrap();
        assert_eq!(text.matches(find).count(), 1, "{find}");
        *text = text.replacen(find, replace, 1);
    }
    let repo = Repo::from_files(files);
    let t = truth(id);
    let model = subject::library_model(&repo, &t.config)
        .unwrap()
        .to_string();
    harch_guards::validate(&repo, &model, &t, &GuardSet::all()).0
}

fn codes(r: &Report) -> Vec<&str> {
    let mut c: Vec<&str> = r.errors.iter().map(|e| e.code).collect();
    c.sort_unstable();
    c.dedup();
    c
}

fn evaluated(image: Option<ImageSize>) -> harch_engine::Analysis {
    let s = subject::resolve(QWEN35, None).unwrap();
    let ir = specs::load(&s.target).unwrap();
    let a = evaluate_at(&ir, &s.truth.config, EvalOptions::default(), image);
    assert!(a.ok(), "{}", subject::render_errors(&a.errors));
    a
}

#[test]
fn qwen3_5_validates_with_every_guard_and_every_tensor_claimed() {
    let r = validate(QWEN35, &[]);
    assert!(r.valid, "{:#?}", r.errors);
    let s = r.summary;
    assert_eq!(s.checkpoint_tensors, 1_811);
    assert_eq!(s.matched_tensors, 1_811);
}

#[test]
fn qwen3_5_counts_equal_the_independent_ones() {
    let a = evaluated(None);
    let sum = a.summary();
    assert_eq!(sum.params_total, 35_951_822_704);
    assert_eq!(sum.params_text, 35_505_251_456);
    assert_eq!(sum.params_mtp, 844_640_768);
    assert_eq!(sum.weight_bytes, 71_903_655_008);
    assert_eq!(sum.weight_tensors, 1_811);
    assert_eq!(sum.params_active, 2_946_429_568);
    assert_eq!(sum.params_active_with_embedding, 3_454_988_928);
    assert_eq!(sum.kv_bytes_per_token, 20_480);
    assert_eq!(sum.state_bytes_per_sequence, 64_389_120);
    let [e] = sum.encoders.as_slice() else {
        panic!("one encoder: {:?}", sum.encoders)
    };
    assert_eq!(e.input, "pixel_values");
    assert_eq!(e.params, 446_571_248);
    // Every tower tensor is BF16.
    assert_eq!(e.weight_bytes, 2 * 446_571_248);
}

/// The tower's FLOPs for one image, written out from the source's shapes: Qwen3_5MoeVisionModel
/// at the learned grid's size (48 x 48 patches of 16 px: 768 x 768), 27 blocks, 2 x 2 merge.
/// Conventions are the engine's (docs/conventions.md): a matmul is 2 x its MACs, a bias is
/// free, LayerNorm 5 and GELU 8 per element, a residual add 1, rope 3 per rotated channel,
/// softmax 5 per score.
fn qwen3_5_vision_flops(height: i128, width: i128) -> i128 {
    let (d, heads, ffn, depth, out) = (1152, 16, 4304, 27, 2048);
    let pixels = 3 * 2 * 16 * 16;
    let patches = (height / 16) * (width / 16);
    let merged = patches / 4;
    let per_patch = 2 * pixels * d   // patch_embed.proj (Conv3d, kernel = stride)
        + 9 * d                      // interpolated pos_embed, added
        + 5 * d; // merger.norm, before the merge
    let per_block_patch = 5 * d      // norm1
        + 2 * d * 3 * d              // qkv
        + 2 * 3 * d                  // rope on q and k (all head_dim channels)
        + 2 * d * d                  // proj
        + d                          // residual
        + 5 * d                      // norm2
        + 2 * d * ffn + 8 * ffn + 2 * ffn * d // linear_fc1, GELU, linear_fc2
        + d; // residual
    // Bidirectional: every patch attends to every patch of its image (q.k, softmax, p.v).
    let per_block_pair = 2 * d + 5 * heads + 2 * d;
    let per_merged = 2 * (4 * d) * (4 * d) + 8 * (4 * d) + 2 * (4 * d) * out;
    patches * per_patch
        + depth * (patches * per_block_patch + patches * patches * per_block_pair)
        + merged * per_merged
}

#[test]
fn qwen3_5_vision_flops_per_image_follow_the_source_shapes() {
    let a = evaluated(None);
    let [e] = a.encoder_summaries().try_into().unwrap();
    assert_eq!((e.height, e.width), (768, 768));
    assert_eq!((e.patches, e.tokens_per_image), (2_304, 576));
    assert_eq!(e.flops_per_image, qwen3_5_vision_flops(768, 768));
    let a = evaluated(Some(ImageSize {
        height: 448,
        width: 448,
        frames: None,
    }));
    let [e] = a.encoder_summaries().try_into().unwrap();
    assert_eq!((e.patches, e.tokens_per_image), (784, 196));
    assert_eq!(e.flops_per_image, qwen3_5_vision_flops(448, 448));
}

#[test]
fn the_tower_changes_no_per_token_figure() {
    // The same spec with the tower cut out (the token embedding feeds the layers directly):
    // decode and prefill FLOPs per token, active parameters and caches are the same.
    let full = evaluated(None);
    let mut files = specs::read_spec_files(&root()).unwrap();
    let text = files.get_mut("specs/models/qwen3_5_moe.yaml").unwrap();
    let cut = text.replace("    in: inputs_embeds\n", "    in: embed_tokens\n");
    let start = cut.find("  patch_embed:").unwrap();
    let end = cut.find("  embed_tokens:").unwrap();
    let mut cut = format!("{}{}", &cut[..start], &cut[end..]);
    cut = cut.replace(
        "  inputs_embeds: { op: masked_scatter, in: [embed_tokens, merger_fc2] }\n",
        "",
    );
    let i = cut.find("inputs:\n").unwrap();
    let j = cut.find("blocks:\n").unwrap();
    cut.replace_range(i..j, "");
    *text = cut;
    let repo = Repo::from_files(files);
    let t = truth(QWEN35);
    let ir = repo.load_model("qwen3_5_moe").unwrap();
    let text_only = harch_engine::evaluate(&ir, &t.config, EvalOptions::default());
    assert!(text_only.ok(), "{:?}", text_only.errors);
    let ctx = harch_engine::Q::lit(4096);
    assert_eq!(full.decode_flops(&ctx).v, text_only.decode_flops(&ctx).v);
    assert_eq!(full.prefill_flops(&ctx).v, text_only.prefill_flops(&ctx).v);
    assert_eq!(full.params_active().v, text_only.params_active().v);
    assert_eq!(
        full.kv_bytes_per_token().v,
        text_only.kv_bytes_per_token().v
    );
    assert_eq!(
        full.params_total().v - text_only.params_total().v,
        446_571_248
    );
    // Images in the prompt: their tokens join the text model's prefill, encoding is per image.
    let (tokens, encode) = full.images_in_context(2);
    assert_eq!(tokens, 2 * 576);
    assert_eq!(encode.v, 2 * qwen3_5_vision_flops(768, 768));
    assert_eq!(
        full.prefill_flops_with_images(&harch_engine::Q::lit(1000), 2)
            .v,
        full.prefill_flops(&harch_engine::Q::lit(1000 + 2 * 576)).v + encode.v
    );
}

const SPEC: &str = "specs/models/qwen3_5_moe.yaml";

#[test]
fn the_tower_as_an_extra_output_of_the_token_embedding_is_rejected() {
    // What a spec without image inputs could do: run the blocks and the merger on (a slice of)
    // the token embedding and hand the merger out as a second output. Shapes agree; the
    // tower's weights would count as active and its FLOPs per decoded token.
    let mut files = specs::read_spec_files(&root()).unwrap();
    let text = files.get_mut(SPEC).unwrap();
    let i = text.find("inputs:\n").unwrap();
    let j = text.find("blocks:\n").unwrap();
    text.replace_range(i..j, "");
    let start = text.find("  patch_embed:").unwrap();
    let end = text.find("  visual_blocks:").unwrap();
    text.replace_range(
        start..end,
        "  tower_in: { op: slice, in: embed_tokens, args: { out: d_vis } }\n",
    );
    *text = text
        .replace("    in: pos_embed\n", "    in: tower_in\n")
        .replace(
            "  inputs_embeds: { op: masked_scatter, in: [embed_tokens, merger_fc2] }\n",
            "",
        )
        .replace("    in: inputs_embeds\n", "    in: embed_tokens\n")
        .replace("outputs: [lm_head]", "outputs: [lm_head, merger_fc2]")
        // (a spatial merge of the token stream is refused by the evaluation itself)
        .replace(
            "{ op: spatial_merge, in: merger_norm, args: { merge: vis_merge } }",
            "{ op: concat, in: [merger_norm, merger_norm, merger_norm, merger_norm] }",
        );
    // The token embedding is defined after the tower: move it first.
    let line = "  embed_tokens: { op: embedding, in: input_ids, path: model.language_model.embed_tokens, args: { vocab: n_vocab, dim: d_model } }\n";
    *text = text
        .replace(line, "")
        .replace("graph:\n", &format!("graph:\n{line}"));
    let repo = Repo::from_files(files);
    let t = truth(QWEN35);
    let model = subject::library_model(&repo, &t.config)
        .unwrap()
        .to_string();
    let r = harch_guards::validate(&repo, &model, &t, &GuardSet::all()).0;
    assert!(codes(&r).contains(&"M030"), "{:#?}", r.errors);
    let m = &r.errors.iter().find(|e| e.code == "M030").unwrap().message;
    assert!(
        m.contains("vision tower is an encoder of an image input")
            && m.contains("as part of the token stream"),
        "{m}"
    );
    // The patch embedding and position table it could not say stay unclaimed.
    assert!(codes(&r).contains(&"W001"), "{:#?}", r.errors);
}

#[test]
fn the_tower_marked_mtp_is_rejected() {
    let r = validate(
        QWEN35,
        &[(
            SPEC,
            "  visual_blocks:\n    in: pos_embed\n",
            "  visual_blocks:\n    in: pos_embed\n    role: mtp\n",
        )],
    );
    assert!(codes(&r).contains(&"M030"), "{:#?}", r.errors);
    let m = &r.errors.iter().find(|e| e.code == "M030").unwrap().message;
    assert!(m.contains("as multi-token prediction"), "{m}");
}

#[test]
fn a_causal_cached_encoder_is_rejected() {
    let lib = "specs/components/library/vision_attention.yaml";
    let r = validate(
        QWEN35,
        &[
            (
                lib,
                "args: { mask: bidirectional } }",
                "args: { mask: causal } }",
            ),
            (
                lib,
                "outputs: [proj]\n",
                "outputs: [proj]\ncache:\n  - { node: k_rope, kind: key, growth: per_token }\n  - { node: v_heads, kind: value, growth: per_token }\n",
            ),
        ],
    );
    let c = codes(&r);
    assert!(
        c.contains(&"L015") || c.contains(&"R003"),
        "{:#?}",
        r.errors
    );
    let text = format!("{:?}", r.errors);
    assert!(text.contains("once per image"), "{text}");
    // The causal mask alone.
    let r = validate(
        QWEN35,
        &[(
            lib,
            "args: { mask: bidirectional } }",
            "args: { mask: causal } }",
        )],
    );
    assert_eq!(codes(&r), ["R003"], "{:#?}", r.errors);
    let m = &r.errors[0].message;
    assert!(m.contains("encoder of image input `pixel_values`"), "{m}");
}

#[test]
fn image_sizes_that_do_not_cut_into_patches_are_located_errors() {
    let s = subject::resolve(QWEN35, None).unwrap();
    let ir = specs::load(&s.target).unwrap();
    let at = |h, w| {
        evaluate_at(
            &ir,
            &s.truth.config,
            EvalOptions::default(),
            Some(ImageSize {
                height: h,
                width: w,
                frames: None,
            }),
        )
    };
    let a = at(450, 448);
    let e = &a.errors[0];
    assert_eq!(e.code, "A002");
    assert!(
        e.message.contains("not a whole number of 16-pixel patches"),
        "{}",
        e.message
    );
    assert!(e.location.line > 0);
    // 464 px = 29 patches: a 2 x 2 merge does not divide it.
    let a = at(464, 448);
    let e = &a.errors[0];
    assert!(
        e.message.contains("does not divide the 29x28 patch grid"),
        "{}",
        e.message
    );
    assert_eq!(
        "448x448".parse::<ImageSize>(),
        Ok(ImageSize {
            height: 448,
            width: 448,
            frames: None,
        })
    );
    assert!("448".parse::<ImageSize>().is_err());
}
