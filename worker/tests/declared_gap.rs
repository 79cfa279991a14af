//! The honesty path as a user meets it: a gap report beside a spec is read whether or not the
//! spec validates and checked by `validate` itself (G001-G004); a spec that validates with a
//! report that holds is "valid with a declared gap", and `show` and `explain` label the
//! numbers the report names as unverified. A report whose evidence the truth contradicts makes
//! the spec invalid, with the report's location.

use std::path::{Path, PathBuf};
use std::process::Command;

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("..")
}

fn harch(dir: &Path, args: &[&str]) -> (i32, String, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_harch-worker"))
        .current_dir(dir)
        .env("HARCH_ROOT", root())
        .args(args)
        .output()
        .unwrap();
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into(),
        String::from_utf8_lossy(&out.stderr).into(),
    )
}

const GAP: &str = r#"kind: dsl_gap
summary: "decode attention reads a selection the DSL cannot state"
needs: "attention over selected positions"
affects: [decode_flops_per_token, prefill_flops]
evidence:
  - 'cfg: hidden_size = 4096'
  - 'ckpt: model.layers.X.self_attn.q_proj.weight = [4096, 4096] BF16'
"#;

/// A copy of the Llama spec (it stands in for the library's) with `gap` beside it.
fn spec_with_gap(dir: &Path, gap: &str) -> String {
    let text = std::fs::read_to_string(root().join("specs/models/llama.yaml")).unwrap();
    std::fs::write(dir.join("llama.yaml"), text).unwrap();
    std::fs::write(dir.join("llama.gap.yaml"), gap).unwrap();
    dir.join("llama.yaml").display().to_string()
}

#[test]
fn a_valid_spec_with_a_gap_that_holds_is_valid_with_a_declared_gap_and_its_numbers_are_labelled() {
    let dir = tempfile::tempdir().unwrap();
    let spec = spec_with_gap(dir.path(), GAP);

    let (code, out, err) = harch(dir.path(), &["validate", &spec]);
    assert_eq!(code, 0, "{out}{err}");
    assert!(
        out.contains("valid with a declared gap: decode attention reads a selection"),
        "{out}"
    );
    assert!(
        out.contains("unverified: decode_flops_per_token, prefill_flops"),
        "{out}"
    );

    let (code, out, err) = harch(dir.path(), &["validate", &spec, "--json"]);
    assert_eq!(code, 0, "{out}{err}");
    let v: serde_json::Value = serde_json::from_str(&out).unwrap();
    assert_eq!(v["valid"], true);
    assert_eq!(v["declared_gap"]["kind"], "dsl_gap");
    assert_eq!(v["declared_gap"]["evidence"].as_array().unwrap().len(), 2);

    let (code, out, err) = harch(dir.path(), &["show", &spec, "--json"]);
    assert_eq!(code, 0, "{out}{err}");
    let v: serde_json::Value = serde_json::from_str(&out).unwrap();
    assert_eq!(
        v["unverified"],
        serde_json::json!(["decode_flops_per_token", "prefill_flops"])
    );
    let (_, out, _) = harch(dir.path(), &["show", &spec]);
    let line = |name: &str| {
        out.lines()
            .find(|l| l.starts_with(name))
            .unwrap_or_else(|| panic!("no `{name}` row in\n{out}"))
            .to_string()
    };
    assert!(
        line("decode FLOPs").contains("unverified (declared gap"),
        "{out}"
    );
    assert!(
        line("prefill FLOPs").contains("unverified (declared gap"),
        "{out}"
    );
    assert!(!line("params total").contains("unverified"), "{out}");

    let (_, out, _) = harch(dir.path(), &["explain", &spec, "prefill_flops"]);
    assert!(out.contains("unverified (declared gap"), "{out}");
    let (_, out, _) = harch(dir.path(), &["explain", &spec, "params_total"]);
    assert!(!out.contains("unverified"), "{out}");
}

#[test]
fn a_gap_report_the_truth_contradicts_makes_the_spec_invalid_at_the_report() {
    let dir = tempfile::tempdir().unwrap();
    let spec = spec_with_gap(dir.path(), &GAP.replace("4096'", "2048'"));
    let (code, out, err) = harch(dir.path(), &["validate", &spec, "--json"]);
    assert_eq!(code, 1, "{out}{err}");
    let v: serde_json::Value = serde_json::from_str(&out).unwrap();
    let e = &v["errors"][0];
    assert_eq!(e["code"], "G003", "{out}");
    assert!(
        e["location"]["file"]
            .as_str()
            .unwrap()
            .ends_with("llama.gap.yaml"),
        "{out}"
    );

    // A valid spec's report must say which numbers it affects, and only with quantities
    // the engine has.
    let spec = spec_with_gap(
        dir.path(),
        &GAP.replace("affects: [decode_flops_per_token, prefill_flops]\n", ""),
    );
    let (code, out, _) = harch(dir.path(), &["validate", &spec, "--json"]);
    assert_eq!(code, 1, "{out}");
    assert!(out.contains("names no number it affects"), "{out}");
    let spec = spec_with_gap(dir.path(), &GAP.replace("prefill_flops]", "speed]"));
    let (code, out, _) = harch(dir.path(), &["validate", &spec, "--json"]);
    assert_eq!(code, 1, "{out}");
    assert!(out.contains("`affects` names `speed`"), "{out}");
    // `show` still shows the numbers, with a note that the report does not hold.
    let (code, out, _) = harch(dir.path(), &["show", &spec]);
    assert_eq!(code, 0, "{out}");
    assert!(
        out.contains("note: the gap report beside the spec does not hold"),
        "{out}"
    );
}
