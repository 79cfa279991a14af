//! The maintainers' side of publishing, through the real binary on a throwaway spec repository
//! (a git repository holding a copy of the project's specs): `promote` moves a draft into the
//! library as a git move and refuses when a spec using it would not validate; `validate-changed`
//! checks exactly the specs a change affects against their recorded truth.
//!
//! Needs the forward source of llama (scripts/fetch-transformers-src).

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

const BIN: &str = env!("CARGO_BIN_EXE_harch-worker");
const DRAFT: &str = "swiglu_mlp_draft";

fn project_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("..")
}

fn copy_dir(from: &Path, to: &Path) {
    std::fs::create_dir_all(to).unwrap();
    for e in std::fs::read_dir(from).unwrap() {
        let e = e.unwrap();
        if e.path().is_dir() {
            copy_dir(&e.path(), &to.join(e.file_name()));
        } else {
            std::fs::copy(e.path(), to.join(e.file_name())).unwrap();
        }
    }
}

/// A spec repository whose llama uses a draft copy of the library's SwiGLU MLP, committed.
struct SpecRepo {
    tmp: tempfile::TempDir,
}

impl SpecRepo {
    fn new() -> SpecRepo {
        let tmp = tempfile::tempdir().unwrap();
        let specs = tmp.path().join("specs");
        for sub in ["arch", "quant", "components/library", "models"] {
            copy_dir(&project_root().join("specs").join(sub), &specs.join(sub));
        }
        let lib =
            std::fs::read_to_string(specs.join("components/library/swiglu_mlp.yaml")).unwrap();
        let draft = lib.replace("component: swiglu_mlp\n", &format!("component: {DRAFT}\n"));
        assert_ne!(draft, lib);
        std::fs::create_dir_all(specs.join("components/drafts")).unwrap();
        std::fs::write(specs.join(format!("components/drafts/{DRAFT}.yaml")), draft).unwrap();
        let llama = std::fs::read_to_string(specs.join("models/llama.yaml")).unwrap();
        let llama = llama
            .replace("ffn: swiglu_mlp }", &format!("ffn: {DRAFT} }}"))
            .replace("blocks:\n", &format!("drafts: [{DRAFT}]\nblocks:\n"));
        std::fs::write(specs.join("models/llama.yaml"), llama).unwrap();
        std::fs::write(tmp.path().join("README.md"), "specs\n").unwrap();
        let r = SpecRepo { tmp };
        r.commit("base");
        r
    }

    fn root(&self) -> &Path {
        self.tmp.path()
    }

    /// `git ARGS` in the work tree (which `commit` makes a repository), its stdout.
    fn git(&self, args: &[&str]) -> String {
        git(self.root(), args)
    }

    /// Commits the whole work tree on the current branch.
    fn commit(&self, message: &str) -> String {
        if !self.root().join(".git").exists() {
            self.git(&["init", "--quiet", "--initial-branch=main"]);
        }
        self.git(&["add", "--all"]);
        self.git(&[
            "-c",
            "user.name=Maintainer",
            "-c",
            "user.email=m@example.com",
            "commit",
            "--quiet",
            "--no-gpg-sign",
            "--allow-empty",
            "-m",
            message,
        ]);
        self.git(&["rev-parse", "HEAD"]).trim().to_string()
    }

    fn run(&self, args: &[&str]) -> Output {
        let mut c = Command::new(BIN);
        c.args(args)
            .current_dir(self.root())
            .env("HARCH_ROOT", self.root());
        c.output().unwrap()
    }

    fn read(&self, p: &str) -> String {
        std::fs::read_to_string(self.root().join(p)).unwrap()
    }
}

