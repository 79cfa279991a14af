//! Validating a spec an agent wrote: the model spec and its drafts as read back from the agent's
//! writable area, joined with the project's own spec library (never the workspace's copy, which an
//! unconfined agent could have edited), checked against the job's truth with the full guards.
//!
//! The generate stage accepts a spec only on this result, and the verify stage checks the
//! generated spec again with it: an agent's exit status or claim proves nothing.

use std::collections::BTreeMap;
use std::path::Path;

use anyhow::{Context, bail};
use harch_engine::Repo;
use harch_guards::truth::Truth;
use harch_guards::{GuardSet, Report};

/// The spec files an agent produced, keyed as in the spec repository
/// (`specs/models/llama.yaml`, `specs/components/drafts/x.yaml`).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Candidate {
    /// Key of the model spec.
    pub model_key: String,
    pub files: BTreeMap<String, String>,
}

impl Candidate {
    /// Reads `<specs_dir>/models/<file>` and every YAML file of `<specs_dir>/components/drafts/`
    /// from a directory the worker wrote (a stage's artifacts). What an agent leaves is read by
    /// the agent-stage loop instead, as hostile input. `Ok(None)` when the model spec is absent.
    pub fn read(specs_dir: &Path, model_file: &str) -> anyhow::Result<Option<Candidate>> {
        let model_path = specs_dir.join("models").join(model_file);
        let text = match std::fs::read_to_string(&model_path) {
            Ok(t) => t,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
            Err(e) => return Err(e).with_context(|| format!("reading {}", model_path.display())),
        };
        let model_key = format!("specs/models/{model_file}");
        let mut files = BTreeMap::from([(model_key.clone(), text)]);
        // The gap report a valid spec was kept with (`<model>.gap.yaml`).
        if let Some(stem) = model_file.strip_suffix(".yaml") {
            let gap = specs_dir.join("models").join(format!("{stem}.gap.yaml"));
            if gap.is_file() {
                let text = std::fs::read_to_string(&gap)
                    .with_context(|| format!("reading {}", gap.display()))?;
                files.insert(format!("specs/models/{stem}.gap.yaml"), text);
            }
        }
        for (name, text) in yaml_files(&specs_dir.join("components/drafts"))? {
            files.insert(format!("specs/components/drafts/{name}"), text);
        }
        Ok(Some(Candidate { model_key, files }))
    }

    /// Writes the candidate under `dir` (`<dir>/models/…`, `<dir>/components/drafts/…`).
    pub fn write(&self, dir: &Path) -> anyhow::Result<()> {
        for (key, text) in &self.files {
            let rel = key.strip_prefix("specs/").unwrap_or(key);
            let path = dir.join(rel);
            if let Some(parent) = path.parent() {
                std::fs::create_dir_all(parent)
                    .with_context(|| format!("creating {}", parent.display()))?;
            }
            harch_files::write_atomic(&path, text.as_bytes())
                .with_context(|| format!("cannot write {}", path.display()))?;
        }
        Ok(())
    }
}

fn yaml_files(dir: &Path) -> anyhow::Result<Vec<(String, String)>> {
    let mut out = Vec::new();
    let entries = match std::fs::read_dir(dir) {
        Ok(e) => e,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(out),
        Err(e) => return Err(e).with_context(|| format!("listing {}", dir.display())),
    };
    for e in entries {
        let path = e?.path();
        if path.is_file() && path.extension().is_some_and(|x| x == "yaml" || x == "yml") {
            let name = path
                .file_name()
                .unwrap_or_default()
                .to_string_lossy()
                .into_owned();
            let text = std::fs::read_to_string(&path)
                .with_context(|| format!("reading {}", path.display()))?;
            out.push((name, text));
        }
    }
    out.sort();
    Ok(out)
}

/// The shared part of the spec repository at `root`: `arch/`, `quant/` and the component
/// library, without model specs or drafts (a candidate brings its own).
pub fn library_files(root: &Path) -> anyhow::Result<BTreeMap<String, String>> {
    let mut files = crate::specs::read_spec_files(root)?;
    files.retain(|k, _| {
        k.starts_with("specs/arch/")
            || k.starts_with("specs/quant/")
            || k.starts_with("specs/components/library/")
    });
    Ok(files)
}

/// The guards a job's `guards` setting selects: `full`/`all`, a tier (`0`-`8`, `weight`, …) or
/// a comma-separated list of guard names.
pub fn guard_set(setting: &str) -> anyhow::Result<GuardSet> {
    let s = setting.trim();
    if s.is_empty() || s == "full" || s == "all" {
        return Ok(GuardSet::all());
    }
    if let Ok(g) = GuardSet::tier(s) {
        return Ok(g);
    }
    match GuardSet::list(s) {
        Ok(g) => Ok(g),
        Err(e) => bail!("guards `{setting}`: {e}"),
    }
}

