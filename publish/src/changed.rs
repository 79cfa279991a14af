//! `harch-worker validate-changed`: what the spec repository's CI runs on a pull request. The
//! files that changed between the base and HEAD name the model specs to check: a changed model
//! spec or provenance record names its spec; a changed component, dimension table or quant
//! scheme names every spec that uses it. Each is validated with every guard against the truth
//! its provenance records (`recheck`), and the results become a Markdown comment.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt::Write;
use std::path::Path;

use anyhow::{Context, bail};
use harch_engine::Repo;

use super::md::cell;
use super::recheck::{self, Recheck, TruthOptions};

/// Paths changed between the merge base of `base` and HEAD, and HEAD, in the git repository
/// at `root` (both sides of a rename).
pub fn changed_paths(root: &Path, base: &str) -> anyhow::Result<Vec<String>> {
    let git = |args: &[&str]| -> anyhow::Result<std::process::Output> {
        std::process::Command::new("git")
            .arg("-C")
            .arg(root)
            .args(args)
            .env("LC_ALL", "C")
            .stdin(std::process::Stdio::null())
            .output()
            .context("cannot run git: validate-changed needs the git command line on PATH")
    };
    let text = |o: std::process::Output| String::from_utf8_lossy(&o.stdout).trim().to_string();
    let inside = git(&["rev-parse", "--is-inside-work-tree"])?;
    if !inside.status.success() {
        bail!("{} is not in a git repository", root.display());
    }
    let base_commit = git(&[
        "rev-parse",
        "--verify",
        "--quiet",
        &format!("{base}^{{commit}}"),
    ])?;
    if !base_commit.status.success() {
        bail!("no commit `{base}`: fetch the base branch first");
    }
    let base_commit = text(base_commit);
    let head = git(&["rev-parse", "--verify", "--quiet", "HEAD^{commit}"])?;
    if !head.status.success() {
        bail!("HEAD is not a commit");
    }
    let merge_base = git(&["merge-base", &base_commit, &text(head)])?;
    if !merge_base.status.success() {
        bail!("`{base}` and HEAD share no history");
    }
    let diff = git(&[
        "diff",
        "--name-only",
        "--no-renames",
        "-z",
        &text(merge_base),
        "HEAD",
        "--",
    ])?;
    if !diff.status.success() {
        bail!(
            "git diff failed: {}",
            String::from_utf8_lossy(&diff.stderr).trim()
        );
    }
    let out: BTreeSet<String> = diff
        .stdout
        .split(|b| *b == 0)
        .filter(|p| !p.is_empty())
        .map(|p| String::from_utf8_lossy(p).replace('\\', "/"))
        .collect();
    Ok(out.into_iter().collect())
}

/// The model specs (paths) that `changed` makes worth checking again, given the spec
/// repository's files at HEAD.
pub fn affected_specs(files: &BTreeMap<String, String>, changed: &[String]) -> Vec<String> {
    let repo = Repo::from_files(files.clone());
    let models: Vec<String> = files
        .keys()
        .filter(|k| harch_engine::load::is_model_spec_path(k))
        .cloned()
        .collect();
    let prov = recheck::provenance_by_spec(files);
    let by_prov_path: BTreeMap<String, String> = prov
        .values()
        .map(|p| (super::provenance::path_for(&p.model_id), p.spec.clone()))
        .collect();
    let mut components = BTreeSet::new();
    let mut out = BTreeSet::new();
    for path in changed {
        if models.contains(path) {
            out.insert(path.clone());
        } else if let Some(spec) = models
            .iter()
            .find(|m| repo.gap_report(m).is_some_and(|(key, _)| key == path))
        {
            // A gap report labels its spec's figures: a change to it is a change to the spec.
            out.insert(spec.clone());
        } else if let Some(spec) = by_prov_path.get(path) {
            if models.contains(spec) {
                out.insert(spec.clone());
            }
        } else if path.starts_with("specs/components/") {
            // The component a file defines, at HEAD (or gone: then every spec is checked).
            match files.get(path) {
                Some(text) => {
                    let one = Repo::from_files(BTreeMap::from([(path.clone(), text.clone())]));
                    components.extend(one.component_names().into_iter().map(str::to_string));
                }
                None => out.extend(models.iter().cloned()),
            }
        } else if path.starts_with("specs/arch/") || path.starts_with("specs/quant/") {
            out.extend(models.iter().cloned());
        }
    }
    if !components.is_empty() {
        for m in &models {
            let uses = repo
                .load_model(m)
                .map(|ir| ir.components.keys().any(|c| components.contains(c)))
                // A spec that does not load is checked, so its errors are reported.
                .unwrap_or(true);
            if uses {
                out.insert(m.clone());
            }
        }
    }
    out.into_iter().collect()
}

