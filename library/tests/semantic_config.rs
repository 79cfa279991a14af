//! The semantic and structural guards against configs the library snapshots do not have: every
//! spelling of the rotary width, counts that are not counts.

use harch_engine::Repo;
use harch_guards::truth::Truth;
use harch_guards::{GuardSet, Report};
use harch_library::subject;
use harch_truth::{snapshot, source};

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

/// Validate `id`'s library spec (with `patch` applied to one spec file) against its snapshot
/// with `edit` applied to the config.
fn validate(
    id: &str,
    patch: Option<(&str, &str, &str)>,
    edit: impl FnOnce(&mut serde_json::Map<String, serde_json::Value>),
) -> Report {
    let mut files = harch_library::specs::read_spec_files(&root()).unwrap();
    if let Some((file, find, replace)) = patch {
        let text = files.get_mut(file).unwrap();
        assert_eq!(text.matches(find).count(), 1, "{find}");
        *text = text.replacen(find, replace, 1);
    }
    let repo = Repo::from_files(files);
    let mut t = truth(id);
    edit(t.config.as_object_mut().unwrap());
    let model = subject::library_model(&repo, &t.config)
        .unwrap()
        .to_string();
    harch_guards::validate(&repo, &model, &t, &GuardSet::all()).0
}

fn codes(r: &Report) -> Vec<&str> {
    r.errors.iter().map(|e| e.code).collect()
}

fn message<'r>(r: &'r Report, code: &str) -> &'r str {
    &r.errors
        .iter()
        .find(|e| e.code == code)
        .unwrap_or_else(|| panic!("no {code}: {:#?}", r.errors))
        .message
}

#[test]
fn a_boolean_expert_count_is_not_read_as_one() {
    let r = validate("Qwen/Qwen3-30B-A3B", None, |c| {
        c.insert("num_experts_per_tok".into(), true.into());
    });
    assert_eq!(codes(&r), ["M005"], "{:#?}", r.errors);
    assert!(message(&r, "M005").contains("`num_experts_per_tok` = true is a boolean"));
    let r = validate("Qwen/Qwen3-30B-A3B", None, |c| {
        c.insert("num_experts_per_tok".into(), serde_json::json!(8.0));
    });
    assert!(
        message(&r, "M005").contains("is a fraction"),
        "{:#?}",
        r.errors
    );
    // A negative count stops the evaluation itself.
    let r = validate("Qwen/Qwen3-30B-A3B", None, |c| {
        c.insert("num_experts_per_tok".into(), serde_json::json!(-8));
    });
    assert!(message(&r, "A002").contains("negative"), "{:#?}", r.errors);
}

#[test]
fn the_partial_rotary_factor_is_read_under_rope_parameters() {
    // A factor other than the configuration class's default (0.25), which would otherwise
    // stand in for the missing top-level key and hide the wrong read.
    let moved = |c: &mut serde_json::Map<String, serde_json::Value>| {
        c.remove("partial_rotary_factor").unwrap();
        c.insert(
            "rope_parameters".into(),
            serde_json::json!({ "rope_type": "default", "partial_rotary_factor": 0.5 }),
        );
    };
    // A spec that reads only the top-level key is not refused here: Qwen3-Next's configuration
    // class defaults that key (0.25), and the 4.57.6 source reads it, so the class's value is
    // what runs (issue 27's class defaults). The spelling under rope_parameters is read:
    // Reading the key where this config has it validates.
    let r = validate(
        "Qwen/Qwen3-Next-80B-A3B",
        Some((
            "specs/models/qwen3_next.yaml",
            "d_rotary: \"d_head * (config.partial_rotary_factor ?? 1)\"",
            "d_rotary: \"d_head * (config.partial_rotary_factor ?? config.rope_parameters.partial_rotary_factor ?? 1)\"",
        )),
        moved,
    );
    assert!(r.valid, "{:#?}", r.errors);
}

#[test]
fn an_absolute_rotary_dim_is_compared_in_channels() {
    let absolute = |c: &mut serde_json::Map<String, serde_json::Value>| {
        c.remove("partial_rotary_factor");
        // Not the 64 channels the class's default factor gives: the read must be of rotary_dim.
        c.insert("rotary_dim".into(), 128.into());
    };
    let r = validate("Qwen/Qwen3-Next-80B-A3B", None, absolute);
    let m = message(&r, "R002");
    assert!(m.contains("config `rotary_dim` = 128 gives 128"), "{m}");
    let r = validate(
        "Qwen/Qwen3-Next-80B-A3B",
        Some((
            "specs/models/qwen3_next.yaml",
            "d_rotary: \"d_head * (config.partial_rotary_factor ?? 1)\"",
            "d_rotary: \"config.rotary_dim ?? d_head * (config.partial_rotary_factor ?? 1)\"",
        )),
        absolute,
    );
    assert!(r.valid, "{:#?}", r.errors);
}

