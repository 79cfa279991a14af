//! The weight and packing guards: join the spec's stored tensors and the checkpoint's on one
//! canonical module path, then compare tensor by tensor.
//!
//! The join itself is `join.rs`; spec rows stand for the cartesian product of their index
//! sets, and several rows may share a canonical path (heterogeneous stacks). Repeated findings
//! are grouped so that 15,000 identical mismatches read as one line.

use std::collections::BTreeMap;

use harch_engine::Analysis;
use harch_engine::analysis::WeightRow;
use harch_engine::diag::{Location, closest};
use harch_engine::schema::QuantSchemeDef;

use crate::report::{Diagnostic, Summary};
use crate::truth::{Inventory, Truth};

mod join;
use join::{Findings, Join, Probed, Tuple, probe};

pub mod code {
    pub const UNCLAIMED: &str = "W001";
    pub const MISSING: &str = "W002";
    pub const ELEMENTS: &str = "W003";
    pub const LAYOUT: &str = "W004";
    pub const DTYPE: &str = "W005";
    pub const TOTAL_BYTES: &str = "W006";
    pub const CLAIMED_TWICE: &str = "W007";
    pub const PACKED_DTYPE: &str = "P001";
    pub const PACKED_ELEMENTS: &str = "P002";
    pub const OVERRIDE_UNUSED: &str = "P003";
    pub const TOO_MANY: &str = "W008";
}

/// How many more tensors than the checkpoint holds the spec may stand for before the join is
/// not built: each costs one entry, so memory stays bounded by the checkpoint plus this.
const SPEC_SURPLUS: u128 = 1_000_000;

/// The number of stored tensors a row stands for (its index sets' product, per stored tensor).
fn row_tensors(row: &WeightRow) -> u128 {
    row.indices
        .iter()
        .fold(row.stored.len() as u128, |n, (_, v)| {
            n.saturating_mul(v.len() as u128)
        })
}

/// W008: the spec stands for so many more tensors than the checkpoint holds that comparing them
/// one by one would only list missing ones; say how many, and which rows multiply.
fn too_many(a: &Analysis, truth: &Truth) -> Option<Outcome> {
    let rows = &a.weights;
    let tensors = &truth.inventory;
    let spec: u128 = rows.iter().map(row_tensors).fold(0, u128::saturating_add);
    if spec <= tensors.len() as u128 + SPEC_SURPLUS {
        return None;
    }
    let widest = rows.iter().max_by_key(|r| row_tensors(r))?;
    let sets: Vec<String> = widest
        .indices
        .iter()
        .map(|(name, v)| {
            format!(
                "{name} in {} ({} values)",
                crate::report::index_ranges(v),
                v.len()
            )
        })
        .collect();
    let d = Diagnostic::new(
        "weight",
        code::TOO_MANY,
        format!(
            "the spec stands for {spec} stored tensors but the checkpoint holds {}; e.g. `{}` alone stands for {} ({})",
            tensors.len(),
            widest.name,
            row_tensors(widest),
            sets.join(", ")
        ),
        a.nodes[widest.node].loc.clone(),
    )
    .hint("a layer or expert count far above the checkpoint's: check the stack's `repeat` and `instances.count` and the config keys they read");
    Some(Outcome {
        weight: vec![d],
        packing: Vec::new(),
        summary: Summary {
            checkpoint_bytes: truth.inventory.total_bytes() as i128,
            checkpoint_tensors: tensors.len(),
            ..Default::default()
        },
    })
}

/// Label for each `#` of a pattern: the segment before it (`layers`, `experts`).
fn labels(pattern: &str) -> Vec<String> {
    let segs: Vec<&str> = pattern.split('.').collect();
    segs.iter()
        .enumerate()
        .filter(|(_, s)| **s == "#")
        .map(|(k, _)| {
            if k > 0 {
                segs[k - 1].to_string()
            } else {
                "index".to_string()
            }
        })
        .collect()
}

fn display(pattern: &str) -> String {
    let labels = labels(pattern);
    let mut n = 0;
    pattern
        .split('.')
        .map(|s| {
            if s == "#" {
                let l = labels.get(n).cloned().unwrap_or_default();
                n += 1;
                let short = match l.as_str() {
                    "layers" => "i".to_string(),
                    "experts" => "e".to_string(),
                    other => other
                        .chars()
                        .next()
                        .map(|c| c.to_string())
                        .unwrap_or_else(|| "n".into()),
                };
                format!("{{{short}}}")
            } else {
                s.to_string()
            }
        })
        .collect::<Vec<_>>()
        .join(".")
}

