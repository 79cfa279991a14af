//! The weight and packing guards: join the spec's stored tensors and the checkpoint's on one
//! canonical module path, then compare tensor by tensor.
//!
//! One normalizer serves both sides: every index segment of a name (`layers.3`, `experts.{e}`)
//! becomes `#` and its value goes into an index tuple. Spec rows stand for the cartesian product
//! of their index sets; several rows may share a canonical path (heterogeneous stacks) and are
//! aggregated before the comparison. Repeated findings are grouped so that 15,000 identical
//! mismatches read as one line.

use std::collections::BTreeMap;

use harch_engine::Analysis;
use harch_engine::analysis::WeightRow;
use harch_engine::diag::{Location, closest};
use harch_engine::schema::QuantSchemeDef;
use rustc_hash::FxHashMap;
use smallvec::SmallVec;

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
    let tensors = &truth.inventory.tensors;
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

/// Index values of one name, in segment order. Four inline slots cover every layout we know
/// (layer, expert, MTP layer, sub-block) without a heap allocation per tensor.
type Tuple = SmallVec<[i128; 4]>;

/// Where each `#` of a canonical pattern takes its value from: an index written in the name, or
/// (spec side) the row's k-th placeholder.
#[derive(Clone, Copy)]
enum Slot {
    Fixed(i128),
    Placeholder(usize),
}

/// The one normalizer for both sides of the join: writes the canonical form of `name` into
/// `pattern` (index segments become `#`) and hands each `#`'s slot to `slot`, in order. With
/// `placeholders` (spec names), `{i}` segments are placeholders; otherwise they are plain names.
fn normalize(name: &str, placeholders: bool, pattern: &mut String, mut slot: impl FnMut(Slot)) {
    pattern.clear();
    let mut next = 0;
    for (k, seg) in name.split('.').enumerate() {
        if k > 0 {
            pattern.push('.');
        }
        if placeholders && seg.starts_with('{') && seg.ends_with('}') {
            slot(Slot::Placeholder(next));
            next += 1;
            pattern.push('#');
        } else if let Some(v) = index_value(seg) {
            slot(Slot::Fixed(v));
            pattern.push('#');
        } else {
            pattern.push_str(seg);
        }
    }
}

/// A segment that is an index (`3`; not `03`, `3x` or a 19-digit run, which stay names, so
/// that no two names share a canonical form).
fn index_value(seg: &str) -> Option<i128> {
    let digits = !seg.is_empty() && seg.bytes().all(|b| b.is_ascii_digit());
    if !digits || seg.len() >= 19 || (seg.len() > 1 && seg.starts_with('0')) {
        return None;
    }
    seg.parse().ok()
}

/// A spec name's pattern and slots, built once per stored tensor of a row, so a row that stands
/// for 15,000 tensors costs one pattern, not 15,000.
fn template(name: &str) -> (String, Vec<Slot>) {
    let (mut pattern, mut slots) = (String::with_capacity(name.len()), Vec::new());
    normalize(name, true, &mut pattern, |s| slots.push(s));
    (pattern, slots)
}

/// The index tuple of `slots` with placeholders taken from `combo`; false when `combo` has
/// too few values.
fn fill(slots: &[Slot], combo: &[i128], tuple: &mut Tuple) -> bool {
    tuple.clear();
    for slot in slots {
        match *slot {
            Slot::Fixed(v) => tuple.push(v),
            Slot::Placeholder(k) => match combo.get(k) {
                Some(&v) => tuple.push(v),
                None => return false,
            },
        }
    }
    true
}

