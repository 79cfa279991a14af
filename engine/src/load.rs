//! Loading the spec repository: YAML → schema → IR, with every error located and coded.
//!
//! The repository arrives as file contents keyed by relative path (`specs/...`); this module
//! does no I/O.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::rc::Rc;

use indexmap::IndexMap;
use serde::de::DeserializeOwned;

use crate::diag::{Location, SpecError, closest, code};
use crate::expr::{self, Expr};
use crate::ir::*;
use crate::ops;
use crate::schema::*;

/// Config keys the guards care about (specs/arch/config_keys.yaml).
#[derive(Clone, Debug, Default, serde::Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ConfigKeys {
    /// Keys that, when config sets them (non-null), some binding of the spec must read.
    #[serde(default)]
    pub must_bind: Vec<String>,
    /// Per-layer lists whose distinct values must land in distinct blocks.
    #[serde(default)]
    pub per_layer: Vec<String>,
    /// Rules that split layers by config: layers where `rule` (an expression over `i` and
    /// `config`) differs must be built from different blocks.
    #[serde(default)]
    pub layer_rules: Vec<LayerRule>,
    /// Quantities config.json fixes, each under every spelling real configs use (the first
    /// present wins); the semantic guard holds the spec's values to them.
    #[serde(default)]
    pub quantities: IndexMap<String, Quantity>,
}

/// One configured quantity (experts per token, MTP layers, head counts).
#[derive(Clone, Debug, Default, serde::Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Quantity {
    /// Every spelling of the key, most common first.
    pub keys: Vec<String>,
    /// The dim that binds the quantity (`top_k`): its value is the configured one.
    #[serde(default)]
    pub dim: Option<String>,
    /// Where no spelling is set: products of keys that state the quantity together, each
    /// used when all its keys are set (DeepSeek's shared experts are `n_shared_experts`
    /// experts of `moe_intermediate_size` each).
    #[serde(default)]
    pub products: Vec<Vec<String>>,
}

impl ConfigKeys {
    /// The first spelling of `quantity` that config sets (non-null), with its value.
    pub fn configured<'c>(
        &self,
        quantity: &str,
        config: &'c serde_json::Value,
    ) -> Option<(&str, &'c serde_json::Value)> {
        self.quantities.get(quantity)?.keys.iter().find_map(|k| {
            config_at(config, k)
                .filter(|v| !v.is_null())
                .map(|v| (k.as_str(), v))
        })
    }
}

/// The value at a config key, where a dotted key names a nested one
/// (`sparse_attention_config.sparse_topk_blocks`).
pub fn config_at<'c>(config: &'c serde_json::Value, key: &str) -> Option<&'c serde_json::Value> {
    key.split('.').try_fold(config, |v, k| v.get(k))
}

/// The value config states for a quantity, and the keys that state it.
#[derive(Clone, Debug, PartialEq)]
pub struct Stated<'c> {
    /// The keys read, one for a spelling, several for a product.
    pub keys: Vec<&'c str>,
    /// Their values, in the order of `keys`.
    pub values: Vec<&'c serde_json::Value>,
}

impl Stated<'_> {
    /// `` `n_shared_experts` `` or `` `moe_intermediate_size` × `n_shared_experts` ``.
    pub fn describe(&self) -> String {
        self.keys
            .iter()
            .zip(&self.values)
            .map(|(k, v)| format!("`{k}` = {v}"))
            .collect::<Vec<_>>()
            .join(" × ")
    }

    /// The stated value, when every key holds a non-negative integer and the product fits.
    pub fn count(&self) -> Option<i128> {
        self.values
            .iter()
            .try_fold(1i128, |acc, v| acc.checked_mul(i128::from(v.as_u64()?)))
    }
}

impl ConfigKeys {
    /// What config states for `quantity`: the first spelling it sets, else the first product
    /// whose keys it all sets.
    pub fn stated<'s>(
        &'s self,
        quantity: &str,
        config: &'s serde_json::Value,
    ) -> Option<Stated<'s>> {
        if let Some((k, v)) = self.configured(quantity, config) {
            return Some(Stated {
                keys: vec![k],
                values: vec![v],
            });
        }
        self.quantities
            .get(quantity)?
            .products
            .iter()
            .find_map(|p| {
                let values: Option<Vec<&serde_json::Value>> = p
                    .iter()
                    .map(|k| config_at(config, k).filter(|v| !v.is_null()))
                    .collect();
                let values = values?;
                (!p.is_empty()).then(|| Stated {
                    keys: p.iter().map(String::as_str).collect(),
                    values,
                })
            })
    }
}

#[derive(Clone, Debug, Default, serde::Deserialize)]
#[serde(deny_unknown_fields)]
pub struct LayerRule {
    pub key: String,
    pub rule: String,
}

#[derive(Clone, Debug)]
struct CompEntry {
    def: ComponentDef,
    file: String,
    draft: bool,
}

/// The spec repository: dims, roles, quant schemes, components and model specs.
#[derive(Clone, Debug, Default)]
pub struct Repo {
    pub dims: IndexMap<String, DimDef>,
    pub roles: IndexMap<String, String>,
    pub schemes: BTreeMap<String, QuantSchemeDef>,
    pub config_keys: ConfigKeys,
    components: BTreeMap<String, CompEntry>,
    models: BTreeMap<String, (ModelDef, String)>,
    /// Errors of files that did not parse; a model that needs one of them fails to load.
    pub file_errors: Vec<SpecError>,
    pub files: BTreeMap<String, String>,
}

fn yaml_options() -> serde_saphyr::Options {
    serde_saphyr::options! { strict_booleans: true }
}

pub fn parse_yaml<T: DeserializeOwned>(file: &str, text: &str) -> Result<T, SpecError> {
    serde_saphyr::from_str_with_options(text, yaml_options()).map_err(|e| {
        let loc = e.location();
        let (line, column) = loc
            .map(|l| (l.line() as u32, l.column() as u32))
            .unwrap_or((0, 0));
        let msg = e.without_snippet().to_string();
        let msg = msg.lines().next().unwrap_or("invalid YAML").to_string();
        SpecError::new(
            code::YAML,
            format!("cannot read YAML: {msg}"),
            Location::at(file, line, column),
        )
        .hint("see docs/dsl.md for the schema of this file")
    })
}

/// Location of a top-level key of a file (`role:`, `drafts:`), for errors about fields that
/// are not spanned in the schema.
fn key_loc(file: &str, text: &str, key: &str) -> Location {
    let prefix = format!("{key}:");
    match text.lines().position(|l| l.starts_with(&prefix)) {
        Some(i) => Location::at(file, i as u32 + 1, 1),
        None => Location::in_file(file),
    }
}

fn loc_of(file: &str, l: &serde_saphyr::Location) -> Location {
    Location::at(file, l.line() as u32, l.column() as u32)
}

/// A gap report's path (`<model>.gap.yaml`): it sits next to its spec and is no spec file.
pub fn is_gap_report_path(path: &str) -> bool {
    path.ends_with(".gap.yaml")
}

/// A model spec's path in a spec repository: a YAML file under `specs/models/` that is no gap
/// report. Every listing of the repository's model specs goes through this, so a file kind
/// added beside the specs is no spec anywhere at once.
pub fn is_model_spec_path(path: &str) -> bool {
    path.starts_with("specs/models/")
        && (path.ends_with(".yaml") || path.ends_with(".yml"))
        && !is_gap_report_path(path)
}

