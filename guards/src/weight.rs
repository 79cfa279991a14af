//! The weight and packing guards: join the spec's stored tensors and the checkpoint's on one
//! canonical module path, then compare tensor by tensor.
//!
//! One normalizer serves both sides: every index segment of a name (`layers.3`, `experts.{e}`)
//! becomes `#` and its value goes into an index tuple. Spec rows stand for the cartesian product
//! of their index sets; several rows may share a canonical path (heterogeneous stacks) and are
//! aggregated before the comparison. Repeated findings are grouped so that 15,000 identical
//! mismatches read as one line.

use std::collections::{BTreeMap, HashMap};

use harch_engine::Analysis;
use harch_engine::analysis::WeightRow;
use harch_engine::diag::{Location, closest};
use harch_engine::schema::QuantSchemeDef;

use crate::report::{Diagnostic, Summary};
use crate::truth::{TensorInfo, Truth};

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
}

/// Canonical form of a name: index segments become `#`; their values form the tuple.
/// Spec placeholders (`{i}`) take their values from `fill`, in order.
fn canonical(name: &str, fill: Option<&[i128]>) -> Option<(String, Vec<i128>)> {
    let mut pattern = String::with_capacity(name.len());
    let mut tuple = Vec::new();
    let mut next = 0;
    for (k, seg) in name.split('.').enumerate() {
        if k > 0 {
            pattern.push('.');
        }
        if seg.starts_with('{') && seg.ends_with('}') {
            let v = *fill?.get(next)?;
            next += 1;
            tuple.push(v);
            pattern.push('#');
        } else if !seg.is_empty() && seg.bytes().all(|b| b.is_ascii_digit()) && seg.len() < 19 {
            tuple.push(seg.parse().ok()?);
            pattern.push('#');
        } else {
            pattern.push_str(seg);
        }
    }
    Some((pattern, tuple))
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
    harch_engine::analysis::ranges(&v)
}

