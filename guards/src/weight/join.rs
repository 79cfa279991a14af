//! The join of the spec's stored tensors with the checkpoint's, on one canonical path.
//!
//! One normalizer serves both sides: every index segment of a name (`layers.3`, `experts.{e}`)
//! becomes `#` and its value goes into an index tuple. Each stored tensor of each spec row is a
//! [`Template`]: its pattern and the row's index sets as membership tests, standing for their
//! cartesian product without listing it. Each checkpoint tensor is probed against the templates
//! of its pattern; only a template that claims fewer tensors than it stands for is listed, to
//! name the missing ones.

use std::collections::{BTreeMap, BTreeSet};

use harch_engine::analysis::WeightRow;
use rustc_hash::{FxHashMap, FxHashSet};
use smallvec::SmallVec;

use super::{code, shape_str};
use crate::truth::{Inventory, Tensor};

/// Index values of one name, in segment order. Four inline slots cover every layout we know
/// (layer, expert, MTP layer, sub-block) without a heap allocation per tensor.
pub(super) type Tuple = SmallVec<[i128; 4]>;

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
    // One pass over the bytes (this runs for each of a checkpoint's 92k names, ~50 bytes each:
    // too short for a vectorized search to pay for its calls), copying the text between index
    // segments in one piece each.
    let bytes = name.as_bytes();
    let (mut start, mut copied) = (0, 0);
    for end in (0..=bytes.len()).filter(|&i| i == bytes.len() || bytes[i] == b'.') {
        let seg = &name[start..end];
        let found = if placeholders && seg.starts_with('{') && seg.ends_with('}') {
            next += 1;
            Some(Slot::Placeholder(next - 1))
        } else {
            index_value(seg).map(Slot::Fixed)
        };
        if let Some(found) = found {
            pattern.push_str(&name[copied..start]);
            pattern.push('#');
            copied = end;
            slot(found);
        }
        start = end + 1;
    }
    pattern.push_str(&name[copied..]);
}

/// A segment that is an index (`3`; not `03`, `3x` or a 19-digit run, which stay names, so
/// that no two names share a canonical form).
fn index_value(seg: &str) -> Option<i128> {
    let b = seg.as_bytes();
    if b.is_empty() || b.len() >= 19 || (b.len() > 1 && b[0] == b'0') {
        return None;
    }
    b.iter().try_fold(0i128, |v, &d| {
        d.is_ascii_digit().then(|| v * 10 + i128::from(d - b'0'))
    })
}

/// A spec name's pattern and slots, built once per stored tensor of a row, so a row that stands
/// for 15,000 tensors costs one pattern, not 15,000.
fn template(name: &str) -> (String, Vec<Slot>) {
    let (mut pattern, mut slots) = (String::with_capacity(name.len()), Vec::new());
    normalize(name, true, &mut pattern, |s| slots.push(s));
    (pattern, slots)
}

#[cfg(test)]
pub(super) fn canonical(name: &str, fill_with: Option<&[i128]>) -> Option<(String, Vec<i128>)> {
    let (mut pattern, mut slots, mut tuple) = (String::new(), Vec::new(), Tuple::new());
    normalize(name, fill_with.is_some(), &mut pattern, |s| slots.push(s));
    let combo = fill_with.unwrap_or_default();
    for slot in slots {
        tuple.push(match slot {
            Slot::Fixed(v) => v,
            Slot::Placeholder(k) => *combo.get(k)?,
        });
    }
    Some((pattern, tuple.to_vec()))
}

/// A row's index set, as a membership test: most are one run of consecutive values
/// (layers 3-60, experts 0-255).
enum Values {
    Run(i128, i128),
    /// Sorted; a value written twice stands for two combinations, as in a cartesian product.
    Sorted(Vec<i128>),
}

impl Values {
    fn new(v: &[i128]) -> Values {
        let mut sorted = v.to_vec();
        sorted.sort_unstable();
        let run = sorted.windows(2).all(|w| w[0].checked_add(1) == Some(w[1]));
        match (sorted.first(), sorted.last()) {
            (Some(&lo), Some(&hi)) if run => Values::Run(lo, hi),
            _ => Values::Sorted(sorted),
        }
    }

