//! The packing guard's reading of a checkpoint's `quantization_config`: which tensors the
//! quantizer stored quantized, and how. The spec's storage schemes must agree tensor by tensor.
//!
//! - compressed-tensors: each `config_groups` entry quantizes the modules its `targets` match
//!   (a class name such as `Linear`, a module name, or `re:<pattern>` matched from the start of
//!   the name, as compressed-tensors does), except those `ignore` matches, with the scheme its
//!   `weights` state (`type`, `num_bits`, `strategy`, `group_size`, the `format`). A targeted
//!   tensor must use a storage scheme that `implements` those facts; an ignored or untargeted
//!   one must be stored unquantized.
//! - fp8 (`weight_block_size`): every tensor stored in an fp8 scheme must implement the
//!   config's block size. (Which linears stay unquantized is the source's choice there, e.g.
//!   DeepSeek-V3.2's `weights_proj`; the weight guard holds their dtypes to the checkpoint.)
//!
//! Another `quant_method` (`mxfp4`, `awq`, ...) is read for coverage only: some scheme must
//! implement it, else P005 (counting such a checkpoint with a scheme written for another would
//! give wrong bytes). A spec may store quantized only what the config says is quantized.

use std::collections::BTreeMap;

use harch_engine::Analysis;
use harch_engine::diag::Location;
use harch_engine::ir::ModelIr;
use harch_engine::schema::QuantSchemeDef;
use serde_json::Value;

use crate::report::Diagnostic;

pub mod code {
    /// A tensor stored otherwise than `quantization_config` says.
    pub const QUANT_CONFIG_SCHEME: &str = "P004";
    /// `quantization_config` states a scheme no storage scheme implements, or one this guard
    /// cannot read.
    pub const QUANT_CONFIG_UNCOVERED: &str = "P005";
}

/// Instances of one weight row checked at most (a row standing for more is W008's).
const MAX_INSTANCES: u128 = 4_000_000;

enum Pattern {
    Class(String),
    Name(String),
    Regex(regex::Regex),
}

impl Pattern {
    fn parse(text: &str) -> Result<Pattern, String> {
        if let Some(re) = text.strip_prefix("re:") {
            return regex::Regex::new(&format!("^(?:{re})"))
                .map(Pattern::Regex)
                .map_err(|e| format!("`{text}` is not a regular expression: {e}"));
        }
        // compressed-tensors names module classes (`Linear`) and modules (`lm_head`) alike.
        if text.starts_with(|c: char| c.is_ascii_uppercase()) && !text.contains('.') {
            Ok(Pattern::Class(text.to_string()))
        } else {
            Ok(Pattern::Name(text.to_string()))
        }
    }

    fn matches(&self, module: &str, class: &str) -> bool {
        match self {
            Pattern::Class(c) => c == class,
            Pattern::Name(n) => n == module,
            Pattern::Regex(r) => r.is_match(module),
        }
    }
}

struct Group {
    name: String,
    facts: BTreeMap<String, Value>,
    targets: Vec<Pattern>,
}

/// What the config states, read once.
struct Stated {
    method: String,
    groups: Vec<Group>,
    ignore: Vec<Pattern>,
}

/// The module class a weight row's op stands for, as a quantizer's `targets` name it.
fn class_of(op: &str) -> &'static str {
    match op {
        "linear" => "Linear",
        "embedding" => "Embedding",
        "patch_embed" => "Conv",
        _ => "",
    }
}

fn is_quantized(s: &QuantSchemeDef) -> bool {
    !s.implements.is_empty() || s.stored.iter().any(|t| t.scale)
}

/// The facts a scheme declares, shown for messages.
fn show_facts(facts: &BTreeMap<String, Value>) -> String {
    facts
        .iter()
        .map(|(k, v)| {
            format!(
                "{k}: {}",
                v.as_str().map_or_else(|| v.to_string(), str::to_string)
            )
        })
        .collect::<Vec<_>>()
        .join(", ")
}

fn implements(s: &QuantSchemeDef, facts: &BTreeMap<String, Value>) -> bool {
    !s.implements.is_empty()
        && s.implements
            .iter()
            .all(|(k, v)| facts.get(k).is_some_and(|f| same(f, v)))
}

/// Equal as config values: `4` and `4.0`, `"int"` and `"int"`.
fn same(a: &Value, b: &Value) -> bool {
    match (a.as_f64(), b.as_f64()) {
        (Some(x), Some(y)) => x == y,
        _ => a == b,
    }
}

