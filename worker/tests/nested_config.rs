//! Guards under a nested `text_config`: a composite checkpoint's config keeps the text model's
//! settings one level down, and every guard holds the spec to them as it does to a flat
//! config. Each case here is a library model whose config is moved under `text_config` (the
//! spec then reads `config.text_config.*`): it validates as before, and the mistakes its flat
//! twin is rejected for are rejected with the same codes.

use harch_engine::Repo;
use harch_guards::truth::Truth;
use harch_guards::{GuardSet, Report};
use harch_worker::{snapshot, source, subject};

fn root() -> std::path::PathBuf {
    std::path::PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("..")
}

/// Keys a composite config keeps at its top level (the class the checkpoint loads as).
const TOP: &[&str] = &["architectures", "model_type", "tie_word_embeddings"];

/// `id`'s snapshot with every config key but [`TOP`] moved under `text_config`.
fn nested_truth(id: &str) -> Truth {
    let mut t = snapshot::load_snapshot(id).unwrap();
    t.sources = source::resolve_native(&t.config)
        .expect("forward source: run scripts/fetch-transformers-src")
        .files;
    let flat = t.config.as_object().unwrap().clone();
    let (top, text): (serde_json::Map<_, _>, serde_json::Map<_, _>) = flat
        .into_iter()
        .partition(|(k, _)| TOP.contains(&k.as_str()));
    let mut top = top;
    top.insert("text_config".into(), serde_json::Value::Object(text));
    t.config = serde_json::Value::Object(top);
    t
}

