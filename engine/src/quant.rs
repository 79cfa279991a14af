//! Storage schemes against the checkpoint's own statement of them: the names a scheme gives its
//! stored tensors, and which schemes cover a config's `quantization_config`.
//!
//! A scheme that a config's `quantization_config` describes says so (`quantization_config:` in
//! `specs/quant/<scheme>.yaml`, a list of patterns). A spec whose config states a
//! quantization_config must store its weights with at least one scheme covering it; a
//! quantization_config that no scheme covers is an error located at `quant_context`, because
//! counting such a checkpoint with a scheme written for another one gives wrong bytes.

use std::collections::BTreeMap;

use serde_json::Value;

use crate::diag::{Location, SpecError, code};
use crate::ir::QuantIr;
use crate::schema::{QuantSchemeDef, StoredDef};

/// The checkpoint name of one stored tensor of a leaf named `name` (`layers.0.attn.wkv.weight`):
/// `leaf:` replaces the leaf's own name, the last dotted segment (DeepSeek-V4 stores the scale of
/// `w1.weight` as `w1.scale`); `suffix:` is appended after that (`weight_scale_inv`).
pub fn stored_name(name: &str, s: &StoredDef) -> String {
    let base = match &s.leaf {
        Some(leaf) => match name.rsplit_once('.') {
            Some((head, _)) => format!("{head}.{leaf}"),
            None => leaf.clone(),
        },
        None => name.to_string(),
    };
    format!("{base}{}", s.suffix)
}

/// Whether `value` holds everything `pattern` states: every key of a pattern map (a `*` key:
/// any one entry of the value's map), equal scalars (numbers by value), lists element by element.
pub fn covers(pattern: &Value, value: &Value) -> bool {
    match (pattern, value) {
        (Value::Object(p), Value::Object(v)) => p.iter().all(|(k, pv)| {
            if k == "*" {
                v.values().any(|vv| covers(pv, vv))
            } else {
                v.get(k).is_some_and(|vv| covers(pv, vv))
            }
        }),
        (Value::Array(p), Value::Array(v)) => {
            p.len() == v.len() && p.iter().zip(v).all(|(a, b)| covers(a, b))
        }
        (Value::Number(a), Value::Number(b)) => a.as_f64() == b.as_f64(),
        (a, b) => a == b,
    }
}

/// The config's `quantization_config` (top level, else under `text_config`), with the key path
/// it was found at.
pub fn config_quantization(config: &Value) -> Option<(&'static str, &Value)> {
    let top = config.get("quantization_config").filter(|v| !v.is_null());
    let text = config
        .get("text_config")
        .and_then(|t| t.get("quantization_config"))
        .filter(|v| !v.is_null());
    top.map(|v| ("quantization_config", v))
        .or_else(|| text.map(|v| ("text_config.quantization_config", v)))
}

/// Keys that describe the KV cache, not the weights (the cache dtype is read from them).
const KV_ONLY: &[&str] = &[
    "kv_cache_scheme",
    "kv_cache_dtype",
    "kv_cache_quant_algo",
    "quant_method",
];

/// Whether a quantization_config says anything about how weights are stored (not only the KV
/// cache's dtype, which `dataflow::config_cache_dtype` reads).
fn states_weight_storage(qc: &Value) -> bool {
    match qc.as_object() {
        Some(m) => m.iter().any(|(k, v)| {
            !KV_ONLY.contains(&k.as_str())
                && !v.is_null()
                && v != &Value::Object(Default::default())
        }),
        None => true,
    }
}

/// The schemes whose `quantization_config` patterns cover `q`, by name.
pub fn covering_schemes<'a>(
    schemes: &'a BTreeMap<String, QuantSchemeDef>,
    q: &Value,
) -> Vec<&'a str> {
    schemes
        .values()
        .filter(|s| s.quantization_config.iter().any(|p| covers(p, q)))
        .map(|s| s.name.as_str())
        .collect()
}

/// The storage formats a quant context names (default, per role, overrides), deduplicated.
fn used_formats(q: &QuantIr) -> Vec<&str> {
    let mut v: Vec<&str> = std::iter::once(q.default.as_str())
        .chain(q.per_role.values().map(String::as_str))
        .chain(q.overrides.iter().map(|o| o.format.as_str()))
        .filter(|f| !f.is_empty())
        .collect();
    v.sort_unstable();
    v.dedup();
    v
}

/// Checks a spec's quant context against the config's `quantization_config`: some format the
/// spec stores weights with must cover it, and some scheme must exist that does.
pub fn check_config(
    schemes: &BTreeMap<String, QuantSchemeDef>,
    q: &QuantIr,
    config: &Value,
) -> Option<SpecError> {
    let (key, qc) = config_quantization(config)?;
    if !states_weight_storage(qc) {
        return None;
    }
    let covering = covering_schemes(schemes, qc);
    let used = used_formats(q);
    if used.iter().any(|f| covering.contains(f)) {
        return None;
    }
    let stated = compact(qc);
    let loc: Location = q.loc.clone();
    Some(if covering.is_empty() {
        SpecError::new(
            code::UNKNOWN_QUANT,
            format!("config `{key}` states {stated}, and no storage scheme of specs/quant covers it"),
            loc,
        )
        .hint("a scheme covers a quantization_config by listing it under `quantization_config:` in specs/quant/<scheme>.yaml; if none describes how this checkpoint stores its weights, write a gap report (<model>.gap.yaml) naming the bytes it affects")
    } else {
        SpecError::new(
            code::UNKNOWN_QUANT,
            format!(
                "config `{key}` states {stated}, but none of the formats this spec stores weights with ({}) covers it",
                used.join(", ")
            ),
            loc,
        )
        .hint(format!(
            "store the quantized weights with a scheme that covers it: {}",
            covering.join(", ")
        ))
    })
}

