//! What `show`, `explain` and `validate` act on: a spec (file, name or model id) and the truth
//! it is evaluated against (a truth directory, or the bundled snapshot of a library model).

use std::path::Path;

use anyhow::{Context, bail};
use harch_engine::load::Repo;
use harch_guards::truth::Truth;

use crate::specs::{self, Target};
use harch_truth::inventory_cache::InventoryCache;
use harch_truth::snapshot;

pub struct Subject {
    pub target: Target,
    pub truth: Truth,
    /// Where the truth came from, for messages.
    pub truth_origin: String,
}

fn looks_like_model_id(arg: &str) -> bool {
    let p = Path::new(arg);
    arg.split('/').count() == 2 && !p.exists() && !arg.ends_with(".yaml") && !arg.ends_with(".yml")
}

/// Resolve `<SPEC-PATH | MODEL-NAME | MODEL-ID>` with an optional `--truth DIR`.
pub fn resolve(arg: &str, truth_dir: Option<&Path>) -> anyhow::Result<Subject> {
    let root = specs::root();
    let by_id = looks_like_model_id(arg);
    // The spec repository is read while the truth is: a large checkpoint's truth takes most of
    // the time, and the two reads do not depend on each other.
    let (truth, repo) = std::thread::scope(|scope| {
        let repo = by_id.then(|| scope.spawn(|| specs::read_repo(&root, &[])));
        let truth = read_truth(arg, truth_dir);
        let repo = repo.map(|r| match r.join() {
            Ok(repo) => repo,
            Err(panic) => std::panic::resume_unwind(panic),
        });
        (truth, repo)
    });
    let (truth, origin) = truth?;
    let target = match repo {
        Some(repo) => {
            let repo = repo?;
            let Some(model) = library_model(&repo, &truth.config).map(str::to_string) else {
                bail!(
                    "no library spec serves the architectures {:?} of `{arg}`",
                    architectures(&truth.config)
                );
            };
            Target::library(repo, model)
        }
        None => specs::resolve_spec(&root, arg)?,
    };
    if truth_dir.is_none() && !looks_like_model_id(arg) {
        // A spec alone: evaluate it against the bundled snapshot of a checkpoint it serves. A
        // spec that does not parse gets empty truth; loading it reports why.
        let Some(archs) = target
            .repo
            .model_architectures(&target.model)
            .map(<[String]>::to_vec)
        else {
            return Ok(Subject {
                target,
                truth: Truth::default(),
                truth_origin: "nothing (the spec does not load)".into(),
            });
        };
        for id in snapshot::snapshot_ids() {
            if let Some(t) = snapshot::try_load_snapshot(id)?
                && architectures(&t.config).iter().any(|a| archs.contains(a))
            {
                return Ok(Subject {
                    target,
                    truth: with_native_source(t),
                    truth_origin: format!("bundled snapshot of {id}"),
                });
            }
        }
        bail!(
            "no bundled snapshot has the architectures {archs:?} of spec `{arg}`; pass `--truth DIR`"
        );
    }
    Ok(Subject {
        target,
        truth: with_native_source(truth),
        truth_origin: origin,
    })
}

/// The truth `arg` is checked against, and where it came from: the truth directory, else the
/// bundled snapshot of a model id, else nothing yet (a spec alone finds its snapshot later).
fn read_truth(arg: &str, truth_dir: Option<&Path>) -> anyhow::Result<(Truth, String)> {
    let cache = InventoryCache::from_env();
    Ok(match truth_dir {
        Some(dir) => (
            harch_truth::truth_dir::load_truth_dir_cached(dir, cache.as_ref())
                .with_context(|| format!("reading truth directory {}", dir.display()))?,
            dir.display().to_string(),
        ),
        None if looks_like_model_id(arg) => {
            match snapshot::try_load_snapshot_cached(arg, cache.as_ref())? {
                Some(t) => (t, format!("bundled snapshot of {arg}")),
                None => bail!(
                    "no bundled snapshot of `{arg}`; fetch it first (`harch-worker fetch {arg} --out DIR`) and pass `--truth DIR`"
                ),
            }
        }
        None => (Truth::default(), String::new()),
    })
}

