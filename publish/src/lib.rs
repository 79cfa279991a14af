//! Publishing a verified spec as a pull request that maintainers can review in minutes.
//!
//! [`publish`] validates the job's spec once more with every guard (only a valid spec is
//! published), builds the bundle (`bundle`: the model spec, the drafts it uses, a provenance
//! record), writes it with the commit message and pull request body into the stage's directory,
//! and then, when `[publish]` names a repository, makes the model's branch carry it (`git`) and
//! opens or updates the branch's one pull request (`github`). Without a repository it stops
//! after writing the files: a dry run.
//!
//! Everything is idempotent: the branch is per model, a bundle already on it makes no commit,
//! an open pull request is updated rather than duplicated, and a retried publish repeats none of
//! it. Errors are [`PublishError`]s, transient or permanent like the fetcher's.

pub mod agents;
pub mod body;
pub mod bundle;
pub mod changed;
pub mod config;
mod error;
pub mod git;
pub mod github;
mod jwt;
pub mod md;
pub mod mermaid;
pub mod prepared;
pub mod promote;
pub mod provenance;
pub mod recheck;
pub mod review;

use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

pub use error::PublishError;

use bundle::{BaseFacts, Proposal};
use config::Target;
use git::{BranchOutcome, BranchPlan, SpecRepo};
use github::{GitHub, PrOutcome, PrRequest};

use harch_jobs::config::PublishSettings;
use harch_jobs::record::JobRecord;

/// What one publish needs.
pub struct PublishRequest {
    pub job: JobRecord,
    pub job_dir: PathBuf,
    /// Where the bundle, commit message and body are written (the stage's directory).
    pub out_dir: PathBuf,
    /// The project whose spec library the spec is validated with.
    pub spec_root: PathBuf,
    /// `[publish]`: names the branch and base of a dry run.
    pub settings: PublishSettings,
    /// None: a dry run.
    pub target: Option<Target>,
}

/// What a publish did; the stage's summary.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct PublishReport {
    /// `dry-run` or `published`.
    pub mode: String,
    /// One line for the job log and `status`.
    pub message: String,
    pub model_id: String,
    pub spec: String,
    pub spec_origin: String,
    pub branch: String,
    pub base: String,
    pub title: String,
    pub labels: Vec<String>,
    pub draft: bool,
    pub draft_reasons: Vec<String>,
    pub files: Vec<String>,
    pub bundle_id: String,
    /// `pushed`, `created`, `unchanged` (the branch already carries the bundle), `in-base`
    /// (the base already holds it) or `not-pushed` (dry run).
    pub branch_action: String,
    pub commit: Option<String>,
    pub pull_request: Option<PrOutcome>,
    pub rate_limit_waits: Vec<String>,
}

impl harch_jobs::summary::StageSummary for PublishReport {
    const STAGE: harch_jobs::stage::Stage = harch_jobs::stage::Stage::Publish;
}

/// Publishes job `req.job`'s spec (see the module docs).
pub async fn publish(req: PublishRequest) -> Result<PublishReport, PublishError> {
    let (job, job_dir, spec_root) = (req.job.clone(), req.job_dir.clone(), req.spec_root.clone());
    let prepared = tokio::task::spawn_blocking(move || bundle::prepare(&job, &job_dir, &spec_root))
        .await
        .map_err(|e| PublishError::permanent(format!("preparing the bundle crashed: {e}")))??;
    let model_id = prepared.model_id.clone();

    let Some(target) = req.target else {
        let root = req.spec_root.clone();
        let facts = BaseFacts::of(&prepared, |p| root.join(p).is_file());
        let proposal = bundle::propose(&prepared, &facts);
        write_artifacts(&req.out_dir, &proposal)?;
        let branch = config::branch_name(&req.settings.branch_prefix, &model_id);
        let mut r = report(
            &prepared,
            &proposal,
            "dry-run",
            &branch,
            &req.settings.base_branch,
        );
        r.branch_action = "not-pushed".into();
        r.message = "publish: dry run ([publish] repo is not configured): bundle, commit message and PR body are in the job's publish/ directory".to_string();
        return Ok(r);
    };

    let branch = target.branch(&model_id);
    if branch == target.base_branch {
        return Err(PublishError::permanent(format!(
            "the model's branch `{branch}` is the base branch: refusing to push to it"
        )));
    }
    let token = github::token_for(&target).await?;
    let t = target.clone();
    let (b, p, tok) = (branch.clone(), prepared.clone(), token.clone());
    let (proposal, outcome) = tokio::task::spawn_blocking(move || {
        let repo = SpecRepo::open(&t.clone_dir, &t.remote_url, Some(tok))?;
        let state = repo.fetch(&t.base_branch, &b)?;
        let facts = BaseFacts::of(&p, |path| repo.has_path(&state.base, path));
        let proposal = bundle::propose(&p, &facts);
        let plan = BranchPlan {
            branch: &b,
            files: &proposal.files,
            message: &proposal.commit_message,
            bundle_id: &bundle::bundle_id(&proposal.files),
            author: (&t.author_name, &t.author_email),
        };
        let outcome = repo.publish_branch(&state, &plan)?;
        Ok::<_, PublishError>((proposal, outcome))
    })
    .await
    .map_err(|e| PublishError::permanent(format!("the git work crashed: {e}")))??;
    write_artifacts(&req.out_dir, &proposal)?;

    let mut r = report(
        &prepared,
        &proposal,
        "published",
        &branch,
        &target.base_branch,
    );
    let commit = match &outcome {
        BranchOutcome::Pushed { commit, created } => {
            r.branch_action = if *created { "created" } else { "pushed" }.into();
            Some(commit.to_string())
        }
        BranchOutcome::Unchanged { commit } => {
            r.branch_action = "unchanged".into();
            Some(commit.to_string())
        }
        BranchOutcome::InBase => {
            r.branch_action = "in-base".into();
            None
        }
    };
    r.commit = commit;
    if outcome == BranchOutcome::InBase {
        r.message = format!(
            "publish: {} already holds this bundle on {}; nothing to propose",
            target.repo(),
            target.base_branch
        );
        return Ok(r);
    }
    let mut gh = GitHub::new(&target, &token)?;
    let pr = gh
        .open_or_update(&PrRequest {
            branch: &branch,
            base: &target.base_branch,
            title: &proposal.title,
            body: &proposal.body,
            draft: !proposal.draft_reasons.is_empty(),
            labels: &proposal.labels,
        })
        .await;
    r.rate_limit_waits = std::mem::take(&mut gh.waits);
    let pr = pr?;
    r.message = format!(
        "publish: pull request #{} {}{} ({}), branch {} {}",
        pr.number,
        pr.action,
        if pr.draft { " as a draft" } else { "" },
        pr.url,
        branch,
        r.branch_action
    );
    r.draft = pr.draft;
    r.pull_request = Some(pr);
    Ok(r)
}