    /// How many times `v` occurs.
    fn count(&self, v: i128) -> u128 {
        match self {
            Values::Run(lo, hi) => u128::from(*lo <= v && v <= *hi),
            Values::Sorted(s) => {
                let from = s.partition_point(|x| *x < v);
                s[from..].partition_point(|x| *x == v) as u128
            }
        }
    }

    /// Each value once, in order.
    fn distinct(&self) -> Vec<i128> {
        match self {
            Values::Run(lo, hi) => (*lo..=*hi).collect(),
            Values::Sorted(s) => {
                let mut d = s.clone();
                d.dedup();
                d
            }
        }
    }

    fn distinct_len(&self) -> u128 {
        match self {
            Values::Run(lo, hi) => hi.abs_diff(*lo) + 1,
            Values::Sorted(s) => {
                s.len() as u128 - s.windows(2).filter(|w| w[0] == w[1]).count() as u128
            }
        }
    }

    fn len(&self) -> u128 {
        match self {
            Values::Run(lo, hi) => hi.abs_diff(*lo) + 1,
            Values::Sorted(s) => s.len() as u128,
        }
    }
}

/// A stored tensor of a spec leaf as the comparison needs it (plain values, so that parts of
/// the checkpoint can be compared on other threads).
struct Leaf {
    shape: Vec<i128>,
    dtype: String,
    /// The storage format (quant scheme) that decided the dtype.
    format: String,
    /// Whether the format packs elements (its findings are the packing guard's).
    packed: bool,
}

/// One stored tensor of one spec row, matched against checkpoint tuples without listing the
/// tuples it stands for: the cartesian product of the row's index sets, each combination
/// filling the name's placeholders in order. A set the name has no placeholder for repeats
/// every tuple, each repeat a claim of its own (reported as W007, as two leaves would be).
struct Template {
    /// The spec row it belongs to.
    row: usize,
    /// What the checkpoint tensor must be: the leaf's stored shape and dtype.
    leaf: Leaf,
    pattern: u32,
    slots: Vec<Slot>,
    sets: Vec<Values>,
    /// Claims on each tuple from the sets the name does not use; 0 when the row stands for
    /// nothing (an empty set, or more placeholders than sets).
    repeat: u128,
}

impl Template {
    fn new(
        row: usize,
        leaf: Leaf,
        pattern: u32,
        slots: Vec<Slot>,
        indices: &[(String, Vec<i128>)],
    ) -> Self {
        let sets: Vec<Values> = indices.iter().map(|(_, v)| Values::new(v)).collect();
        let used = slots
            .iter()
            .filter(|s| matches!(s, Slot::Placeholder(_)))
            .count();
        let repeat = if used > sets.len() || sets.iter().any(|s| s.len() == 0) {
            0
        } else {
            sets[used..]
                .iter()
                .fold(1u128, |n, s| n.saturating_mul(s.len()))
        };
        Template {
            row,
            leaf,
            pattern,
            slots,
            sets,
            repeat,
        }
    }

    /// How many claims this template makes on `tuple` (0: it does not stand for it).
    fn claims(&self, tuple: &[i128]) -> u128 {
        if self.repeat == 0 || tuple.len() != self.slots.len() {
            return 0;
        }
        let mut n = self.repeat;
        for (slot, &v) in self.slots.iter().zip(tuple) {
            n = match *slot {
                Slot::Fixed(f) if f == v => n,
                Slot::Fixed(_) => 0,
                Slot::Placeholder(k) => n.saturating_mul(self.sets[k].count(v)),
            };
            if n == 0 {
                return 0;
            }
        }
        n
    }

    /// How many distinct tuples it stands for.
    fn distinct_len(&self) -> u128 {
        if self.repeat == 0 {
            return 0;
        }
        self.slots.iter().fold(1u128, |n, slot| match *slot {
            Slot::Fixed(_) => n,
            Slot::Placeholder(k) => n.saturating_mul(self.sets[k].distinct_len()),
        })
    }