impl Repo {
    /// Build from `(relative path, contents)` pairs; paths look like `specs/models/llama.yaml`.
    pub fn from_files(files: BTreeMap<String, String>) -> Repo {
        let mut repo = Repo::default();
        let mut clashes: BTreeMap<String, Vec<String>> = BTreeMap::new();
        for (path, text) in &files {
            let p = path.as_str();
            if (!p.ends_with(".yaml") && !p.ends_with(".yml")) || is_gap_report_path(p) {
                continue;
            }
            let res: Result<(), SpecError> = (|| {
                if p.ends_with("arch/dims.yaml") {
                    repo.dims = parse_yaml(p, text)?;
                } else if p.ends_with("arch/roles.yaml") {
                    repo.roles = parse_yaml(p, text)?;
                } else if p.ends_with("arch/config_keys.yaml") {
                    repo.config_keys = parse_yaml(p, text)?;
                } else if p.contains("/quant/") {
                    let s: QuantSchemeDef = parse_yaml(p, text)?;
                    repo.schemes.insert(s.name.clone(), s);
                } else if p.contains("/components/") {
                    let def: ComponentDef = parse_yaml(p, text)?;
                    let draft = p.contains("/drafts/");
                    if let Some(prev) = repo.components.get(&def.component) {
                        // Blame the draft and keep the library definition, so that a draft
                        // can never shadow a reviewed component.
                        let name = def.component.clone();
                        let (blamed, other) = if prev.draft && !draft {
                            let blamed = prev.file.clone();
                            let entry = CompEntry {
                                def,
                                file: p.to_string(),
                                draft,
                            };
                            repo.components.insert(name.clone(), entry);
                            (blamed, p.to_string())
                        } else {
                            (p.to_string(), prev.file.clone())
                        };
                        let blamed_text = files.get(&blamed).map(String::as_str).unwrap_or("");
                        return Err(SpecError::new(
                            code::DUPLICATE,
                            format!("component `{name}` is defined twice ({other} and {blamed})"),
                            key_loc(&blamed, blamed_text, "component"),
                        )
                        .hint("rename the draft: a library component changes by review, not by a draft of the same name"));
                    }
                    repo.components.insert(
                        def.component.clone(),
                        CompEntry {
                            def,
                            file: p.to_string(),
                            draft,
                        },
                    );
                } else if p.contains("/models/") {
                    let def: ModelDef = parse_yaml(p, text)?;
                    if let Some(files) = clashes.get_mut(&def.model) {
                        files.push(p.to_string());
                    } else if let Some((_, first)) = repo.models.remove(&def.model) {
                        clashes.insert(def.model.clone(), vec![first, p.to_string()]);
                    } else {
                        repo.models.insert(def.model.clone(), (def, p.to_string()));
                    }
                }
                Ok(())
            })();
            if let Err(e) = res {
                repo.file_errors.push(e);
            }
        }
        // Two model specs with one `model:` name (typically a copy of a library spec given by
        // path): neither is loaded under that name, and each says which file it clashes with.
        for (name, clashing) in &clashes {
            for file in clashing {
                let others: Vec<&str> = clashing
                    .iter()
                    .filter(|f| *f != file)
                    .map(String::as_str)
                    .collect();
                let text = files.get(file).map(String::as_str).unwrap_or("");
                repo.file_errors.push(
                    SpecError::new(
                        code::DUPLICATE,
                        format!(
                            "model name `{name}` clashes with {}, which has the same `model:` name",
                            others.join(" and ")
                        ),
                        key_loc(file, text, "model"),
                    )
                    .hint(format!(
                        "model names are unique in the library: give this spec its own `model:` name (a copy of a library spec keeps the library's name until you change it), or edit {} itself",
                        others.join(" or ")
                    )),
                );
            }
        }
        repo.files = files;
        repo
    }

    /// A component's definition and whether it is a draft.
    pub fn component_def(&self, name: &str) -> Option<(&ComponentDef, bool)> {
        self.components.get(name).map(|c| (&c.def, c.draft))
    }

    pub fn component_names(&self) -> Vec<&str> {
        self.components.keys().map(String::as_str).collect()
    }

    pub fn model_names(&self) -> Vec<&str> {
        self.models.keys().map(String::as_str).collect()
    }

    /// The `architectures` a model spec (by name or file) declares, if it parsed.
    pub fn model_architectures(&self, name_or_file: &str) -> Option<&[String]> {
        self.models
            .get(name_or_file)
            .or_else(|| {
                self.models
                    .values()
                    .find(|(_, f)| f == name_or_file || f.ends_with(name_or_file))
            })
            .map(|(d, _)| d.architectures.as_slice())
    }

    pub fn model_file(&self, name: &str) -> Option<&str> {
        self.models.get(name).map(|(_, f)| f.as_str())
    }

    /// The gap report next to a model spec (`specs/models/<x>.gap.yaml` beside `<x>.yaml`), by
    /// the spec's name or file: its file key and text. The report is read whether or not the
    /// spec validates; checking it is the caller's (it needs the truth).
    pub fn gap_report(&self, name_or_file: &str) -> Option<(&str, &str)> {
        let file = self
            .models
            .get(name_or_file)
            .map(|(_, f)| f.as_str())
            .unwrap_or(name_or_file);
        let stem = file
            .strip_suffix(".yaml")
            .or_else(|| file.strip_suffix(".yml"))?;
        let key = format!("{stem}.gap.yaml");
        self.files
            .get_key_value(&key)
            .map(|(k, v)| (k.as_str(), v.as_str()))
    }

    /// The model spec serving a config `architectures` entry.
    pub fn model_for_architecture(&self, arch: &str) -> Option<&str> {
        self.models
            .iter()
            .find(|(_, (d, _))| d.architectures.iter().any(|a| a == arch))
            .map(|(n, _)| n.as_str())
    }

    /// Library (non-draft) components: name, role, summary.
    pub fn library_components(&self) -> Vec<(&str, &str, &str)> {
        self.components
            .values()
            .filter(|c| !c.draft)
            .map(|c| {
                (
                    c.def.component.as_str(),
                    c.def.role.as_str(),
                    c.def.summary.as_str(),
                )
            })
            .collect()
    }

    /// The dim table a model sees: the registered dims, plus the one-off dims its listed drafts
    /// declare. A draft may not redeclare a registered dim, two drafts may not declare the same
    /// one, and a library component declares none (its dims are registered in dims.yaml).
    fn dims_for(&self, def: &ModelDef) -> (IndexMap<String, DimDef>, Vec<SpecError>) {
        let mut dims = self.dims.clone();
        let mut errors = Vec::new();
        let mut declared_by: BTreeMap<String, String> = BTreeMap::new();
        for c in self.components.values() {
            if c.def.declare_dims.is_empty() {
                continue;
            }
            let text = self.files.get(&c.file).map(String::as_str).unwrap_or("");
            let loc = key_loc(&c.file, text, "declare_dims");
            if !c.draft {
                errors.push(
                    SpecError::new(code::DUPLICATE, format!("library component `{}` declares dims; library dims are registered in specs/arch/dims.yaml", c.def.component), loc)
                        .hint("promoting a draft moves its `declare_dims:` into specs/arch/dims.yaml"),
                );
                continue;
            }
            if !def.drafts.contains(&c.def.component) {
                continue;
            }
            for (name, d) in &c.def.declare_dims {
                if self.dims.contains_key(name) {
                    errors.push(
                        SpecError::new(
                            code::DUPLICATE,
                            format!(
                                "draft `{}` declares dim `{name}`, which is registered already",
                                c.def.component
                            ),
                            loc.clone(),
                        )
                        .hint(format!(
                            "use the registered `{name}` ({}: {}) or pick a new name",
                            self.dims[name].kind, self.dims[name].summary
                        )),
                    );
                } else if let Some(other) = declared_by.get(name) {
                    errors.push(SpecError::new(
                        code::DUPLICATE,
                        format!(
                            "dim `{name}` is declared by drafts `{other}` and `{}`",
                            c.def.component
                        ),
                        loc.clone(),
                    ));
                } else {
                    declared_by.insert(name.clone(), c.def.component.clone());
                    dims.insert(name.clone(), d.clone());
                }
            }
        }
        (dims, errors)
    }

    /// A model spec's definition (by name or file) to edit in place: what-if edits (a slot
    /// filled with another component, a dim bound to a value) change the definition the next
    /// [`Repo::load_model`] reads, never a file.
    pub fn model_def_mut(&mut self, name_or_file: &str) -> Option<&mut ModelDef> {
        if self.models.contains_key(name_or_file) {
            return self.models.get_mut(name_or_file).map(|(d, _)| d);
        }
        self.models
            .values_mut()
            .find(|(_, f)| f == name_or_file || f.ends_with(name_or_file))
            .map(|(d, _)| d)
    }

    /// Library (non-draft) models that fill some slot with `component`, by name.
    pub fn models_using(&self, component: &str) -> Vec<&ModelDef> {
        self.models
            .values()
            .map(|(d, _)| d)
            .filter(|d| {
                d.blocks
                    .values()
                    .any(|b| b.value.fill.values().any(|f| f.component() == component))
            })
            .collect()
    }

