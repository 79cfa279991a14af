//! The semantic and structural guards against configs the library snapshots do not have: every
//! spelling of the rotary width, counts that are not counts.

use harch_engine::Repo;
use harch_guards::truth::Truth;
use harch_guards::{GuardSet, Report};
use harch_worker::{snapshot, source, subject};

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
    let mut files = harch_worker::specs::read_spec_files(&root()).unwrap();
    if let Some((file, find, replace)) = patch {
        let text = files.get_mut(file).unwrap();
        assert_eq!(text.matches(find).count(), 1, "{find}");
        *text = text.replacen(find, replace, 1);
    }
    let repo = Repo::from_files(files);
    let mut t = truth(id);
    edit(t.config.as_object_mut().unwrap());
    let model = subject::architectures(&t.config)
        .iter()
        .find_map(|a| repo.model_for_architecture(a))
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
    let moved = |c: &mut serde_json::Map<String, serde_json::Value>| {
        let f = c.remove("partial_rotary_factor").unwrap();
        c.insert(
            "rope_parameters".into(),
            serde_json::json!({ "rope_type": "default", "partial_rotary_factor": f }),
        );
    };
    // The library spec reads only the top-level key: it would rotate the whole head.
    let r = validate("Qwen/Qwen3-Next-80B-A3B", None, moved);
    assert_eq!(codes(&r), ["R002"], "{:#?}", r.errors);
    let m = message(&r, "R002");
    assert!(
        m.contains("rotates 256 channels") && m.contains("rope_parameters.partial_rotary_factor"),
        "{m}"
    );
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
        c.insert("rotary_dim".into(), 64.into());
    };
    let r = validate("Qwen/Qwen3-Next-80B-A3B", None, absolute);
    let m = message(&r, "R002");
    assert!(m.contains("config `rotary_dim` = 64 gives 64"), "{m}");
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
