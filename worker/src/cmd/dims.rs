//! The architecture's dims as `show` and `compare` print them: each bound dim of the spec with
//! its symbol, value and what it is (the dim table's summary), in a fixed order of kinds, and
//! the config facts the dims do not carry (the context limit, the rope base).

use harch_engine::{Analysis, ModelIr};
use serde::Serialize;

/// Kinds in the order people read an architecture; flags (0/1 switches) are left out.
const KINDS: &[&str] = &[
    "layers",
    "hidden",
    "head_count",
    "head_dim",
    "latent",
    "ffn",
    "experts",
    "vocab",
    "window",
    "count",
];

#[derive(Clone, Debug, Serialize)]
pub struct Dim {
    pub symbol: String,
    pub value: i128,
    pub kind: String,
    pub summary: String,
}

/// The spec's bound dims, grouped by kind.
pub fn dims(ir: &ModelIr, a: &Analysis) -> Vec<Dim> {
    let mut out = Vec::new();
    for kind in KINDS {
        for (name, q) in &a.dims {
            let Some(def) = ir.dim_table.get(name) else {
                continue;
            };
            if def.kind == *kind {
                out.push(Dim {
                    symbol: name.clone(),
                    value: q.v,
                    kind: def.kind.clone(),
                    summary: def.summary.clone(),
                });
            }
        }
    }
    out
}

/// Config facts beside the dims: `max_position_embeddings` (the published context limit) and
/// the rope base and scaling, as config.json (or its `text_config`) states them (null when it
/// does not).
pub fn config_facts(config: &serde_json::Value) -> Vec<(&'static str, serde_json::Value)> {
    let text = config.get("text_config").unwrap_or(config);
    let get = |k: &str| text.get(k).or_else(|| config.get(k)).cloned();
    let mut v = Vec::new();
    for (name, key) in [
        ("context_limit", "max_position_embeddings"),
        ("rope_theta", "rope_theta"),
        ("rope_scaling", "rope_scaling"),
    ] {
        // Null when config.json does not say: the JSON keeps one shape for every model.
        v.push((name, get(key).unwrap_or(serde_json::Value::Null)));
    }
    v
}

/// The dims and config facts as `show` prints them, before the totals.
pub fn print(ir: &ModelIr, a: &Analysis, config: &serde_json::Value) {
    outln!("architecture");
    for d in dims(ir, a) {
        outln!(
            "  {:<24} {:>12}   {}",
            d.symbol,
            harch_worker::text::group_digits(d.value),
            d.summary
        );
    }
    for (k, v) in config_facts(config)
        .into_iter()
        .filter(|(_, v)| !v.is_null())
    {
        outln!("  {k:<24} {:>12}   config.json", v.to_string());
    }
    outln!();
}
