//! The configuration class's `attribute_map`: transformers reads `config.<alias>` as
//! `config.<target>` (GLM-4.7-Flash maps `head_dim` to `qk_rope_head_dim`, `num_local_experts` to
//! `n_routed_experts`), so the value a spec or a guard reads under either name is the target's.
//! The config every guard and the evaluation see is config.json with each alias resolved so.

use std::collections::BTreeMap;

use crate::pysrc::{Kind, Module};

/// (alias, target) pairs of every configuration class's `attribute_map` in `sources`.
pub fn attribute_map(sources: &BTreeMap<String, String>) -> Vec<(String, String)> {
    let mut out = Vec::new();
    for (name, text) in sources {
        if !name.starts_with("configuration_") {
            continue;
        }
        let m = Module::read(name, text);
        for s in &m.stmts {
            let Kind::Assign { targets, value, .. } = &s.kind else {
                continue;
            };
            let in_class = s
                .parent
                .is_some_and(|p| matches!(m.stmts[p].kind, Kind::Class(_)));
            if !in_class || m.targets(targets.clone()) != ["attribute_map"] {
                continue;
            }
            let inner = m.strip_brackets(value.clone());
            let inner = if m.tok(value.start) == "{" {
                value.start + 1..value.end.saturating_sub(1)
            } else {
                inner
            };
            for pair in m.split_top(inner) {
                let text = m.span(pair);
                let Some((a, b)) = text.split_once(':') else {
                    continue;
                };
                if let (Some(a), Some(b)) = (literal(a), literal(b))
                    && !out.iter().any(|(x, _): &(String, String)| x == &a)
                {
                    out.push((a, b));
                }
            }
        }
    }
    out
}

/// The defaults of the configuration class whose `model_type` is `model_type`: the literal
/// values (numbers, strings, booleans) of its `__init__` keyword parameters (transformers 4) and
/// of its annotated class attributes (transformers 5's dataclass configs). transformers reads a
/// key config.json leaves out at this default, so a guard must too.
pub fn class_defaults(
    sources: &BTreeMap<String, String>,
    model_type: &str,
) -> Vec<(String, serde_json::Value)> {
    let mut out = Vec::new();
    for (name, text) in sources {
        if !name.starts_with("configuration_") {
            continue;
        }
        let m = Module::read(name, text);
        for (c, stmt) in m.stmts.iter().enumerate() {
            if !matches!(stmt.kind, Kind::Class(_)) || !class_has_model_type(&m, c, model_type) {
                continue;
            }
            for k in m.body(c) {
                let s = &m.stmts[k];
                if s.parent != Some(c) {
                    continue;
                }
                match &s.kind {
                    Kind::Assign {
                        targets,
                        value,
                        aug: false,
                    } => {
                        // Annotated only: a plain class attribute (`model_type = …`,
                        // `attribute_map = …`) is no configuration key.
                        let annotated =
                            targets.clone().any(|t| m.tok(t) == ":") || m.tok(targets.end) == ":";
                        if let ([key], true, Some(v)) = (
                            m.targets(targets.clone()).as_slice(),
                            annotated,
                            python_literal(m.span(value.clone())),
                        ) {
                            push(&mut out, key, v);
                        }
                    }
                    Kind::Def(n) if n == "__init__" => {
                        let r = s.tokens.clone();
                        let Some(open) = r.clone().find(|&t| m.tok(t) == "(") else {
                            continue;
                        };
                        let Some(close) = m.matching_close(open, r.end) else {
                            continue;
                        };
                        for p in m.split_top(open + 1..close) {
                            let Some(eq) = p.clone().find(|&t| m.tok(t) == "=") else {
                                continue;
                            };
                            let key = m.tok(p.start);
                            if let Some(v) = python_literal(m.span(eq + 1..p.end)) {
                                push(&mut out, key, v);
                            }
                        }
                    }
                    _ => {}
                }
            }
        }
    }
    out
}

