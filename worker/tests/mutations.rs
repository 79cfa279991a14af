//! The mutation suite (tests/mutations.yaml): every realistic wrong spec is rejected by the
//! intended guard with the intended code, and by nothing unrelated. Also: every library spec
//! validates against its checkpoint with zero errors.

use std::collections::BTreeMap;
use std::path::PathBuf;

use harch_engine::Repo;
use harch_guards::truth::Truth;
use harch_guards::{GuardSet, Report};
use harch_worker::{snapshot, source, subject};

#[derive(serde::Deserialize)]
struct Patch {
    find: String,
    replace: String,
}

#[derive(serde::Deserialize)]
#[serde(deny_unknown_fields)]
struct Mutation {
    name: String,
    model: String,
    file: String,
    find: String,
    replace: String,
    also_patch: Option<Patch>,
    guard: String,
    code: String,
    #[serde(default)]
    also: Vec<String>,
}

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("..")
}

fn truth(model_id: &str) -> Truth {
    let mut t = snapshot::load_snapshot(model_id)
        .unwrap_or_else(|| panic!("no bundled snapshot of {model_id}"));
    let src = source::resolve_native(&t.config).unwrap_or_else(|| {
        panic!("no forward source for {model_id}: run scripts/fetch-transformers-src (or set HARCH_TRANSFORMERS_SRC)")
    });
    t.sources = src.files;
    t
}

fn spec_for(repo: &Repo, t: &Truth) -> String {
    let archs = subject::architectures(&t.config);
    archs
        .iter()
        .find_map(|a| repo.model_for_architecture(a))
        .expect("a library spec serves this architecture")
        .to_string()
}

fn codes(r: &Report) -> Vec<String> {
    r.errors
        .iter()
        .map(|e| format!("{}:{}", e.guard, e.code))
        .collect()
}

#[test]
fn every_library_spec_validates_with_zero_errors() {
    let files = harch_worker::specs::read_spec_files(&root()).unwrap();
    let repo = Repo::from_files(files);
    assert!(repo.file_errors.is_empty(), "{:?}", repo.file_errors);
    for id in snapshot::snapshot_ids() {
        let t = truth(id);
        let model = spec_for(&repo, &t);
        let (r, _) = harch_guards::validate(&repo, &model, &t, &GuardSet::all());
        assert!(r.valid, "{id} ({model}) is invalid: {:#?}", r.errors);
        assert_eq!(r.summary.byte_diff, 0, "{id}");
        assert_eq!(
            r.summary.matched_tensors, r.summary.checkpoint_tensors,
            "{id}"
        );
        assert_eq!(
            r.guards.len(),
            harch_guards::tiers::GUARDS.len(),
            "{id}: all guards ran"
        );
        assert!(r.warnings.is_empty(), "{id}: {:#?}", r.warnings);
    }
}

#[test]
fn mutation_suite_is_rejected_by_the_intended_guards() {
    let text = std::fs::read_to_string(root().join("tests/mutations.yaml")).unwrap();
    let muts: Vec<Mutation> =
        harch_engine::load::parse_yaml("tests/mutations.yaml", &text).unwrap();
    assert!(muts.len() >= 40, "the suite holds at least 40 mutations");
    let base = harch_worker::specs::read_spec_files(&root()).unwrap();
    let mut truths: BTreeMap<String, Truth> = BTreeMap::new();
    for m in &muts {
        truths
            .entry(m.model.clone())
            .or_insert_with(|| truth(&m.model));
    }
    let failures: Vec<String> = std::thread::scope(|s| {
        let chunks: Vec<&[Mutation]> = muts.chunks(muts.len().div_ceil(2)).collect();
        let handles: Vec<_> = chunks
            .into_iter()
            .map(|chunk| {
                let base = &base;
                let truths = &truths;
                s.spawn(move || {
                    chunk
                        .iter()
                        .filter_map(|m| check(m, base, &truths[&m.model]).err())
                        .collect::<Vec<_>>()
                })
            })
            .collect();
        handles
            .into_iter()
            .flat_map(|h| h.join().unwrap())
            .collect()
    });
    assert!(
        failures.is_empty(),
        "{} mutations misbehaved:\n{}",
        failures.len(),
        failures.join("\n")
    );
}

fn check(m: &Mutation, base: &BTreeMap<String, String>, t: &Truth) -> Result<(), String> {
    let mut files = base.clone();
    let text = files
        .get_mut(&m.file)
        .ok_or_else(|| format!("{}: no file {}", m.name, m.file))?;
    for p in std::iter::once((&m.find, &m.replace))
        .chain(m.also_patch.as_ref().map(|p| (&p.find, &p.replace)))
    {
        if text.matches(p.0.as_str()).count() != 1 {
            return Err(format!(
                "{}: `find` must occur exactly once in {}",
                m.name, m.file
            ));
        }
        *text = text.replacen(p.0.as_str(), p.1, 1);
    }
    let repo = Repo::from_files(files);
    let model = spec_for(&repo, t);
    let (r, _) = harch_guards::validate(&repo, &model, t, &GuardSet::all());
    let got = codes(&r);
    let want = format!("{}:{}", m.guard, m.code);
    if r.valid || !got.contains(&want) {
        return Err(format!("{}: expected {want}, got {got:?}", m.name));
    }
    let unrelated: Vec<&String> = got
        .iter()
        .filter(|c| {
            let code = c.split(':').nth(1).unwrap_or("");
            code != m.code && !m.also.iter().any(|a| a == code)
        })
        .collect();
    if !unrelated.is_empty() {
        let msgs: Vec<String> = r
            .errors
            .iter()
            .filter(|e| e.code != m.code && !m.also.iter().any(|a| a == e.code))
            .map(|e| format!("    {} {}", e.code, e.message))
            .collect();
        return Err(format!(
            "{}: rejected for unrelated reasons {unrelated:?}\n{}",
            m.name,
            msgs.join("\n")
        ));
    }
    Ok(())
}
