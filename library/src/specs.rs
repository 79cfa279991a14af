//! Finding and reading the spec repository (`specs/`) and resolving what a command names:
//! a spec file, a model name, or a Hugging Face model id.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use anyhow::{Context, bail};
use harch_engine::{ModelIr, Repo, SpecError};

/// The repository root: `$HARCH_ROOT`, else the nearest ancestor of the current directory with
/// `specs/arch/dims.yaml`, else the checkout this binary was built from.
pub fn root() -> PathBuf {
    if let Ok(r) = std::env::var("HARCH_ROOT") {
        return PathBuf::from(r);
    }
    if let Ok(cwd) = std::env::current_dir() {
        for dir in cwd.ancestors() {
            if dir.join("specs/arch/dims.yaml").is_file() {
                return dir.to_path_buf();
            }
        }
    }
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("..")
}

/// Every YAML file under `root/specs`, keyed by its path relative to `root`.
pub fn read_spec_files(root: &Path) -> anyhow::Result<BTreeMap<String, String>> {
    let mut files = BTreeMap::new();
    let mut stack = vec![root.join("specs")];
    while let Some(dir) = stack.pop() {
        let entries =
            std::fs::read_dir(&dir).with_context(|| format!("reading {}", dir.display()))?;
        for e in entries {
            let path = e?.path();
            if path.is_dir() {
                stack.push(path);
            } else if path.extension().is_some_and(|x| x == "yaml" || x == "yml") {
                let rel = path
                    .strip_prefix(root)
                    .unwrap_or(&path)
                    .to_string_lossy()
                    .replace('\\', "/");
                let text = std::fs::read_to_string(&path)
                    .with_context(|| format!("reading {}", path.display()))?;
                files.insert(rel, text);
            }
        }
    }
    Ok(files)
}

/// Read the spec repository into a [`Repo`]; `extra` adds files from elsewhere (a spec being
/// validated, its drafts), keyed the same way.
pub fn read_repo(root: &Path, extra: &[(String, String)]) -> anyhow::Result<Repo> {
    let mut files = read_spec_files(root)?;
    for (k, v) in extra {
        files.insert(k.clone(), v.clone());
    }
    Ok(Repo::from_files(files))
}

/// What a command line names as the spec.
#[derive(Clone)]
pub struct Target {
    pub repo: Repo,
    /// Model name in the repo, or the relative file key of a spec given by path.
    pub model: String,
    /// Files from outside `specs/` (a spec given by path, its drafts): the key they have in
    /// the repo (`specs/models/x.yaml`) and the path the user gave, which errors must show.
    pub paths: BTreeMap<String, String>,
    /// The library spec a spec given by path stands in for, because it has that spec's
    /// `model:` name (a copy that kept it): left out of the repo for this check.
    pub stands_in_for: Option<String>,
}

impl Target {
    /// A spec of the library, or the library's spec for a model.
    pub fn library(repo: Repo, model: String) -> Target {
        Target {
            repo,
            model,
            paths: BTreeMap::new(),
            stands_in_for: None,
        }
    }

    /// The file a location names, as the user knows it: the path they gave for a file from
    /// outside `specs/`, the repository-relative path otherwise.
    pub fn user_path<'a>(&'a self, file: &'a str) -> &'a str {
        self.paths.get(file).map_or(file, String::as_str)
    }

    /// A note for the user when the spec stands in for a library spec of the same name.
    pub fn note(&self) -> Option<String> {
        let library = self.stands_in_for.as_deref()?;
        let given = self.user_path(&self.model);
        Some(format!(
            "{given} has the `model:` name of the library spec {library} and stands in for it in this check (model names are unique; give a copy its own name to check both)"
        ))
    }

    /// Points a location into a file from outside `specs/` at the path the user gave.
    pub fn relocate(&self, loc: &mut harch_engine::diag::Location) {
        if let Some(f) = loc.file.as_mut()
            && let Some(p) = self.paths.get(f.as_str())
        {
            *f = p.clone();
        }
    }

    /// [`Target::relocate`] for every error.
    pub fn relocate_all(&self, errs: &mut [SpecError]) {
        for e in errs {
            self.relocate(&mut e.location);
        }
    }
}

