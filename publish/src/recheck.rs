//! Checking a spec of the spec repository again against the truth it was published with: the
//! provenance record names the model and the revision sha, and the truth is fetched again at
//! that sha (or served from a `--truth` directory, or, for library models without provenance,
//! from the bundled snapshot). Shared by `validate-changed` (the spec repository's CI) and
//! `promote`.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use anyhow::{Context, bail};
use harch_engine::Repo;
use harch_guards::GuardSet;
use harch_guards::truth::Truth;

use super::provenance::{self, Provenance};

/// Where truth may come from.
#[derive(Clone, Debug, Default)]
pub struct TruthOptions {
    /// Truth directories given on the command line; one serves a spec when its truth.json names
    /// the provenance's model, or its config's architectures are the spec's.
    pub dirs: Vec<PathBuf>,
    /// Serve provenance models from the bundled snapshots instead of the Hub.
    pub offline: bool,
    /// Where fetched truth is kept (`<dir>/<org>__<name>@<revision>`).
    pub fetch_dir: PathBuf,
}

/// The result of checking one model spec.
#[derive(Clone, Debug, serde::Serialize)]
pub struct Recheck {
    pub spec: String,
    pub model_id: Option<String>,
    pub revision: Option<String>,
    /// Where the truth came from (a directory, the Hub at a sha, a bundled snapshot).
    pub truth: String,
    pub valid: bool,
    pub errors: Vec<String>,
    pub warnings: usize,
}

/// Every provenance record in `files` (repository path → text), by the spec it describes.
pub fn provenance_by_spec(files: &BTreeMap<String, String>) -> BTreeMap<String, Provenance> {
    let mut out = BTreeMap::new();
    for (path, text) in files {
        if path.starts_with(&format!("{}/", provenance::DIR))
            && path.ends_with(".json")
            && let Ok(p) = Provenance::parse(text.as_bytes(), path)
        {
            out.insert(p.spec.clone(), p);
        }
    }
    out
}

/// Reads `specs/provenance/*.json` under `root` (they are JSON, which `read_spec_files` skips).
pub fn read_provenance(root: &Path) -> BTreeMap<String, String> {
    let mut files = BTreeMap::new();
    let dir = root.join(provenance::DIR);
    for e in std::fs::read_dir(&dir).into_iter().flatten().flatten() {
        let p = e.path();
        if p.extension().is_some_and(|x| x == "json")
            && let Ok(text) = std::fs::read_to_string(&p)
        {
            let name = e.file_name().to_string_lossy().into_owned();
            files.insert(format!("{}/{name}", provenance::DIR), text);
        }
    }
    files
}

/// The truth to check `spec` (a model spec's path) against, and where it came from.
pub async fn truth_for(
    repo: &Repo,
    spec: &str,
    prov: Option<&Provenance>,
    opts: &TruthOptions,
) -> anyhow::Result<(Truth, String)> {
    let archs: Vec<String> = repo
        .model_architectures(spec)
        .map(<[String]>::to_vec)
        .unwrap_or_default();
    for dir in &opts.dirs {
        let meta = harch_truth::truth_dir::read_meta(dir).ok().flatten();
        let config: serde_json::Value = std::fs::read(dir.join("config.json"))
            .ok()
            .and_then(|b| serde_json::from_slice(&b).ok())
            .unwrap_or_default();
        let by_id = prov.is_some_and(|p| meta.as_ref().is_some_and(|m| m.model_id == p.model_id));
        let by_arch = prov.is_none()
            && harch_library::subject::architectures(&config)
                .iter()
                .any(|a| archs.contains(a));
        if by_id || by_arch {
            let t = harch_truth::source::load_truth(dir)?;
            return Ok((t, dir.display().to_string()));
        }
    }
    if let Some(p) = prov {
        let revision = p
            .truth
            .revision
            .clone()
            .or_else(|| p.truth.requested_revision.clone());
        if opts.offline || revision.is_none() && p.truth.origin == "snapshot" {
            let t = harch_truth::snapshot::try_load_snapshot(&p.model_id)?.with_context(|| {
                format!(
                    "offline, and no bundled snapshot of {} (pass --truth DIR)",
                    p.model_id
                )
            })?;
            return Ok((
                with_source(t),
                format!("bundled snapshot of {}", p.model_id),
            ));
        }
        let rev = revision.unwrap_or_else(|| "main".into());
        let out = opts.fetch_dir.join(format!(
            "{}@{}",
            super::config::model_slug(&p.model_id),
            rev.replace('/', "_")
        ));
        if !out.join("config.json").is_file() {
            let mut fo = harch_hub::FetchOptions::from_env(&p.model_id, out.clone());
            fo.revision = rev.clone();
            harch_hub::fetch_truth(&fo)
                .await
                .with_context(|| format!("fetching the truth of {} at {rev}", p.model_id))?;
        }
        let t = harch_truth::source::load_truth(&out)?;
        return Ok((t, format!("{} at {rev} (Hub)", p.model_id)));
    }
    for id in harch_truth::snapshot::snapshot_ids() {
        if let Some(t) = harch_truth::snapshot::try_load_snapshot(id)?
            && harch_library::subject::architectures(&t.config)
                .iter()
                .any(|a| archs.contains(a))
        {
            return Ok((with_source(t), format!("bundled snapshot of {id}")));
        }
    }
    bail!(
        "{spec} has no provenance record and no bundled snapshot serves {archs:?}: pass --truth DIR"
    )
}

fn with_source(mut t: Truth) -> Truth {
    if t.sources.is_empty()
        && let Some(set) = harch_truth::source::resolve_native(&t.config)
    {
        t.sources = set.files;
    }
    t
}

/// Validates `spec` in `files` (the whole spec repository) with every guard against its truth.
pub async fn recheck(
    files: &BTreeMap<String, String>,
    spec: &str,
    prov: Option<&Provenance>,
    opts: &TruthOptions,
) -> Recheck {
    let repo = Repo::from_files(files.clone());
    let mut r = Recheck {
        spec: spec.to_string(),
        model_id: prov.map(|p| p.model_id.clone()),
        revision: prov.and_then(|p| p.truth.revision.clone()),
        truth: String::new(),
        valid: false,
        errors: Vec::new(),
        warnings: 0,
    };
    let (truth, origin) = match truth_for(&repo, spec, prov, opts).await {
        Ok(t) => t,
        Err(e) => {
            r.truth = "unavailable".into();
            r.errors.push(format!("no truth to check against: {e:#}"));
            return r;
        }
    };
    r.truth = origin;
    let spec_owned = spec.to_string();
    let result = tokio::task::spawn_blocking(move || {
        harch_guards::validate(&repo, &spec_owned, &truth, &GuardSet::all()).0
    })
    .await;
    match result {
        Ok(report) => {
            r.valid = report.valid;
            r.warnings = report.warnings.len();
            r.errors = report
                .errors
                .iter()
                .map(|d| {
                    let at = d
                        .location
                        .file
                        .as_deref()
                        .map(|f| format!(" at {f}:{}", d.location.line))
                        .unwrap_or_default();
                    format!("{} [{}]{at}: {}", d.code, d.guard, d.message)
                })
                .collect();
        }
        Err(e) => r.errors.push(format!("validation crashed: {e}")),
    }
    r
}
