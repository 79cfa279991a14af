//! The bundle a publish proposes: the model spec, the draft components it uses and its
//! provenance record, with everything the pull request says about them. Built from the job's
//! artifacts by one validation (all guards) whose report and evaluation feed the provenance, the
//! summary table and the diagrams; a spec that does not validate is never bundled.

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;

use harch_engine::Repo;
use harch_guards::GuardSet;

use super::PublishError;
use super::agents;
use super::mermaid;
pub use super::prepared::{BaseFacts, Prepared};
use super::provenance::{self, Figures, JobRef, Provenance, ValidateRecord, WarningRecord};
use super::review::ReviewRecord;
use harch_jobs::record::{JobRecord, StageState};
use harch_jobs::stage::Stage;
use harch_library::candidate::{self, Candidate};

/// Gathers and validates what job `job` produced. CPU-bound: call it off the async threads.
pub fn prepare(
    job: &JobRecord,
    job_dir: &Path,
    spec_root: &Path,
) -> Result<Prepared, PublishError> {
    let model_id = job.request.model_id.clone();
    let truth_dir = job_dir.join(Stage::Fetch.dir_name()).join("truth");
    if !truth_dir.is_dir() {
        return Err(PublishError::permanent(format!(
            "publish needs the fetch stage's truth dir ({} is missing): select fetch before publish",
            truth_dir.display()
        )));
    }
    let truth = harch_truth::source::load_truth(&truth_dir)
        .map_err(|e| PublishError::permanent(format!("{e:#}")))?;
    let meta = harch_truth::truth_dir::read_meta(&truth_dir)
        .map_err(|e| PublishError::permanent(format!("{e:#}")))?
        .unwrap_or_else(|| harch_truth::truth_dir::TruthMeta {
            model_id: model_id.clone(),
            ..Default::default()
        });
    let library = candidate::library_files(spec_root)
        .map_err(|e| PublishError::permanent(format!("reading the spec library: {e:#}")))?;
    let (candidate, spec_origin) = job_candidate(job, job_dir, spec_root, &truth.config)?;

    let mut files = library;
    files.extend(candidate.files.clone());
    let repo = Repo::from_files(files);
    let (mut report, analysis) =
        harch_guards::validate(&repo, &candidate.model_key, &truth, &GuardSet::all());
    let declared_gap = harch_library::declared_gap::validate_with_gap(
        &repo,
        &candidate.model_key,
        &truth,
        &mut report,
    );
    let (true, Some(analysis)) = (report.valid, analysis) else {
        let codes: BTreeSet<&str> = report.errors.iter().map(|d| d.code).collect();
        return Err(PublishError::permanent(format!(
            "publish refuses a spec that does not validate: {} has {} errors ({}); only a spec with no validate errors is published",
            candidate.model_key,
            report.errors.len(),
            codes.into_iter().collect::<Vec<_>>().join(", ")
        )));
    };
    let ir = repo.load_model(&candidate.model_key).map_err(|errs| {
        PublishError::permanent(format!(
            "{} validated but does not load: {}",
            candidate.model_key,
            harch_library::subject::render_errors(&errs)
        ))
    })?;
    let summary = analysis.summary();

    // Only drafts the spec lists are published; anything else an agent left is not. Specs name
    // components, not files, so each draft is published as `<component>.yaml` whatever the
    // agent called its file.
    let mut bundle: BTreeMap<String, Vec<u8>> = BTreeMap::new();
    bundle.insert(
        candidate.model_key.clone(),
        candidate.files[&candidate.model_key].clone().into_bytes(),
    );
    if let (Some(_), Some((key, text))) = (&declared_gap, repo.gap_report(&candidate.model_key)) {
        bundle.insert(key.to_string(), text.as_bytes().to_vec());
    }
    let mut drafts = BTreeMap::new();
    let mut component_diagrams = BTreeMap::new();
    for name in &ir.drafts {
        let Some(c) = ir.component(name) else {
            continue;
        };
        let Some(text) = candidate.files.get(&c.file) else {
            continue;
        };
        let path = format!("specs/components/drafts/{name}.yaml");
        bundle.insert(path.clone(), text.clone().into_bytes());
        drafts.insert(name.clone(), path);
        component_diagrams.insert(name.clone(), mermaid::component(c));
    }
    for path in bundle.keys() {
        check_path(path)?;
    }

    let s = &report.summary;
    let provenance = Provenance {
        schema: provenance::SCHEMA.to_string(),
        model_id: model_id.clone(),
        truth: meta.clone(),
        spec: candidate.model_key.clone(),
        drafts: drafts.values().cloned().collect(),
        validate: ValidateRecord {
            valid: report.valid,
            guards: report.guards.iter().map(|g| g.to_string()).collect(),
            errors: report.errors.len(),
            checkpoint_tensors: s.checkpoint_tensors,
            matched_tensors: s.matched_tensors,
            checkpoint_bytes: s.checkpoint_bytes,
            spec_bytes: s.spec_bytes,
            byte_diff: s.byte_diff,
            warnings: report
                .warnings
                .iter()
                .map(|w| WarningRecord {
                    code: w.code.to_string(),
                    message: w.message.clone(),
                })
                .collect(),
        },
        figures: Figures::from_summary(&summary),
        review: ReviewRecord::from_job(job),
        agents: agents::from_job(job),
        job: JobRef {
            id: job.id.clone(),
            harch_version: env!("CARGO_PKG_VERSION").to_string(),
        },
        reproduce: provenance::reproduce_commands(&model_id, &meta, &candidate.model_key),
    };
    let provenance_path = provenance::path_for(&model_id);
    bundle.insert(provenance_path.clone(), provenance.to_bytes());
    // The model's Inspector page, committed with the bundle; the pull request names it.
    let page_path = harch_inspect::page_path_for(&model_id);
    check_path(&page_path)?;
    let page = harch_inspect::collect_from(
        &model_id,
        &repo,
        &candidate.model_key,
        &truth,
        &format!("{model_id} as fetched for job {}", job.id),
    )
    .and_then(|d| harch_inspect::page(&d, &Default::default()))
    .map_err(|e| PublishError::permanent(format!("building the model's page: {e:#}")))?;
    bundle.insert(page_path.clone(), page.into_bytes());
    Ok(Prepared {
        model_id,
        spec_name: ir.name.clone(),
        spec_summary: ir.summary.clone(),
        spec_key: candidate.model_key.clone(),
        drafts,
        files: bundle,
        provenance_path,
        page_path,
        provenance,
        model_diagram: mermaid::model(&ir, &summary.groups),
        component_diagrams,
        spec_origin,
        declared_gap,
    })
}

