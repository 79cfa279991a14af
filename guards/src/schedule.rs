//! The schedule guard: config values that shape the layer stack are read by the spec, and the
//! spec's per-layer block assignment separates every layer the config separates.

use std::collections::{BTreeMap, BTreeSet};

use harch_engine::Analysis;
use harch_engine::diag::Location;
use harch_engine::expr::{self, Env, EvalError, Val};
use harch_engine::ir::ModelIr;
use harch_engine::load::ConfigKeys;
use harch_engine::q::Q;

use crate::report::Diagnostic;

pub mod code {
    pub const UNBOUND_KEY: &str = "C001";
    pub const MERGED_LAYERS: &str = "C002";
    pub const LIST_LENGTH: &str = "C003";
}

struct LayerEnv<'a> {
    config: &'a serde_json::Value,
    i: i128,
}

impl Env for LayerEnv<'_> {
    fn name(&self, name: &str) -> Result<Q, EvalError> {
        if name == "i" {
            Ok(Q::lit(self.i))
        } else {
            Err(EvalError::UnknownName(name.into()))
        }
    }
    fn config(&self) -> &serde_json::Value {
        self.config
    }
}

/// A config key with a non-null value.
/// Whether config sets `key` (dotted for a nested key: `sparse_attention_config.sparse_block_size`).
pub(crate) fn present(config: &serde_json::Value, key: &str) -> bool {
    harch_engine::load::config_at(config, key).is_some_and(|v| !v.is_null())
}

use crate::config_view::reads_key;

/// Whether the spec reads `key`'s value under another name: a `??` chain of a dim names it at
/// any position (the chain stops at the first present key, but every key it names is one the
/// author chose to read), or the spec reads another spelling of the same quantity that config
/// sets to the same value (`experts_per_token` beside `num_experts_per_tok`).
fn spelled_otherwise(
    ir: &ModelIr,
    a: &Analysis,
    config: &serde_json::Value,
    keys: &ConfigKeys,
    key: &str,
) -> bool {
    if ir.dims.iter().any(|d| chain_keys(&d.expr).contains(&key)) {
        return true;
    }
    keys.quantities
        .values()
        .filter(|q| q.keys.iter().any(|k| k == key))
        .flat_map(|q| q.keys.iter())
        .any(|other| {
            other != key
                && present(config, other)
                && config.get(other) == config.get(key)
                && reads_key(a, other)
        })
}

/// Top-level config keys named anywhere in the `??` chains of an expression.
pub(crate) fn chain_keys(e: &expr::Expr) -> Vec<&str> {
    use harch_engine::expr::{BinOp, Expr, PathSeg};
    fn walk<'e>(e: &'e Expr, in_chain: bool, out: &mut Vec<&'e str>) {
        match e {
            Expr::Config(path) => {
                if in_chain && let Some(PathSeg::Key(k)) = path.first() {
                    out.push(k);
                }
                for seg in path {
                    if let PathSeg::Index(i) = seg {
                        walk(i, false, out);
                    }
                }
            }
            Expr::Unary(_, x) => walk(x, in_chain, out),
            Expr::Binary(BinOp::Coalesce, l, r) => {
                walk(l, true, out);
                walk(r, true, out);
            }
            Expr::Binary(_, l, r) => {
                walk(l, false, out);
                walk(r, false, out);
            }
            Expr::Call(_, args) => {
                for x in args {
                    walk(x, false, out);
                }
            }
            _ => {}
        }
    }
    let mut out = Vec::new();
    walk(e, false, &mut out);
    out
}

/// Layer index → block of the main (non-MTP) stacks.
pub fn main_layers(a: &Analysis) -> BTreeMap<String, BTreeMap<i128, String>> {
    let mut out: BTreeMap<String, BTreeMap<i128, String>> = BTreeMap::new();
    for g in a
        .groups
        .iter()
        .filter(|g| g.top_role.as_deref() != Some("mtp") && g.encoder.is_none())
    {
        for l in &g.layers {
            out.entry(g.stack.clone())
                .or_default()
                .insert(*l, g.block.clone());
        }
    }
    out
}