fn push(out: &mut Vec<(String, serde_json::Value)>, key: &str, v: serde_json::Value) {
    let plain = !key.is_empty() && key.chars().all(|c| c.is_ascii_alphanumeric() || c == '_');
    if plain && !out.iter().any(|(k, _)| k == key) {
        out.push((key.to_string(), v));
    }
}

fn class_has_model_type(m: &Module, class: usize, model_type: &str) -> bool {
    m.body(class).any(|k| {
        let s = &m.stmts[k];
        match &s.kind {
            Kind::Assign { targets, value, .. } if s.parent == Some(class) => {
                m.targets(targets.clone()) == ["model_type"]
                    && literal(m.span(value.clone())).as_deref() == Some(model_type)
            }
            _ => false,
        }
    })
}

/// A number, a string or a boolean as Python writes it; `None` and anything computed are not
/// defaults a guard can read.
fn python_literal(s: &str) -> Option<serde_json::Value> {
    let s = s.trim();
    match s {
        "True" => return Some(true.into()),
        "False" => return Some(false.into()),
        _ => {}
    }
    if let Some(q) = s.chars().next().filter(|c| *c == '"' || *c == '\'') {
        let v = s.strip_prefix(q)?.strip_suffix(q)?;
        return (!v.contains(q) && !v.contains('\\')).then(|| v.into());
    }
    let digits: String = s.chars().filter(|c| *c != '_').collect();
    if let Ok(i) = digits.parse::<i64>() {
        return Some(i.into());
    }
    digits
        .parse::<f64>()
        .ok()
        .filter(|f| f.is_finite())
        .and_then(serde_json::Number::from_f64)
        .map(serde_json::Value::Number)
}

/// The keys whose absence a guard would otherwise read as a default of its own (an unstated
/// `routed_scaling_factor` as 1, `scoring_func` as softmax, no `partial_rotary_factor` as the
/// whole head): where config.json is silent, the configuration class's default is the fact.
pub const BEHAVIOUR_KEYS: &[&str] = &[
    "routed_scaling_factor",
    "norm_topk_prob",
    "scoring_func",
    "topk_method",
    "n_group",
    "topk_group",
    "hidden_act",
    "hidden_activation",
    "partial_rotary_factor",
    "sliding_window",
];

/// config.json with every behaviour key it leaves out ([`BEHAVIOUR_KEYS`]) read at its
/// configuration class's default (the text model's class for a nested `text_config`); `None`
/// when that adds nothing.
pub fn with_class_defaults(
    config: &serde_json::Value,
    sources: &BTreeMap<String, String>,
) -> Option<serde_json::Value> {
    let mut out = config.clone();
    let scope = match out.get("text_config") {
        Some(t) if t.is_object() => out.get_mut("text_config")?,
        _ => &mut out,
    };
    let model_type = scope.get("model_type")?.as_str()?.to_string();
    let defaults = class_defaults(sources, &model_type);
    let obj = scope.as_object_mut()?;
    let mut changed = false;
    for (k, v) in defaults {
        if BEHAVIOUR_KEYS.contains(&k.as_str()) && !obj.contains_key(&k) {
            obj.insert(k, v);
            changed = true;
        }
    }
    changed.then_some(out)
}

fn literal(s: &str) -> Option<String> {
    let s = s.trim();
    let q = s.chars().next().filter(|c| *c == '"' || *c == '\'')?;
    let v = s.strip_prefix(q)?.strip_suffix(q)?;
    v.chars()
        .all(|c| c.is_ascii_alphanumeric() || c == '_')
        .then(|| v.to_string())
}