/// The spec a job ends with: the fix stage's, else the generate stage's, else (a job that ran
/// no agent) the library spec serving the model's architecture.
fn job_candidate(
    job: &JobRecord,
    job_dir: &Path,
    spec_root: &Path,
    config: &serde_json::Value,
) -> Result<(Candidate, String), PublishError> {
    for stage in [Stage::Fix, Stage::Generate] {
        let done = job
            .stage(stage)
            .is_some_and(|s| s.state == StageState::Done);
        let dir = job_dir.join(stage.dir_name()).join("spec");
        if !done || !dir.join("models").is_dir() {
            continue;
        }
        let models = yaml_names(&dir.join("models"))?;
        let [file] = models.as_slice() else {
            return Err(PublishError::permanent(format!(
                "{} should hold exactly one model spec, found {}",
                dir.join("models").display(),
                models.len()
            )));
        };
        let c = Candidate::read(&dir, file)
            .map_err(|e| PublishError::permanent(format!("{e:#}")))?
            .ok_or_else(|| PublishError::permanent(format!("{file} vanished")))?;
        return Ok((c, stage.to_string()));
    }
    if job.stage(Stage::Generate).is_some() {
        return Err(PublishError::permanent(
            "the job's generate stage left no spec: nothing to publish",
        ));
    }
    let repo = harch_library::specs::read_repo(spec_root, &[])
        .map_err(|e| PublishError::permanent(format!("{e:#}")))?;
    let Some(file) = harch_library::subject::library_model(&repo, config)
        .and_then(|m| repo.model_file(m))
        .map(str::to_string)
    else {
        return Err(PublishError::permanent(format!(
            "no spec to publish: the job ran no generate stage and no library spec serves {:?}",
            harch_library::subject::architectures(config)
        )));
    };
    let text = std::fs::read_to_string(spec_root.join(&file))
        .map_err(|e| PublishError::permanent(format!("reading {file}: {e}")))?;
    let mut files = BTreeMap::from([(file.clone(), text)]);
    if let Some((key, text)) = repo.gap_report(&file) {
        files.insert(key.to_string(), text.to_string());
    }
    Ok((
        Candidate {
            model_key: file,
            files,
        },
        "library".into(),
    ))
}