    /// Load a model spec (by model name or by file path) into the IR.
    pub fn load_model(&self, name_or_file: &str) -> Result<ModelIr, Vec<SpecError>> {
        let found = self.models.get(name_or_file).or_else(|| {
            self.models
                .values()
                .find(|(_, f)| f == name_or_file || f.ends_with(name_or_file))
        });
        let Some((def, file)) = found else {
            if let Some(e) = self.file_errors.iter().find(|e| {
                e.location
                    .file
                    .as_deref()
                    .is_some_and(|f| f == name_or_file || f.ends_with(name_or_file))
            }) {
                return Err(vec![e.clone()]);
            }
            let names: Vec<&str> = self.models.keys().map(String::as_str).collect();
            let mut e = SpecError::new(
                code::UNKNOWN_COMPONENT,
                format!("no model spec `{name_or_file}`"),
                Location::default(),
            );
            e.hint = Some(match closest(name_or_file, names.iter().copied()) {
                Some(c) => format!("did you mean `{c}`?"),
                None => format!("known model specs: {}", names.join(", ")),
            });
            return Err(vec![e]);
        };
        let (dims, dim_errors) = self.dims_for(def);
        let mut ld = Loader {
            repo: self,
            dims,
            errors: Vec::new(),
            comps: BTreeMap::new(),
            model_drafts: def.drafts.clone(),
            building: Vec::new(),
        };
        ld.errors.extend(dim_errors);
        // Files that failed to parse are reported when nothing else explains a missing name.
        let ir = ld.model(def, file);
        // A component defined twice would be resolved silently to one of them: always an error.
        let duplicate = self.file_errors.iter().any(|e| e.code == code::DUPLICATE);
        if !ld.errors.is_empty() || duplicate {
            for e in &self.file_errors {
                if e.location.file.as_deref().is_some_and(|f| {
                    f.contains("/components/") || f.contains("/arch/") || f.contains("/quant/")
                }) {
                    ld.errors.push(e.clone());
                }
            }
            return Err(ld.errors);
        }
        Ok(ir)
    }
}

struct Loader<'r> {
    repo: &'r Repo,
    /// The registered dims plus those the model's drafts declare (`declare_dims:`).
    dims: IndexMap<String, DimDef>,
    errors: Vec<SpecError>,
    comps: BTreeMap<String, Rc<ComponentIr>>,
    model_drafts: Vec<String>,
    /// Components being loaded, outermost first: one that appears again contains itself.
    building: Vec<String>,
}

const LOOP_VARS: &[&str] = &["i"];

/// Ops whose node states its shape (`shape:`) instead of deriving it from args.
const EXPLICIT_SHAPE: &[&str] = &["parameter", "buffer"];