#[cfg(test)]
fn canonical(name: &str, fill_with: Option<&[i128]>) -> Option<(String, Vec<i128>)> {
    let (mut pattern, mut slots, mut tuple) = (String::new(), Vec::new(), Tuple::new());
    normalize(name, fill_with.is_some(), &mut pattern, |s| slots.push(s));
    fill(&slots, fill_with.unwrap_or_default(), &mut tuple).then(|| (pattern, tuple.to_vec()))
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

#[derive(Clone, Copy)]
struct Claim {
    row: usize,
    stored: usize,
}

/// One side's item: canonical pattern id, index tuple, and what it is on that side.
type Item<T> = (u32, Tuple, T);

/// The join, as two lists sorted by (pattern, tuple) and walked in step: sorting small tuples
/// is cheaper than hashing them, and equal keys end up adjacent (a tensor claimed twice).
#[derive(Default)]
struct Join {
    patterns: Vec<String>,
    ids: FxHashMap<String, u32>,
    spec: Vec<Item<Claim>>,
    ckpt: Vec<Item<usize>>,
}

impl Join {
    /// The id of `pattern`, allocating the pattern only the first time it is seen.
    fn id(&mut self, pattern: &str) -> u32 {
        if let Some(&id) = self.ids.get(pattern) {
            return id;
        }
        let id = self.patterns.len() as u32;
        self.patterns.push(pattern.to_string());
        self.ids.insert(pattern.to_string(), id);
        id
    }

    fn build(rows: &[WeightRow], tensors: &[TensorInfo]) -> Join {
        let mut join = Join::default();
        let mut tuple = Tuple::new();
        for (r, row) in rows.iter().enumerate() {
            let combos = cartesian(&row.indices);
            for (s, st) in row.stored.iter().enumerate() {
                let (pattern, slots) = template(&st.name);
                let id = join.id(&pattern);
                join.spec.reserve(combos.len());
                for combo in &combos {
                    if fill(&slots, combo, &mut tuple) {
                        join.spec
                            .push((id, tuple.clone(), Claim { row: r, stored: s }));
                    }
                }
            }
        }
        let mut pattern = String::new();
        join.ckpt.reserve(tensors.len());
        for (k, t) in tensors.iter().enumerate() {
            tuple.clear();
            normalize(&t.name, false, &mut pattern, |slot| {
                if let Slot::Fixed(v) = slot {
                    tuple.push(v);
                }
            });
            let id = join.id(&pattern);
            join.ckpt.push((id, tuple.clone(), k));
        }
        // Stable for the spec side: claims of one tensor stay in row order.
        join.spec.sort_by(|a, b| (a.0, &a.1).cmp(&(b.0, &b.1)));
        join.ckpt
            .sort_unstable_by(|a, b| (a.0, &a.1).cmp(&(b.0, &b.1)));
        join
    }

    /// The checkpoint tensor at `pattern` and `tuple`.
    fn tensor(&self, pattern: &str, tuple: &[i128]) -> Option<usize> {
        let id = *self.ids.get(pattern)?;
        let i = self
            .ckpt
            .binary_search_by(|c| (c.0, c.1.as_slice()).cmp(&(id, tuple)))
            .ok()?;
        Some(self.ckpt[i].2)
    }
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

fn cartesian(indices: &[(String, Vec<i128>)]) -> Vec<Tuple> {
    let mut out: Vec<Tuple> = vec![Tuple::new()];
    for (_, vals) in indices {
        let mut next = Vec::with_capacity(out.len() * vals.len());
        for t in &out {
            for v in vals {
                let mut t2 = t.clone();
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
    if let Some(out) = too_many(a, truth) {
        return out;
    }
    let rows: &[WeightRow] = &a.weights;
    let tensors: &[TensorInfo] = &truth.inventory.tensors;
    let join = Join::build(rows, tensors);
    let packed: Vec<bool> = rows
        .iter()
        .map(|row| schemes.get(&row.format).is_some_and(is_packed))
        .collect();
    let mut found: BTreeMap<Key, Vec<Tuple>> = BTreeMap::new();
    let mut note = |guard, code, pattern: &str, row, detail, tuple: &Tuple| {
        found
            .entry(Key {
                guard,
                code,
                pattern: pattern.to_string(),
                row,
                detail,
            })
            .or_default()
            .push(tuple.clone());
    };
    let mut matched = 0usize;
    let (spec, ckpt) = (&join.spec, &join.ckpt);
    let (mut i, mut j) = (0, 0);
    while i < spec.len() || j < ckpt.len() {
        let spec_key = spec.get(i).map(|s| (s.0, &s.1));
        let ckpt_key = ckpt.get(j).map(|c| (c.0, &c.1));
        let order = match (spec_key, ckpt_key) {
            (Some(s), Some(c)) => s.cmp(&c),
            (Some(_), None) => std::cmp::Ordering::Less,
            _ => std::cmp::Ordering::Greater,
        };
        if order == std::cmp::Ordering::Greater {
            let (id, tuple, _) = &ckpt[j];
            let pattern = &join.patterns[*id as usize];
            note(
                "weight",
                code::UNCLAIMED,
                pattern,
                None,
                String::new(),
                tuple,
            );
            j += 1;
            continue;
        }
        // Every spec leaf that claims this tensor.
        let (id, tuple, c) = &spec[i];
        let end = i + spec[i..]
            .iter()
            .take_while(|s| s.0 == *id && s.1 == *tuple)
            .count();
        let claims = &spec[i..end];
        i = end;
        let pattern = &join.patterns[*id as usize];
        let row = &rows[c.row];
        let st = &row.stored[c.stored];
        if claims.len() > 1 {
            let others: Vec<&str> = claims
                .iter()
                .map(|(_, _, c)| a.nodes[rows[c.row].node].id.as_str())
                .collect();
            let detail = format!(
                "is claimed by {} spec leaves ({})",
                claims.len(),
                others.join(", ")
            );
            note(
                "weight",
                code::CLAIMED_TWICE,
                pattern,
                Some(c.row),
                detail,
                tuple,
            );
        }
        if order == std::cmp::Ordering::Less {
            note(
                "weight",
                code::MISSING,
                pattern,
                Some(c.row),
                String::new(),
                tuple,
            );
            continue;
        }
        let t = &tensors[ckpt[j].2];
        j += 1;
        matched += 1;
        let packed = packed[c.row];
        let guard = if packed { "packing" } else { "weight" };
        let same_shape = st.shape.len() == t.shape.len()
            && st
                .shape
                .iter()
                .zip(&t.shape)
                .all(|(q, &d)| q.v == d as i128);
        if !same_shape {
            let want: Vec<i128> = st.shape.iter().map(|q| q.v).collect();
            let got: Vec<i128> = t.shape.iter().map(|&d| d as i128).collect();
            let want_n: i128 = want.iter().product();
            let got_n: i128 = got.iter().product();
            let (code, detail) = if want_n != got_n {
                let code = if packed {
                    code::PACKED_ELEMENTS
                } else {
                    code::ELEMENTS
                };
                let detail = format!(
                    "spec {} ({want_n} elements), checkpoint {} ({got_n} elements)",
                    shape_str(&want),
                    shape_str(&got),
                );
                (code, detail)
            } else {
                let code = if packed {
                    code::PACKED_ELEMENTS
                } else {
                    code::LAYOUT
                };
                let detail = format!(
                    "spec {}, checkpoint {} (same element count: transposed or split differently?)",
                    shape_str(&want),
                    shape_str(&got)
                );
                (code, detail)
            };
            note(guard, code, pattern, Some(c.row), detail, tuple);
        }
        if st.dtype != t.dtype.as_str() {
            let code = if packed {
                code::PACKED_DTYPE
            } else {
                code::DTYPE
            };
            let detail = format!(
                "stored as {} in the spec ({} format) but {} in the checkpoint",
                st.dtype, row.format, t.dtype
            );
            note(guard, code, pattern, Some(c.row), detail, tuple);
        }
    }
    let mut has_spec = vec![false; join.patterns.len()];
    for (id, _, _) in spec {
        has_spec[*id as usize] = true;
    }
    let spec_patterns: Vec<&str> = join
        .patterns
        .iter()
        .zip(has_spec)
        .filter(|(_, has)| *has)
        .map(|(p, _)| p.as_str())
        .collect();

    let mut weight = Vec::new();
    let mut packing = Vec::new();
    let buffers = crate::source::registered_buffers(truth.sources.values());
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
                let dtype_shape = join.tensor(&key.pattern, ex).map(|k| format!(" {} {}", tensors[k].dtype, shape_str(&tensors[k].shape.iter().map(|d| *d as i128).collect::<Vec<_>>()))).unwrap_or_default();
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
        let t: Vec<Tuple> = (3..61)
            .flat_map(|l| (0..256).map(move |e| Tuple::from_slice(&[l, e])))
            .collect();
        assert_eq!(
            where_("model.layers.#.mlp.experts.#.w", &t),
            "layers 3-60, experts 0-255: "
        );
    }
}