/// config.json with every alias of `map` reading its target (and a target config.json leaves
/// out taking the value given under its alias); `None` when that changes nothing.
pub fn effective_config(
    config: &serde_json::Value,
    map: &[(String, String)],
) -> Option<serde_json::Value> {
    let obj = config.as_object()?;
    let present = |k: &str| obj.get(k).filter(|v| !v.is_null());
    let mut out = obj.clone();
    let mut changed = false;
    for (alias, target) in map {
        match (present(target), present(alias)) {
            (Some(t), a) if a != Some(t) => {
                out.insert(alias.clone(), t.clone());
                changed = true;
            }
            (None, Some(a)) => {
                out.insert(target.clone(), a.clone());
                changed = true;
            }
            _ => {}
        }
    }
    changed.then_some(serde_json::Value::Object(out))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn configuration(version: &str, model: &str) -> BTreeMap<String, String> {
        BTreeMap::from([crate::pinned::file(version, model, "configuration")])
    }

    #[test]
    fn class_defaults_are_read_from_init_and_from_annotated_fields() {
        // transformers 4: keyword defaults of `__init__`.
        let v3 = configuration("4.57.6", "deepseek_v3");
        let d = class_defaults(&v3, "deepseek_v3");
        let get = |d: &[(String, serde_json::Value)], k: &str| {
            d.iter().find(|(x, _)| x == k).map(|(_, v)| v.clone())
        };
        assert_eq!(get(&d, "routed_scaling_factor"), Some(2.5.into()));
        assert_eq!(get(&d, "hidden_act"), Some("silu".into()));
        assert_eq!(get(&d, "n_group"), Some(8.into()));
        assert_eq!(get(&d, "q_lora_rank"), Some(1536.into()));
        // Another class's model type reads nothing.
        assert!(class_defaults(&v3, "llama").is_empty());
        // transformers 5: annotated class attributes of the dataclass config.
        let g4 = configuration("5.23.0", "gemma4");
        let d = class_defaults(&g4, "gemma4_text");
        assert_eq!(get(&d, "sliding_window"), Some(512.into()));
        assert_eq!(
            get(&d, "hidden_activation"),
            Some("gelu_pytorch_tanh".into())
        );
        assert_eq!(get(&d, "rms_norm_eps"), Some(1e-6.into()));
        assert_eq!(get(&d, "model_type"), None);
        // A config silent on a behaviour key reads the class's default; one that states it
        // keeps its own; a nested text config is filled where it is.
        let silent = serde_json::json!({ "model_type": "deepseek_v3", "n_group": 4 });
        let filled = with_class_defaults(&silent, &v3).unwrap();
        assert_eq!(filled["routed_scaling_factor"], 2.5);
        assert_eq!(filled["n_group"], 4);
        assert!(filled.get("q_lora_rank").is_none(), "only behaviour keys");
        let nested = serde_json::json!({ "model_type": "gemma4", "text_config": { "model_type": "gemma4_text" } });
        let filled = with_class_defaults(&nested, &g4).unwrap();
        assert_eq!(filled["text_config"]["sliding_window"], 512);
        assert_eq!(with_class_defaults(&filled, &g4), None);
    }

    #[test]
    fn glm_4_7_flash_reads_head_dim_as_the_rotated_width() {
        let sources = configuration("5.23.0", "glm4_moe_lite");
        let map = attribute_map(&sources);
        assert!(
            map.contains(&("head_dim".into(), "qk_rope_head_dim".into())),
            "{map:?}"
        );
        assert!(
            map.contains(&("num_local_experts".into(), "n_routed_experts".into())),
            "{map:?}"
        );
        // A config in GLM-4.7-Flash's shape: the MLA widths, a `head_dim` of the query/key head.
        let config = serde_json::json!({
            "model_type": "glm4_moe_lite", "head_dim": 256, "qk_rope_head_dim": 64,
            "qk_nope_head_dim": 192, "n_routed_experts": 64
        });
        let eff = effective_config(&config, &map).expect("aliases resolve");
        assert_eq!(eff["head_dim"], 64);
        assert_eq!(eff["num_local_experts"], 64);
        assert_eq!(eff["qk_nope_head_dim"], 192);
        // Nothing to resolve: no copy.
        assert_eq!(effective_config(&eff, &map), None);
        assert_eq!(effective_config(&config, &[]), None);
    }
}