impl Loader<'_> {
    fn err(&mut self, e: SpecError) {
        self.errors.push(e);
    }

    fn parse_expr(&mut self, raw: &str, loc: &Location, what: &str) -> Option<Expr> {
        match expr::parse(raw) {
            Ok(e) => Some(e),
            Err(pe) => {
                self.err(
                    SpecError::new(code::BAD_EXPR, format!("{what}: cannot parse `{raw}`: {pe}"), loc.clone())
                        .hint("expressions use dims, integers, + - * / %, parentheses, config.<path>, `??` for defaults, and ceil_div/min/max"),
                );
                None
            }
        }
    }

    /// Every name an expression reads must be a known dim (or a loop variable / local name).
    fn check_names(
        &mut self,
        e: &Expr,
        allowed: &dyn Fn(&str) -> bool,
        loc: &Location,
        what: &str,
    ) {
        let mut names = Vec::new();
        e.names(&mut names);
        for n in names {
            if allowed(&n) {
                continue;
            }
            let known = self.dims.contains_key(&*n);
            let mut err = SpecError::new(
                code::UNKNOWN_DIM,
                if known {
                    format!("{what}: dim `{n}` is not declared in this component's `dims:` list")
                } else {
                    format!("{what}: `{n}` is not a registered dim")
                },
                loc.clone(),
            );
            err.hint = Some(if known {
                format!("add `{n}` to the component's `dims:`")
            } else {
                match closest(&n, self.dims.keys().map(String::as_str)) {
                    Some(c) => format!("did you mean `{c}`? Dims are registered once in specs/arch/dims.yaml"),
                    None => "register the dim in specs/arch/dims.yaml (kind and summary), then bind it in the model's `dims:`".into(),
                }
            });
            self.err(err);
        }
    }

    fn check_role(&mut self, role: &str, loc: &Location) {
        if !self.repo.roles.contains_key(role) {
            let roles: Vec<&str> = self.repo.roles.keys().map(String::as_str).collect();
            let hint = match closest(role, roles.iter().copied()) {
                Some(c) => format!("did you mean `{c}`? registered roles: {}", roles.join(", ")),
                None => format!(
                    "registered roles (specs/arch/roles.yaml): {}",
                    roles.join(", ")
                ),
            };
            self.err(
                SpecError::new(
                    code::UNKNOWN_ROLE,
                    format!("role `{role}` is not registered"),
                    loc.clone(),
                )
                .hint(hint),
            );
        }
    }

    fn component_visible(&self, name: &str) -> bool {
        match self.repo.components.get(name) {
            Some(c) => !c.draft || self.model_drafts.iter().any(|d| d == name),
            None => false,
        }
    }

    fn component(&mut self, name: &str, loc: &Location) -> Option<Rc<ComponentIr>> {
        if let Some(at) = self.building.iter().position(|b| b == name) {
            let mut chain = self.building[at..].to_vec();
            chain.push(name.to_string());
            self.err(
                SpecError::new(
                    code::CYCLE,
                    format!(
                        "component `{name}` contains itself ({})",
                        chain.join(" -> ")
                    ),
                    loc.clone(),
                )
                .hint("a component cannot nest itself; repeated layers are a stack"),
            );
            return None;
        }
        if let Some(c) = self.comps.get(name) {
            return Some(c.clone());
        }
        if !self.component_visible(name) {
            let is_draft = self.repo.components.get(name).is_some_and(|c| c.draft);
            let mut e = SpecError::new(
                code::UNKNOWN_COMPONENT,
                format!("unknown component `{name}`"),
                loc.clone(),
            );
            e.hint = Some(if is_draft {
                format!("`{name}` is a draft: list it under the model's `drafts:` to use it")
            } else {
                let names: Vec<&str> = self
                    .repo
                    .components
                    .iter()
                    .filter(|(_, c)| !c.draft)
                    .map(|(n, _)| n.as_str())
                    .collect();
                match closest(name, names.iter().copied()) {
                    Some(c) => format!("did you mean `{c}`?"),
                    None => format!("library components: {}", names.join(", ")),
                }
            });
            self.err(e);
            return None;
        }
        let entry = self.repo.components[name].clone();
        // Insert a placeholder first so that a self-referencing component cannot recurse forever.
        let placeholder = Rc::new(ComponentIr {
            name: name.to_string(),
            role: entry.def.role.clone(),
            summary: String::new(),
            file: entry.file.clone(),
            draft: entry.draft,
            dims: vec![],
            defaults: vec![],
            slots: vec![],
            inputs: vec![],
            nodes: vec![],
            outputs: vec![],
            cache: vec![],
            axioms: vec![],
            decode_variant: None,
            source: None,
            stream_out: vec![],
            reads: vec![],
        });
        self.comps.insert(name.to_string(), placeholder);
        self.building.push(name.to_string());
        let c = Rc::new(self.component_ir(&entry));
        self.building.pop();
        self.comps.insert(name.to_string(), c.clone());
        if let Some(v) = &c.decode_variant {
            let text = self.repo.files.get(&entry.file).map(String::as_str);
            let vloc = key_loc(&entry.file, text.unwrap_or(""), "decode_variant");
            if let Some(var) = self.component(v, &vloc)
                && var.inputs.len() != c.inputs.len()
            {
                self.err(SpecError::new(
                    code::BAD_NODE,
                    format!(
                        "decode variant `{v}` takes {} inputs but `{name}` takes {}",
                        var.inputs.len(),
                        c.inputs.len()
                    ),
                    vloc,
                ));
            }
        }
        Some(c)
    }

    fn component_ir(&mut self, entry: &CompEntry) -> ComponentIr {
        let def = &entry.def;
        let file = entry.file.as_str();
        let text = self.repo.files.get(file).map(String::as_str).unwrap_or("");
        let (role_loc, dims_loc, defaults_loc) = (
            key_loc(file, text, "role"),
            key_loc(file, text, "dims"),
            key_loc(file, text, "defaults"),
        );
        self.check_role(&def.role, &role_loc);
        for d in &def.dims {
            if !self.dims.contains_key(d) {
                let hint = closest(d, self.dims.keys().map(String::as_str))
                    .map(|c| format!("did you mean `{c}`?"))
                    .unwrap_or_else(|| "register it in specs/arch/dims.yaml".into());
                self.err(
                    SpecError::new(
                        code::UNKNOWN_DIM,
                        format!("component dim `{d}` is not registered"),
                        dims_loc.clone(),
                    )
                    .hint(hint),
                );
            }
        }
        for k in def.defaults.keys() {
            if !def.dims.contains(k) {
                self.err(SpecError::new(
                    code::UNKNOWN_DIM,
                    format!("`defaults` sets `{k}`, which is not in the component's `dims:`"),
                    defaults_loc.clone(),
                ));
            }
        }
        let dims: BTreeSet<String> = def.dims.iter().cloned().collect();
        let allowed = |n: &str| dims.contains(n) || LOOP_VARS.contains(&n);
        let mut defaults = Vec::new();
        for (k, v) in &def.defaults {
            if let Some(e) =
                self.parse_expr(&v.as_expr_text(), &defaults_loc, &format!("default `{k}`"))
            {
                self.check_names(&e, &allowed, &defaults_loc, &format!("default `{k}`"));
                defaults.push((k.clone(), e));
            }
        }
        // A stream the component reads is one more name its nodes' `in:` may take.
        let graph_inputs: Vec<String> = def.inputs.iter().chain(&def.reads).cloned().collect();
        let nodes = self.graph(
            &def.graph,
            &graph_inputs,
            &def.outputs,
            file,
            &allowed,
            &def.slots,
        );
        let node_ids: BTreeSet<&str> = nodes.iter().map(|n| n.id.as_str()).collect();
        self.check_stream_names(def, file, text, &node_ids);
        for r in &def.reads {
            if !nodes.iter().any(|n| n.inputs.contains(r)) {
                self.err(
                    SpecError::new(
                        code::UNKNOWN_INPUT,
                        format!("`{}` reads stream `{r}`, but no node of its graph takes it", def.component),
                        key_loc(file, text, "reads"),
                    )
                    .hint(format!("the node that uses the value names it in `in:` (`in: [q, k, {r}]`), or drop it from `reads`")),
                );
            }
        }
        let mut cache = Vec::new();
        for c in &def.cache {
            let loc = loc_of(file, &c.referenced);
            if !node_ids.contains(c.value.node.as_str()) {
                self.err(
                    SpecError::new(
                        code::BAD_CACHE,
                        format!(
                            "cache entry names node `{}`, which is not in the graph",
                            c.value.node
                        ),
                        loc.clone(),
                    )
                    .hint(
                        "a cache entry points at the node whose output is kept across decode steps",
                    ),
                );
                continue;
            }
            let growth = match c.value.growth.as_str() {
                "per_token" => Growth::PerToken,
                "window" => Growth::Window,
                "constant" => Growth::Constant,
                g => {
                    self.err(
                        SpecError::new(
                            code::BAD_CACHE,
                            format!("cache growth `{g}` is unknown"),
                            loc.clone(),
                        )
                        .hint("growth is per_token, window (with `window:`) or constant"),
                    );
                    continue;
                }
            };
            let window = c
                .value
                .window
                .as_ref()
                .and_then(|w| self.parse_expr(&w.as_expr_text(), &loc, "cache window"));
            if let Some(w) = &window {
                self.check_names(w, &allowed, &loc, "cache window");
            }
            if growth == Growth::Window && window.is_none() {
                self.err(
                    SpecError::new(
                        code::BAD_CACHE,
                        "a window cache needs `window:`".to_string(),
                        loc.clone(),
                    )
                    .hint("e.g. `window: sliding_window`"),
                );
            }
            let steps = c
                .value
                .steps
                .as_ref()
                .and_then(|w| self.parse_expr(&w.as_expr_text(), &loc, "cache steps"));
            let when = c
                .value
                .when
                .as_ref()
                .and_then(|w| self.parse_expr(&w.as_expr_text(), &loc, "cache `when`"));
            if let Some(w) = &when {
                self.check_names(w, &allowed, &loc, "cache `when`");
            }
            cache.push(CacheIr {
                node: c.value.node.clone(),
                kind: c.value.kind.clone(),
                growth,
                window,
                window_src: c.value.window_src.clone(),
                steps,
                dtype: c.value.dtype.clone(),
                src: c.value.src.clone(),
                when,
                loc,
            });
        }
        let mut axioms = Vec::new();
        for a in &def.axioms {
            let loc = loc_of(file, &a.referenced);
            let p = |s: &Option<Scalar>, what: &str, ld: &mut Self| -> Option<Expr> {
                let e = s
                    .as_ref()
                    .and_then(|s| ld.parse_expr(&s.as_expr_text(), &loc, what))?;
                ld.check_names(&e, &allowed, &loc, what);
                Some(e)
            };
            let kv = p(
                &a.value.kv_elements_per_token,
                "axiom kv_elements_per_token",
                self,
            );
            let st = p(&a.value.state_elements, "axiom state_elements", self);
            let w = p(&a.value.window, "axiom window", self);
            axioms.push(AxiomIr {
                kv_elements_per_token: kv,
                state_elements: st,
                window: w,
                caches_read_by_attention: a.value.caches_read_by_attention,
                loc,
            });
        }
        ComponentIr {
            name: def.component.clone(),
            role: def.role.clone(),
            summary: def.summary.clone(),
            file: file.to_string(),
            draft: entry.draft,
            dims: def.dims.clone(),
            defaults,
            slots: def.slots.clone(),
            inputs: def.inputs.clone(),
            nodes,
            outputs: def.outputs.clone(),
            cache,
            axioms,
            decode_variant: def.decode_variant.clone(),
            source: def.source.clone(),
            stream_out: def
                .stream_out
                .iter()
                .map(|(k, v)| (k.clone(), v.clone()))
                .collect(),
            reads: def.reads.clone(),
        }
    }

    /// A component's `reads` may not shadow its inputs or nodes, and `stream_out` publishes
    /// nodes of its own graph.
    fn check_stream_names(
        &mut self,
        def: &ComponentDef,
        file: &str,
        text: &str,
        node_ids: &BTreeSet<&str>,
    ) {
        for r in &def.reads {
            if def.inputs.contains(r) || node_ids.contains(r.as_str()) {
                self.err(
                    SpecError::new(
                        code::DUPLICATE,
                        format!("`reads` names `{r}`, which is also an input or a node of `{}`", def.component),
                        key_loc(file, text, "reads"),
                    )
                    .hint("a stream read is an input of the graph under its own name; rename the node"),
                );
            }
        }
        for (stream, node) in &def.stream_out {
            if !node_ids.contains(node.as_str()) {
                let hint = closest(node, node_ids.iter().copied())
                    .map(|c| format!("did you mean `{c}`? "))
                    .unwrap_or_default();
                self.err(
                    SpecError::new(
                        code::UNKNOWN_INPUT,
                        format!("`stream_out` publishes node `{node}` as stream `{stream}`, but `{}` has no such node", def.component),
                        key_loc(file, text, "stream_out"),
                    )
                    .hint(format!("{hint}`stream_out: {{ {stream}: <node id of this graph> }}`")),
                );
            }
        }
    }

    /// Resolve a graph: node kinds, inputs, args; returns nodes in dataflow order.
    fn graph(
        &mut self,
        graph: &IndexMap<String, serde_saphyr::Spanned<NodeDef>>,
        inputs: &[String],
        outputs: &[String],
        file: &str,
        allowed: &dyn Fn(&str) -> bool,
        slots: &[String],
    ) -> Vec<NodeIr> {
        let mut nodes = Vec::new();
        // Nodes that failed to resolve: references to them are not reported again.
        let mut failed: BTreeSet<String> = BTreeSet::new();
        for (id, spanned) in graph {
            let n = &spanned.value;
            let loc = loc_of(file, &spanned.referenced).with_node(id.clone());
            if inputs.contains(id) {
                self.err(SpecError::new(
                    code::DUPLICATE,
                    format!("node `{id}` has the name of an input"),
                    loc.clone(),
                ));
            }
            let kinds = [
                n.op.is_some(),
                n.component.is_some(),
                n.slot.is_some(),
                n.stack.is_some(),
            ];
            if kinds.iter().filter(|k| **k).count() != 1 {
                self.err(
                    SpecError::new(code::BAD_NODE, format!("node `{id}` must have exactly one of `op`, `component`, `slot`, `stack`"), loc.clone())
                        .hint("e.g. `q_proj: { op: linear, in: x, args: { in: d_model, out: \"n_heads * d_head\" } }`"),
                );
                failed.insert(id.clone());
                continue;
            }
            let kind = if let Some(op) = &n.op {
                match ops::lookup(op) {
                    Some(spec) => {
                        for k in n.args.keys() {
                            let known = spec.args.iter().any(|a| a.trim_end_matches('?') == k);
                            if !known {
                                let names: Vec<&str> =
                                    spec.args.iter().map(|a| a.trim_end_matches('?')).collect();
                                self.err(
                                    SpecError::new(
                                        code::BAD_ARG,
                                        format!("op `{op}` has no argument `{k}`"),
                                        loc.clone(),
                                    )
                                    .hint(
                                        if names.is_empty() {
                                            format!("`{op}` takes no arguments")
                                        } else {
                                            format!("`{op}` takes: {}", spec.args.join(", "))
                                        },
                                    ),
                                );
                            }
                        }
                        for a in spec.args.iter().filter(|a| !a.ends_with('?')) {
                            if !n.args.contains_key(*a) {
                                self.err(
                                    SpecError::new(
                                        code::BAD_ARG,
                                        format!("op `{op}` needs argument `{a}`"),
                                        loc.clone(),
                                    )
                                    .hint(format!("`{op}` takes: {}", spec.args.join(", "))),
                                );
                            }
                        }
                        NodeKind::Op(spec)
                    }
                    None => {
                        let names: Vec<&str> = ops::all().map(|o| o.name).collect();
                        let hint = match closest(op, names.iter().copied()) {
                            Some(c) => {
                                format!("did you mean `{c}`? `harch-worker ops` lists every op")
                            }
                            None => "`harch-worker ops` lists every op".into(),
                        };
                        self.err(
                            SpecError::new(
                                code::UNKNOWN_OP,
                                format!("unknown op `{op}`"),
                                loc.clone(),
                            )
                            .hint(hint),
                        );
                        failed.insert(id.clone());
                        continue;
                    }
                }
            } else if let Some(c) = &n.component {
                let comp = self.component(c, &loc);
                let bind = self.binds(&n.bind, &loc, allowed);
                if let Some(comp) = comp {
                    for (k, _) in &bind {
                        if !comp.dims.contains(k) {
                            self.err(
                                SpecError::new(
                                    code::UNKNOWN_DIM,
                                    format!(
                                        "`bind` sets `{k}`, which component `{c}` does not use"
                                    ),
                                    loc.clone(),
                                )
                                .hint(format!("`{c}` uses dims: {}", comp.dims.join(", "))),
                            );
                        }
                    }
                }
                NodeKind::Component {
                    name: c.clone(),
                    bind,
                }
            } else if let Some(s) = &n.slot {
                if !slots.contains(s) {
                    self.err(
                        SpecError::new(
                            code::UNFILLED_SLOT,
                            format!("slot `{s}` is not declared in `slots:`"),
                            loc.clone(),
                        )
                        .hint("declare block-template slots under `slots:`"),
                    );
                }
                NodeKind::Slot(s.clone())
            } else {
                let st = n.stack.as_ref().expect("checked one kind");
                match self.stack(st, file, &loc, allowed) {
                    Some(s) => NodeKind::Stack(s),
                    None => {
                        failed.insert(id.clone());
                        continue;
                    }
                }
            };
            if let Some(r) = &n.role {
                self.check_role(r, &loc);
            }
            let mut args = IndexMap::new();
            for (k, v) in &n.args {
                let raw = v.as_expr_text();
                let parsed = expr::parse(&raw).ok();
                if let Some(e) = &parsed {
                    let mut names = Vec::new();
                    e.names(&mut names);
                    // Bare words (`causal`, `silu`) are text arguments, not dims.
                    let is_word = matches!(e, Expr::Name(_)) && !self.dims.contains_key(&*names[0]);
                    if !is_word {
                        self.check_names(e, allowed, &loc, &format!("argument `{k}`"));
                    }
                } else if matches!(v, Scalar::Text(_)) && raw.chars().any(|c| "*+/()".contains(c)) {
                    self.parse_expr(&raw, &loc, &format!("argument `{k}`"));
                }
                args.insert(k.clone(), Arg { raw, expr: parsed });
            }
            let when = match &n.when {
                Some(w) => {
                    let e = self.parse_expr(&w.as_expr_text(), &loc, "`when`");
                    if let Some(e) = &e {
                        self.check_names(e, allowed, &loc, "`when`");
                    }
                    e
                }
                None => None,
            };
            let instances = n.instances.as_ref().and_then(|i| {
                let count = self.parse_expr(&i.count.as_expr_text(), &loc, "instances.count")?;
                self.check_names(&count, allowed, &loc, "instances.count");
                let active = match &i.active {
                    Some(a) => {
                        let e = self.parse_expr(&a.as_expr_text(), &loc, "instances.active")?;
                        self.check_names(&e, allowed, &loc, "instances.active");
                        Some(e)
                    }
                    None => None,
                };
                Some(InstancesIr {
                    count,
                    active,
                    index: i.index.clone(),
                })
            });
            let explicit =
                matches!(&kind, NodeKind::Op(spec) if EXPLICIT_SHAPE.contains(&spec.name));
            let shape = match (&n.shape, explicit) {
                (Some(axes), true) => {
                    let mut out = Vec::new();
                    for (k, a) in axes.iter().enumerate() {
                        let what = format!("shape axis {}", k + 1);
                        if let Some(e) = self.parse_expr(&a.as_expr_text(), &loc, &what) {
                            self.check_names(&e, allowed, &loc, &what);
                            out.push(e);
                        }
                    }
                    Some(out)
                }
                (None, true) => {
                    self.err(
                        SpecError::new(code::BAD_ARG, format!("node `{id}` needs `shape:`"), loc.clone())
                            .hint("a parameter or buffer states its shape as a list of expressions, e.g. `shape: [1, 1, n_heads, 1]`"),
                    );
                    None
                }
                (Some(_), false) => {
                    self.err(
                        SpecError::new(code::BAD_ARG, format!("node `{id}` has `shape:`, which only `parameter` and `buffer` nodes take"), loc.clone())
                            .hint("other ops derive their weight shapes from their args"),
                    );
                    None
                }
                (None, false) => None,
            };
            let is_buffer = matches!(&kind, NodeKind::Op(spec) if spec.name == "buffer");
            let is_stack = matches!(&kind, NodeKind::Stack(_));
            if n.src.is_some() && !is_buffer && !is_stack {
                self.err(
                    SpecError::new(
                        code::BAD_ARG,
                        format!("node `{id}` has `src:`, which only `buffer` and stack nodes take"),
                        loc.clone(),
                    )
                    .hint("streams and caches carry their own `src:`"),
                );
            }
            nodes.push(NodeIr {
                id: id.clone(),
                loc,
                kind,
                inputs: n.inputs.as_ref().map(|i| i.to_vec()).unwrap_or_default(),
                args,
                path: n.path.clone(),
                leaves: n.leaves.clone(),
                role: n.role.clone(),
                when,
                instances,
                shape,
                src: n.src.clone(),
            });
        }
        let ordered = self.order(nodes, inputs, file, &failed);
        let ids: BTreeSet<&str> = ordered.iter().map(|n| n.id.as_str()).collect();
        for o in outputs {
            if !ids.contains(o.as_str()) && !inputs.contains(o) {
                let text = self.repo.files.get(file).map(String::as_str).unwrap_or("");
                self.err(SpecError::new(
                    code::UNKNOWN_INPUT,
                    format!("output `{o}` is not a node of the graph"),
                    key_loc(file, text, "outputs"),
                ));
            }
        }
        ordered
    }

    /// A fill's `rename:`: each key must be a module path segment (or leaf name) somewhere in
    /// the filled component, and each value a plain segment.
    fn renames(
        &mut self,
        rename: &IndexMap<String, String>,
        comp: Option<&ComponentIr>,
        cname: &str,
        slot: &str,
        loc: &Location,
    ) -> Vec<(String, String)> {
        if rename.is_empty() {
            return vec![];
        }
        let Some(comp) = comp else {
            self.err(
                SpecError::new(
                    code::BAD_RENAME,
                    format!("slot `{slot}` is filled by block `{cname}`, which cannot be renamed"),
                    loc.clone(),
                )
                .hint("rename the components inside that block's own fills"),
            );
            return vec![];
        };
        let mut segments = BTreeSet::new();
        self.module_segments(comp, &mut segments, 0);
        let mut out = Vec::new();
        for (from, to) in rename {
            let plain =
                |s: &str| !s.is_empty() && !s.contains('.') && !s.contains('{') && !s.contains('}');
            if !plain(from) || !plain(to) {
                self.err(
                    SpecError::new(
                        code::BAD_RENAME,
                        format!("rename `{from}: {to}` in slot `{slot}`: both sides must be one path segment"),
                        loc.clone(),
                    )
                    .hint("e.g. `rename: { gate_proj: w1, up_proj: w3, down_proj: w2 }`; the slot's own module is `path:`"),
                );
                continue;
            }
            if !segments.contains(from.as_str()) {
                let hint = match closest(from, segments.iter().map(String::as_str)) {
                    Some(c) => format!(
                        "did you mean `{c}`? `{cname}` names its modules: {}",
                        segments.iter().cloned().collect::<Vec<_>>().join(", ")
                    ),
                    None => format!(
                        "`{cname}` names its modules: {}",
                        segments.iter().cloned().collect::<Vec<_>>().join(", ")
                    ),
                };
                self.err(
                    SpecError::new(
                        code::BAD_RENAME,
                        format!("rename `{from}` in slot `{slot}` matches no module of `{cname}`"),
                        loc.clone(),
                    )
                    .hint(hint),
                );
                continue;
            }
            out.push((from.clone(), to.clone()));
        }
        out
    }

    /// Every module path segment and leaf-name override under a component, nested ones too.
    fn module_segments(&self, comp: &ComponentIr, out: &mut BTreeSet<String>, depth: usize) {
        if depth > 32 {
            return;
        }
        for n in &comp.nodes {
            let path = n.path.as_deref().unwrap_or(&n.id);
            out.extend(
                path.split('.')
                    .filter(|s| !s.is_empty() && !s.starts_with('{'))
                    .map(String::from),
            );
            out.extend(n.leaves.values().cloned());
            if let NodeKind::Component { name, .. } = &n.kind
                && let Some(c) = self.comps.get(name)
            {
                self.module_segments(&c.clone(), out, depth + 1);
            }
        }
    }

    fn binds(
        &mut self,
        bind: &IndexMap<String, Scalar>,
        loc: &Location,
        allowed: &dyn Fn(&str) -> bool,
    ) -> Vec<(String, Expr)> {
        let mut out = Vec::new();
        for (k, v) in bind {
            if !self.dims.contains_key(k) {
                let hint = closest(k, self.dims.keys().map(String::as_str))
                    .map(|c| format!("did you mean `{c}`?"))
                    .unwrap_or_default();
                self.err(
                    SpecError::new(
                        code::UNKNOWN_DIM,
                        format!("`bind` names `{k}`, which is not a registered dim"),
                        loc.clone(),
                    )
                    .hint(hint),
                );
            }
            if let Some(e) = self.parse_expr(&v.as_expr_text(), loc, &format!("bind `{k}`")) {
                self.check_names(&e, allowed, loc, &format!("bind `{k}`"));
                out.push((k.clone(), e));
            }
        }
        out
    }

    fn stack(
        &mut self,
        st: &StackDef,
        file: &str,
        loc: &Location,
        allowed: &dyn Fn(&str) -> bool,
    ) -> Option<StackIr> {
        let repeat = self.parse_expr(&st.repeat.as_expr_text(), loc, "stack repeat")?;
        self.check_names(&repeat, allowed, loc, "stack repeat");
        let index_offset = st
            .index_offset
            .as_ref()
            .and_then(|o| self.parse_expr(&o.as_expr_text(), loc, "stack index_offset"));
        let mut schedule = Vec::new();
        for s in &st.schedule {
            let sloc = loc_of(file, &s.referenced).with_node(loc.node.clone().unwrap_or_default());
            let when = match &s.value.when {
                Some(w) => {
                    let e = self.parse_expr(&w.as_expr_text(), &sloc, "schedule `where`");
                    if let Some(e) = &e {
                        self.check_names(e, allowed, &sloc, "schedule `where`");
                    }
                    e
                }
                None => None,
            };
            schedule.push(ScheduleIr {
                block: s.value.block.clone(),
                when,
                loc: sloc,
            });
        }
        if schedule.is_empty() {
            self.err(
                SpecError::new(
                    code::BAD_NODE,
                    "a stack needs at least one schedule entry".to_string(),
                    loc.clone(),
                )
                .hint("schedule: [{ block: decoder }]"),
            );
        }
        let carried_name = st
            .streams
            .iter()
            .find(|(_, s)| s.carries)
            .map(|(n, _)| n.clone());
        let internal: BTreeSet<&str> = st
            .streams
            .iter()
            .filter(|(_, s)| !s.carries && s.from.is_none() && s.read.is_none())
            .map(|(n, _)| n.as_str())
            .collect();
        let streams: Vec<StreamIr> = st
            .streams
            .iter()
            .filter_map(|(n, s)| {
                let kind =
                    self.stream_kind(n, s, carried_name.as_deref(), &internal, loc, allowed)?;
                Some(StreamIr {
                    name: n.clone(),
                    carries: s.carries,
                    src: s.src.clone(),
                    kind,
                })
            })
            .collect();
        // Without a carried stream the layers are independent (DeepStack's mergers, one per
        // saved hidden state): each reads the stack's input and its streams, and the stack's
        // value is its input.
        let carried = st.streams.values().filter(|s| s.carries).count();
        if carried > 1 {
            self.err(
                SpecError::new(code::BAD_STREAM, format!("a stack carries at most one stream from layer to layer; this one declares {carried}"), loc.clone())
                    .hint("streams: { hidden: { carries: true, src: \"`hidden_states = decoder_layer(`\" } }"),
            );
        }
        Some(StackIr {
            repeat,
            path: st.path.clone(),
            index_offset,
            schedule,
            streams,
        })
    }

    /// What a declared stream is, from the fields it sets; a mixture is one located error with
    /// the forms that exist.
    fn stream_kind(
        &mut self,
        name: &str,
        s: &StreamDef,
        carried: Option<&str>,
        internal: &BTreeSet<&str>,
        loc: &Location,
        allowed: &dyn Fn(&str) -> bool,
    ) -> Option<StreamKind> {
        let bad = |ld: &mut Self, msg: String, hint: &str| {
            ld.err(
                SpecError::new(
                    code::BAD_STREAM,
                    format!("stream `{name}`: {msg}"),
                    loc.clone(),
                )
                .hint(hint.to_string()),
            );
            None
        };
        const FORMS: &str = "a stream is carried (`carries: true`), internal (written by `stream_out`, read by `reads`), an append stream (`from: <carried stream>`, `after:` or `before:` a condition over `i`, `read: each|all|concat`) or an earlier stack's append stream (`read:` alone)";
        let read = match s.read.as_deref() {
            None => None,
            Some("each") => Some(ReadMode::Each),
            Some("all") => Some(ReadMode::All),
            Some("concat") => {
                let axis = match &s.axis {
                    None => -1,
                    Some(a) => match a.as_expr_text().trim().parse::<i64>() {
                        Ok(v) => v,
                        Err(_) => {
                            return bad(
                                self,
                                format!("`axis: {}` is not an integer", a.as_expr_text()),
                                "axis: -1 joins along the last axis",
                            );
                        }
                    },
                };
                Some(ReadMode::Concat(axis))
            }
            Some(other) => {
                return bad(
                    self,
                    format!("`read: {other}` is unknown"),
                    "read: each (element j to the j-th reading layer), all (every element before the layer), concat (joined along `axis`)",
                );
            }
        };
        if s.axis.is_some() && !matches!(read, Some(ReadMode::Concat(_))) {
            return bad(self, "`axis:` goes with `read: concat` only".into(), FORMS);
        }
        if s.carries {
            if s.from.is_some() || s.after.is_some() || s.before.is_some() || read.is_some() {
                return bad(
                    self,
                    "a carried stream takes no `from`, `after`, `before` or `read`".into(),
                    FORMS,
                );
            }
            return Some(StreamKind::Carried);
        }
        let Some(from) = &s.from else {
            if s.after.is_some() || s.before.is_some() {
                return bad(self, "`after:`/`before:` say when an append stream takes its `from:`, which is missing".into(), FORMS);
            }
            return Some(match read {
                Some(read) => StreamKind::Earlier { read },
                None => StreamKind::Internal,
            });
        };
        let from = if Some(from.as_str()) == carried {
            None
        } else if internal.contains(from.as_str()) {
            Some(from.clone())
        } else {
            return bad(
                self,
                format!(
                    "`from: {from}` is neither this stack's carried stream{} nor one of its internal streams",
                    carried.map(|c| format!(" (`{c}`)")).unwrap_or_default()
                ),
                "an append stream saves the carried stream at a layer's entry or exit, or an internal stream (published with `stream_out`) after the layers that write it",
            );
        };
        let (at, entry) = match (&s.after, &s.before) {
            (Some(a), None) => (a, false),
            (None, Some(b)) => (b, true),
            _ => {
                return bad(self, "an append stream takes exactly one of `after:` (the layer's exit) and `before:` (its entry)".into(), "after: \"i % 4 == 3\"  (a condition over the layer index `i`)");
            }
        };
        let Some(read) = read else {
            return bad(
                self,
                "an append stream needs `read: each|all|concat`".into(),
                FORMS,
            );
        };
        if entry && let Some(f) = &from {
            return bad(
                self,
                format!(
                    "`from: {f}` is written inside a layer: it is saved `after:` the layers that write it, not `before:`"
                ),
                FORMS,
            );
        }
        let what = format!("stream `{name}` {}", if entry { "before" } else { "after" });
        let at = self.parse_expr(&at.as_expr_text(), loc, &what)?;
        self.check_names(&at, allowed, loc, &what);
        Some(StreamKind::Append {
            at,
            entry,
            read,
            from,
        })
    }

    /// Topological order along `in:` edges; unknown inputs and cycles are errors.
    fn order(
        &mut self,
        nodes: Vec<NodeIr>,
        inputs: &[String],
        file: &str,
        failed: &BTreeSet<String>,
    ) -> Vec<NodeIr> {
        let index: HashMap<String, usize> = nodes
            .iter()
            .enumerate()
            .map(|(i, n)| (n.id.clone(), i))
            .collect();
        let mut ok = true;
        for n in &nodes {
            for i in &n.inputs {
                if failed.contains(i) {
                    ok = false;
                    continue;
                }
                if !index.contains_key(i) && !inputs.contains(i) {
                    let mut cands: Vec<&str> = index.keys().map(String::as_str).collect();
                    cands.extend(inputs.iter().map(String::as_str));
                    let hint = match closest(i, cands.iter().copied()) {
                        Some(c) => format!(
                            "did you mean `{c}`? `in:` names a node of this graph or one of its inputs ({})",
                            inputs.join(", ")
                        ),
                        None => format!(
                            "`in:` names a node of this graph or one of its inputs ({})",
                            inputs.join(", ")
                        ),
                    };
                    self.err(
                        SpecError::new(
                            code::UNKNOWN_INPUT,
                            format!("node `{}` reads `{i}`, which does not exist", n.id),
                            n.loc.clone(),
                        )
                        .hint(hint),
                    );
                    ok = false;
                }
            }
        }
        if !ok {
            return nodes;
        }
        // Kahn's algorithm, stable in declaration order.
        let mut state = vec![0u8; nodes.len()];
        let mut out_idx = Vec::with_capacity(nodes.len());
        fn visit(
            i: usize,
            nodes: &[NodeIr],
            index: &HashMap<String, usize>,
            state: &mut [u8],
            out: &mut Vec<usize>,
        ) -> Result<(), usize> {
            match state[i] {
                2 => return Ok(()),
                1 => return Err(i),
                _ => {}
            }
            state[i] = 1;
            for inp in &nodes[i].inputs {
                if let Some(&j) = index.get(inp) {
                    visit(j, nodes, index, state, out)?;
                }
            }
            state[i] = 2;
            out.push(i);
            Ok(())
        }
        for i in 0..nodes.len() {
            if let Err(c) = visit(i, &nodes, &index, &mut state, &mut out_idx) {
                self.err(
                    SpecError::new(
                        code::CYCLE,
                        format!("node `{}` is part of a cycle of `in:` edges", nodes[c].id),
                        nodes[c].loc.clone(),
                    )
                    .hint(
                        "dataflow inside a graph must be acyclic; cross-layer values are streams",
                    ),
                );
                let _ = file;
                return nodes;
            }
        }
        let mut slots: Vec<Option<NodeIr>> = nodes.into_iter().map(Some).collect();
        out_idx
            .into_iter()
            .filter_map(|i| slots[i].take())
            .collect()
    }

    /// The model's `inputs:`: each a known kind, each size an expression over dims and config.
    fn inputs(
        &mut self,
        def: &ModelDef,
        file: &str,
        allowed: &dyn Fn(&str) -> bool,
    ) -> Vec<InputIr> {
        let mut out = Vec::new();
        for (name, v) in &def.inputs {
            let loc = loc_of(file, &v.referenced).with_node(format!("inputs.{name}"));
            let d = &v.value;
            if name == "input_ids" || def.graph.contains_key(name) {
                self.err(
                    SpecError::new(
                        code::DUPLICATE,
                        format!("input `{name}` is named like the token input or a graph node"),
                        loc.clone(),
                    )
                    .hint("give the image input its own name (`pixel_values`)"),
                );
                continue;
            }
            if !matches!(d.kind.as_str(), "image" | "video") {
                self.err(
                    SpecError::new(
                        code::YAML,
                        format!("input `{name}` has kind `{}`", d.kind),
                        loc.clone(),
                    )
                    .hint("an input beside `input_ids` is `kind: image` or `kind: video`"),
                );
                continue;
            }
            let mut parse = |what: &str, v: &Scalar| -> Option<Expr> {
                let raw = v.as_expr_text();
                let e = self.parse_expr(&raw, &loc, &format!("input `{name}` {what}"))?;
                self.check_names(&e, allowed, &loc, &format!("input `{name}` {what}"));
                Some(e)
            };
            let (Some(height), Some(width), Some(channels), Some(patch)) = (
                parse("height", &d.height),
                parse("width", &d.width),
                parse("channels", &d.channels),
                parse("patch", &d.patch),
            ) else {
                continue;
            };
            let temporal_patch = d
                .temporal_patch
                .as_ref()
                .and_then(|v| parse("temporal_patch", v));
            let frames = d.frames.as_ref().and_then(|v| parse("frames", v));
            let merge = d.merge.as_ref().and_then(|v| parse("merge", v));
            out.push(InputIr {
                name: name.clone(),
                kind: d.kind.clone(),
                height,
                width,
                channels,
                patch,
                temporal_patch,
                frames,
                merge,
                video: d.video,
                loc,
            });
        }
        out
    }

    fn model(&mut self, def: &ModelDef, file: &str) -> ModelIr {
        let model_text = self.repo.files.get(file).map(String::as_str).unwrap_or("");
        let quant_loc = key_loc(file, model_text, "quant_context");
        let mut dims = Vec::new();
        for (name, v) in &def.dims {
            let loc = loc_of(file, &v.referenced).with_node(format!("dims.{name}"));
            if !self.dims.contains_key(name) {
                let hint = closest(name, self.dims.keys().map(String::as_str))
                    .map(|c| {
                        format!(
                            "did you mean `{c}`? Dims are registered once in specs/arch/dims.yaml"
                        )
                    })
                    .unwrap_or_else(|| {
                        "register it in specs/arch/dims.yaml with a kind and summary".into()
                    });
                self.err(
                    SpecError::new(
                        code::UNKNOWN_DIM,
                        format!("dim `{name}` is not registered"),
                        loc.clone(),
                    )
                    .hint(hint),
                );
            }
            let raw = v.value.value().as_expr_text();
            if let Some(e) = self.parse_expr(&raw, &loc, &format!("dim `{name}`")) {
                dims.push(DimBinding {
                    name: name.clone(),
                    expr: e,
                    raw,
                    loc,
                    src: v.value.src().map(str::to_string),
                });
            }
        }
        let mut attrs = Vec::new();
        for (name, v) in &def.attrs {
            let loc = loc_of(file, &v.referenced).with_node(format!("attrs.{name}"));
            let raw = v.value.as_expr_text();
            if let Some(e) = self.parse_expr(&raw, &loc, &format!("attr `{name}`")) {
                attrs.push(DimBinding {
                    name: name.clone(),
                    expr: e,
                    raw,
                    loc,
                    src: None,
                });
            }
        }
        let dim_names: BTreeSet<String> = dims.iter().map(|d| d.name.clone()).collect();
        let allowed_all = |n: &str| dim_names.contains(n) || LOOP_VARS.contains(&n);
        for d in &dims {
            let d = d.clone();
            self.check_names(&d.expr, &allowed_all, &d.loc, &format!("dim `{}`", d.name));
        }
        for d in &def.drafts {
            if !self.repo.components.contains_key(d) {
                self.err(
                    SpecError::new(
                        code::UNKNOWN_COMPONENT,
                        format!("draft `{d}` does not exist"),
                        key_loc(file, model_text, "drafts"),
                    )
                    .hint("drafts live in specs/components/drafts/<name>.yaml"),
                );
            }
        }
        let mut blocks = IndexMap::new();
        for (name, b) in &def.blocks {
            let loc = loc_of(file, &b.referenced).with_node(format!("blocks.{name}"));
            let template = self.component(&b.value.template, &loc);
            let mut fills = IndexMap::new();
            for (slot, f) in &b.value.fill {
                let (cname, bind, path, rename) = match f {
                    FillDef::Name(n) => (n.clone(), IndexMap::new(), None, IndexMap::new()),
                    FillDef::Full {
                        component,
                        bind,
                        path,
                        rename,
                    } => (
                        component.clone(),
                        bind.clone(),
                        path.clone(),
                        rename.clone(),
                    ),
                };
                let comp = if def.blocks.contains_key(&cname) {
                    None
                } else {
                    self.component(&cname, &loc)
                };
                let bind = self.binds(&bind, &loc, &allowed_all);
                let rename = self.renames(&rename, comp.as_deref(), &cname, slot, &loc);
                fills.insert(
                    slot.clone(),
                    FillIr {
                        name: cname,
                        bind,
                        path,
                        rename,
                    },
                );
            }
            if let Some(t) = &template {
                for s in &t.slots {
                    if !fills.contains_key(s) {
                        self.err(
                            SpecError::new(
                                code::UNFILLED_SLOT,
                                format!(
                                    "block `{name}` leaves slot `{s}` of `{}` unfilled",
                                    t.name
                                ),
                                loc.clone(),
                            )
                            .hint(format!("fill: {{ {s}: <component> }}")),
                        );
                    }
                }
                for s in fills.keys() {
                    if !t.slots.contains(s) {
                        self.err(
                            SpecError::new(
                                code::UNFILLED_SLOT,
                                format!(
                                    "block `{name}` fills `{s}`, which `{}` does not have",
                                    t.name
                                ),
                                loc.clone(),
                            )
                            .hint(format!(
                                "slots of `{}`: {}",
                                t.name,
                                t.slots.join(", ")
                            )),
                        );
                    }
                }
            }
            let bind = self.binds(&b.value.bind, &loc, &allowed_all);
            blocks.insert(
                name.clone(),
                BlockIr {
                    name: name.clone(),
                    template: b.value.template.clone(),
                    fills,
                    bind,
                    loc,
                },
            );
        }
        let inputs = self.inputs(def, file, &allowed_all);
        let mut graph_inputs = vec!["input_ids".to_string()];
        graph_inputs.extend(inputs.iter().map(|i| i.name.clone()));
        let graph = self.graph(
            &def.graph,
            &graph_inputs,
            &def.outputs,
            file,
            &allowed_all,
            &[],
        );
        for n in &graph {
            if let NodeKind::Stack(s) = &n.kind {
                for e in &s.schedule {
                    if !blocks.contains_key(&e.block) {
                        let hint = closest(&e.block, blocks.keys().map(String::as_str))
                            .map(|c| format!("did you mean `{c}`?"))
                            .unwrap_or_else(|| "declare it under `blocks:`".into());
                        self.err(
                            SpecError::new(
                                code::UNKNOWN_COMPONENT,
                                format!(
                                    "schedule names block `{}`, which is not declared",
                                    e.block
                                ),
                                e.loc.clone(),
                            )
                            .hint(hint),
                        );
                    }
                }
            }
        }
        let q = &def.quant_context;
        let mut quant = QuantIr {
            default: q.default.clone().unwrap_or_else(|| "bf16".into()),
            per_role: q.per_role.clone(),
            overrides: q
                .overrides
                .iter()
                .map(|o| OverrideIr {
                    leaf: o.value.leaf.clone(),
                    format: o.value.format.clone(),
                    loc: loc_of(file, &o.referenced),
                })
                .collect(),
            cache: q.cache.clone(),
            cache_src: q.cache_src.clone(),
            loc: quant_loc.clone(),
        };
        let mut formats: Vec<(String, Location)> = vec![(quant.default.clone(), quant_loc.clone())];
        formats.extend(quant.cache.iter().map(|c| (c.clone(), quant_loc.clone())));
        for (role, f) in &quant.per_role {
            self.check_role(role, &quant_loc);
            formats.push((f.clone(), quant_loc.clone()));
        }
        for o in &quant.overrides {
            formats.push((o.format.clone(), o.loc.clone()));
        }
        for (f, loc) in formats {
            if !self.repo.schemes.contains_key(&f) {
                let names: Vec<&str> = self.repo.schemes.keys().map(String::as_str).collect();
                self.err(
                    SpecError::new(
                        code::UNKNOWN_QUANT,
                        format!("storage format `{f}` has no scheme in specs/quant/"),
                        loc,
                    )
                    .hint(format!("known formats: {}", names.join(", "))),
                );
            }
        }
        quant.per_role.sort_keys();
        ModelIr {
            name: def.model.clone(),
            file: file.to_string(),
            summary: def.summary.clone(),
            architectures: def.architectures.clone(),
            sources: def.sources.clone(),
            dims,
            attrs,
            blocks,
            quant,
            inputs,
            graph,
            outputs: def.outputs.clone(),
            components: std::mem::take(&mut self.comps),
            schemes: self.repo.schemes.clone(),
            dim_table: self.dims.clone(),
            model_card: def.model_card.clone(),
            unused_config: def.unused_config.clone(),
            drafts: def.drafts.clone(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn two_model_specs_with_one_name_both_say_so() {
        let spec = include_str!("../../specs/models/llama.yaml").replacen(
            "model: llama\n",
            "model: twin\n",
            1,
        );
        let files = BTreeMap::from([
            ("specs/models/a.yaml".to_string(), spec.to_string()),
            ("specs/models/b.yaml".to_string(), spec.to_string()),
        ]);
        let repo = Repo::from_files(files);
        assert!(repo.model_names().is_empty());
        for (file, other) in [("a", "b"), ("b", "a")] {
            let errs = repo
                .load_model(&format!("specs/models/{file}.yaml"))
                .unwrap_err();
            assert_eq!(errs[0].code, code::DUPLICATE, "{errs:?}");
            assert!(
                errs[0].message.contains(&format!(
                    "model name `twin` clashes with specs/models/{other}.yaml"
                )),
                "{errs:?}"
            );
            assert_eq!(errs[0].location.line, 1);
        }
    }

    #[test]
    fn a_quantity_is_stated_by_a_spelling_or_else_by_a_product() {
        let keys: ConfigKeys = parse_yaml(
            "config_keys.yaml",
            "quantities:\n  width: { keys: [shared_width], products: [[per_expert, n_shared]], dim: d }\n",
        )
        .unwrap();
        let c = serde_json::json!({ "per_expert": 1408, "n_shared": 2 });
        let s = keys.stated("width", &c).unwrap();
        assert_eq!(s.count(), Some(2816));
        assert_eq!(s.describe(), "`per_expert` = 1408 × `n_shared` = 2");
        // A spelling config sets wins over the product.
        let c = serde_json::json!({ "shared_width": 512, "per_expert": 1408, "n_shared": 2 });
        assert_eq!(keys.stated("width", &c).unwrap().count(), Some(512));
        // A product with a key missing (or null) states nothing; one that is no count has no
        // value.
        let c = serde_json::json!({ "per_expert": 1408, "n_shared": null });
        assert!(keys.stated("width", &c).is_none());
        let c = serde_json::json!({ "per_expert": 1408, "n_shared": true });
        assert_eq!(keys.stated("width", &c).unwrap().count(), None);
        // A product past i128 is no count either, never a wrapped one.
        let c = serde_json::json!({ "per_expert": u64::MAX, "n_shared": u64::MAX });
        assert_eq!(keys.stated("width", &c).unwrap().count(), None);
    }
}

#[cfg(test)]
mod dim_value_tests {
    use super::*;

    fn model(dims: &str) -> Result<ModelDef, SpecError> {
        parse_yaml(
            "specs/models/m.yaml",
            &format!(
                "model: m\nsummary: s\narchitectures: [M]\ndims:\n{dims}graph: {{}}\noutputs: []\n"
            ),
        )
    }

    #[test]
    fn a_dim_is_an_expression_or_one_with_its_source_anchor() {
        let m = model("  top_k: config.num_experts_per_tok\n  n: 2\n").unwrap();
        assert_eq!(m.dims["top_k"].value.src(), None);
        assert_eq!(m.dims["n"].value.value().as_expr_text(), "2".to_string());
        let m =
            model("  top_k: { value: \"config.k * 2\", src: \"`self.top_k = config.k * 2`\" }\n")
                .unwrap();
        assert_eq!(m.dims["top_k"].value.value().as_expr_text(), "config.k * 2");
        assert_eq!(
            m.dims["top_k"].value.src(),
            Some("`self.top_k = config.k * 2`")
        );
        // A misspelt field is a located error, not a silently dropped anchor.
        let e = model("  top_k: { value: config.k, scr: \"`x`\" }\n").unwrap_err();
        assert_eq!(e.location.file.as_deref(), Some("specs/models/m.yaml"));
        assert!(e.location.line >= 5, "{e:?}");
    }
}