/// Validate `id`'s library spec, reading its config under `text_config`, with `patches`
/// (find, replace) applied to the nested spec file.
fn validate(id: &str, spec: &str, patches: &[(&str, &str)]) -> Report {
    let mut files = harch_worker::specs::read_spec_files(&root()).unwrap();
    let text = files.get_mut(spec).unwrap();
    *text = text.replace("config.", "config.text_config.");
    // The keys the top level keeps are read where they are.
    for k in TOP {
        *text = text.replace(&format!("config.text_config.{k}"), &format!("config.{k}"));
    }
    for (find, replace) in patches {
        assert_eq!(text.matches(find).count(), 1, "{find}");
        *text = text.replacen(find, replace, 1);
    }
    let repo = Repo::from_files(files);
    let t = nested_truth(id);
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

const NEXT: &str = "Qwen/Qwen3-Next-80B-A3B";
const NEXT_SPEC: &str = "specs/models/qwen3_next.yaml";

#[test]
fn a_nested_config_validates_as_the_flat_one() {
    let r = validate(NEXT, NEXT_SPEC, &[]);
    assert!(r.valid, "{:#?}", r.errors);
    let r = validate(
        "deepseek-ai/DeepSeek-V3",
        "specs/models/deepseek_v3.yaml",
        &[],
    );
    assert!(r.valid, "{:#?}", r.errors);
}

#[test]
fn top_k_halved_under_text_config_is_rejected() {
    let r = validate(
        NEXT,
        NEXT_SPEC,
        &[(
            "top_k: config.text_config.num_experts_per_tok",
            "top_k: \"config.text_config.num_experts_per_tok / 2\"",
        )],
    );
    assert_eq!(codes(&r), ["M001", "M002", "M003"], "{:#?}", r.errors);
    let m = &r.errors.iter().find(|e| e.code == "M003").unwrap().message;
    assert!(m.contains("config states 10"), "{m}");
}

#[test]
fn literal_counts_under_text_config_are_rejected() {
    // A literal that happens to equal config today leaves the key unread (C001); one that
    // does not is the wrong number (M003).
    let r = validate(
        NEXT,
        NEXT_SPEC,
        &[(
            "n_experts: config.text_config.num_experts",
            "n_experts: 512",
        )],
    );
    assert_eq!(codes(&r), ["C001"], "{:#?}", r.errors);
    let r = validate(
        NEXT,
        NEXT_SPEC,
        &[(
            "n_heads: config.text_config.num_attention_heads",
            "n_heads: 8",
        )],
    );
    assert!(codes(&r).contains(&"M003"), "{:#?}", r.errors);
    assert!(codes(&r).contains(&"C001"), "{:#?}", r.errors);
}

#[test]
fn an_unread_partial_rotary_factor_under_text_config_is_rejected() {
    let r = validate(
        NEXT,
        NEXT_SPEC,
        &[(
            "d_rotary: \"d_head * (config.text_config.partial_rotary_factor ?? 1)\"",
            "d_rotary: d_head",
        )],
    );
    assert!(codes(&r).contains(&"R002"), "{:#?}", r.errors);
    assert!(codes(&r).contains(&"C001"), "{:#?}", r.errors);
}

#[test]
fn a_fallback_for_a_spelling_the_nested_config_lacks_is_rejected() {
    let r = validate(
        NEXT,
        NEXT_SPEC,
        &[(
            "top_k: config.text_config.num_experts_per_tok",
            "top_k: \"config.text_config.moe_topk ?? 10\"",
        )],
    );
    assert!(codes(&r).contains(&"M004"), "{:#?}", r.errors);
}

/// gpt-oss's checkpoint and source under a config in Gemma 4's shape (transformers 5): the text
/// settings under `text_config`, `rope_parameters` keyed by layer type, the full layers rotating
/// a quarter of the head with rope type `proportional`, the sliding ones the whole head.
fn gemma4_like_truth() -> Truth {
    let mut t = nested_truth("openai/gpt-oss-20b");
    let text = t.config["text_config"].as_object_mut().unwrap();
    text.remove("rope_scaling");
    text.insert(
        "rope_parameters".into(),
        serde_json::json!({
            "sliding_attention": { "rope_type": "default", "rope_theta": 10000.0 },
            "full_attention": {
                "rope_type": "proportional", "partial_rotary_factor": 0.25, "rope_theta": 1000000.0
            }
        }),
    );
    t
}

/// The gpt-oss spec read under `text_config`, with its rope settings replaced by `attrs` and
/// the full block's attention by `full_attention` (a draft component) when given.
fn gemma4_like(attrs: &str, full: Option<(&str, &str)>) -> Report {
    let mut files = harch_worker::specs::read_spec_files(&root()).unwrap();
    let spec = "specs/models/gpt_oss.yaml";
    let mut text = files[spec].replace("config.", "config.text_config.");
    for k in TOP {
        text = text.replace(&format!("config.text_config.{k}"), &format!("config.{k}"));
    }
    let old = "  rope_type: \"config.text_config.rope_scaling.rope_type ?? config.text_config.rope_scaling.type ?? 'default'\"\n";
    assert!(text.contains(old));
    text = text.replace(old, attrs);
    if let Some((component, bind)) = full {
        let lib = &files["specs/components/library/gqa_attention.yaml"];
        let draft = lib
            .replace(
                "component: gqa_attention",
                &format!("component: {component}"),
            )
            .replace("scaling: rope_type }", "scaling: rope_type_full }");
        files.insert(format!("specs/components/drafts/{component}.yaml"), draft);
        text = text.replacen(
            "sources: [modeling_gpt_oss.py]\n",
            &format!("sources: [modeling_gpt_oss.py]\ndrafts: [{component}]\n"),
            1,
        );
        let block = "  full:\n    template: pre_norm_block\n    fill: { attention: gqa_attention, ffn: moe_ffn_grouped }\n";
        assert!(text.contains(block));
        text = text.replace(
            block,
            &format!("  full:\n    template: pre_norm_block\n    fill: {{ attention: {component}, ffn: moe_ffn_grouped }}\n    bind: {{ {bind} }}\n"),
        );
    }
    files.insert(spec.into(), text);
    let repo = Repo::from_files(files);
    harch_guards::validate(&repo, "gpt_oss", &gemma4_like_truth(), &GuardSet::all()).0
}

#[test]
fn rope_parameters_per_layer_type_hold_each_block_to_its_type() {
    // Faithful: the sliding layers' rope is their type's, the full layers rotate a quarter of
    // the head with the proportional rope.
    let faithful = gemma4_like(
        "  rope_type: \"config.text_config.rope_parameters.sliding_attention.rope_type\"\n  rope_type_full: \"config.text_config.rope_parameters.full_attention.rope_type\"\n",
        Some((
            "gqa_attention_full",
            "d_rotary: \"d_head * config.text_config.rope_parameters.full_attention.partial_rotary_factor\"",
        )),
    );
    assert!(faithful.valid, "{:#?}", faithful.errors);
    // Wrong: one rope for every layer, the sliding layers' (default, every channel rotated).
    let wrong = gemma4_like(
        "  rope_type: \"config.text_config.rope_parameters.sliding_attention.rope_type ?? 'default'\"\n",
        None,
    );
    let c = codes(&wrong);
    assert!(
        c.contains(&"R001") && c.contains(&"R002"),
        "{:#?}",
        wrong.errors
    );
    let r001 = wrong.errors.iter().find(|e| e.code == "R001").unwrap();
    assert!(
        r001.message
            .contains("`proportional` for its `full_attention` layers"),
        "{}",
        r001.message
    );
    assert!(r001.location.file.is_some());
    let r002 = &wrong
        .errors
        .iter()
        .find(|e| e.code == "R002")
        .unwrap()
        .message;
    assert!(
        r002.contains("rotates 64 channels") && r002.contains("gives 16"),
        "{r002}"
    );
    // Wrong the other way: the full layers' rope everywhere (the sliding layers rotate a
    // quarter too).
    let swapped = gemma4_like(
        "  rope_type: \"config.text_config.rope_parameters.full_attention.rope_type\"\n  rope_type_full: \"config.text_config.rope_parameters.full_attention.rope_type\"\n",
        Some(("gqa_attention_full", "attn_window: 0")),
    );
    let c = codes(&swapped);
    assert!(
        c.contains(&"R001") && c.contains(&"R002"),
        "{:#?}",
        swapped.errors
    );
    let r001 = &swapped
        .errors
        .iter()
        .find(|e| e.code == "R001")
        .unwrap()
        .message;
    assert!(
        r001.contains("`default` for its `sliding_attention` layers"),
        "{r001}"
    );
}