    /// Every distinct tuple it stands for.
    fn tuples(&self) -> Vec<Tuple> {
        if self.repeat == 0 {
            return Vec::new();
        }
        let mut out = vec![Tuple::new()];
        for slot in &self.slots {
            let values = match *slot {
                Slot::Fixed(v) => vec![v],
                Slot::Placeholder(k) => self.sets[k].distinct(),
            };
            out = out
                .iter()
                .flat_map(|t| {
                    values.iter().map(move |&v| {
                        let mut t = t.clone();
                        t.push(v);
                        t
                    })
                })
                .collect();
        }
        out
    }
}

/// The spec side of the join: every stored tensor of every row as a template, found by its
/// canonical pattern. Checkpoint tensors are probed against it one by one, so the spec's
/// 92k tensors are never listed, hashed or sorted; only a template that claims fewer
/// checkpoint tensors than it stands for is listed, to name the missing ones.
pub(super) struct Join {
    patterns: Vec<String>,
    ids: FxHashMap<String, u32>,
    /// In row order, then stored-tensor order: the first claim on a tensor is its owner.
    templates: Vec<Template>,
    /// Templates of each pattern, in order.
    by_pattern: Vec<Vec<usize>>,
}

/// Claims on one checkpoint tuple: (template, how many times), in template order.
type Claims = SmallVec<[(usize, u128); 2]>;

impl Join {
    pub(super) fn build(rows: &[WeightRow], packed: &[bool]) -> Join {
        let mut join = Join {
            patterns: Vec::new(),
            ids: FxHashMap::default(),
            templates: Vec::new(),
            by_pattern: Vec::new(),
        };
        for (r, row) in rows.iter().enumerate() {
            for st in &row.stored {
                let (pattern, slots) = template(&st.name);
                let id = match join.ids.get(&pattern) {
                    Some(&id) => id,
                    None => {
                        let id = join.patterns.len() as u32;
                        join.patterns.push(pattern.clone());
                        join.ids.insert(pattern, id);
                        join.by_pattern.push(Vec::new());
                        id
                    }
                };
                join.by_pattern[id as usize].push(join.templates.len());
                let leaf = Leaf {
                    shape: st.shape.iter().map(|q| q.v).collect(),
                    dtype: st.dtype.clone(),
                    format: row.format.clone(),
                    packed: packed[r],
                };
                join.templates
                    .push(Template::new(r, leaf, id, slots, &row.indices));
            }
        }
        join
    }

    /// Every claim on `tuple` at pattern `id`.
    fn claims(&self, id: u32, tuple: &[i128]) -> Claims {
        self.by_pattern[id as usize]
            .iter()
            .filter_map(|&t| {
                let n = self.templates[t].claims(tuple);
                (n > 0).then_some((t, n))
            })
            .collect()
    }

    /// Patterns some template stands for at least one tensor of.
    pub(super) fn spec_patterns(&self) -> Vec<&str> {
        self.by_pattern
            .iter()
            .zip(&self.patterns)
            .filter(|(ts, _)| ts.iter().any(|&t| self.templates[t].repeat > 0))
            .map(|(_, p)| p.as_str())
            .collect()
    }
}

/// Findings with the same key are reported once, with their index tuples.
#[derive(Clone, PartialEq, Eq, PartialOrd, Ord)]
pub(super) struct Key {
    pub(super) guard: &'static str,
    pub(super) code: &'static str,
    pub(super) pattern: String,
    pub(super) row: Option<usize>,
    pub(super) detail: String,
}

#[derive(Default)]
pub(super) struct Findings {
    pub(super) found: BTreeMap<Key, Vec<Tuple>>,
    /// The checkpoint tensor behind each unclaimed (pattern, tuple), for the report's example.
    pub(super) unclaimed: FxHashMap<(String, Tuple), usize>,
}

impl Findings {
    fn note(
        &mut self,
        (guard, code): (&'static str, &'static str),
        pattern: &str,
        row: Option<usize>,
        detail: String,
        tuple: &[i128],
    ) {
        self.found
            .entry(Key {
                guard,
                code,
                pattern: pattern.to_string(),
                row,
                detail,
            })
            .or_default()
            .push(Tuple::from_slice(tuple));
    }

