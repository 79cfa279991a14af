//! The committed corpus of broken specs (tests/broken_specs/) gives located errors, never panics.
//!
//! Each case is a directory with a model spec `model.yaml` and optional draft components in
//! `drafts/`. The first line of `model.yaml` says what loading it against the real library
//! (specs/) must report:
//!
//! ```text
//! # expect: <CODE> [line <N>] [file <PATH>] [node <NODE-PATH>]
//! # expect: ok
//! ```
//!
//! `file` defaults to the case's `model.yaml`; `drafts/<name>.yaml` names one of its drafts,
//! `specs/...` a library file. An optional second line `# config: llama|deepseek` picks the
//! bundled snapshot whose config the spec is evaluated against (default: llama).

use std::collections::BTreeMap;
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::path::{Path, PathBuf};

use harch_engine::{EvalOptions, SpecError, evaluate};
use harch_library::specs;
use harch_truth::snapshot;

fn workspace_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("..")
}

#[derive(Debug, Default, PartialEq)]
struct Expect {
    /// `None` for `ok`.
    code: Option<String>,
    line: Option<u32>,
    file: Option<String>,
    node: Option<String>,
}

fn parse_expect(case: &str, first_line: &str) -> Expect {
    let rest = first_line
        .strip_prefix("# expect:")
        .unwrap_or_else(|| panic!("{case}: model.yaml must start with `# expect: ...`"));
    let mut words = rest.split_whitespace();
    let code = words
        .next()
        .unwrap_or_else(|| panic!("{case}: `# expect:` names no code"));
    let mut e = Expect {
        code: (code != "ok").then(|| code.to_string()),
        ..Expect::default()
    };
    while let Some(key) = words.next() {
        let value = words
            .next()
            .unwrap_or_else(|| panic!("{case}: `{key}` without a value"));
        match key {
            "line" => e.line = Some(value.parse().expect("line is a number")),
            "file" => e.file = Some(value.to_string()),
            "node" => e.node = Some(value.to_string()),
            other => panic!("{case}: unknown expectation `{other}`"),
        }
    }
    e
}

struct Case {
    name: String,
    expect: Expect,
    config: String,
    /// The model's key in the repo, and every file the case adds to the library.
    model_key: String,
    files: Vec<(String, String)>,
}

fn read_case(dir: &Path) -> Case {
    let name = dir.file_name().unwrap().to_string_lossy().to_string();
    let text = std::fs::read_to_string(dir.join("model.yaml"))
        .unwrap_or_else(|e| panic!("{name}: model.yaml: {e}"));
    let mut lines = text.lines();
    let expect = parse_expect(&name, lines.next().unwrap_or_default());
    let config = lines
        .next()
        .and_then(|l| l.strip_prefix("# config:"))
        .map(|c| c.trim().to_string())
        .unwrap_or_else(|| "llama".into());
    let model_key = format!("specs/models/broken_{name}.yaml");
    let mut files = vec![(model_key.clone(), text)];
    let drafts = dir.join("drafts");
    if drafts.is_dir() {
        let mut entries: Vec<PathBuf> = std::fs::read_dir(&drafts)
            .unwrap()
            .map(|e| e.unwrap().path())
            .collect();
        entries.sort();
        for p in entries {
            let fname = p.file_name().unwrap().to_string_lossy().to_string();
            files.push((
                format!("specs/components/drafts/{fname}"),
                std::fs::read_to_string(&p).unwrap(),
            ));
        }
    }
    Case {
        name,
        expect,
        config,
        model_key,
        files,
    }
}

fn snapshot_config(which: &str) -> serde_json::Value {
    let id = match which {
        "llama" => "meta-llama/Llama-3.1-8B",
        "deepseek" => "deepseek-ai/DeepSeek-V3",
        other => panic!("unknown config `{other}` (llama or deepseek)"),
    };
    snapshot::load_snapshot(id)
        .unwrap_or_else(|| panic!("no bundled snapshot of {id}"))
        .config
}