fn ranges(mut v: Vec<i128>) -> String {
    v.sort_unstable();
    v.dedup();
    crate::report::index_ranges(&v)
}

/// "layers 3-60, experts 0-255" for a set of index tuples.
fn where_(pattern: &str, tuples: &[Tuple]) -> String {
    let labels = labels(pattern);
    if labels.is_empty() {
        return String::new();
    }
    let mut parts = Vec::new();
    let mut product = 1usize;
    for (k, l) in labels.iter().enumerate() {
        let vals: Vec<i128> = tuples.iter().filter_map(|t| t.get(k).copied()).collect();
        let mut uniq = vals.clone();
        uniq.sort_unstable();
        uniq.dedup();
        product = product.saturating_mul(uniq.len());
        parts.push(format!("{l} {}", ranges(vals)));
    }
    let mut s = parts.join(", ");
    if product != tuples.len() {
        s.push_str(&format!(" (only {} of these combinations)", tuples.len()));
    }
    s.push_str(": ");
    s
}

fn shape_str(s: &[i128]) -> String {
    format!(
        "[{}]",
        s.iter()
            .map(|d| d.to_string())
            .collect::<Vec<_>>()
            .join(", ")
    )
}

fn is_packed(s: &QuantSchemeDef) -> bool {
    s.stored.len() > 1 || s.stored.iter().any(|t| t.shape.is_some() || t.scale)
}

pub struct Outcome {
    pub weight: Vec<Diagnostic>,
    pub packing: Vec<Diagnostic>,
    pub summary: Summary,
}