    /// W007 when a tuple has more than one claim, naming every claiming leaf.
    fn claimed_twice(&mut self, join: &Join, owners: &[&str], claims: &Claims, tuple: &[i128]) {
        let total = claims.iter().fold(0u128, |n, c| n.saturating_add(c.1));
        if total < 2 {
            return;
        }
        let first = join.templates[claims[0].0].row;
        let pattern = &join.patterns[join.templates[claims[0].0].pattern as usize];
        let others: Vec<&str> = claims
            .iter()
            .flat_map(|&(t, n)| std::iter::repeat_n(owners[join.templates[t].row], n as usize))
            .collect();
        let detail = format!("is claimed by {total} spec leaves ({})", others.join(", "));
        self.note(
            ("weight", code::CLAIMED_TWICE),
            pattern,
            Some(first),
            detail,
            tuple,
        );
    }

    /// Compares the checkpoint tensor `t` with the spec leaf that owns it.
    fn compare(&mut self, owner: &Template, t: &Tensor, at: (&str, &[i128])) {
        let (pattern, tuple) = at;
        let (leaf, row) = (&owner.leaf, Some(owner.row));
        let guard = if leaf.packed { "packing" } else { "weight" };
        let same_shape = leaf.shape.len() == t.shape.len()
            && leaf
                .shape
                .iter()
                .zip(t.shape)
                .all(|(&q, &d)| q == d as i128);
        if !same_shape {
            let got: Vec<i128> = t.shape.iter().map(|&d| d as i128).collect();
            let want_n: i128 = leaf.shape.iter().product();
            let got_n: i128 = got.iter().product();
            let (code, detail) = if want_n != got_n {
                let code = if leaf.packed {
                    code::PACKED_ELEMENTS
                } else {
                    code::ELEMENTS
                };
                let detail = format!(
                    "spec {} ({want_n} elements), checkpoint {} ({got_n} elements)",
                    shape_str(&leaf.shape),
                    shape_str(&got),
                );
                (code, detail)
            } else {
                let code = if leaf.packed {
                    code::PACKED_ELEMENTS
                } else {
                    code::LAYOUT
                };
                let detail = format!(
                    "spec {}, checkpoint {} (same element count: transposed or split differently?)",
                    shape_str(&leaf.shape),
                    shape_str(&got)
                );
                (code, detail)
            };
            self.note((guard, code), pattern, row, detail, tuple);
        }
        if leaf.dtype != t.dtype.as_str() {
            let code = if leaf.packed {
                code::PACKED_DTYPE
            } else {
                code::DTYPE
            };
            let detail = format!(
                "stored as {} in the spec ({} format) but {} in the checkpoint",
                leaf.dtype, leaf.format, t.dtype
            );
            self.note((guard, code), pattern, row, detail, tuple);
        }
    }
}

/// W002, and W007 where several leaves claim one: the tuples of templates that claimed fewer
/// checkpoint tensors than they stand for. Only those templates are listed, against the
/// checkpoint tuples of their own patterns.
fn missing(join: &Join, owners: &[&str], hits: &[u128], tensors: &Inventory, found: &mut Findings) {
    let short: Vec<&Template> = join
        .templates
        .iter()
        .zip(hits)
        .filter(|(t, hits)| **hits < t.distinct_len())
        .map(|(t, _)| t)
        .collect();
    if short.is_empty() {
        return;
    }
    let wanted: FxHashSet<u32> = short.iter().map(|t| t.pattern).collect();
    let mut present: FxHashSet<(u32, Tuple)> = FxHashSet::default();
    let (mut pattern, mut tuple) = (String::new(), Tuple::new());
    for t in tensors.iter() {
        tuple.clear();
        normalize(t.name, false, &mut pattern, |slot| {
            if let Slot::Fixed(v) = slot {
                tuple.push(v);
            }
        });
        if let Some(&id) = join.ids.get(pattern.as_str())
            && wanted.contains(&id)
        {
            present.insert((id, tuple.clone()));
        }
    }
    let mut absent: BTreeSet<(u32, Tuple)> = BTreeSet::new();
    for t in short {
        for tuple in t.tuples() {
            let key = (t.pattern, tuple);
            if !present.contains(&key) {
                absent.insert(key);
            }
        }
    }
    for (id, tuple) in absent {
        let claims = join.claims(id, &tuple);
        found.claimed_twice(join, owners, &claims, &tuple);
        let row = claims.first().map(|&(t, _)| join.templates[t].row);
        found.note(
            ("weight", code::MISSING),
            &join.patterns[id as usize],
            row,
            String::new(),
            &tuple,
        );
    }
}

