//! The mutation suite (tests/mutations.yaml): every realistic wrong spec is rejected by the
//! intended guard with the intended code, and by nothing unrelated; every equivalent rewrite
//! (`valid: true`) still validates, with no warning and the same numbers. Also: every library
//! spec validates against its checkpoint with zero errors.

use std::collections::BTreeMap;
use std::path::PathBuf;

use harch_engine::Repo;
use harch_guards::truth::Truth;
use harch_guards::{GuardSet, Report};
use harch_library::subject;
use harch_truth::{snapshot, source};

#[derive(serde::Deserialize)]
#[serde(deny_unknown_fields)]
struct Patch {
    /// Another file than the mutation's own.
    file: Option<String>,
    find: String,
    replace: String,
}

#[derive(serde::Deserialize)]
#[serde(untagged)]
enum Patches {
    One(Patch),
    Many(Vec<Patch>),
}

#[derive(serde::Deserialize)]
#[serde(deny_unknown_fields)]
struct Mutation {
    name: String,
    model: String,
    file: String,
    find: String,
    replace: String,
    also_patch: Option<Patches>,
    /// The model spec to validate, when not the one serving the truth's architecture.
    spec: Option<String>,
    /// The rejecting guard and code; absent for an equivalent rewrite.
    guard: Option<String>,
    code: Option<String>,
    #[serde(default)]
    also: Vec<String>,
    /// An equivalent rewrite: it must validate with no error or warning and the same numbers.
    #[serde(default)]
    valid: bool,
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
    subject::library_model(repo, &t.config)
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
    let files = harch_library::specs::read_spec_files(&root()).unwrap();
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
    let base = harch_library::specs::read_spec_files(&root()).unwrap();
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
    let extra: Vec<&Patch> = match &m.also_patch {
        None => vec![],
        Some(Patches::One(p)) => vec![p],
        Some(Patches::Many(v)) => v.iter().collect(),
    };
    let patches = std::iter::once((&m.file, &m.find, &m.replace)).chain(
        extra
            .iter()
            .map(|p| (p.file.as_ref().unwrap_or(&m.file), &p.find, &p.replace)),
    );
    for (file, find, replace) in patches {
        let text = files
            .get_mut(file)
            .ok_or_else(|| format!("{}: no file {file}", m.name))?;
        if text.matches(find.as_str()).count() != 1 {
            return Err(format!(
                "{}: `find` must occur exactly once in {file}: {find:?}",
                m.name
            ));
        }
        *text = text.replacen(find.as_str(), replace, 1);
    }
    let repo = Repo::from_files(files);
    let model = m.spec.clone().unwrap_or_else(|| spec_for(&repo, t));
    let (r, a) = harch_guards::validate(&repo, &model, t, &GuardSet::all());
    let got = codes(&r);
    // `HARCH_SHOW_MUTATION=<name>|all` prints what a mutation is rejected with.
    if std::env::var("HARCH_SHOW_MUTATION").is_ok_and(|v| v == m.name || v == "all") {
        for e in &r.errors {
            eprintln!(
                "[{}] {} {}\n    hint: {}",
                m.name,
                e.code,
                e.message,
                e.hint.as_deref().unwrap_or("-")
            );
        }
    }
    if m.valid {
        return equivalent(m, base, t, &r, a.as_ref());
    }
    let (Some(guard), Some(code)) = (&m.guard, &m.code) else {
        return Err(format!(
            "{}: needs `guard` and `code`, or `valid: true`",
            m.name
        ));
    };
    let want = format!("{guard}:{code}");
    if r.valid || !got.contains(&want) {
        return Err(format!("{}: expected {want}, got {got:?}", m.name));
    }
    let unrelated: Vec<&String> = got
        .iter()
        .filter(|c| {
            let code = c.split(':').nth(1).unwrap_or("");
            code != m.code.as_deref().unwrap_or_default() && !m.also.iter().any(|a| a == code)
        })
        .collect();
    if !unrelated.is_empty() {
        let msgs: Vec<String> = r
            .errors
            .iter()
            .filter(|e| Some(e.code) != m.code.as_deref() && !m.also.iter().any(|a| a == e.code))
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

/// An equivalent rewrite validates cleanly and publishes the numbers the library spec does.
fn equivalent(
    m: &Mutation,
    base: &BTreeMap<String, String>,
    t: &Truth,
    r: &Report,
    a: Option<&harch_engine::Analysis>,
) -> Result<(), String> {
    if !r.valid || !r.warnings.is_empty() {
        let msgs: Vec<String> = r
            .errors
            .iter()
            .chain(&r.warnings)
            .map(|e| format!("    {} {}", e.code, e.message))
            .collect();
        return Err(format!(
            "{}: an equivalent rewrite must stay valid, got:\n{}",
            m.name,
            msgs.join("\n")
        ));
    }
    let repo = Repo::from_files(base.clone());
    let model = spec_for(&repo, t);
    let (_, before) = harch_guards::validate(&repo, &model, t, &GuardSet::all());
    let json = |a: Option<&harch_engine::Analysis>| {
        a.map(|a| serde_json::to_value(a.summary()).expect("summary serializes"))
    };
    if json(a) != json(before.as_ref()) {
        return Err(format!(
            "{}: an equivalent rewrite changed the numbers",
            m.name
        ));
    }
    Ok(())
}