pub fn check(
    a: &Analysis,
    truth: &Truth,
    schemes: &BTreeMap<String, QuantSchemeDef>,
    overrides: &[(String, Location)],
) -> Outcome {
    if let Some(out) = too_many(a, truth) {
        return out;
    }
    let rows: &[WeightRow] = &a.weights;
    let tensors: &Inventory = &truth.inventory;
    let packed: Vec<bool> = rows
        .iter()
        .map(|row| schemes.get(&row.format).is_some_and(is_packed))
        .collect();
    let owners: Vec<&str> = rows.iter().map(|r| a.nodes[r.node].id.as_str()).collect();
    let join = Join::build(rows, &packed);
    let Probed {
        found,
        matched,
        bytes,
        ..
    } = probe(&join, &owners, tensors);
    let spec_patterns = join.spec_patterns();

    let mut weight = Vec::new();
    let mut packing = Vec::new();
    let buffers = crate::source::registered_buffers(truth.sources.values());
    let Findings { found, unclaimed } = found;
    for (key, mut tuples) in found {
        // Hash order is arbitrary: sort so the example and the report are the same every run.
        tuples.sort_unstable();
        let loc = key
            .row
            .map(|r| a.nodes[rows[r].node].loc.clone())
            .unwrap_or_default();
        let name = display(&key.pattern);
        let at = where_(&key.pattern, &tuples);
        let n = tuples.len();
        let count = if n > 1 {
            format!(" ({n} tensors)")
        } else {
            String::new()
        };
        let ex = &tuples[0];
        let example = if key.pattern.contains('#') {
            format!("; e.g. `{}`", concrete(&key.pattern, ex))
        } else {
            String::new()
        };
        let d = match key.code {
            code::UNCLAIMED => {
                let dtype_shape = unclaimed.get(&(key.pattern.clone(), ex.clone())).and_then(|&k| tensors.get(k)).map(|t| format!(" {} {}", t.dtype, shape_str(&t.shape.iter().map(|d| *d as i128).collect::<Vec<_>>()))).unwrap_or_default();
                let mut d = Diagnostic::new("weight", key.code, format!("{at}checkpoint tensor `{name}`{dtype_shape} is claimed by no spec leaf{count}{example}"), loc);
                let last = key.pattern.rsplit('.').next().unwrap_or("");
                d.hint = Some(if buffers.contains(last) || last == "inv_freq" {
                    // A buffer has no owning module to add: adding an op would invent parameters.
                    format!("`{last}` looks like a buffer (the forward source registers it with `register_buffer`, or it is a rotary `inv_freq`): declare it `{{ op: buffer, shape: [...], src: '`register_buffer(\"{last}\"`' }}` at its path; a buffer is stored, never a parameter")
                } else {
                    match closest(&key.pattern, spec_patterns.iter().copied()) {
                        Some(c) => format!("the closest spec tensor is `{}`; add the module that owns this tensor or fix its path", display(c)),
                        None => "add the module that owns this tensor (path, leaves) to the spec".into(),
                    }
                });
                d
            }
            code::MISSING => Diagnostic::new("weight", key.code, format!("{at}spec tensor `{name}` is not in the checkpoint{count}{example}"), loc)
                .hint("the spec declares a weight the checkpoint does not have: check the node's `path`, `leaves`, `when:` or the layer schedule"),
            code::CLAIMED_TWICE => Diagnostic::new("weight", key.code, format!("{at}`{name}` {}{count}", key.detail), loc).hint("each checkpoint tensor belongs to exactly one spec leaf"),
            c => {
                let d = Diagnostic::new(key.guard, c, format!("{at}`{name}` {}{count}", key.detail), loc);
                match c {
                    code::PACKED_DTYPE | code::PACKED_ELEMENTS => d.hint("the quant scheme in specs/quant/ decides stored dtypes and shapes: check the leaf's format in `quant_context` (per_role, overrides)"),
                    code::DTYPE => d.hint("set the storage format of this leaf in `quant_context` (default, per_role or an override)"),
                    _ => d.hint("the op's args decide the weight shape (linear: [out, in]); check `in`/`out` and the dims they use"),
                }
            }
        };
        if key.guard == "packing" {
            packing.push(d);
        } else {
            weight.push(d);
        }
    }

    let checkpoint_bytes = bytes as i128;
    let spec_bytes = a.weight_bytes().v;
    let summary = Summary {
        checkpoint_bytes,
        spec_bytes,
        byte_diff: spec_bytes - checkpoint_bytes,
        checkpoint_tensors: tensors.len(),
        matched_tensors: matched,
    };
    if summary.byte_diff != 0 {
        weight.push(
            Diagnostic::new(
                "weight",
                code::TOTAL_BYTES,
                format!(
                    "the spec stores {} bytes but the checkpoint holds {} (diff {:+})",
                    spec_bytes, checkpoint_bytes, summary.byte_diff
                ),
                Location::default(),
            )
            .hint("total bytes are the final checksum: fix the per-tensor errors above"),
        );
    }
    for (i, (leaf, loc)) in overrides.iter().enumerate() {
        if !a.override_hits.contains(&i) {
            packing.push(Diagnostic::new("packing", code::OVERRIDE_UNUSED, format!("quant override `{leaf}` matches no weight leaf"), loc.clone()).hint("an override names leaves by glob over checkpoint names, e.g. `*.mlp.gate.e_score_correction_bias`"));
        }
    }
    Outcome {
        weight,
        packing,
        summary,
    }
}

fn concrete(pattern: &str, tuple: &[i128]) -> String {
    let mut n = 0;
    pattern
        .split('.')
        .map(|s| {
            if s == "#" {
                let v = tuple.get(n).copied().unwrap_or_default();
                n += 1;
                v.to_string()
            } else {
                s.to_string()
            }
        })
        .collect::<Vec<_>>()
        .join(".")
}

#[cfg(test)]
mod tests {
    use super::join::canonical;
    use super::*;

    #[test]
    fn one_normalizer_for_both_sides() {
        let ck = canonical("model.layers.3.mlp.experts.17.down_proj.weight", None).unwrap();
        let sp = canonical(
            "model.layers.{i}.mlp.experts.{e}.down_proj.weight",
            Some(&[3, 17]),
        )
        .unwrap();
        assert_eq!(ck, sp);
        assert_eq!(
            display(&ck.0),
            "model.layers.{i}.mlp.experts.{e}.down_proj.weight"
        );
    }

    #[test]
    fn grouped_where() {
        let t: Vec<Tuple> = (3..61)
            .flat_map(|l| (0..256).map(move |e| Tuple::from_slice(&[l, e])))
            .collect();
        assert_eq!(
            where_("model.layers.#.mlp.experts.#.w", &t),
            "layers 3-60, experts 0-255: "
        );
    }
}