/// Every checkpoint tensor against the spec's templates: what no leaf claims (W001), what more
/// than one claims (W007), shapes and dtypes of what one owns (W003-W005, P001-P002), and then
/// what the spec declares that the checkpoint lacks (W002). `owners` names each row's leaf.
/// A large checkpoint is probed in parts on every core; the parts' findings are merged.
pub(super) fn probe(join: &Join, owners: &[&str], tensors: &Inventory) -> Probed {
    // Below this many tensors a part, a thread costs more than it saves.
    probe_in_parts(join, owners, tensors, 16_384)
}

fn probe_in_parts(join: &Join, owners: &[&str], tensors: &Inventory, least: usize) -> Probed {
    let threads = std::thread::available_parallelism()
        .map(|n| n.get())
        .unwrap_or(1)
        .min(tensors.len().div_ceil(least))
        .max(1);
    let size = tensors.len().div_ceil(threads).max(1);
    let run = |k: usize| {
        let part = (k * size).min(tensors.len())..((k + 1) * size).min(tensors.len());
        probe_part(join, owners, tensors.range(part), k * size)
    };
    let mut all = std::thread::scope(|scope| {
        // This thread probes the first part; an empty checkpoint is one empty part.
        let others: Vec<_> = (1..threads).map(|k| scope.spawn(move || run(k))).collect();
        let mut all = run(0);
        for other in others {
            match other.join() {
                Ok(part) => all.merge(part),
                Err(panic) => std::panic::resume_unwind(panic),
            }
        }
        all
    });
    missing(join, owners, &all.hits, tensors, &mut all.found);
    all
}

/// What probing (part of) a checkpoint found.
pub(super) struct Probed {
    pub(super) found: Findings,
    /// Distinct checkpoint tuples each template claimed: fewer than it stands for means some
    /// of its tensors are missing.
    pub(super) hits: Vec<u128>,
    /// Checkpoint tensors some leaf claims.
    pub(super) matched: usize,
    /// Bytes of the checkpoint's tensors (counted here, where each shape is read anyway).
    pub(super) bytes: u128,
}

impl Probed {
    fn new(templates: usize) -> Probed {
        Probed {
            found: Findings::default(),
            hits: vec![0; templates],
            matched: 0,
            bytes: 0,
        }
    }

    fn merge(&mut self, other: Probed) {
        for (key, tuples) in other.found.found {
            self.found.found.entry(key).or_default().extend(tuples);
        }
        self.found.unclaimed.extend(other.found.unclaimed);
        for (h, o) in self.hits.iter_mut().zip(other.hits) {
            *h += o;
        }
        self.matched += other.matched;
        self.bytes += other.bytes;
    }
}

/// [`probe`] over `tensors`, the checkpoint's tensors from position `offset` on.
fn probe_part<'a>(
    join: &Join,
    owners: &[&str],
    tensors: impl Iterator<Item = Tensor<'a>>,
    offset: usize,
) -> Probed {
    let mut out = Probed::new(join.templates.len());
    let found = &mut out.found;
    let (mut pattern, mut tuple) = (String::new(), Tuple::new());
    for (k, t) in tensors.enumerate() {
        out.bytes += t.nbytes();
        tuple.clear();
        normalize(t.name, false, &mut pattern, |slot| {
            if let Slot::Fixed(v) = slot {
                tuple.push(v);
            }
        });
        let claims = match join.ids.get(pattern.as_str()) {
            Some(&id) => join.claims(id, &tuple),
            None => Claims::new(),
        };
        let Some(&(first, _)) = claims.first() else {
            found.note(
                ("weight", code::UNCLAIMED),
                &pattern,
                None,
                String::new(),
                &tuple,
            );
            found
                .unclaimed
                .insert((pattern.clone(), tuple.clone()), offset + k);
            continue;
        };
        for &(t, _) in &claims {
            out.hits[t] += 1;
        }
        found.claimed_twice(join, owners, &claims, &tuple);
        out.matched += 1;
        found.compare(&join.templates[first], &t, (&pattern, &tuple));
    }
    out
}

