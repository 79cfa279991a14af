//! `harch-worker promote <component>`: a maintainer moves a reviewed draft component into the
//! library. The draft's file moves from `specs/components/drafts/` to
//! `specs/components/library/` (a git move: the index records the rename), and every model spec
//! that listed it under `drafts:` stops listing it (a library component needs no listing). Before
//! anything is touched, every model spec that uses the component is validated in its new place
//! against its truth (`recheck`); one that no longer validates, or has no truth to be checked
//! against, refuses the promotion.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use anyhow::{Context, bail};
use harch_engine::Repo;

use super::recheck::{self, Recheck, TruthOptions};

pub const DRAFTS: &str = "specs/components/drafts/";
pub const LIBRARY: &str = "specs/components/library/";

/// What a promotion changes (or would change, for a dry run).
#[derive(Clone, Debug, serde::Serialize)]
pub struct Plan {
    pub component: String,
    pub from: String,
    pub to: String,
    /// Model specs whose `drafts:` list loses the component, with their new text.
    #[serde(skip)]
    pub edits: BTreeMap<String, String>,
    pub edited_specs: Vec<String>,
    /// Every model spec that uses the component, checked in its new place.
    pub checks: Vec<Recheck>,
}

/// Plans the promotion of `component` in the spec repository at `root` and checks it; errors
/// when the promotion must be refused.
pub async fn plan(root: &Path, component: &str, opts: &TruthOptions) -> anyhow::Result<Plan> {
    let mut files = harch_library::specs::read_spec_files(root)?;
    files.extend(recheck::read_provenance(root));
    let repo = Repo::from_files(files.clone());
    let Some((_, is_draft)) = repo.component_def(component) else {
        let drafts: Vec<&str> = files
            .keys()
            .filter_map(|k| k.strip_prefix(DRAFTS))
            .collect();
        bail!(
            "no component `{component}` in {}; drafts: {}",
            root.join("specs/components").display(),
            if drafts.is_empty() {
                "none".to_string()
            } else {
                drafts.join(", ")
            }
        );
    };
    if !is_draft {
        bail!("`{component}` is already a library component");
    }
    let from = files
        .iter()
        .filter(|(k, _)| k.starts_with(DRAFTS))
        .find(|(k, text)| {
            Repo::from_files(BTreeMap::from([((*k).clone(), (*text).clone())]))
                .component_names()
                .contains(&component)
        })
        .map(|(k, _)| k.clone())
        .with_context(|| format!("the draft file of `{component}` was not found"))?;
    let name = from.strip_prefix(DRAFTS).unwrap_or(&from).to_string();
    if name.contains('/') {
        bail!("{from} is in a subfolder of drafts/; move it by hand");
    }
    let to = format!("{LIBRARY}{name}");
    if files.contains_key(&to) || root.join(&to).exists() {
        bail!("{to} exists already");
    }

    // The repository after the move, and which specs use the component.
    let mut after = files.clone();
    let text = after.remove(&from).unwrap_or_default();
    after.insert(to.clone(), text);
    let mut edits = BTreeMap::new();
    let mut users = Vec::new();
    for (path, text) in files
        .iter()
        .filter(|(k, _)| harch_engine::load::is_model_spec_path(k))
    {
        // A spec that does not load (perhaps because of this very draft) counts as a user when
        // its text names the component: it is then checked, and refuses the promotion.
        let (lists, uses) = match repo.load_model(path) {
            Ok(ir) => (
                ir.drafts.iter().any(|d| d == component),
                ir.components.contains_key(component),
            ),
            Err(_) => (
                remove_draft(text, component).is_some(),
                mentions(text, component),
            ),
        };
        if lists {
            let edited = remove_draft(text, component).with_context(|| {
                format!("{path} lists `{component}` under drafts: in a form promote cannot edit; remove it by hand")
            })?;
            after.insert(path.clone(), edited.clone());
            edits.insert(path.clone(), edited);
        }
        if lists || uses {
            users.push(path.clone());
        }
    }
    let moved = Repo::from_files(after.clone());
    for path in edits.keys() {
        if let Ok(ir) = moved.load_model(path)
            && ir.drafts.iter().any(|d| d == component)
        {
            bail!("{path}: `{component}` is still listed under drafts: after the edit");
        }
    }
    let prov = recheck::provenance_by_spec(&after);
    let mut checks = Vec::new();
    for spec in &users {
        checks.push(recheck::recheck(&after, spec, prov.get(spec), opts).await);
    }
    let failed: Vec<String> = checks
        .iter()
        .filter(|c| !c.valid)
        .map(|c| {
            format!(
                "{} (truth: {}): {}",
                c.spec,
                c.truth,
                c.errors
                    .iter()
                    .take(5)
                    .cloned()
                    .collect::<Vec<_>>()
                    .join("; ")
            )
        })
        .collect();
    if !failed.is_empty() {
        bail!(
            "refusing to promote `{component}`: {} spec(s) using it do not validate with it in the library:\n  {}",
            failed.len(),
            failed.join("\n  ")
        );
    }
    Ok(Plan {
        component: component.to_string(),
        from,
        to,
        edited_specs: edits.keys().cloned().collect(),
        edits,
        checks,
    })
}

