//! `harch-worker validate` as a user runs it: exit codes, JSON shape, and the human output pinned
//! by a golden file (`UPDATE_GOLDEN=1` rewrites it after a deliberate change).

use std::path::{Path, PathBuf};
use std::process::Command;

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("..")
}

fn validate(args: &[&str]) -> (i32, String, String) {
    validate_in(&root(), args)
}

fn validate_in(dir: &Path, args: &[&str]) -> (i32, String, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_harch-worker"))
        .current_dir(dir)
        .arg("validate")
        .args(args)
        .output()
        .unwrap();
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into(),
        String::from_utf8_lossy(&out.stderr).into(),
    )
}

fn broken_llama(dir: &Path) -> PathBuf {
    let text = std::fs::read_to_string(root().join("specs/models/llama.yaml")).unwrap();
    let broken = text.replacen(
        "n_vocab: config.vocab_size",
        "n_vocab: \"config.vocab_size - 1\"",
        1,
    );
    assert_ne!(text, broken);
    let p = dir.join("llama_broken.yaml");
    std::fs::write(&p, broken).unwrap();
    p
}

#[test]
fn a_library_model_is_valid_and_exits_zero() {
    let (code, out, err) = validate(&["meta-llama/Llama-3.1-8B"]);
    assert_eq!(code, 0, "{out}{err}");
    assert!(out.trim_end().ends_with("valid (0 warnings)"), "{out}");
    assert!(
        out.contains("291 of 291 checkpoint tensors matched"),
        "{out}"
    );
}

/// `--timings` names every phase that ran, each guard included, on stderr only: the report on
/// stdout stays what scripts parse.
#[test]
fn timings_list_each_phase_on_stderr() {
    let (code, out, err) = validate(&["Qwen/Qwen3-8B", "--timings", "--json"]);
    assert_eq!(code, 0, "{out}{err}");
    serde_json::from_str::<serde_json::Value>(&out).expect("stdout is the JSON report alone");
    let line = err
        .lines()
        .find(|l| l.starts_with("timings: "))
        .unwrap_or_else(|| panic!("no timings line in {err}"));
    for phase in [
        "read truth + specs",
        "load",
        "evaluate",
        "weight+packing",
        "schedule",
        "semantic",
        "source",
        "report",
        "total",
    ] {
        assert!(
            line.contains(&format!("{phase} ")),
            "{phase} missing: {line}"
        );
    }
    let (_, _, quiet) = validate(&["Qwen/Qwen3-8B"]);
    assert!(!quiet.contains("timings"), "{quiet}");
}

#[test]
fn an_invalid_spec_exits_one_with_located_json_errors() {
    let dir = tempfile::tempdir().unwrap();
    let spec = broken_llama(dir.path());
    let (code, out, _) = validate(&[spec.to_str().unwrap(), "--json"]);
    assert_eq!(code, 1);
    let v: serde_json::Value = serde_json::from_str(&out).unwrap();
    assert_eq!(v["valid"], false);
    assert_eq!(
        v["guards"].as_array().unwrap().len(),
        harch_guards::tiers::GUARDS.len()
    );
    let errors = v["errors"].as_array().unwrap();
    let w003: Vec<&serde_json::Value> = errors.iter().filter(|e| e["code"] == "W003").collect();
    assert_eq!(w003.len(), 2, "embed_tokens and lm_head: {errors:#?}");
    for e in &w003 {
        assert_eq!(e["guard"], "weight");
        assert_eq!(e["location"]["file"], spec.to_str().unwrap());
        assert!(e["location"]["line"].as_u64().unwrap() > 0);
        assert!(e["hint"].is_string());
    }
    let nodes: Vec<&str> = w003
        .iter()
        .map(|e| e["location"]["node"].as_str().unwrap())
        .collect();
    assert!(
        nodes.contains(&"embed_tokens") && nodes.contains(&"lm_head"),
        "{nodes:?}"
    );
    assert_eq!(v["summary"]["byte_diff"], -16384);
    for key in [
        "checkpoint_bytes",
        "spec_bytes",
        "checkpoint_tensors",
        "matched_tensors",
    ] {
        assert!(v["summary"][key].is_number(), "{key}");
    }
}

#[test]
fn human_output_matches_the_golden_file() {
    let dir = tempfile::tempdir().unwrap();
    broken_llama(dir.path());
    // A relative path, as given, in the locations: the same text in every checkout.
    let (code, out, _) = validate_in(dir.path(), &["llama_broken.yaml"]);
    assert_eq!(code, 1);
    let golden = root().join("tests/golden/validate_vocab_off_by_one.txt");
    if std::env::var_os("UPDATE_GOLDEN").is_some() {
        std::fs::write(&golden, &out).unwrap();
    }
    let want = std::fs::read_to_string(&golden).unwrap();
    assert_eq!(
        out, want,
        "rerun with UPDATE_GOLDEN=1 after a deliberate change"
    );
    assert!(
        out.contains("error[W003]")
            && out.contains("  --> llama_broken.yaml:")
            && out.contains("= help:")
    );
}