/// The probe against the join as defined: every row's cartesian product listed, both sides
/// keyed by (pattern, tuple), each key's claims in row order.
#[cfg(test)]
mod normalized {
    use super::*;

    fn of(name: &str, placeholders: bool) -> (String, Vec<String>) {
        let (mut pattern, mut slots) = (String::new(), Vec::new());
        normalize(name, placeholders, &mut pattern, |s| {
            slots.push(match s {
                Slot::Fixed(v) => v.to_string(),
                Slot::Placeholder(k) => format!("{{{k}}}"),
            })
        });
        (pattern, slots)
    }

    #[test]
    fn index_segments_become_placeholders_and_the_rest_stays() {
        let cases: [(&str, bool, &str, &[&str]); 10] = [
            (
                "model.layers.10.mlp.experts.255.w",
                false,
                "model.layers.#.mlp.experts.#.w",
                &["10", "255"],
            ),
            ("3", false, "#", &["3"]),
            ("0.1", false, "#.#", &["0", "1"]),
            ("a.03.b", false, "a.03.b", &[]),
            ("a.3x.b", false, "a.3x.b", &[]),
            ("", false, "", &[]),
            ("..", false, "..", &[]),
            ("a..7.", false, "a..#.", &["7"]),
            ("l.{i}.e.{j}.w", true, "l.#.e.#.w", &["{0}", "{1}"]),
            ("l.{i}.e.{j}.w", false, "l.{i}.e.{j}.w", &[]),
        ];
        for (name, placeholders, pattern, slots) in cases {
            assert_eq!(
                of(name, placeholders),
                (
                    pattern.to_string(),
                    slots.iter().map(|s| s.to_string()).collect()
                ),
                "{name}"
            );
        }
    }
}

#[cfg(test)]
mod probe_matches_listing {
    use super::*;
    use crate::truth::TensorInfo;
    use harch_engine::analysis::StoredTensor;
    use harch_engine::ops::LeafKind;
    use harch_engine::q::Q;
    use proptest::prelude::*;

    fn cartesian(indices: &[(String, Vec<i128>)]) -> Vec<Vec<i128>> {
        let mut out = vec![Vec::new()];
        for (_, vals) in indices {
            out = out
                .iter()
                .flat_map(|t| {
                    vals.iter().map(move |&v| {
                        let mut t = t.clone();
                        t.push(v);
                        t
                    })
                })
                .collect();
        }
        out
    }

    fn listed(
        join: &Join,
        rows: &[WeightRow],
        owners: &[&str],
        tensors: &[TensorInfo],
    ) -> (BTreeMap<Key, Vec<Tuple>>, usize) {
        // Claims by template: one per stored tensor of each row, in order.
        let mut spec: BTreeMap<(String, Vec<i128>), Vec<usize>> = BTreeMap::new();
        let mut template = 0;
        for row in rows {
            let combos = cartesian(&row.indices);
            for st in &row.stored {
                for combo in &combos {
                    if let Some(key) = canonical(&st.name, Some(combo)) {
                        spec.entry(key).or_default().push(template);
                    }
                }
                template += 1;
            }
        }
        let ckpt: BTreeMap<(String, Vec<i128>), usize> = tensors
            .iter()
            .enumerate()
            .filter_map(|(k, t)| Some((canonical(&t.name, None)?, k)))
            .collect();
        let mut keys: BTreeSet<&(String, Vec<i128>)> = spec.keys().collect();
        keys.extend(ckpt.keys());
        let mut found = Findings::default();
        let mut matched = 0;
        for key @ (pattern, tuple) in keys {
            let tensor = ckpt.get(key).map(|&k| &tensors[k]);
            let Some(claims) = spec.get(key) else {
                found.note(
                    ("weight", code::UNCLAIMED),
                    pattern,
                    None,
                    String::new(),
                    tuple,
                );
                continue;
            };
            let owner = &join.templates[claims[0]];
            if claims.len() > 1 {
                let names: Vec<&str> = claims
                    .iter()
                    .map(|&t| owners[join.templates[t].row])
                    .collect();
                let detail = format!(
                    "is claimed by {} spec leaves ({})",
                    claims.len(),
                    names.join(", ")
                );
                found.note(
                    ("weight", code::CLAIMED_TWICE),
                    pattern,
                    Some(owner.row),
                    detail,
                    tuple,
                );
            }
            match tensor {
                None => found.note(
                    ("weight", code::MISSING),
                    pattern,
                    Some(owner.row),
                    String::new(),
                    tuple,
                ),
                Some(t) => {
                    matched += 1;
                    found.compare(owner, &t.as_tensor(), (pattern, tuple));
                }
            }
        }
        (found.found, matched)
    }