#[test]
fn alternating_layers_are_named_by_range_and_step() {
    // gpt-oss alternates sliding and full layers; one block for both is reported with ranges.
    let r = validate(
        "openai/gpt-oss-20b",
        Some((
            "specs/models/gpt_oss.yaml",
            "        - { block: sliding, where: \"config.layer_types[i] == 'sliding_attention'\" }\n        - { block: full, where: \"config.layer_types[i] == 'full_attention'\" }\n",
            "        - { block: full }\n",
        )),
        |_| {},
    );
    let m = message(&r, "C002");
    assert!(
        m.contains("layers 0-22 step 2") && m.contains("layers 1-23 step 2"),
        "{m}"
    );
}

#[test]
fn a_top_k_exception_is_held_to_the_value_its_statement_computes() {
    // The quote is a real statement that reads the key, but it computes the configured 8, so
    // it cannot justify 16 (issue 27: an anchor is the statement that computes the value).
    let src = "`self.top_k = config.num_experts_per_tok`";
    let anchored =
        format!("top_k: {{ value: \"config.num_experts_per_tok * 2\", src: \"{src}\" }}");
    let r = validate(
        "Qwen/Qwen3-30B-A3B",
        Some((
            "specs/models/qwen3_moe.yaml",
            "top_k: config.num_experts_per_tok",
            &anchored,
        )),
        |_| {},
    );
    let mut got = codes(&r);
    got.sort();
    got.dedup();
    assert_eq!(got, ["M001", "M002", "M003", "M008"], "{:#?}", r.errors);
    let m = message(&r, "M008");
    assert!(
        m.contains("`self.top_k = config.num_experts_per_tok` (modeling_qwen3_moe.py:")
            && m.contains("computes 8 from `num_experts_per_tok`, not 16")
            && m.contains("the guard expected the statement that computes 16"),
        "{m}"
    );
    // The same statement holds for the value it computes.
    let unchanged = format!("top_k: {{ value: config.num_experts_per_tok, src: \"{src}\" }}");
    let r = validate(
        "Qwen/Qwen3-30B-A3B",
        Some((
            "specs/models/qwen3_moe.yaml",
            "top_k: config.num_experts_per_tok",
            &unchanged,
        )),
        |_| {},
    );
    assert!(r.valid, "{:#?}", r.errors);
    // The same exception quoting a line the source does not have is refused, and so is
    // everything it would have excused.
    let made_up = anchored.replace(src, "`self.top_k = config.num_experts_per_tok * 2`");
    let r = validate(
        "Qwen/Qwen3-30B-A3B",
        Some((
            "specs/models/qwen3_moe.yaml",
            "top_k: config.num_experts_per_tok",
            &made_up,
        )),
        |_| {},
    );
    let mut got = codes(&r);
    got.sort();
    got.dedup();
    assert_eq!(got, ["M001", "M002", "M003", "M008"], "{:#?}", r.errors);
    let m = message(&r, "M008");
    assert!(
        m.contains("is not in the forward source (modeling_qwen3_moe.py)"),
        "{m}"
    );
}

#[test]
fn a_stack_past_the_trunk_is_held_to_the_layers_its_statement_runs() {
    let trunk = "    in: mtp_fc\n    role: mtp\n";
    // A real statement, but it runs the 48 trunk layers, not the 49 the main stacks hold.
    let anchored = "    in: mtp_fc\n    src: \"`for decoder_layer in self.layers[: self.config.num_hidden_layers]:`\"\n";
    let r = validate(
        "Qwen/Qwen3-Next-80B-A3B",
        Some(("specs/models/qwen3_next.yaml", trunk, anchored)),
        |_| {},
    );
    let mut got = codes(&r);
    got.sort();
    assert_eq!(got, ["M007", "M008"], "{:#?}", r.errors);
    let m = message(&r, "M008");
    assert!(
        m.contains("computes 48 from `num_hidden_layers`, not 49")
            && m.contains("the guard expected the statement that runs 49 layers"),
        "{m}"
    );
    // Without the anchor the same stack is MTP counted as trunk.
    let r = validate(
        "Qwen/Qwen3-Next-80B-A3B",
        Some(("specs/models/qwen3_next.yaml", trunk, "    in: mtp_fc\n")),
        |_| {},
    );
    assert_eq!(codes(&r), ["M007"], "{:#?}", r.errors);
    // An anchor that names no layer count explains nothing.
    let unrelated = "    in: mtp_fc\n    src: \"`hidden_states = decoder_layer(`\"\n";
    let r = validate(
        "Qwen/Qwen3-Next-80B-A3B",
        Some(("specs/models/qwen3_next.yaml", trunk, unrelated)),
        |_| {},
    );
    let mut got = codes(&r);
    got.sort();
    assert_eq!(got, ["M007", "M008"], "{:#?}", r.errors);
    assert!(
        message(&r, "M008").contains("quotes no line that reads `num_hidden_layers`"),
        "{:#?}",
        r.errors
    );
}