pub fn check(
    ir: &ModelIr,
    a: &Analysis,
    config: &serde_json::Value,
    keys: &ConfigKeys,
) -> Vec<Diagnostic> {
    let mut out = Vec::new();
    let file_loc = Location::in_file(&ir.file);
    for key in &keys.must_bind {
        if present(config, key)
            && !reads_key(a, key)
            && !spelled_otherwise(ir, a, config, keys, key)
            && !ir.unused_config.contains_key(key)
        {
            let value = harch_engine::load::config_at(config, key)
                .map(|v| v.to_string())
                .unwrap_or_default();
            let shown = if value.len() > 60 {
                format!("{}…", &value[..60])
            } else {
                value
            };
            out.push(
                Diagnostic::new("schedule", code::UNBOUND_KEY, format!("config `{key}` = {shown} is read by no binding of the spec"), file_loc.clone())
                    .hint(format!("bind it where it shapes the graph, e.g. a dim `<name>: config.{key}` used by an op, or a schedule `where:` that reads it")),
            );
        }
    }
    // An encoder's sub-config shapes its tower as the text config shapes the text model.
    for scope in crate::config_view::ENCODER_SCOPES {
        let Some(sub) = config.get(*scope).filter(|v| v.is_object()) else {
            continue;
        };
        for key in &keys.must_bind {
            let path = format!("{scope}.{key}");
            let read = a.config_reads.iter().any(|r| {
                r.strip_prefix("config.")
                    .and_then(|r| r.strip_prefix(path.as_str()))
                    .is_some_and(|rest| rest.is_empty() || rest.starts_with(['.', '[']))
            });
            if present(sub, key) && !read && !ir.unused_config.contains_key(&path) {
                out.push(
                    Diagnostic::new("schedule", code::UNBOUND_KEY, format!("config `{path}` = {} is read by no binding of the spec", sub[key.as_str()]), file_loc.clone())
                        .hint(format!("bind it where it shapes the tower, e.g. a dim `<name>: config.{path}` used by an op")),
                );
            }
        }
    }
    let stacks = main_layers(a);
    for (stack, layers) in &stacks {
        let n = layers.len();
        for key in &keys.per_layer {
            if let Some(list) = config.get(key).and_then(|v| v.as_array())
                && list.len() != n
            {
                out.push(
                    Diagnostic::new(
                        "schedule",
                        code::LIST_LENGTH,
                        format!(
                            "config `{key}` lists {} layers but stack `{stack}` has {n}",
                            list.len()
                        ),
                        file_loc.clone(),
                    )
                    .hint("the stack's `repeat` must cover every layer the config lists"),
                );
            }
        }
        for rule in &keys.layer_rules {
            if !present(config, &rule.key) {
                continue;
            }
            let Ok(e) = expr::parse(&rule.rule) else {
                continue;
            };
            let mut by_block: BTreeMap<&str, BTreeMap<String, Vec<i128>>> = BTreeMap::new();
            let mut ok = true;
            for (&i, block) in layers {
                let v = match expr::eval(&e, &LayerEnv { config, i }) {
                    Ok(Val::Str(s)) => s.to_string(),
                    Ok(Val::Bool(b)) => b.to_string(),
                    Ok(Val::Int(q)) => q.v.to_string(),
                    Ok(_) => continue,
                    Err(_) => {
                        ok = false;
                        break;
                    }
                };
                by_block
                    .entry(block.as_str())
                    .or_default()
                    .entry(v)
                    .or_default()
                    .push(i);
            }
            if !ok {
                continue;
            }
            for (block, values) in by_block {
                if values.len() > 1 {
                    let parts: Vec<String> = values
                        .iter()
                        .map(|(v, ls)| format!("layers {} ({v})", crate::report::index_ranges(ls)))
                        .collect();
                    let loc = ir
                        .blocks
                        .get(block)
                        .map(|b| b.loc.clone())
                        .unwrap_or_else(|| file_loc.clone());
                    out.push(
                        Diagnostic::new(
                            "schedule",
                            code::MERGED_LAYERS,
                            format!("stack `{stack}` builds {} from one block `{block}`, but config `{}` separates them (`{}`)", parts.join(" and "), rule.key, rule.rule),
                            loc,
                        )
                        .hint(format!("give each kind of layer its own block and a `where:` that reads config.{}", rule.key)),
                    );
                }
            }
        }
    }
    let _ = BTreeSet::<()>::new();
    out
}