/// Checks every spec in `specs` against its recorded truth.
pub async fn check_all(
    files: &BTreeMap<String, String>,
    specs: &[String],
    opts: &TruthOptions,
) -> Vec<Recheck> {
    let prov = recheck::provenance_by_spec(files);
    let mut out = Vec::new();
    for spec in specs {
        out.push(recheck::recheck(files, spec, prov.get(spec), opts).await);
    }
    out
}

/// The comment the workflow posts.
pub fn markdown(results: &[Recheck], changed: usize) -> String {
    let mut b =
        String::from("<!-- harch:validate-changed -->\n### harch: validation of changed specs\n\n");
    if results.is_empty() {
        let _ = writeln!(
            b,
            "{changed} files changed; none of them affects a model spec."
        );
        return b;
    }
    let bad = results.iter().filter(|r| !r.valid).count();
    let _ = writeln!(
        b,
        "{} of {} affected specs valid{}.\n",
        results.len() - bad,
        results.len(),
        if bad > 0 {
            " — **this pull request must not be merged as is**"
        } else {
            ""
        }
    );
    b.push_str("| spec | model | truth | result |\n|---|---|---|---|\n");
    for r in results {
        let _ = writeln!(
            b,
            "| `{}` | {} | {} | {} |",
            cell(&r.spec, 120),
            r.model_id.as_deref().map_or("—".into(), |m| cell(m, 120)),
            cell(&r.truth, 160),
            if r.valid {
                format!("✓ valid ({} warnings)", r.warnings)
            } else {
                format!("✗ {} errors", r.errors.len())
            }
        );
    }
    for r in results.iter().filter(|r| !r.valid) {
        let _ = writeln!(
            b,
            "\n<details><summary><code>{}</code>: {} errors</summary>\n",
            cell(&r.spec, 120),
            r.errors.len()
        );
        for e in r.errors.iter().take(50) {
            let _ = writeln!(b, "- {}", cell(e, 400));
        }
        if r.errors.len() > 50 {
            let _ = writeln!(b, "- … {} more", r.errors.len() - 50);
        }
        b.push_str("\n</details>\n");
    }
    b
}

/// The Inspector page of each spec a change affects, against the truth its recheck reads,
/// written into `dir` (the spec repository's CI uploads them with its report). A spec without
/// truth gets no page; its recheck already says why.
pub async fn write_pages(
    files: &BTreeMap<String, String>,
    specs: &[String],
    opts: &TruthOptions,
    dir: &std::path::Path,
) -> anyhow::Result<Vec<std::path::PathBuf>> {
    let prov = recheck::provenance_by_spec(files);
    let repo = harch_engine::Repo::from_files(files.clone());
    let mut pages = Vec::new();
    for spec in specs {
        let p = prov.get(spec);
        let Ok((truth, origin)) = recheck::truth_for(&repo, spec, p, opts).await else {
            continue;
        };
        let title = p
            .map(|p| p.model_id.clone())
            .unwrap_or_else(|| spec.clone());
        let data = harch_inspect::collect_from(&title, &repo, spec, &truth, &origin)?;
        let html = harch_inspect::page(&data, &Default::default())?;
        let path = dir.join(harch_inspect::site::page_file(&title));
        std::fs::create_dir_all(dir)?;
        harch_inspect::site::write_file(&path, &html)?;
        pages.push(path);
    }
    Ok(pages)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_gap_report_is_no_spec_but_a_change_to_it_rechecks_its_spec() {
        let files = BTreeMap::from([
            (
                "specs/models/m.yaml".to_string(),
                "kind: model\n".to_string(),
            ),
            (
                "specs/models/m.gap.yaml".to_string(),
                "kind: dsl_gap\n".to_string(),
            ),
            (
                "specs/models/n.yaml".to_string(),
                "kind: model\n".to_string(),
            ),
        ]);
        let changed = vec!["specs/models/m.gap.yaml".to_string()];
        assert_eq!(affected_specs(&files, &changed), ["specs/models/m.yaml"]);
        // Everything rechecked (a shared file changed): the specs, never the gap report.
        let changed = vec!["specs/arch/dims.yaml".to_string()];
        assert_eq!(
            affected_specs(&files, &changed),
            ["specs/models/m.yaml", "specs/models/n.yaml"]
        );
    }
}
