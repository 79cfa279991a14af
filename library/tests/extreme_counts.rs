//! Configs with absurd counts (layers, experts, heads up to 10^9) are located errors: no panic,
//! no allocation abort, and the process stays under 1 GiB. One test binary of its own, so that
//! its peak memory is its own.

use harch_engine::Repo;
use harch_guards::truth::Truth;
use harch_guards::{GuardSet, Report};
use harch_library::subject;
use harch_truth::snapshot;
use proptest::prelude::*;

fn root() -> std::path::PathBuf {
    std::path::PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("..")
}

fn repo() -> Repo {
    Repo::from_files(harch_library::specs::read_spec_files(&root()).unwrap())
}

fn validate(repo: &Repo, t: &Truth) -> Report {
    let model = subject::library_model(repo, &t.config).unwrap().to_string();
    harch_guards::validate(repo, &model, t, &GuardSet::all()).0
}

fn with(id: &str, key: &str, v: u64) -> Truth {
    let mut t = snapshot::load_snapshot(id).unwrap();
    t.config[key] = v.into();
    t
}

/// Peak resident memory of this process (Linux `VmHWM`), in bytes.
fn peak_rss() -> Option<u64> {
    let s = std::fs::read_to_string("/proc/self/status").ok()?;
    let line = s.lines().find(|l| l.starts_with("VmHWM:"))?;
    let kb: u64 = line.split_whitespace().nth(1)?.parse().ok()?;
    Some(kb * 1024)
}

#[test]
fn absurd_counts_are_clean_errors_in_bounded_memory() {
    let repo = repo();
    let cases = [
        (
            "deepseek-ai/DeepSeek-V3",
            "num_hidden_layers",
            100_000,
            "W008",
        ),
        (
            "deepseek-ai/DeepSeek-V3",
            "n_routed_experts",
            1_000_000,
            "W008",
        ),
        (
            "deepseek-ai/DeepSeek-V3",
            "num_hidden_layers",
            1_000_000_000,
            "A002",
        ),
        ("Qwen/Qwen3-30B-A3B", "num_experts", 1_000_000_000, "A002"),
        (
            "Qwen/Qwen3-8B",
            "num_attention_heads",
            1_000_000_000,
            "W003",
        ),
    ];
    for (id, key, v, code) in cases {
        let r = validate(&repo, &with(id, key, v));
        assert!(!r.valid, "{id} {key}={v}");
        let e = r
            .errors
            .iter()
            .find(|e| e.code == code)
            .unwrap_or_else(|| panic!("{id} {key}={v}: no {code} in {:#?}", r.errors));
        assert!(
            e.location.file.is_some(),
            "{id} {key}={v}: {code} is located"
        );
        assert!(
            r.errors.iter().all(|e| e.message.len() < 2_000),
            "{id} {key}={v}: messages stay short"
        );
    }
    if let Some(peak) = peak_rss() {
        assert!(peak < 1 << 30, "peak RSS {peak} bytes");
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 24, ..ProptestConfig::default() })]

    /// Any count up to 10^9 in any of the keys that size a model: validate answers.
    #[test]
    fn extreme_counts_never_panic(
        which in 0usize..3,
        key in prop::sample::select(vec![
            "num_hidden_layers", "num_attention_heads", "num_key_value_heads", "head_dim",
            "num_experts", "n_routed_experts", "num_local_experts", "num_experts_per_tok",
            "moe_intermediate_size", "first_k_dense_replace", "num_nextn_predict_layers",
        ]),
        v in prop_oneof![0u64..4, 1_000u64..200_000, 100_000_000u64..=1_000_000_000],
    ) {
        let id = ["Qwen/Qwen3-30B-A3B", "openai/gpt-oss-20b", "deepseek-ai/DeepSeek-V2-Lite"][which];
        let mut t = snapshot::load_snapshot(id).unwrap();
        if t.config.get(key).is_none() {
            return Ok(());
        }
        t.config[key] = v.into();
        let r = validate(&repo(), &t);
        // Either the count happens to be the checkpoint's, or something says why not.
        prop_assert!(r.valid || !r.errors.is_empty());
    }
}