/// Carries out a checked plan: moves the file and writes the edited specs, then records the
/// move and the edits in the git index (as `git mv` and `git add` would), when `root` is in a
/// git repository.
pub fn apply(root: &Path, plan: &Plan) -> anyhow::Result<bool> {
    let from = root.join(&plan.from);
    let to = root.join(&plan.to);
    std::fs::create_dir_all(to.parent().unwrap_or(root))?;
    std::fs::rename(&from, &to)
        .with_context(|| format!("moving {} to {}", from.display(), to.display()))?;
    for (path, text) in &plan.edits {
        harch_jobs::store::write_atomic(&root.join(path), text.as_bytes())?;
    }
    let git = |dir: &Path, args: &[&str]| -> anyhow::Result<std::process::Output> {
        std::process::Command::new("git")
            .arg("-C")
            .arg(dir)
            .args(args)
            .env("LC_ALL", "C")
            .stdin(std::process::Stdio::null())
            .output()
            .context("cannot run git to record the move in the index")
    };
    let top = match git(root, &["rev-parse", "--show-toplevel"]) {
        Ok(o) if o.status.success() => o,
        // Not in a git repository (or one without a work tree, or no git at all): the files
        // are moved, nothing is staged.
        _ => return Ok(false),
    };
    let workdir = PathBuf::from(String::from_utf8_lossy(&top.stdout).trim());
    // Paths in the index are relative to the work tree, which may sit above `root`.
    let canon = |p: &Path| p.canonicalize().unwrap_or_else(|_| p.to_path_buf());
    let root_rel = canon(root)
        .strip_prefix(canon(&workdir))
        .map(Path::to_path_buf)
        .context("the spec repository is outside the git work tree")?;
    let rel = |p: &str| root_rel.join(p).to_string_lossy().into_owned();
    // A draft that was never committed is simply not in the index.
    let old = rel(&plan.from);
    let removed = git(
        &workdir,
        &["rm", "--cached", "--quiet", "--ignore-unmatch", "--", &old],
    )?;
    if !removed.status.success() {
        bail!(
            "git rm --cached {old}: {}",
            String::from_utf8_lossy(&removed.stderr).trim()
        );
    }
    let mut add = vec![
        "add".to_string(),
        "--force".into(),
        "--".into(),
        rel(&plan.to),
    ];
    add.extend(plan.edits.keys().map(|p| rel(p)));
    let add: Vec<&str> = add.iter().map(String::as_str).collect();
    let added = git(&workdir, &add)?;
    if !added.status.success() {
        bail!("git add: {}", String::from_utf8_lossy(&added.stderr).trim());
    }
    Ok(true)
}

/// Whether `text` has `name` as a whole word.
fn mentions(text: &str, name: &str) -> bool {
    text.split(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
        .any(|w| w == name)
}

/// `text` without `name` in its top-level `drafts:` list (flow `[a, b]` or block `- a` form);
/// a list left empty goes entirely. None when the list has a form this does not understand.
pub fn remove_draft(text: &str, name: &str) -> Option<String> {
    let lines: Vec<&str> = text.split_inclusive('\n').collect();
    let at = lines.iter().position(|l| l.starts_with("drafts:"))?;
    let rest = lines[at]["drafts:".len()..].trim_end();
    let (value, comment) = match rest.find(" #") {
        Some(i) => (rest[..i].trim(), &rest[i..]),
        None => (rest.trim(), ""),
    };
    let unquote = |s: &str| s.trim().trim_matches(|c| c == '"' || c == '\'').to_string();
    let mut out: Vec<String> = lines.iter().map(|l| l.to_string()).collect();
    if let Some(inner) = value.strip_prefix('[').and_then(|v| v.strip_suffix(']')) {
        let kept: Vec<&str> = inner
            .split(',')
            .map(str::trim)
            .filter(|s| !s.is_empty() && unquote(s) != name)
            .collect();
        let nl = if lines[at].ends_with('\n') { "\n" } else { "" };
        out[at] = if kept.is_empty() {
            String::new()
        } else {
            format!("drafts: [{}]{comment}{nl}", kept.join(", "))
        };
        return Some(out.concat());
    }
    if !value.is_empty() {
        return None;
    }
    // Block form: the indented `- item` lines that follow.
    let mut items = Vec::new();
    for (i, l) in lines.iter().enumerate().skip(at + 1) {
        let t = l.trim_start();
        if l.starts_with([' ', '\t']) && t.starts_with('-') {
            items.push(i);
        } else if t.is_empty() || t.starts_with('#') && l.starts_with([' ', '\t']) {
            continue;
        } else {
            break;
        }
    }
    let mut removed = false;
    for &i in &items {
        let item = lines[i].trim_start().trim_start_matches('-');
        let item = item.split(" #").next().unwrap_or("");
        if unquote(item) == name {
            out[i] = String::new();
            removed = true;
        }
    }
    if !removed {
        return None;
    }
    if items.iter().all(|i| out[*i].is_empty()) {
        out[at] = String::new();
    }
    Some(out.concat())
}

#[cfg(test)]
mod tests {
    use super::remove_draft;

    #[test]
    fn drafts_lists_lose_the_promoted_name() {
        assert_eq!(
            remove_draft("model: m\ndrafts: [a, b]\ngraph: {}\n", "a").unwrap(),
            "model: m\ndrafts: [b]\ngraph: {}\n"
        );
        assert_eq!(
            remove_draft("model: m\ndrafts: ['a']  # new\ngraph: {}\n", "a").unwrap(),
            "model: m\ngraph: {}\n"
        );
        assert_eq!(
            remove_draft("model: m\ndrafts:\n  - a\n  - \"b\"\ngraph: {}\n", "b").unwrap(),
            "model: m\ndrafts:\n  - a\ngraph: {}\n"
        );
        assert_eq!(
            remove_draft("model: m\ndrafts:\n  - a\ngraph: {}\n", "a").unwrap(),
            "model: m\ngraph: {}\n"
        );
        assert!(remove_draft("model: m\ngraph: {}\n", "a").is_none());
        assert!(remove_draft("drafts: !!seq [a]\n", "a").is_none());
        assert!(remove_draft("drafts:\n  - b\n", "a").is_none());
    }
}
