//! The decontaminated library of an ablation run: what an agent rewriting a model "from
//! scratch" may still see. Removed: every model spec (the target's own and all others), and
//! every library component of the same kind as one the target's library spec uses. A
//! component's kind is its role (`attention`, `ffn_moe`, …): when the target uses
//! `mla_attention`, every attention component goes, MLA or not, and so does every component
//! that nests a removed one. Templates (components with slots, such as `pre_norm_block`)
//! carry no mechanism of their own and stay, as do the shared tables (`arch/`, `quant/`) and
//! components of other kinds: the generic building blocks.
//!
//! Decided from the library's own definitions and the target spec's loaded IR, never by model
//! or component name.

use std::collections::{BTreeMap, BTreeSet};

use anyhow::{Context, bail};
use harch_engine::Repo;
use serde::{Deserialize, Serialize};

/// One file left out of the agent's workspace and prompt, and why.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Removed {
    /// The file as the spec repository names it (`specs/components/library/mla_attention.yaml`).
    pub path: String,
    pub why: String,
}

#[derive(Clone, Debug)]
pub struct Decontaminated {
    /// The shared tables and the components that stay, keyed like the spec repository.
    pub library: BTreeMap<String, String>,
    pub removed: Vec<Removed>,
    /// The target's library spec (`specs/models/gpt_oss.yaml`), when the library has one.
    pub target: Option<String>,
}

impl Decontaminated {
    /// Names of the components that stay.
    pub fn kept_components(&self) -> Vec<String> {
        self.library
            .keys()
            .filter(|k| k.starts_with(COMPONENTS))
            .cloned()
            .collect()
    }
}

const COMPONENTS: &str = "specs/components/library/";
const MODELS: &str = "specs/models/";

/// Splits `all` (every file under `specs/`, keyed `specs/…`) into what an ablation run of the
/// model serving `architectures` may see and what it may not.
pub fn decontaminate(
    all: &BTreeMap<String, String>,
    architectures: &[String],
) -> anyhow::Result<Decontaminated> {
    let repo = Repo::from_files(all.clone());
    let target = architectures
        .iter()
        .find_map(|a| repo.model_for_architecture(a))
        .map(str::to_string);
    let target_file = target
        .as_deref()
        .and_then(|m| repo.model_file(m))
        .map(str::to_string);

    // The kinds (roles) of the mechanisms the target's spec uses.
    let mut kinds: BTreeMap<String, String> = BTreeMap::new();
    if let Some(model) = &target {
        let ir = repo.load_model(model).map_err(|errs| {
            anyhow::anyhow!(
                "the library spec of `{model}` does not load, so its kinds are unknown: {}",
                errs.first().map(|e| e.message.as_str()).unwrap_or("")
            )
        })?;
        for name in ir.components.keys() {
            let Some((def, draft)) = repo.component_def(name) else {
                continue;
            };
            if !draft && def.slots.is_empty() {
                kinds
                    .entry(def.role.clone())
                    .or_insert_with(|| name.clone());
            }
        }
    }

    // Library components by name, with the file each lives in.
    let mut files_of: BTreeMap<String, String> = BTreeMap::new();
    for key in all.keys().filter(|k| k.starts_with(COMPONENTS)) {
        let text = &all[key];
        let def: harch_engine::schema::ComponentDef = harch_engine::load::parse_yaml(key, text)
            .map_err(|e| anyhow::anyhow!("{}", e.message))
            .with_context(|| format!("reading {key}"))?;
        files_of.insert(def.component.clone(), key.clone());
    }
    let mut removed_names: BTreeMap<String, String> = BTreeMap::new();
    for name in files_of.keys() {
        let Some((def, _)) = repo.component_def(name) else {
            continue;
        };
        if let Some(used) = kinds.get(&def.role) {
            let why = if used == name {
                format!("used by the target spec (kind `{}`)", def.role)
            } else {
                format!("same kind (`{}`) as the target's `{used}`", def.role)
            };
            removed_names.insert(name.clone(), why);
        }
    }
    // A component that nests a removed one would show how it is used; it goes too.
    loop {
        let mut more = Vec::new();
        for name in files_of.keys().filter(|n| !removed_names.contains_key(*n)) {
            let Some((def, _)) = repo.component_def(name) else {
                continue;
            };
            let nested = def
                .graph
                .values()
                .filter_map(|n| n.value.component.clone())
                .chain(def.decode_variant.clone());
            if let Some(r) = nested.into_iter().find(|c| removed_names.contains_key(c)) {
                more.push((name.clone(), format!("nests the removed `{r}`")));
            }
        }
        if more.is_empty() {
            break;
        }
        removed_names.extend(more);
    }

    let mut library = BTreeMap::new();
    let mut removed = Vec::new();
    for (key, text) in all {
        let why = if key.starts_with(MODELS) {
            Some(if Some(key) == target_file.as_ref() {
                "the target's own spec".to_string()
            } else {
                "another model's spec".to_string()
            })
        } else if key.starts_with(COMPONENTS) {
            files_of
                .iter()
                .find(|(_, f)| *f == key)
                .and_then(|(n, _)| removed_names.get(n).cloned())
        } else if key.starts_with("specs/arch/") || key.starts_with("specs/quant/") {
            None
        } else {
            // Drafts, snapshots, hardware: not part of what an agent is given.
            continue;
        };
        match why {
            Some(why) => removed.push(Removed {
                path: key.clone(),
                why,
            }),
            None => {
                library.insert(key.clone(), text.clone());
            }
        }
    }
    if target.is_some() && !removed.iter().any(|r| r.path.starts_with(COMPONENTS)) {
        bail!(
            "decontamination removed no component of the target's kinds: refusing a run that would see its own building blocks"
        );
    }
    Ok(Decontaminated {
        library,
        removed,
        target: target_file,
    })
}

/// The component names in `removed`, as they appear after `component:` in their files.
pub fn removed_component_names(
    d: &Decontaminated,
    all: &BTreeMap<String, String>,
) -> BTreeSet<String> {
    d.removed
        .iter()
        .filter(|r| r.path.starts_with(COMPONENTS))
        .filter_map(|r| {
            harch_engine::load::parse_yaml::<harch_engine::schema::ComponentDef>(
                &r.path,
                all.get(&r.path)?,
            )
            .ok()
            .map(|d| d.component)
        })
        .collect()
}