/// `git ARGS` in `dir`, which must succeed; its stdout.
fn git(dir: &Path, args: &[&str]) -> String {
    let out = Command::new("git")
        .arg("-C")
        .arg(dir)
        .args(args)
        .env("LC_ALL", "C")
        .output()
        .expect("the tests need the git command line");
    assert!(
        out.status.success(),
        "git {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

fn text(o: &Output) -> String {
    format!(
        "{}{}",
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    )
}

#[test]
fn promote_moves_the_draft_into_the_library_as_a_git_move() {
    let r = SpecRepo::new();
    let out = r.run(&["promote", DRAFT, "--offline"]);
    assert!(out.status.success(), "{}", text(&out));
    let said = text(&out);
    assert!(
        said.contains("✓ specs/models/llama.yaml validates with it in the library"),
        "{said}"
    );
    let from = format!("specs/components/drafts/{DRAFT}.yaml");
    let to = format!("specs/components/library/{DRAFT}.yaml");
    assert!(!r.root().join(&from).exists());
    assert!(r.read(&to).contains(&format!("component: {DRAFT}")));
    let llama = r.read("specs/models/llama.yaml");
    assert!(!llama.contains("drafts:"), "{llama}");
    assert!(llama.contains(&format!("ffn: {DRAFT} }}")), "{llama}");
    // Staged as git mv would: the index has the library file and not the draft.
    assert!(!r.git(&["ls-files", "--stage", "--", &to]).is_empty());
    assert!(r.git(&["ls-files", "--stage", "--", &from]).is_empty());
    let staged = r.git(&["diff", "--cached", "--name-status", "-M", "HEAD"]);
    assert!(
        staged.lines().any(|l| l.starts_with('R')),
        "no rename staged: {staged}"
    );
    // The library spec validates as it is.
    let v = r.run(&["validate", "specs/models/llama.yaml"]);
    assert!(v.status.success(), "{}", text(&v));
}

#[test]
fn promote_refuses_when_a_spec_using_the_draft_does_not_validate() {
    let r = SpecRepo::new();
    let path = format!("specs/components/drafts/{DRAFT}.yaml");
    let draft = r.read(&path);
    // A maintainer's edit that breaks the draft for llama: gate and up projections swapped
    // dims would not do (symmetric); the intermediate size bound to the model width does.
    let broken = draft.replacen("d_ffn", "d_model", 1);
    assert_ne!(broken, draft);
    std::fs::write(r.root().join(&path), broken).unwrap();
    let out = r.run(&["promote", DRAFT, "--offline"]);
    assert_eq!(out.status.code(), Some(1), "{}", text(&out));
    let said = text(&out);
    assert!(said.contains("refusing to promote"), "{said}");
    assert!(said.contains("specs/models/llama.yaml"), "{said}");
    assert!(r.root().join(&path).is_file(), "the draft moved anyway");
    assert!(r.read("specs/models/llama.yaml").contains("drafts:"));
}

#[test]
fn promote_refuses_a_library_component_and_an_unknown_name() {
    let r = SpecRepo::new();
    let out = r.run(&["promote", "swiglu_mlp", "--offline"]);
    assert_eq!(out.status.code(), Some(1));
    assert!(
        text(&out).contains("already a library component"),
        "{}",
        text(&out)
    );
    let out = r.run(&["promote", "nope", "--offline"]);
    assert_eq!(out.status.code(), Some(1));
    assert!(text(&out).contains(DRAFT), "{}", text(&out));
}

#[test]
fn validate_changed_checks_the_specs_a_change_affects() {
    let r = SpecRepo::new();
    let base = r.commit("nothing");
    let base = base.to_string();
    // Only the README: no spec is affected.
    std::fs::write(r.root().join("README.md"), "specs, now documented\n").unwrap();
    r.commit("docs");
    let out = r.run(&["validate-changed", "--base", &base, "--offline"]);
    assert!(out.status.success(), "{}", text(&out));
    assert!(
        text(&out).contains("none of them affects a model spec"),
        "{}",
        text(&out)
    );

    // A draft edit that breaks llama: llama is checked (only llama) and fails.
    let path = format!("specs/components/drafts/{DRAFT}.yaml");
    let broken = r.read(&path).replacen("d_ffn", "d_model", 1);
    std::fs::write(r.root().join(&path), broken).unwrap();
    r.commit("break the draft");
    let md = r.root().join("comment.md");
    let out = r.run(&[
        "validate-changed",
        "--base",
        &base,
        "--offline",
        "--markdown",
        md.to_str().unwrap(),
        "--pages",
        r.root().join("pages").to_str().unwrap(),
    ]);
    assert_eq!(out.status.code(), Some(1), "{}", text(&out));
    let comment = std::fs::read_to_string(&md).unwrap();
    assert!(comment.contains("0 of 1 affected specs valid"), "{comment}");
    // The affected spec's Inspector page: written, with its errors instead of figures.
    let pages: Vec<_> = std::fs::read_dir(r.root().join("pages"))
        .unwrap()
        .map(|e| e.unwrap().path())
        .collect();
    assert_eq!(pages.len(), 1, "{pages:?}");
    let page = std::fs::read_to_string(&pages[0]).unwrap();
    assert!(
        page.contains("\"valid\":false"),
        "the page records the failed validation"
    );
    assert!(comment.contains("Inspector pages: 1 written"), "{comment}");
    assert!(
        comment.contains("| `specs/models/llama.yaml` |"),
        "{comment}"
    );
    assert!(
        comment.contains("bundled snapshot of meta-llama/Llama-3.1-8B"),
        "{comment}"
    );
    assert!(comment.contains("✗"), "{comment}");
}

#[test]
fn validate_changed_uses_the_truth_a_provenance_record_names() {
    let r = SpecRepo::new();
    let base = r.commit("nothing").to_string();
    // A dense Qwen3 spec under a new name whose provenance says it describes the MoE
    // checkpoint: the record, not the spec's architectures, picks the truth, and the check
    // fails as it must.
    let qwen =
        r.read("specs/models/qwen3.yaml")
            .replacen("model: qwen3\n", "model: qwen3_bot\n", 1);
    std::fs::write(r.root().join("specs/models/qwen3_bot.yaml"), qwen).unwrap();
    std::fs::create_dir_all(r.root().join("specs/provenance")).unwrap();
    let prov = serde_json::json!({
        "schema": "harch.provenance/1",
        "model_id": "Qwen/Qwen3-30B-A3B",
        "truth": {"model_id": "Qwen/Qwen3-30B-A3B", "origin": "snapshot"},
        "spec": "specs/models/qwen3_bot.yaml",
        "validate": {"valid": true, "guards": [], "errors": 0, "checkpoint_tensors": 0,
            "matched_tensors": 0, "checkpoint_bytes": 0, "spec_bytes": 0, "byte_diff": 0},
        "figures": {"params_total": 0, "params_active": 0, "params_mtp": 0, "weight_bytes": 0,
            "weight_tensors": 0, "kv_bytes_per_token": 0, "kv_window_bytes_per_token": 0,
            "state_bytes_per_sequence": 0, "context": 0, "decode_flops_per_token": 0, "groups": []},
        "review": {"status": "not_reviewed", "reasons": [], "mapping": [], "defects": []},
        "job": {"id": "j", "harch_version": "0"},
        "reproduce": [],
    });
    std::fs::write(
        r.root().join("specs/provenance/Qwen__Qwen3-30B-A3B.json"),
        serde_json::to_string_pretty(&prov).unwrap(),
    )
    .unwrap();
    r.commit("add qwen3_bot");
    let out = r.run(&["validate-changed", "--base", &base, "--offline", "--json"]);
    let said = text(&out);
    assert_eq!(out.status.code(), Some(1), "{said}");
    let results: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let results = results.as_array().unwrap();
    assert_eq!(results.len(), 1, "{said}");
    assert_eq!(results[0]["spec"], "specs/models/qwen3_bot.yaml");
    assert_eq!(results[0]["model_id"], "Qwen/Qwen3-30B-A3B");
    assert_eq!(
        results[0]["truth"],
        "bundled snapshot of Qwen/Qwen3-30B-A3B"
    );
    assert_eq!(results[0]["valid"], false);
    assert!(
        results[0]["errors"].to_string().contains("[weight]"),
        "{said}"
    );

    // The same spec with the right record validates.
    let fixed = serde_json::to_string_pretty(&serde_json::json!({
        "model_id": "Qwen/Qwen3-8B",
        "truth": {"model_id": "Qwen/Qwen3-8B", "origin": "snapshot"},
    }))
    .unwrap();
    let mut p: serde_json::Value = prov.clone();
    let f: serde_json::Value = serde_json::from_str(&fixed).unwrap();
    p["model_id"] = f["model_id"].clone();
    p["truth"] = f["truth"].clone();
    std::fs::remove_file(r.root().join("specs/provenance/Qwen__Qwen3-30B-A3B.json")).unwrap();
    std::fs::write(
        r.root().join("specs/provenance/Qwen__Qwen3-8B.json"),
        serde_json::to_string_pretty(&p).unwrap(),
    )
    .unwrap();
    r.commit("right provenance");
    let out = r.run(&["validate-changed", "--base", &base, "--offline", "--json"]);
    assert!(out.status.success(), "{}", text(&out));
}

/// The workflow a spec repository runs is YAML GitHub accepts, triggers on pull requests, and
/// calls this binary's commands with flags they have (so it cannot drift from the CLI).
#[test]
fn the_spec_repository_workflow_calls_real_commands() {
    let path = project_root().join(".github/workflows/validate-specs.yml");
    let text = std::fs::read_to_string(&path).unwrap();
    let opts = serde_saphyr::options! { strict_booleans: true };
    let wf: serde_json::Value = serde_saphyr::from_str_with_options(&text, opts).unwrap();
    assert!(wf["on"]["pull_request"].is_object(), "{wf:#}");
    assert_eq!(wf["permissions"]["pull-requests"], "write");
    let steps = wf["jobs"]["validate"]["steps"].as_array().unwrap();
    let mut calls = 0;
    for step in steps {
        let Some(run) = step["run"].as_str() else {
            continue;
        };
        let joined = run.replace("\\\n", " ");
        for line in joined.lines() {
            let Some(at) = line.find("harch-worker ") else {
                continue;
            };
            let words: Vec<&str> = line[at..].split_whitespace().collect();
            let sub = words[1];
            let help = Command::new(BIN).args([sub, "--help"]).output().unwrap();
            assert!(help.status.success(), "`harch-worker {sub}` does not exist");
            let help = String::from_utf8_lossy(&help.stdout);
            for flag in words.iter().filter(|w| w.starts_with("--")) {
                assert!(help.contains(flag), "`harch-worker {sub}` has no {flag}");
            }
            calls += 1;
        }
        for script in joined
            .split_whitespace()
            .filter(|w| w.starts_with("scripts/"))
        {
            assert!(project_root().join(script).is_file(), "{script} is missing");
        }
    }
    assert_eq!(calls, 1, "the workflow should run validate-changed once");
}