/// "layers 3-60, experts 0-255" for a set of index tuples.
fn where_(pattern: &str, tuples: &[Vec<i128>]) -> String {
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

#[derive(Clone, Copy)]
struct Claim {
    row: usize,
    stored: usize,
}

#[derive(Default)]
struct Entry {
    spec: HashMap<Vec<i128>, Vec<Claim>>,
    ckpt: HashMap<Vec<i128>, usize>,
}

/// Findings with the same key are reported once, with their index tuples.
#[derive(Clone, PartialEq, Eq, PartialOrd, Ord)]
struct Key {
    guard: &'static str,
    code: &'static str,
    pattern: String,
    row: Option<usize>,
    detail: String,
}

pub struct Outcome {
    pub weight: Vec<Diagnostic>,
    pub packing: Vec<Diagnostic>,
    pub summary: Summary,
}

fn cartesian(indices: &[(String, Vec<i128>)]) -> Vec<Vec<i128>> {
    let mut out: Vec<Vec<i128>> = vec![vec![]];
    for (_, vals) in indices {
        let mut next = Vec::with_capacity(out.len() * vals.len());
        for t in &out {
            for v in vals {
                let mut t2 = Vec::with_capacity(t.len() + 1);
                t2.extend_from_slice(t);
                t2.push(*v);
                next.push(t2);
            }
        }
        out = next;
    }
    out
}

pub fn check(
    a: &Analysis,
    truth: &Truth,
    schemes: &BTreeMap<String, QuantSchemeDef>,
    overrides: &[(String, Location)],
) -> Outcome {
    let mut entries: HashMap<String, Entry> = HashMap::new();
    let rows: &[WeightRow] = &a.weights;
    for (r, row) in rows.iter().enumerate() {
        let tuples = cartesian(&row.indices);
        for (s, st) in row.stored.iter().enumerate() {
            for t in &tuples {
                if let Some((pattern, tuple)) = canonical(&st.name, Some(t)) {
                    entries
                        .entry(pattern)
                        .or_default()
                        .spec
                        .entry(tuple)
                        .or_default()
                        .push(Claim { row: r, stored: s });
                }
            }
        }
    }
    let tensors: &[TensorInfo] = &truth.inventory.tensors;
    for (k, t) in tensors.iter().enumerate() {
        if let Some((pattern, tuple)) = canonical(&t.name, None) {
            entries.entry(pattern).or_default().ckpt.insert(tuple, k);
        }
    }

    let mut found: BTreeMap<Key, Vec<Vec<i128>>> = BTreeMap::new();
    let mut matched = 0usize;
    let spec_patterns: Vec<String> = entries
        .iter()
        .filter(|(_, e)| !e.spec.is_empty())
        .map(|(p, _)| p.clone())
        .collect();
    for (pattern, e) in &entries {
        for (tuple, claims) in &e.spec {
            let c = claims[0];
            let row = &rows[c.row];
            let st = &row.stored[c.stored];
            if claims.len() > 1 {
                let others: Vec<String> = claims
                    .iter()
                    .map(|c| a.nodes[rows[c.row].node].id.clone())
                    .collect();
                found
                    .entry(Key {
                        guard: "weight",
                        code: code::CLAIMED_TWICE,
                        pattern: pattern.clone(),
                        row: Some(c.row),
                        detail: format!(
                            "is claimed by {} spec leaves ({})",
                            claims.len(),
                            others.join(", ")
                        ),
                    })
                    .or_default()
                    .push(tuple.clone());
            }
            let Some(&k) = e.ckpt.get(tuple) else {
                found
                    .entry(Key {
                        guard: "weight",
                        code: code::MISSING,
                        pattern: pattern.clone(),
                        row: Some(c.row),
                        detail: String::new(),
                    })
                    .or_default()
                    .push(tuple.clone());
                continue;
            };
            matched += 1;
            let t = &tensors[k];
            let want: Vec<i128> = st.shape.iter().map(|q| q.v).collect();
            let got: Vec<i128> = t.shape.iter().map(|d| *d as i128).collect();
            let packed = schemes.get(&row.format).is_some_and(is_packed);
            let guard = if packed { "packing" } else { "weight" };
            let want_n: i128 = want.iter().product();
            let got_n: i128 = got.iter().product();
            if want_n != got_n {
                let c = if packed {
                    code::PACKED_ELEMENTS
                } else {
                    code::ELEMENTS
                };
                found
                    .entry(Key {
                        guard,
                        code: c,
                        pattern: pattern.clone(),
                        row: Some(c_row(c, claims)),
                        detail: format!(
                            "expected {} ({} elements) got {} ({} elements)",
                            shape_str(&want),
                            want_n,
                            shape_str(&got),
                            got_n
                        ),
                    })
                    .or_default()
                    .push(tuple.clone());
            } else if want != got {
                let c = if packed {
                    code::PACKED_ELEMENTS
                } else {
                    code::LAYOUT
                };
                found.entry(Key { guard, code: c, pattern: pattern.clone(), row: Some(c_row(c, claims)), detail: format!("expected {} got {} (same element count: transposed or split differently?)", shape_str(&want), shape_str(&got)) }).or_default().push(tuple.clone());
            }
            if st.dtype != t.dtype.as_str() {
                let c = if packed {
                    code::PACKED_DTYPE
                } else {
                    code::DTYPE
                };
                found
                    .entry(Key {
                        guard,
                        code: c,
                        pattern: pattern.clone(),
                        row: Some(claims[0].row),
                        detail: format!(
                            "stored as {} in the spec ({} format) but {} in the checkpoint",
                            st.dtype, row.format, t.dtype
                        ),
                    })
                    .or_default()
                    .push(tuple.clone());
            }
        }
        for (tuple, _) in e.ckpt.iter().filter(|(t, _)| !e.spec.contains_key(*t)) {
            found
                .entry(Key {
                    guard: "weight",
                    code: code::UNCLAIMED,
                    pattern: pattern.clone(),
                    row: None,
                    detail: String::new(),
                })
                .or_default()
                .push(tuple.clone());
        }
    }

    let mut weight = Vec::new();
    let mut packing = Vec::new();
    for (key, tuples) in found {
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
                let dtype_shape = entries.get(&key.pattern).and_then(|e| e.ckpt.get(ex)).map(|&k| format!(" {} {}", tensors[k].dtype, shape_str(&tensors[k].shape.iter().map(|d| *d as i128).collect::<Vec<_>>()))).unwrap_or_default();
                let mut d = Diagnostic::new("weight", key.code, format!("{at}checkpoint tensor `{name}`{dtype_shape} is claimed by no spec leaf{count}{example}"), loc);
                d.hint = Some(match closest(&key.pattern, spec_patterns.iter().map(String::as_str)) {
                    Some(c) => format!("the closest spec tensor is `{}`; add the module that owns this tensor or fix its path", display(c)),
                    None => "add the module that owns this tensor (path, leaves) to the spec".into(),
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

    let checkpoint_bytes: i128 = truth.inventory.total_bytes() as i128;
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

fn c_row(_code: &str, claims: &[Claim]) -> usize {
    claims[0].row
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
        let t: Vec<Vec<i128>> = (3..61)
            .flat_map(|l| (0..256).map(move |e| vec![l, e]))
            .collect();
        assert_eq!(
            where_("model.layers.#.mlp.experts.#.w", &t),
            "layers 3-60, experts 0-255: "
        );
    }
}