#[test]
fn shared_expert_width_is_read_from_either_spelling() {
    // DeepSeek states the shared experts as a count of moe_intermediate_size-wide experts;
    // a config that states their width directly is read under that spelling first.
    let r = validate("deepseek-ai/DeepSeek-V2-Lite", None, |c| {
        c.insert("shared_expert_intermediate_size".into(), 1408.into());
    });
    let m = message(&r, "M003");
    assert!(
        m.contains("dim `d_shared_ffn`") && m.contains("`shared_expert_intermediate_size` = 1408"),
        "{m}"
    );
    let r = validate(
        "deepseek-ai/DeepSeek-V2-Lite",
        Some((
            "specs/models/deepseek_v2.yaml",
            "d_shared_ffn: \"config.moe_intermediate_size * config.n_shared_experts\"",
            "d_shared_ffn: \"config.moe_intermediate_size * (config.n_shared_experts - 1)\"",
        )),
        |_| {},
    );
    let m = message(&r, "M003");
    assert!(
        m.contains("`moe_intermediate_size` = 1408 × `n_shared_experts` = 2"),
        "{m}"
    );
}

#[test]
fn a_slot_renamed_only_with_its_children_is_compared_with_the_source() {
    // MiniMax-M3 stores its MoE under `block_sparse_moe`; transformers 5 renames it to `mlp` only
    // in names that go on to a child (`.block_sparse_moe.(experts|gate|shared_experts).`), so the
    // slot is read as the attribute its children land under.
    let r = validate("MiniMaxAI/MiniMax-M3", None, |_| {});
    assert!(r.errors.is_empty(), "{:#?}", r.errors);
    assert!(
        !r.unverified.iter().any(|u| u.contains("moe_")),
        "{:#?}",
        r.unverified
    );
    let wrong = validate(
        "MiniMaxAI/MiniMax-M3",
        Some((
            "specs/components/library/pre_norm_block.yaml",
            "out: { op: add, in: [attn_residual, ffn] }",
            "out: { op: add, in: [hidden, ffn] }",
        )),
        |_| {},
    );
    let blocks: Vec<&str> = wrong
        .errors
        .iter()
        .filter(|e| e.code == "O008")
        .map(|e| e.message.as_str())
        .collect();
    for b in ["moe_full", "moe_sparse"] {
        assert!(
            blocks.iter().any(|m| m.contains(&format!("block `{b}`"))),
            "{blocks:#?}"
        );
    }
}

#[test]
fn a_routed_scale_read_under_another_key_is_held_to_that_key() {
    // A checkpoint whose source scales the routed weights by a key of its own (as Step-3.7's
    // `config.moe_router_scaling_factor`) and whose config has no `routed_scaling_factor`: the
    // factor is the source's key's value, which the spec's `routed_scaling_factor ?? 1` misses.
    let run = |spec_scale: &str| {
        let mut files = harch_library::specs::read_spec_files(&root()).unwrap();
        let text = files.get_mut("specs/models/deepseek_v3.yaml").unwrap();
        *text = text.replacen(
            "router_scale: \"config.routed_scaling_factor ?? 1\"",
            &format!("router_scale: \"{spec_scale}\""),
            1,
        );
        let repo = Repo::from_files(files);
        let mut t = truth("deepseek-ai/DeepSeek-V3");
        let c = t.config.as_object_mut().unwrap();
        let v = c.remove("routed_scaling_factor").expect("V3 states it");
        c.insert("moe_router_scaling_factor".into(), v);
        for (_, src) in t.sources.iter_mut() {
            *src = src
                .replace(
                    "self.routed_scaling_factor = config.routed_scaling_factor",
                    "self.routed_scaling_factor = config.moe_router_scaling_factor",
                )
                .replace(
                    "routed_scaling_factor=2.5,",
                    "moe_router_scaling_factor=2.5,",
                )
                .replace(
                    "self.routed_scaling_factor = routed_scaling_factor",
                    "self.moe_router_scaling_factor = moe_router_scaling_factor",
                );
        }
        let model = subject::library_model(&repo, &t.config)
            .unwrap()
            .to_string();
        harch_guards::validate(&repo, &model, &t, &GuardSet::all()).0
    };
    let wrong = run("config.routed_scaling_factor ?? 1");
    let m = message(&wrong, "M027");
    assert!(
        m.contains("scales the kept weights by 1")
            && m.contains("config `moe_router_scaling_factor` = 2.5")
            && m.contains("topk_weights = topk_weights * self.routed_scaling_factor"),
        "{m}"
    );
    let right = run("config.moe_router_scaling_factor");
    assert!(!codes(&right).contains(&"M027"), "{:#?}", right.errors);
}