fn report(
    p: &bundle::Prepared,
    proposal: &Proposal,
    mode: &str,
    branch: &str,
    base: &str,
) -> PublishReport {
    PublishReport {
        mode: mode.into(),
        message: String::new(),
        model_id: p.model_id.clone(),
        spec: p.spec_key.clone(),
        spec_origin: p.spec_origin.clone(),
        branch: branch.into(),
        base: base.into(),
        title: proposal.title.clone(),
        labels: proposal.labels.clone(),
        draft: !proposal.draft_reasons.is_empty(),
        draft_reasons: proposal.draft_reasons.clone(),
        files: proposal.files.keys().cloned().collect(),
        bundle_id: bundle::bundle_id(&proposal.files),
        branch_action: String::new(),
        commit: None,
        pull_request: None,
        rate_limit_waits: Vec::new(),
    }
}

/// The stage's files: `bundle/<repository path>`, `commit-message.txt`, `pr-body.md` and
/// `pr.json` (title, labels, draft reasons).
fn write_artifacts(out: &Path, proposal: &Proposal) -> Result<(), PublishError> {
    use harch_jobs::store::write_atomic;
    for (path, bytes) in &proposal.files {
        let dest = out.join("bundle").join(path);
        if let Some(dir) = dest.parent() {
            std::fs::create_dir_all(dir)
                .map_err(|e| PublishError::transient(format!("creating {}: {e}", dir.display())))?;
        }
        write_atomic(&dest, bytes)?;
    }
    write_atomic(
        &out.join("commit-message.txt"),
        proposal.commit_message.as_bytes(),
    )?;
    write_atomic(&out.join("pr-body.md"), proposal.body.as_bytes())?;
    let meta = serde_json::json!({
        "title": proposal.title,
        "labels": proposal.labels,
        "draft": !proposal.draft_reasons.is_empty(),
        "draft_reasons": proposal.draft_reasons,
    });
    let bytes = serde_json::to_vec_pretty(&meta)
        .map_err(|e| PublishError::permanent(format!("pr.json: {e}")))?;
    write_atomic(&out.join("pr.json"), &bytes)?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    /// The publish stage's summary is this report; a record written before the report could be
    /// read back reads as it and writes back unchanged.
    #[test]
    fn the_report_reads_and_writes_the_recorded_summary() {
        let old = json!({
            "mode": "published", "message": "publish: pull request #7 opened",
            "model_id": "meta-llama/Llama-3.1-8B", "spec": "specs/models/llama.yaml",
            "spec_origin": "generate", "branch": "harch/llama-3.1-8b", "base": "main",
            "title": "Add llama", "labels": ["harch"], "draft": true,
            "draft_reasons": ["not reviewed"], "files": ["specs/models/llama.yaml"],
            "bundle_id": "abc123", "branch_action": "created", "commit": "deadbeef",
            "pull_request": {"number": 7, "url": "https://github.example/pr/7",
                "action": "opened", "draft": true, "labels_added": ["harch"],
                "labels_removed": [], "draft_unsupported": false},
            "rate_limit_waits": []
        });
        let report: PublishReport = serde_json::from_value(old.clone()).unwrap();
        assert_eq!(report.pull_request.as_ref().map(|p| p.number), Some(7));
        assert_eq!(serde_json::to_value(&report).unwrap(), old);
        let dry = json!({
            "mode": "dry-run", "message": "publish: dry run", "model_id": "o/m",
            "spec": "specs/models/m.yaml", "spec_origin": "library", "branch": "harch/m",
            "base": "main", "title": "Add m", "labels": [], "draft": false,
            "draft_reasons": [], "files": [], "bundle_id": "b", "branch_action": "not-pushed",
            "commit": null, "pull_request": null, "rate_limit_waits": []
        });
        let report: PublishReport = serde_json::from_value(dry.clone()).unwrap();
        assert_eq!(serde_json::to_value(&report).unwrap(), dry);
    }
}