/// Loads and evaluates a case; the errors of whichever stage failed first.
fn run_case(case: &Case, configs: &BTreeMap<String, serde_json::Value>) -> Vec<SpecError> {
    let repo = specs::read_repo(&workspace_root(), &case.files).expect("reading specs/");
    let ir = match repo.load_model(&case.model_key) {
        Ok(ir) => ir,
        Err(errs) => return errs,
    };
    let a = evaluate(&ir, &configs[&case.config], EvalOptions::default());
    let mut errs = a.errors.clone();
    for f in &a.axiom_failures {
        errs.push(SpecError::new("axiom", f.message.clone(), f.loc.clone()));
    }
    // The same walk with formulas on must agree (and must not panic either).
    let s = evaluate(&ir, &configs[&case.config], EvalOptions { symbolic: true });
    assert_eq!(
        s.errors.len(),
        a.errors.len(),
        "{}: symbolic walk differs",
        case.name
    );
    errs
}

fn expected_file(case: &Case) -> String {
    match case.expect.file.as_deref() {
        None | Some("model.yaml") => case.model_key.clone(),
        Some(f) if f.starts_with("drafts/") => format!("specs/components/{f}"),
        Some(f) => f.to_string(),
    }
}

fn matches(case: &Case, e: &SpecError) -> bool {
    let want = &case.expect;
    Some(e.code) == want.code.as_deref()
        && e.location.file.as_deref() == Some(expected_file(case).as_str())
        && want.line.is_none_or(|l| e.location.line == l)
        && want
            .node
            .as_ref()
            .is_none_or(|n| e.location.node.as_deref() == Some(n.as_str()))
}

fn cases() -> Vec<Case> {
    let dir = workspace_root().join("tests/broken_specs");
    let mut dirs: Vec<PathBuf> = std::fs::read_dir(&dir)
        .unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
        .map(|e| e.unwrap().path())
        .filter(|p| p.is_dir())
        .collect();
    dirs.sort();
    dirs.iter().map(|d| read_case(d)).collect()
}

#[test]
fn every_broken_spec_reports_its_located_error_without_panicking() {
    let cases = cases();
    let broken = cases.iter().filter(|c| c.expect.code.is_some()).count();
    assert!(broken >= 25, "the corpus holds only {broken} broken specs");
    let configs: BTreeMap<String, serde_json::Value> = ["llama", "deepseek"]
        .iter()
        .map(|c| (c.to_string(), snapshot_config(c)))
        .collect();
    let mut failures = Vec::new();
    for case in &cases {
        let errs = match catch_unwind(AssertUnwindSafe(|| run_case(case, &configs))) {
            Ok(errs) => errs,
            Err(_) => {
                failures.push(format!("{}: PANICKED", case.name));
                continue;
            }
        };
        let shown = errs
            .iter()
            .map(|e| format!("    {e:?}"))
            .collect::<Vec<_>>()
            .join("\n");
        if case.expect.code.is_none() {
            if !errs.is_empty() {
                failures.push(format!("{}: expected no errors, got\n{shown}", case.name));
            }
            continue;
        }
        if !errs.iter().any(|e| matches(case, e)) {
            failures.push(format!(
                "{}: expected {:?} in {}, got\n{shown}",
                case.name,
                case.expect,
                expected_file(case)
            ));
        }
        for e in &errs {
            if e.location.file.is_none() {
                failures.push(format!("{}: error without a file: {e:?}", case.name));
            }
        }
    }
    assert!(
        failures.is_empty(),
        "{} of {} cases failed:\n{}",
        failures.len(),
        cases.len(),
        failures.join("\n")
    );
}

#[test]
fn expectation_headers_parse() {
    assert_eq!(
        parse_expect("t", "# expect: S002 line 9 file drafts/m.yaml node a[b].c"),
        Expect {
            code: Some("S002".into()),
            line: Some(9),
            file: Some("drafts/m.yaml".into()),
            node: Some("a[b].c".into()),
        }
    );
    assert_eq!(parse_expect("t", "# expect: ok"), Expect::default());
}
