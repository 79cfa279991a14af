//! Issue 27: guards read the forward source's statements, not strings in it. A dtype anchor
//! that occurs but produces nothing the cache holds is refused with the statement the guard
//! expected; a key read under another spelling, or later in a `??` chain, is read.

use harch_engine::Repo;
use harch_guards::truth::Truth;
use harch_guards::{GuardSet, Report};
use harch_worker::{snapshot, source, subject};

fn truth(model_id: &str) -> Truth {
    let mut t = snapshot::load_snapshot(model_id).expect("bundled snapshot");
    t.sources = source::resolve_native(&t.config)
        .expect("forward source: run scripts/fetch-transformers-src")
        .files;
    t
}

/// Validate `model`'s library spec with one replacement in one spec file.
fn validate(model: &str, file: &str, find: &str, replace: &str) -> Report {
    let root = std::path::PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("..");
    let mut files = harch_worker::specs::read_spec_files(&root).unwrap();
    let text = files.get_mut(file).unwrap();
    assert_eq!(text.matches(find).count(), 1, "{find}");
    *text = text.replacen(find, replace, 1);
    let repo = Repo::from_files(files);
    let t = truth(model);
    let spec = subject::library_model(&repo, &t.config)
        .expect("library spec")
        .to_string();
    harch_guards::validate(&repo, &spec, &t, &GuardSet::all()).0
}

fn message<'r>(r: &'r Report, code: &str) -> &'r str {
    &r.errors
        .iter()
        .find(|e| e.code == code)
        .unwrap_or_else(|| panic!("no {code}: {:#?}", r.errors))
        .message
}

#[test]
fn a_dtype_anchor_on_an_upcast_the_cache_does_not_keep_names_the_write() {
    let r = validate(
        "meta-llama/Llama-3.1-8B",
        "specs/models/llama.yaml",
        "  cache: bf16",
        "  cache: f32\n  cache_src: \"`attn_weights = nn.functional.softmax(attn_weights, dim=-1, dtype=torch.float32)`\"",
    );
    let m = message(&r, "M061");
    assert!(
        m.contains("which does not write or cast the keys and values the cache stores")
            && m.contains("(modeling_llama.py:")
            && m.contains("`key_states, value_states = past_key_values.update(key_states, value_states, self.layer_idx, cache_kwargs)`"),
        "{m}"
    );
    // The diagnostic is located at `quant_context`, where the dtype is written.
    let d = r.errors.iter().find(|e| e.code == "M061").unwrap();
    assert!(
        d.location.line > 0
            && d.location
                .file
                .as_deref()
                .is_some_and(|f| f.ends_with("llama.yaml")),
        "{d:#?}"
    );
}

#[test]
fn a_present_key_read_under_another_spelling_is_read() {
    // gpt-oss's config sets `num_experts_per_tok` and `experts_per_token`, both 4.
    let r = validate(
        "openai/gpt-oss-20b",
        "specs/models/gpt_oss.yaml",
        "top_k: config.num_experts_per_tok",
        "top_k: config.experts_per_token",
    );
    assert!(r.valid, "{:#?}", r.errors);
    // A chain that names the configured spelling second reads it (no M004, no C001).
    let r = validate(
        "Qwen/Qwen3-30B-A3B",
        "specs/models/qwen3_moe.yaml",
        "top_k: config.num_experts_per_tok",
        "top_k: \"config.num_activated_experts ?? config.moe_k ?? config.num_experts_per_tok\"",
    );
    assert!(r.valid, "{:#?}", r.errors);
}

#[test]
fn hash_routed_layers_need_no_selection_bias() {
    // DeepSeek-V3 with its MoE layers routed by hash (DeepSeek-V4's `mlp_layer_types`): a
    // router without `score_bias` there is no R007 (the weight guard still sees the stored
    // bias the spec no longer reads).
    let root = std::path::PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("..");
    let mut files = harch_worker::specs::read_spec_files(&root).unwrap();
    let f = files.get_mut("specs/models/deepseek_v3.yaml").unwrap();
    let find = "router_score_bias: \"config.topk_method == 'noaux_tc'\"";
    assert_eq!(f.matches(find).count(), 1);
    *f = f.replacen(find, "router_score_bias: 0", 1);
    let repo = Repo::from_files(files);
    let run = |hashed: bool| {
        let mut t = truth("deepseek-ai/DeepSeek-V3");
        if hashed {
            let types: Vec<&str> = (0..61)
                .map(|i| if i < 3 { "dense" } else { "hash_moe" })
                .collect();
            t.config["mlp_layer_types"] = serde_json::json!(types);
        }
        let spec = subject::library_model(&repo, &t.config)
            .unwrap()
            .to_string();
        harch_guards::validate(&repo, &spec, &t, &GuardSet::all()).0
    };
    // R007 on a trunk router (the MTP layer's router is not a layer `mlp_layer_types` lists).
    let trunk_r007 = |r: &Report| {
        r.errors
            .iter()
            .any(|e| e.code == "R007" && e.message.contains("`layers["))
    };
    assert!(trunk_r007(&run(false)));
    let r = run(true);
    assert!(
        !trunk_r007(&r) && r.errors.iter().any(|e| e.code == "W001"),
        "{:#?}",
        r.errors
    );
}

#[test]
fn a_stream_anchor_on_a_class_attribute_names_the_statement_that_passes_the_value_on() {
    let r = validate(
        "Qwen/Qwen3-Next-80B-A3B",
        "specs/models/qwen3_next.yaml",
        "src: \"an MTP layer is a decoder layer, run after the trunk (transformers skips its weights): `hidden_states = decoder_layer(`\"",
        "src: \"transformers skips the MTP weights: `_keys_to_ignore_on_load_unexpected`\"",
    );
    let m = message(&r, "O007");
    assert!(
        m.contains("a class attribute")
            && m.contains("`_keys_to_ignore_on_load_unexpected = [r\"^mtp.*\"]` (modeling_qwen3_next.py:")
            && m.contains("the guard expected the statement that passes `hidden` on, as `hidden_states = decoder_layer( …` (modeling_qwen3_next.py:"),
        "{m}"
    );
    let d = r.errors.iter().find(|e| e.code == "O007").unwrap();
    assert!(d.location.line > 0, "{d:?}");
    assert_eq!(r.errors.len(), 1, "{:#?}", r.errors);
}

/// DeepSeek-V3's snapshot with `routed_scaling_factor` taken out of config.json: transformers
/// then reads DeepseekV3Config's default, 2.5, and so do the guards and the evaluation.
#[test]
fn a_silent_config_reads_the_configuration_class_default() {
    let root = std::path::PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("..");
    let mut t = truth("deepseek-ai/DeepSeek-V3");
    t.config
        .as_object_mut()
        .unwrap()
        .remove("routed_scaling_factor");
    let run = |find: &str, replace: &str| {
        let mut files = harch_worker::specs::read_spec_files(&root).unwrap();
        let text = files.get_mut("specs/models/deepseek_v3.yaml").unwrap();
        assert_eq!(text.matches(find).count(), 1, "{find}");
        *text = text.replacen(find, replace, 1);
        let repo = Repo::from_files(files);
        harch_guards::validate(&repo, "deepseek_v3", &t, &GuardSet::all()).0
    };
    let same = "router_scale: \"config.routed_scaling_factor ?? 1\"";
    let r = run(same, same);
    assert!(r.valid, "{:#?}", r.errors);
    let r = run(same, "router_scale: 1");
    let m = message(&r, "R009");
    assert!(m.contains("2.5"), "{m}");
}