/// Resolve `SPEC-PATH | model name`. A path outside `specs/models/` is added to the repo under
/// `specs/models/` (its drafts may sit next to it in `drafts/`).
pub fn resolve_spec(root: &Path, arg: &str) -> anyhow::Result<Target> {
    let p = Path::new(arg);
    if p.is_file() {
        let text = std::fs::read_to_string(p).with_context(|| format!("reading {arg}"))?;
        let key = format!(
            "specs/models/{}",
            p.file_name()
                .map(|f| f.to_string_lossy().to_string())
                .unwrap_or_default()
        );
        let mut extra = vec![];
        let mut paths = BTreeMap::new();
        let abs = std::fs::canonicalize(p)?;
        let inside = std::fs::canonicalize(root.join("specs"))
            .map(|s| abs.starts_with(s))
            .unwrap_or(false);
        let key = if inside {
            abs.strip_prefix(std::fs::canonicalize(root)?)?
                .to_string_lossy()
                .replace('\\', "/")
        } else {
            key
        };
        if !inside {
            paths.insert(key.clone(), arg.to_string());
            extra.push((key.clone(), text.clone()));
            // The gap report beside the spec travels with it (`x.yaml` and `x.gap.yaml`).
            let gap = p.with_extension("gap.yaml");
            if let (Some(stem), true) = (key.strip_suffix(".yaml"), gap.is_file()) {
                let gap_key = format!("{stem}.gap.yaml");
                paths.insert(gap_key.clone(), gap.display().to_string());
                extra.push((gap_key, std::fs::read_to_string(&gap)?));
            }
            if let Some(dir) = p.parent() {
                let drafts = dir.join("drafts");
                if drafts.is_dir() {
                    for e in std::fs::read_dir(&drafts)? {
                        let path = e?.path();
                        if path.extension().is_some_and(|x| x == "yaml") {
                            let name = path
                                .file_name()
                                .map(|f| f.to_string_lossy().to_string())
                                .unwrap_or_default();
                            let key = format!("specs/components/drafts/{name}");
                            paths.insert(key.clone(), path.display().to_string());
                            extra.push((key, std::fs::read_to_string(&path)?));
                        }
                    }
                }
            }
        }
        let mut files = read_spec_files(root)?;
        // A copy of a library spec that keeps its `model:` name stands in for it: model names
        // are unique, and the file the user named is the one to check.
        let stands_in_for = if inside {
            None
        } else {
            library_file_named_like(&files, &key, &text)
        };
        if let Some(f) = &stands_in_for {
            files.remove(f);
        }
        files.extend(extra);
        return Ok(Target {
            repo: Repo::from_files(files),
            model: key,
            paths,
            stands_in_for,
        });
    }
    let repo = read_repo(root, &[])?;
    if repo.model_names().contains(&arg) {
        return Ok(Target::library(repo, arg.to_string()));
    }
    if arg.ends_with(".yaml") {
        bail!("no such file: {arg}");
    }
    bail!(
        "`{arg}` is neither a spec file nor a model spec name (known: {})",
        repo.model_names().join(", ")
    )
}

/// The library model spec (other than `key`) whose `model:` name the spec `text` has, if any.
fn library_file_named_like(
    files: &BTreeMap<String, String>,
    key: &str,
    text: &str,
) -> Option<String> {
    let own = Repo::from_files(BTreeMap::from([(key.to_string(), text.to_string())]));
    let name = own.model_names().first()?.to_string();
    let models: BTreeMap<String, String> = files
        .iter()
        .filter(|(k, _)| harch_engine::load::is_model_spec_path(k) && k.as_str() != key)
        .map(|(k, v)| (k.clone(), v.clone()))
        .collect();
    Repo::from_files(models)
        .model_file(&name)
        .map(str::to_string)
}

/// Loads the target's model; errors are located at the paths the user gave.
pub fn load(target: &Target) -> Result<ModelIr, Vec<SpecError>> {
    target.repo.load_model(&target.model).map_err(|mut errs| {
        target.relocate_all(&mut errs);
        errs
    })
}
