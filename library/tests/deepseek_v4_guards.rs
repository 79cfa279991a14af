//! DeepSeek-V4-Flash-0731's library spec under the guards, against its config and the transformers 5.23.0 forward source: a
//! compressor's ratio is the config's for each of its layers (M011), and the guards look the
//! checkpoint's module names up under the load-time renames of conversion_mapping.py.

use std::collections::BTreeMap;
use std::path::PathBuf;

use harch_engine::Repo;
use harch_guards::truth::Truth;
use harch_guards::{GuardSet, validate};
use harch_truth::source;

const SPEC: &str = include_str!("../../specs/models/deepseek_v4.yaml");
const CONFIG: &str = include_str!("../../engine/tests/fixtures/deepseek_v4/config.json");

fn library_files() -> BTreeMap<String, String> {
    let root = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("..");
    let mut files = BTreeMap::new();
    let mut stack = vec![root.join("specs")];
    while let Some(dir) = stack.pop() {
        for e in std::fs::read_dir(&dir)
            .expect("specs/ is readable")
            .flatten()
        {
            let path = e.path();
            if path.is_dir() {
                stack.push(path);
            } else if path.extension().is_some_and(|x| x == "yaml") {
                let key = path
                    .strip_prefix(&root)
                    .unwrap()
                    .to_string_lossy()
                    .replace('\\', "/");
                files.insert(key, std::fs::read_to_string(&path).unwrap());
            }
        }
    }
    files
}

fn codes(spec: &str) -> Vec<(String, String)> {
    codes_with(spec, serde_json::from_str(CONFIG).unwrap())
}

fn codes_with(spec: &str, config: serde_json::Value) -> Vec<(String, String)> {
    let src = source::resolve_native(&config).expect(
        "no deepseek_v4 source: run scripts/fetch-transformers-src (or set HARCH_TRANSFORMERS_SRC)",
    );
    let truth = Truth {
        config,
        sources: src.files,
        ..Default::default()
    };
    let mut files = library_files();
    files.insert("specs/models/deepseek_v4.yaml".into(), spec.to_string());
    let repo = Repo::from_files(files);
    let (report, _) = validate(&repo, "deepseek_v4", &truth, &GuardSet::all());
    report
        .errors
        .iter()
        .map(|d| (d.code.to_string(), d.message.clone()))
        .collect()
}

#[test]
fn the_conversion_renames_ride_with_the_v4_source() {
    let config: serde_json::Value = serde_json::from_str(CONFIG).unwrap();
    let src = source::resolve_native(&config).expect("deepseek_v4 source");
    let entry = &src.files[harch_guards::conversion::CONVERSION_FILE];
    let r = harch_guards::conversion::Renames::read(entry);
    assert_eq!(
        r.module("layers.{i}.attn.wq_a"),
        "layers.{i}.self_attn.q_a_proj"
    );
    assert_eq!(
        r.module("layers.{i}.attn.indexer.compressor.norm"),
        "layers.{i}.self_attn.compressor.indexer.kv_norm"
    );
    assert_eq!(r.module("embed"), "embed_tokens");
}

#[test]
fn a_compression_ratio_other_than_the_configs_is_m011() {
    let clean = codes(SPEC);
    eprintln!("clean spec, remaining errors (the inventory is left empty here):");
    for (c, m) in &clean {
        eprintln!("  {c}: {}", m.chars().take(200).collect::<String>());
    }
    assert!(!clean.iter().any(|(c, _)| c == "M011"), "{clean:#?}");
    // The HCA block given the CSA ratio as a literal.
    let from = "  hca:\n    bind: { compress_ratio: \"config.compress_ratios[i]\" }";
    assert!(SPEC.contains(from));
    let wrong = codes(&SPEC.replacen(from, "  hca:\n    bind: { compress_ratio: 4 }", 1));
    let m = wrong
        .iter()
        .find(|(c, _)| c == "M011")
        .unwrap_or_else(|| panic!("{wrong:#?}"));
    assert!(
        m.1.contains("at layer 3, but config `compress_ratios[3]` is 128"),
        "{}",
        m.1
    );
}

#[test]
fn hc_mult_written_as_a_literal_is_c001() {
    // The residual's stream count hard-coded: the numbers are right for this checkpoint and
    // wrong for the next, and config's `hc_mult` is read by nothing.
    let from = "  hc_mult: config.hc_mult\n";
    assert!(SPEC.contains(from));
    let wrong = codes(&SPEC.replacen(from, "  hc_mult: 4\n", 1));
    assert!(
        wrong
            .iter()
            .any(|(c, m)| c == "C001" && m.contains("`hc_mult`")),
        "{wrong:#?}"
    );
    // Bound through an equivalent expression, it is read.
    let same = codes(&SPEC.replacen(from, "  hc_mult: \"config.hc_mult * 1\"\n", 1));
    assert!(
        !same
            .iter()
            .any(|(c, m)| c == "C001" && m.contains("`hc_mult`")),
        "{same:#?}"
    );
}

/// The checkpoint's own `quantization_config` (fp8, E8M0 scales, 128 × 128 blocks) is what the
/// spec's schemes implement; one stating another block, or a method no scheme implements,
/// is refused by the packing guard (P005, and P004 at the tensors stored otherwise).
#[test]
fn the_quantization_config_is_held_to_the_schemes_that_implement_it() {
    let quant = |c: &[(String, String)]| -> Vec<String> {
        c.iter()
            .filter(|(code, _)| code == "P004" || code == "P005")
            .map(|(code, m)| format!("{code}: {m}"))
            .collect()
    };
    assert_eq!(quant(&codes(SPEC)), Vec::<String>::new());
    let mut config: serde_json::Value = serde_json::from_str(CONFIG).unwrap();
    config["quantization_config"]["weight_block_size"] = serde_json::json!([64, 64]);
    let found = quant(&codes_with(SPEC, config.clone()));
    assert!(
        found
            .iter()
            .any(|m| m.starts_with("P005") && m.contains("[64,64]")),
        "{found:#?}"
    );
    assert!(
        found
            .iter()
            .any(|m| m.starts_with("P004") && m.contains("fp8_e8m0_block128")),
        "{found:#?}"
    );
    config["quantization_config"] =
        serde_json::json!({ "quant_method": "awq", "bits": 4, "group_size": 128 });
    let found = quant(&codes_with(SPEC, config));
    assert!(
        found
            .iter()
            .any(|m| m.starts_with("P005") && m.contains("awq")),
        "{found:#?}"
    );
}