fn yaml_names(dir: &Path) -> Result<Vec<String>, PublishError> {
    let mut out = Vec::new();
    let entries = std::fs::read_dir(dir)
        .map_err(|e| PublishError::transient(format!("listing {}: {e}", dir.display())))?;
    for e in entries.flatten() {
        let name = e.file_name().to_string_lossy().into_owned();
        if (name.ends_with(".yaml") || name.ends_with(".yml"))
            && !harch_engine::load::is_gap_report_path(&name)
        {
            out.push(name);
        }
    }
    out.sort();
    Ok(out)
}

/// Bundle paths come from file names an agent chose: plain names under `specs/` only.
fn check_path(path: &str) -> Result<(), PublishError> {
    let ok = path.starts_with("specs/")
        && path.split('/').all(|seg| {
            !seg.is_empty()
                && !seg.starts_with('.')
                && seg
                    .chars()
                    .all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.'))
        });
    if ok {
        Ok(())
    } else {
        Err(PublishError::permanent(format!(
            "refusing to publish a file named `{}`: spec files are plain names (letters, digits, `-`, `_`, `.`) under specs/",
            path.escape_debug()
        )))
    }
}

impl BaseFacts {
    pub fn of(p: &Prepared, has_path: impl Fn(&str) -> bool) -> BaseFacts {
        BaseFacts {
            new_spec: !has_path(&p.spec_key),
            new_drafts: p
                .drafts
                .iter()
                .filter(|(_, path)| !has_path(path))
                .map(|(name, _)| name.clone())
                .collect(),
        }
    }
}

/// Everything a publish proposes: files, commit message and pull request.
#[derive(Clone, Debug)]
pub struct Proposal {
    pub files: BTreeMap<String, Vec<u8>>,
    pub title: String,
    pub body: String,
    pub commit_message: String,
    pub labels: Vec<String>,
    /// Non-empty: the pull request is a draft, for these reasons.
    pub draft_reasons: Vec<String>,
}

/// Labels harch owns on its pull requests (others' labels are left alone).
pub const LABEL_PREFIX: &str = "harch:";

pub fn propose(p: &Prepared, base: &BaseFacts) -> Proposal {
    let review = &p.provenance.review;
    let mut draft_reasons = review.draft_reasons();
    if let Some(g) = &p.declared_gap {
        draft_reasons.push(harch_library::declared_gap::line(g));
    }
    let mut labels = Vec::new();
    if base.new_spec {
        labels.push("harch:new-architecture".to_string());
    }
    if !base.new_drafts.is_empty() {
        labels.push("harch:new-components".to_string());
    }
    labels.push(
        match review.status {
            super::review::ReviewStatus::Pass => "harch:review-pass",
            super::review::ReviewStatus::NoPass => "harch:review-no-pass",
            super::review::ReviewStatus::NotReviewed => "harch:not-reviewed",
        }
        .to_string(),
    );
    if !review.open_rows().is_empty() {
        labels.push("harch:unverified".to_string());
    }
    let verb = if base.new_spec { "Add" } else { "Update" };
    let title = format!(
        "{verb} spec `{}` for {}",
        one_line(&p.spec_name, 80),
        p.model_id
    );
    Proposal {
        files: p.files.clone(),
        body: super::body::render(p, base, &draft_reasons),
        commit_message: commit_message(p, base),
        title,
        labels,
        draft_reasons,
    }
}

