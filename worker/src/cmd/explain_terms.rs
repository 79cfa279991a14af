//! `explain` of a cache total (`kv_bytes_per_token`, `kv_window_bytes_per_token`,
//! `state_bytes_per_sequence`) as people read it: one labelled term per cache entry (which
//! cache of which layer group, its dtype, its layers), folded by layer group unless `--full`,
//! and every atom of every term in `where` with its value.

use std::process::ExitCode;

use harch_engine::Analysis;
use harch_engine::analysis::CacheRow;
use harch_engine::ir::Growth;

struct Term {
    group: String,
    label: String,
    formula: String,
    value: i128,
}

fn growth_of(quantity: &str) -> Option<Growth> {
    Some(match quantity {
        "kv_bytes_per_token" => Growth::PerToken,
        "kv_window_bytes_per_token" => Growth::Window,
        "state_bytes_per_sequence" => Growth::Constant,
        _ => return None,
    })
}

fn term(a: &Analysis, c: &CacheRow, r#where: &mut Vec<(String, i128)>) -> Term {
    // Per token, or for a compressor's cache per token over its ratio (one entry per r tokens).
    let q = a.cache_row_token_bytes(c);
    let mut note = |name: &str, v: Option<i128>| {
        if let Some(v) = v
            && !r#where.iter().any(|(n, _)| n == name)
        {
            r#where.push((name.to_string(), v));
        }
    };
    // An atom's value: a dim's, or the whole of the factor it stands for (`layers(full)` is
    // the count, `state(layers[linear_moe].attention.core)` the elements, named by its row).
    for (factor, atoms) in [
        (&c.elements, c.elements.term_atoms()),
        (&c.count, c.count.term_atoms()),
    ] {
        let single = atoms.len() == 1 && atoms[0].len() == 1;
        for atom in atoms.iter().flatten() {
            let v = a
                .dims
                .get(&**atom)
                .map(|d| d.v)
                .or(single.then_some(factor.v));
            note(atom, v);
        }
    }
    let group = a
        .group_of(c.node)
        .map(|g| format!("{}[{}]", g.stack, g.block))
        .unwrap_or_else(|| "top level".into());
    let node = &a.nodes[c.node].id;
    Term {
        group,
        label: format!("{node} ({}, {})", c.kind, c.dtype),
        formula: q.formula(),
        value: q.v,
    }
}

/// Answers `explain <spec> <cache total>`, or `None` for any other quantity.
pub fn explain(
    a: &Analysis,
    quantity: &str,
    full: bool,
    json: bool,
) -> anyhow::Result<Option<ExitCode>> {
    let Some(growth) = growth_of(quantity) else {
        return Ok(None);
    };
    let mut r#where = Vec::new();
    let terms: Vec<Term> = a
        .caches
        .iter()
        .filter(|c| c.growth == growth && a.is_main_row(c.node))
        .map(|c| term(a, c, &mut r#where))
        .collect();
    let total: i128 = terms.iter().map(|t| t.value).sum();
    let whole = match quantity {
        "kv_bytes_per_token" => a.kv_bytes_per_token(),
        "kv_window_bytes_per_token" => a.kv_window_bytes_per_token(),
        _ => a.state_bytes_per_sequence(),
    };
    // The terms are the engine's sum taken apart: if they ever disagree, say the plain formula.
    if total != whole.v {
        return Ok(None);
    }
    // Groups in first-seen order, each with its terms.
    let mut groups: Vec<(String, Vec<&Term>)> = Vec::new();
    for t in &terms {
        match groups.iter_mut().find(|(g, _)| *g == t.group) {
            Some((_, ts)) => ts.push(t),
            None => groups.push((t.group.clone(), vec![t])),
        }
    }
    if json {
        let js: Vec<serde_json::Value> = terms
            .iter()
            .map(|t| {
                serde_json::json!({
                    "group": t.group, "term": t.label, "formula": t.formula, "value": t.value,
                })
            })
            .collect();
        crate::cli::out::print_json(&serde_json::json!({
            "quantity": quantity,
            "formula": whole.formula(),
            "value": whole.v,
            "terms": js,
            "groups": groups.iter().map(|(g, ts)| serde_json::json!({
                "group": g, "entries": ts.len(), "value": ts.iter().map(|t| t.value).sum::<i128>(),
            })).collect::<Vec<_>>(),
            "where": r#where.iter().map(|(n, v)| (n.clone(), serde_json::json!(v))).collect::<serde_json::Map<String, serde_json::Value>>(),
            "bound": serde_json::Value::Null,
        }))?;
        return Ok(Some(ExitCode::SUCCESS));
    }
    let digits = harch_worker::text::group_digits;
    outln!("{quantity} = Σ cache entries, by layer group");
    outln!("  = {}", digits(whole.v));
    if terms.is_empty() {
        outln!("  (no cache grows this way in this model)");
    }
    for (g, ts) in &groups {
        let sum: i128 = ts.iter().map(|t| t.value).sum();
        outln!(
            "{g}: {}  ({} entr{})",
            digits(sum),
            ts.len(),
            if ts.len() == 1 { "y" } else { "ies" }
        );
        if full || ts.len() <= 4 {
            for t in ts {
                outln!("  {}: {} = {}", t.label, t.formula, digits(t.value));
            }
        } else {
            outln!("  … {} entries (--full lists each)", ts.len());
        }
    }
    if full {
        outln!("whole expression: {}", whole.formula());
    }
    if !r#where.is_empty() {
        outln!("where");
        for (n, v) in &r#where {
            outln!("  {n} = {}", digits(*v));
        }
    }
    Ok(Some(ExitCode::SUCCESS))
}