/// A config value on one line, at most 200 characters.
fn compact(v: &Value) -> String {
    let s = v.to_string();
    if s.len() <= 200 {
        return s;
    }
    let cut = (0..=200)
        .rev()
        .find(|&i| s.is_char_boundary(i))
        .unwrap_or(0);
    format!("{}…", &s[..cut])
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn stored(leaf: Option<&str>, suffix: &str) -> StoredDef {
        StoredDef {
            suffix: suffix.into(),
            leaf: leaf.map(str::to_string),
            dtype: "F8_E8M0".into(),
            shape: None,
            scale: true,
        }
    }

    #[test]
    fn a_scheme_renames_the_leaf_or_appends_to_it() {
        let n = "layers.0.ffn.experts.3.w1.weight";
        assert_eq!(
            stored_name(n, &stored(Some("scale"), "")),
            "layers.0.ffn.experts.3.w1.scale"
        );
        assert_eq!(
            stored_name(n, &stored(None, "_scale_inv")),
            "layers.0.ffn.experts.3.w1.weight_scale_inv"
        );
        assert_eq!(stored_name("weight", &stored(Some("scale"), "")), "scale");
        assert_eq!(stored_name(n, &stored(None, "")), n);
    }

    fn scheme(name: &str, patterns: Vec<Value>) -> (String, QuantSchemeDef) {
        (
            name.to_string(),
            QuantSchemeDef {
                name: name.into(),
                summary: String::new(),
                applies_to: vec!["matrix".into()],
                params_per_element: None,
                stored: vec![],
                quantization_config: patterns,
                implements: Default::default(),
            },
        )
    }

    fn quant(default: &str, per_role: &[(&str, &str)]) -> QuantIr {
        QuantIr {
            default: default.into(),
            per_role: per_role
                .iter()
                .map(|(a, b)| (a.to_string(), b.to_string()))
                .collect(),
            loc: Location::at("specs/models/x.yaml", 12, 1),
            ..Default::default()
        }
    }

    #[test]
    fn patterns_cover_what_they_state_and_nothing_else() {
        let v4 = json!({"activation_scheme": "dynamic", "fmt": "e4m3", "quant_method": "fp8",
                        "scale_fmt": "ue8m0", "weight_block_size": [128, 128]});
        assert!(covers(
            &json!({"quant_method": "fp8", "scale_fmt": "ue8m0", "weight_block_size": [128, 128]}),
            &v4
        ));
        assert!(!covers(&json!({"weight_block_size": [64, 64]}), &v4));
        assert!(!covers(&json!({"weight_block_size": [128]}), &v4));
        assert!(!covers(&json!({"group_size": 32}), &v4));
        // `*` stands for a map's entries whatever their names (compressed-tensors groups).
        let ct = json!({"quant_method": "compressed-tensors",
                        "config_groups": {"group_0": {"weights": {"num_bits": 4, "group_size": 32}}}});
        assert!(covers(
            &json!({"config_groups": {"*": {"weights": {"num_bits": 4, "group_size": 32}}}}),
            &ct
        ));
        assert!(!covers(
            &json!({"config_groups": {"*": {"weights": {"num_bits": 8}}}}),
            &ct
        ));
        assert!(covers(&json!({"x": 4}), &json!({"x": 4.0})));
        // A KV-cache-only quantization_config says nothing about weights.
        assert!(!states_weight_storage(
            &json!({"quant_method": "compressed-tensors", "kv_cache_scheme": {"num_bits": 8}, "config_groups": {}})
        ));
        assert!(states_weight_storage(&v4));
    }

    #[test]
    fn an_uncovered_or_unused_quantization_config_is_a_located_error() {
        let schemes: BTreeMap<_, _> = [
            scheme("bf16", vec![]),
            scheme(
                "fp8_e8m0_block128",
                vec![json!({"quant_method": "fp8", "scale_fmt": "ue8m0"})],
            ),
        ]
        .into_iter()
        .collect();
        let v4 = json!({"quantization_config": {"quant_method": "fp8", "scale_fmt": "ue8m0"}});
        let ok = quant("bf16", &[("attention", "fp8_e8m0_block128")]);
        assert!(check_config(&schemes, &ok, &v4).is_none());
        // No quantization_config: nothing to cover.
        assert!(check_config(&schemes, &quant("bf16", &[]), &json!({})).is_none());
        assert!(
            check_config(
                &schemes,
                &quant("bf16", &[]),
                &json!({"quantization_config": null})
            )
            .is_none()
        );
        let unused = check_config(&schemes, &quant("bf16", &[]), &v4).expect("an error");
        assert_eq!(unused.code, "L010");
        assert_eq!(unused.location.line, 12);
        assert!(unused.hint.unwrap().contains("fp8_e8m0_block128"));
        let nested =
            json!({"text_config": {"quantization_config": {"quant_method": "awq", "bits": 4}}});
        let none = check_config(&schemes, &ok, &nested).expect("an error");
        assert!(
            none.message
                .contains("`text_config.quantization_config` states")
                && none.message.contains("no storage scheme"),
            "{}",
            none.message
        );
    }
}