fn one_line(s: &str, max: usize) -> String {
    s.chars()
        .map(|c| if c.is_control() || c == '`' { ' ' } else { c })
        .take(max)
        .collect()
}

/// What and why, the files, and trailers: the job, and the agents as co-authors.
pub fn commit_message(p: &Prepared, base: &BaseFacts) -> String {
    let v = &p.provenance.validate;
    let rev = p
        .provenance
        .truth
        .revision
        .as_deref()
        .map(|r| format!("@{}", &r[..r.len().min(12)]))
        .unwrap_or_default();
    let verb = if base.new_spec { "add" } else { "update" };
    let mut m = format!(
        "specs: {verb} {} for {}{rev}\n\n",
        one_line(&p.spec_name, 60),
        p.model_id
    );
    let authors: Vec<String> = p
        .provenance
        .agents
        .iter()
        .filter(|a| a.stage != Stage::Review)
        .filter_map(|a| a.backend.clone())
        .collect();
    let by = if authors.is_empty() {
        "taken from the harch library".to_string()
    } else {
        format!("written by the {} agent", authors.join(" and "))
    };
    m.push_str(&format!(
        "The spec of {} was {by} and accepted by harch's full validation ({} guards): \
         {} of {} checkpoint tensors claimed, {} bytes difference. Review: {}.\n\n",
        p.model_id,
        v.guards.len(),
        v.matched_tensors,
        v.checkpoint_tensors,
        v.byte_diff,
        p.provenance.review.status.label()
    ));
    for path in p.files.keys() {
        let what = if *path == p.spec_key {
            if base.new_spec {
                "new model spec"
            } else {
                "model spec"
            }
        } else if *path == p.provenance_path {
            "provenance"
        } else {
            "draft component"
        };
        m.push_str(&format!("- {path} ({what})\n"));
    }
    m.push_str(&format!("\nHarch-Job: {}\n", p.provenance.job.id));
    m.push_str(&format!("{BUNDLE_TRAILER} {}\n", bundle_id(&p.files)));
    for t in agents::co_author_trailers(&p.provenance.agents) {
        m.push_str(&t);
        m.push('\n');
    }
    m
}

/// The commit trailer that names the bundle a harch commit carries.
pub const BUNDLE_TRAILER: &str = "Harch-Bundle:";

/// A name for the bundle's content: git's blob ids of its files with their paths, hashed as git
/// hashes a blob. Equal bundles have equal ids on every machine, so a publish can tell that the
/// branch already carries what it would commit.
pub fn bundle_id(files: &BTreeMap<String, Vec<u8>>) -> String {
    let blob = blob_id;
    let mut listing = String::new();
    for (path, bytes) in files {
        listing.push_str(&format!("{} {path}\n", blob(bytes)));
    }
    blob(listing.as_bytes())
}

/// The id git gives `bytes` as a blob (`git hash-object`).
fn blob_id(bytes: &[u8]) -> String {
    let mut h = sha1_smol::Sha1::new();
    h.update(format!("blob {}\0", bytes.len()).as_bytes());
    h.update(bytes);
    h.digest().to_string()
}

#[cfg(test)]
mod tests {
    #[test]
    fn blob_ids_are_gits() {
        assert_eq!(
            super::blob_id(b""),
            "e69de29bb2d1d6434b8b29ae775ad8c2e48c5391"
        );
        assert_eq!(
            super::blob_id(b"hello\n"),
            "ce013625030ba8dba906f756967f9e9ca394464a"
        );
    }
}