/// Why a truth is not the checkpoint of model id `arg`, when it is not: the truth directory's
/// `truth.json` names another id, or its architectures differ from the bundled snapshot of
/// `arg`. `None` for a spec path or a truth that agrees (or says nothing either way).
pub fn identity_mismatch(arg: &str, truth: &Truth) -> anyhow::Result<Option<String>> {
    if !looks_like_model_id(arg) {
        return Ok(None);
    }
    if let Some(id) = &truth.model_id
        && id != arg
    {
        return Ok(Some(format!("its truth.json says it is `{id}`")));
    }
    let theirs = architectures(&truth.config);
    if let Some(config) = snapshot::snapshot_config(arg)? {
        let ours = architectures(&config);
        if !ours.is_empty() && !theirs.is_empty() && !ours.iter().any(|a| theirs.contains(a)) {
            return Ok(Some(format!(
                "its config.json is {theirs:?}, but `{arg}` is {ours:?}"
            )));
        }
    }
    Ok(None)
}

/// Truth without forward source (a bundled snapshot) gets the transformers modeling file of its
/// architecture when one is available locally.
fn with_native_source(mut truth: Truth) -> Truth {
    if truth.sources.is_empty()
        && let Some(set) = harch_truth::source::resolve_native(&truth.config)
    {
        truth.sources = set.files;
    }
    truth
}

/// The library model serving the first of `config`'s architectures that `repo` has a spec for.
pub fn library_model<'r>(repo: &'r Repo, config: &serde_json::Value) -> Option<&'r str> {
    architectures(config)
        .iter()
        .find_map(|a| repo.model_for_architecture(a))
}

pub fn architectures(config: &serde_json::Value) -> Vec<String> {
    config
        .get("architectures")
        .and_then(|a| a.as_array())
        .map(|a| {
            a.iter()
                .filter_map(|v| v.as_str().map(str::to_string))
                .collect()
        })
        .unwrap_or_default()
}

pub fn render_errors(errs: &[harch_engine::SpecError]) -> String {
    errs.iter()
        .map(|e| e.to_string())
        .collect::<Vec<_>>()
        .join("\n")
}

/// Load the subject's spec and evaluate it once. The error is the spec's errors, rendered
/// (the command line makes it exit 1: the spec, not the command, is wrong).
pub fn evaluated(
    s: &Subject,
    opts: harch_engine::EvalOptions,
) -> anyhow::Result<(harch_engine::ModelIr, harch_engine::Analysis)> {
    evaluated_at(s, opts, None)
}

/// As [`evaluated`], with image inputs counted at `image` (each input's default when `None`).
pub fn evaluated_at(
    s: &Subject,
    opts: harch_engine::EvalOptions,
    image: Option<harch_engine::ImageSize>,
) -> anyhow::Result<(harch_engine::ModelIr, harch_engine::Analysis)> {
    if let Some(n) = s.target.note() {
        eprintln!("note: {n}");
    }
    evaluated_target(&s.target, &s.truth.config, opts, image)
}

/// As [`evaluated_at`], for a target other than the subject's own (a what-if edit of it),
/// against the subject's config.
pub fn evaluated_target(
    target: &Target,
    config: &serde_json::Value,
    opts: harch_engine::EvalOptions,
    image: Option<harch_engine::ImageSize>,
) -> anyhow::Result<(harch_engine::ModelIr, harch_engine::Analysis)> {
    let ir = specs::load(target).map_err(|errs| anyhow::anyhow!("{}", render_errors(&errs)))?;
    let a = harch_engine::evaluate_at(&ir, config, opts, image);
    if !a.errors.is_empty() {
        let mut errs = a.errors.clone();
        target.relocate_all(&mut errs);
        anyhow::bail!("{}", render_errors(&errs));
    }
    Ok((ir, a))
}