fn read(config: &Value, loc: &Location, out: &mut Vec<Diagnostic>) -> Option<Stated> {
    let q = config.get("quantization_config")?.as_object()?;
    let method = q.get("quant_method")?.as_str()?.to_string();
    let mut bad = |m: String| {
        out.push(
            Diagnostic::new("packing", code::QUANT_CONFIG_UNCOVERED, m, loc.clone())
                .hint("only `targets`/`ignore` entries that are class names, module names or `re:` patterns can be checked"),
        )
    };
    let patterns = |v: Option<&Value>, bad: &mut dyn FnMut(String)| -> Vec<Pattern> {
        let mut out = Vec::new();
        for t in v.and_then(Value::as_array).into_iter().flatten() {
            match t.as_str().map(Pattern::parse) {
                Some(Ok(p)) => out.push(p),
                Some(Err(e)) => bad(format!("quantization_config: {e}")),
                None => bad(format!("quantization_config: target {t} is not a string")),
            }
        }
        out
    };
    match method.as_str() {
        "compressed-tensors" => {
            let format = q.get("format").cloned();
            let ignore = patterns(q.get("ignore"), &mut bad);
            let mut groups = Vec::new();
            for (name, g) in q
                .get("config_groups")
                .and_then(Value::as_object)
                .into_iter()
                .flatten()
            {
                let Some(w) = g.get("weights").and_then(Value::as_object) else {
                    continue;
                };
                let mut facts =
                    BTreeMap::from([("quant_method".to_string(), Value::from(method.clone()))]);
                if let Some(f) = g.get("format").filter(|f| !f.is_null()).or(format.as_ref()) {
                    facts.insert("format".into(), f.clone());
                }
                for key in [
                    "type",
                    "num_bits",
                    "strategy",
                    "group_size",
                    "block_structure",
                ] {
                    if let Some(v) = w.get(key).filter(|v| !v.is_null()) {
                        facts.insert(key.into(), v.clone());
                    }
                }
                groups.push(Group {
                    name: name.clone(),
                    facts,
                    targets: patterns(g.get("targets"), &mut bad),
                });
            }
            Some(Stated {
                method,
                groups,
                ignore,
            })
        }
        "fp8" => {
            let mut facts = BTreeMap::from([("quant_method".to_string(), Value::from("fp8"))]);
            if let Some(b) = q.get("weight_block_size").filter(|b| !b.is_null()) {
                facts.insert("weight_block_size".into(), b.clone());
            }
            Some(Stated {
                method,
                groups: vec![Group {
                    name: "fp8".into(),
                    facts,
                    targets: Vec::new(),
                }],
                ignore: Vec::new(),
            })
        }
        // Another method is read for coverage only: some scheme must implement it (gpt-oss's
        // `mxfp4`); which tensors it quantizes is the weight guard's, from the checkpoint.
        // A config that states only the KV cache's quantization says nothing about weights.
        _ if states_weight_storage(q) => Some(Stated {
            method: method.clone(),
            groups: vec![Group {
                name: method.clone(),
                facts: BTreeMap::from([("quant_method".to_string(), Value::from(method))]),
                targets: Vec::new(),
            }],
            ignore: Vec::new(),
        }),
        _ => None,
    }
}

/// Keys of a quantization_config that describe the KV cache, not the weights.
const KV_ONLY: &[&str] = &[
    "kv_cache_scheme",
    "kv_cache_dtype",
    "kv_cache_quant_algo",
    "quant_method",
];

fn states_weight_storage(q: &serde_json::Map<String, Value>) -> bool {
    q.iter().any(|(k, v)| {
        !KV_ONLY.contains(&k.as_str()) && !v.is_null() && v != &Value::Object(Default::default())
    })
}

/// Every concrete checkpoint name a row stands for (its placeholders filled), when few enough.
fn instances(name: &str, indices: &[(String, Vec<i128>)]) -> Option<Vec<String>> {
    let total: u128 = indices.iter().map(|(_, v)| v.len() as u128).product();
    if total > MAX_INSTANCES {
        return None;
    }
    let mut names = vec![name.to_string()];
    for (placeholder, values) in indices {
        let key = format!("{{{placeholder}}}");
        names = names
            .iter()
            .flat_map(|n| {
                values
                    .iter()
                    .map(|v| n.replace(&key, &v.to_string()))
                    .collect::<Vec<_>>()
            })
            .collect();
    }
    Some(names)
}