    fn segment(placeholders: bool) -> impl Strategy<Value = String> {
        let fixed = prop_oneof![
            Just("a".to_string()),
            Just("b".to_string()),
            Just("03".to_string()),
            (0..4u8).prop_map(|d| d.to_string()),
        ];
        if placeholders {
            prop_oneof![fixed, Just("{i}".to_string())].boxed()
        } else {
            fixed.boxed()
        }
    }

    fn name(placeholders: bool) -> impl Strategy<Value = String> {
        prop::collection::vec(segment(placeholders), 1..4)
            .prop_map(|s| format!("{}.w", s.join(".")))
    }

    fn shape() -> impl Strategy<Value = Vec<u64>> {
        prop::collection::vec(prop_oneof![Just(2u64), Just(3), Just(6)], 1..3)
    }

    fn row() -> impl Strategy<Value = WeightRow> {
        let stored = prop::collection::vec((name(true), shape(), any::<bool>()), 1..3);
        let sets = prop::collection::vec(prop::collection::vec(0..4i128, 0..4), 0..4);
        (stored, sets).prop_map(|(stored, sets)| WeightRow {
            node: 0,
            leaf: "w".into(),
            kind: LeafKind::Matrix,
            name: stored[0].0.clone(),
            indices: sets
                .into_iter()
                .enumerate()
                .map(|(k, v)| (format!("s{k}"), v))
                .collect(),
            logical: Vec::new(),
            format: "bf16".into(),
            stored: stored
                .into_iter()
                .map(|(name, shape, f32)| StoredTensor {
                    name,
                    dtype: if f32 { "F32" } else { "BF16" }.into(),
                    dtype_bytes: if f32 { 4 } else { 2 },
                    shape: shape.iter().map(|&d| Q::lit(d as i128)).collect(),
                    scale: false,
                })
                .collect(),
            count: Q::lit(1),
            override_index: None,
        })
    }

    fn tensors() -> impl Strategy<Value = Vec<TensorInfo>> {
        prop::collection::btree_map(name(false), (shape(), any::<bool>()), 0..24).prop_map(|m| {
            m.into_iter()
                .map(|(name, (shape, f32))| TensorInfo {
                    name,
                    dtype: if f32 {
                        crate::truth::Dtype::F32
                    } else {
                        crate::truth::Dtype::BF16
                    },
                    shape: shape.into(),
                    shard: None,
                })
                .collect()
        })
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(2000))]
        #[test]
        fn same_findings(
            rows in prop::collection::vec(row(), 0..4),
            packed in prop::collection::vec(any::<bool>(), 4),
            tensors in tensors(),
        ) {
            let owners: Vec<String> = (0..rows.len()).map(|r| format!("leaf{r}")).collect();
            let owners: Vec<&str> = owners.iter().map(String::as_str).collect();
            let join = Join::build(&rows, &packed);
            // Parts of at least 3 tensors: the merge of parts is held to the listing too.
            let inventory = Inventory::from_tensors(tensors.clone(), None);
            let probed = probe_in_parts(&join, &owners, &inventory, 3);
            let (mut found, matched) = (probed.found.found, probed.matched);
            for tuples in found.values_mut() {
                tuples.sort_unstable();
            }
            let (mut want, want_matched) = listed(&join, &rows, &owners, &tensors);
            for tuples in want.values_mut() {
                tuples.sort_unstable();
            }
            prop_assert_eq!(matched, want_matched);
            let show = |m: &BTreeMap<Key, Vec<Tuple>>| -> Vec<String> {
                m.iter().map(|(k, t)| format!("{} {} {} {:?} {} {:?}", k.guard, k.code, k.pattern, k.row, k.detail, t)).collect()
            };
            prop_assert_eq!(show(&found), show(&want));
        }
    }
}
