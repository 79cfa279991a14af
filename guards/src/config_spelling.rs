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

    #[test]
    fn glm_4_7_flash_reads_head_dim_as_the_rotated_width() {
        let name = "configuration_glm4_moe_lite.py".to_string();
        let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("../.cache/transformers/5.23.0/models/glm4_moe_lite")
            .join(&name);
        let text = std::fs::read_to_string(&path).unwrap_or_else(|e| {
            panic!(
                "{}: {e} (run scripts/fetch-transformers-src)",
                path.display()
            )
        });
        let sources = BTreeMap::from([(name, text)]);
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