#[test]
fn usage_errors_exit_two() {
    assert_eq!(
        validate(&["meta-llama/Llama-3.1-8B", "--tier", "bogus"]).0,
        2
    );
    assert_eq!(validate(&["no/such-model"]).0, 2);
    assert_eq!(validate(&["missing.yaml"]).0, 2);
}

#[test]
fn tiers_say_which_guards_ran() {
    let dir = tempfile::tempdir().unwrap();
    let spec = broken_llama(dir.path());
    let (code, out, _) = validate(&[spec.to_str().unwrap(), "--json", "--tier", "off"]);
    assert_eq!(code, 0, "with every guard off nothing is checked");
    let v: serde_json::Value = serde_json::from_str(&out).unwrap();
    assert_eq!(v["guards"].as_array().unwrap().len(), 0);
    let (code, out, _) = validate(&[spec.to_str().unwrap(), "--json", "--guards", "source,shape"]);
    assert_eq!(code, 0, "the weight guard is what catches this mistake");
    let v: serde_json::Value = serde_json::from_str(&out).unwrap();
    assert_eq!(v["guards"], serde_json::json!(["shape", "source"]));
}

/// `show … | head` and friends: a reader that goes away ends the command quietly (killed by
/// SIGPIPE, as Unix tools are), never with a panic message.
#[test]
fn a_closed_stdout_is_not_a_panic() {
    for args in [
        &["show", "meta-llama/Llama-3.1-8B"][..],
        &["ops"][..],
        &["validate", "meta-llama/Llama-3.1-8B"][..],
    ] {
        let mut child = std::process::Command::new(env!("CARGO_BIN_EXE_harch-worker"))
            .args(args)
            .current_dir(root())
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .unwrap();
        // Close the read end before the command has written anything.
        drop(child.stdout.take());
        let out = child.wait_with_output().unwrap();
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(!stderr.contains("panicked"), "{args:?}: {stderr}");
        assert!(
            !stderr.contains("Broken pipe"),
            "{args:?} reported the closed pipe as an error: {stderr}"
        );
    }
}

/// A truth directory holding the bundled snapshot of `id`, recording `recorded` as its model id
/// (none: no truth.json names it).
fn truth_dir_of(dir: &Path, id: &str, recorded: Option<&str>) -> PathBuf {
    let truth = harch_worker::snapshot::load_snapshot(id).unwrap();
    let out = dir.join(id.replace('/', "__"));
    let meta = harch_worker::truth_dir::TruthMeta {
        model_id: recorded.unwrap_or("").into(),
        ..Default::default()
    };
    harch_worker::truth_dir::write_from_truth(&out, &truth, &meta).unwrap();
    if recorded.is_none() {
        std::fs::remove_file(out.join("truth.json")).unwrap();
    }
    out
}

#[test]
fn a_model_id_checked_against_another_models_truth_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    // truth.json says which model the directory holds.
    let qwen = truth_dir_of(dir.path(), "Qwen/Qwen3-8B", Some("Qwen/Qwen3-8B"));
    let (code, out, err) =
        validate(&["deepseek-ai/DeepSeek-V3", "--truth", qwen.to_str().unwrap()]);
    assert_eq!(code, 2, "{out}{err}");
    assert!(
        err.contains("M010") && err.contains("`Qwen/Qwen3-8B`"),
        "{err}"
    );
    // Without truth.json, the architectures of the id's bundled snapshot decide.
    let bare = truth_dir_of(dir.path(), "meta-llama/Llama-3.1-8B", None);
    let (code, _, err) = validate(&["Qwen/Qwen3-8B", "--truth", bare.to_str().unwrap()]);
    assert_eq!(code, 2, "{err}");
    assert!(
        err.contains("LlamaForCausalLM") && err.contains("Qwen3ForCausalLM"),
        "{err}"
    );
    // The matching truth validates, and both reports name the spec file and the truth.
    let (code, out, err) = validate(&["Qwen/Qwen3-8B", "--truth", qwen.to_str().unwrap()]);
    assert_eq!(code, 0, "{out}{err}");
    assert!(
        out.contains(&format!(
            "checked specs/models/qwen3.yaml against {}",
            qwen.display()
        )),
        "{out}"
    );
    let (code, out, _) = validate(&["Qwen/Qwen3-8B", "--truth", qwen.to_str().unwrap(), "--json"]);
    assert_eq!(code, 0);
    let v: serde_json::Value = serde_json::from_str(&out).unwrap();
    assert_eq!(v["spec"], "specs/models/qwen3.yaml");
    let t = v["truth"].as_str().unwrap();
    assert!(
        t.contains(&qwen.display().to_string()) && t.contains("Qwen/Qwen3-8B"),
        "{t}"
    );
}