pub fn check(ir: &ModelIr, a: &Analysis, config: &Value) -> Vec<Diagnostic> {
    let mut out = Vec::new();
    let file = Location::in_file(&ir.file);
    let Some(stated) = read(config, &file, &mut out) else {
        return out;
    };
    for g in &stated.groups {
        if !ir.schemes.values().any(|s| implements(s, &g.facts)) {
            out.push(
                Diagnostic::new(
                    "packing",
                    code::QUANT_CONFIG_UNCOVERED,
                    format!(
                        "quantization_config group `{}` ({}) is implemented by no storage scheme",
                        g.name,
                        show_facts(&g.facts)
                    ),
                    file.clone(),
                )
                .hint("add a scheme under specs/quant/ whose `stored` tensors are the checkpoint's and whose `implements:` states these facts"),
            );
        }
    }
    // One finding per (row, what was wrong): a row stands for many tensors.
    for w in &a.weights {
        let Some(scheme) = ir.schemes.get(&w.format) else {
            continue;
        };
        let node = &a.nodes[w.node];
        let loc = w
            .override_index
            .and_then(|i| ir.quant.overrides.get(i))
            .map_or_else(|| node.loc.clone(), |o| o.loc.clone());
        let quantized = is_quantized(scheme);
        let own_method = scheme
            .implements
            .get("quant_method")
            .and_then(Value::as_str);
        if stated.method != "fp8" && stated.method != "compressed-tensors" {
            continue;
        }
        if stated.method == "fp8" {
            if own_method == Some("fp8") && !implements(scheme, &stated.groups[0].facts) {
                out.push(wrong(
                    &format!(
                        "quantization_config states fp8 with {}, but `{}` implements {}",
                        show_facts(&stated.groups[0].facts),
                        w.format,
                        show_facts(&sorted(&scheme.implements))
                    ),
                    loc,
                ));
            }
            continue;
        }
        let class = class_of(&node.op);
        let module_of = |n: &str| {
            n.rsplit_once('.')
                .map_or(n.to_string(), |(m, _)| m.to_string())
        };
        let Some(names) = instances(&w.name, &w.indices) else {
            continue;
        };
        let mut first_wrong: Option<(String, String)> = None;
        let mut wrong_count = 0usize;
        for name in &names {
            let module = module_of(name);
            let ignored = stated.ignore.iter().position(|p| p.matches(&module, class));
            let group = stated
                .groups
                .iter()
                .find(|g| g.targets.iter().any(|p| p.matches(&module, class)));
            let problem = match group {
                _ if ignored.is_some() && quantized => Some(format!(
                    "`{name}` is stored `{}`, but quantization_config's `ignore` leaves module `{module}` unquantized",
                    w.format
                )),
                None if quantized => Some(format!(
                    "`{name}` is stored `{}`, but no quantization_config group targets module `{module}`",
                    w.format
                )),
                Some(g) if ignored.is_none() && !implements(scheme, &g.facts) => Some(format!(
                    "`{name}` is stored `{}`, but quantization_config group `{}` quantizes module `{module}` as {}",
                    w.format,
                    g.name,
                    show_facts(&g.facts)
                )),
                _ => None,
            };
            if let Some(p) = problem {
                wrong_count += 1;
                if first_wrong.is_none() {
                    first_wrong = Some((name.clone(), p));
                }
            }
        }
        if let Some((_, p)) = first_wrong {
            let more = if wrong_count > 1 {
                format!(" ({} tensors of this row)", wrong_count)
            } else {
                String::new()
            };
            out.push(wrong(&format!("{p}{more}"), loc));
        }
    }
    out
}

fn sorted<'a>(m: impl IntoIterator<Item = (&'a String, &'a Value)>) -> BTreeMap<String, Value> {
    m.into_iter().map(|(k, v)| (k.clone(), v.clone())).collect()
}

fn wrong(message: &str, loc: Location) -> Diagnostic {
    Diagnostic::new("packing", code::QUANT_CONFIG_SCHEME, message.to_string(), loc).hint(
        "store each tensor as quantization_config says: `quant_context` overrides or per_role name the scheme that `implements` the config's group (specs/quant/), and an ignored module keeps the default format",
    )
}