/// Validates `candidate` joined with `library` against `truth`.
pub fn validate(
    library: &BTreeMap<String, String>,
    candidate: &Candidate,
    truth: &Truth,
    guards: &GuardSet,
) -> Report {
    validate_with_analysis(library, candidate, truth, guards).0
}

/// [`validate`], with the evaluation when the spec loads (the review checks node paths in it).
pub fn validate_with_analysis(
    library: &BTreeMap<String, String>,
    candidate: &Candidate,
    truth: &Truth,
    guards: &GuardSet,
) -> (Report, Option<harch_engine::Analysis>) {
    let mut files = library.clone();
    files.extend(candidate.files.clone());
    let repo = Repo::from_files(files);
    harch_guards::validate(&repo, &candidate.model_key, truth, guards)
}

/// The spec a stage kept (`<spec_dir>/models/<one>.yaml` and its drafts).
pub fn read_stage_spec(spec_dir: &Path) -> anyhow::Result<Candidate> {
    let mut models = yaml_files(&spec_dir.join("models"))?;
    models.retain(|(name, _)| !harch_engine::load::is_gap_report_path(name));
    let [(model_file, _)] = models.as_slice() else {
        bail!(
            "{} should hold exactly one model spec, found {}",
            spec_dir.join("models").display(),
            models.len()
        );
    };
    Candidate::read(spec_dir, model_file)?
        .with_context(|| format!("{model_file} vanished from {}", spec_dir.display()))
}

/// The library's model spec serving `config`'s architectures, as a candidate; None when the
/// library has none.
pub fn library_spec(
    spec_root: &Path,
    config: &serde_json::Value,
) -> anyhow::Result<Option<Candidate>> {
    let all = crate::specs::read_spec_files(spec_root)?;
    let repo = Repo::from_files(all.clone());
    let key = crate::subject::library_model(&repo, config)
        .and_then(|m| repo.model_file(m))
        .map(str::to_string);
    Ok(key.and_then(|key| {
        let text = all.get(&key)?.clone();
        Some(Candidate {
            files: BTreeMap::from([(key.clone(), text)]),
            model_key: key,
        })
    }))
}

/// The verify stage's check of a generated spec (`<spec_dir>/models/*.yaml` and its drafts)
/// against the job's truth dir, with the project's library.
pub fn verify_generated(
    spec_dir: &Path,
    truth_dir: &Path,
    tier: &str,
) -> anyhow::Result<crate::verify::VerifyOutcome> {
    let candidate = read_stage_spec(spec_dir)?;
    let truth = harch_truth::source::load_truth(truth_dir)?;
    let library = library_files(&crate::specs::root())?;
    let mut report = validate(&library, &candidate, &truth, &guard_set(tier)?);
    let mut files = library;
    files.extend(candidate.files.clone());
    let gap = crate::declared_gap::validate_with_gap(
        &Repo::from_files(files),
        &candidate.model_key,
        &truth,
        &mut report,
    );
    crate::verify::VerifyOutcome::of(candidate.model_key.clone(), &report, gap.as_ref())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn guard_settings_name_all_a_tier_or_a_list() {
        assert_eq!(guard_set("full").unwrap(), GuardSet::all());
        assert_eq!(guard_set("all").unwrap(), GuardSet::all());
        assert_eq!(
            guard_set("weight").unwrap(),
            GuardSet::tier("weight").unwrap()
        );
        assert_eq!(
            guard_set("shape,weight").unwrap().names(),
            ["weight", "shape"]
        );
        let err = guard_set("everything").unwrap_err().to_string();
        assert!(err.contains("everything"), "{err}");
    }

    #[test]
    fn a_candidate_is_its_model_spec_and_drafts() {
        let tmp = tempfile::tempdir().unwrap();
        let specs = tmp.path().join("specs");
        std::fs::create_dir_all(specs.join("models")).unwrap();
        assert!(Candidate::read(&specs, "m.yaml").unwrap().is_none());
        std::fs::create_dir_all(specs.join("components/drafts")).unwrap();
        std::fs::write(specs.join("models/m.yaml"), "model: m\n").unwrap();
        std::fs::write(specs.join("components/drafts/d.yaml"), "component: d\n").unwrap();
        std::fs::write(specs.join("components/drafts/notes.txt"), "ignored").unwrap();
        let c = Candidate::read(&specs, "m.yaml").unwrap().unwrap();
        assert_eq!(c.model_key, "specs/models/m.yaml");
        assert_eq!(
            c.files.keys().collect::<Vec<_>>(),
            ["specs/components/drafts/d.yaml", "specs/models/m.yaml"]
        );
        let out = tmp.path().join("out");
        c.write(&out).unwrap();
        assert_eq!(
            std::fs::read_to_string(out.join("models/m.yaml")).unwrap(),
            "model: m\n"
        );
        assert!(out.join("components/drafts/d.yaml").is_file());
    }
}
