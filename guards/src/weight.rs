//! The weight and packing guards: join the spec's stored tensors and the checkpoint's on one
//! canonical module path, then compare tensor by tensor.
//!
//! One normalizer serves both sides: every index segment of a name (`layers.3`, `experts.{e}`)
//! becomes `#` and its value goes into an index tuple. Spec rows stand for the cartesian product
//! of their index sets; several rows may share a canonical path (heterogeneous stacks) and are
//! aggregated before the comparison. Repeated findings are grouped so that 15,000 identical
//! mismatches read as one line.

use std::collections::{BTreeMap, BTreeSet};

use harch_engine::Analysis;
use harch_engine::analysis::WeightRow;
use harch_engine::diag::{Location, closest};
use harch_engine::schema::QuantSchemeDef;
use rustc_hash::{FxHashMap, FxHashSet};
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
    // Every dot found in one pass (this runs for each of a checkpoint's 92k names).
    let mut start = 0;
    let ends = memchr::memchr_iter(b'.', name.as_bytes()).chain(std::iter::once(name.len()));
    for end in ends {
        let seg = &name[start..end];
        if start > 0 {
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
        start = end + 1;
    }
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
fn canonical(name: &str, fill_with: Option<&[i128]>) -> Option<(String, Vec<i128>)> {
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
struct Join {
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
    fn build(rows: &[WeightRow], packed: &[bool]) -> Join {
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
    fn spec_patterns(&self) -> Vec<&str> {
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
struct Key {
    guard: &'static str,
    code: &'static str,
    pattern: String,
    row: Option<usize>,
    detail: String,
}

#[derive(Default)]
struct Findings {
    found: BTreeMap<Key, Vec<Tuple>>,
    /// The checkpoint tensor behind each unclaimed (pattern, tuple), for the report's example.
    unclaimed: FxHashMap<(String, Tuple), usize>,
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
    fn compare(&mut self, owner: &Template, t: &TensorInfo, at: (&str, &[i128])) {
        let (pattern, tuple) = at;
        let (leaf, row) = (&owner.leaf, Some(owner.row));
        let guard = if leaf.packed { "packing" } else { "weight" };
        let same_shape = leaf.shape.len() == t.shape.len()
            && leaf
                .shape
                .iter()
                .zip(&t.shape)
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

pub struct Outcome {
    pub weight: Vec<Diagnostic>,
    pub packing: Vec<Diagnostic>,
    pub summary: Summary,
}

/// W002, and W007 where several leaves claim one: the tuples of templates that claimed fewer
/// checkpoint tensors than they stand for. Only those templates are listed, against the
/// checkpoint tuples of their own patterns.
fn missing(
    join: &Join,
    owners: &[&str],
    hits: &[u128],
    tensors: &[TensorInfo],
    found: &mut Findings,
) {
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
    for t in tensors {
        tuple.clear();
        normalize(&t.name, false, &mut pattern, |slot| {
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
fn probe(join: &Join, owners: &[&str], tensors: &[TensorInfo]) -> Probed {
    // Below this many tensors a part, a thread costs more than it saves.
    probe_in_parts(join, owners, tensors, 16_384)
}

fn probe_in_parts(join: &Join, owners: &[&str], tensors: &[TensorInfo], least: usize) -> Probed {
    let threads = std::thread::available_parallelism()
        .map(|n| n.get())
        .unwrap_or(1)
        .min(tensors.len().div_ceil(least))
        .max(1);
    let size = tensors.len().div_ceil(threads).max(1);
    let probe_part = |k: usize, part: &[TensorInfo]| probe_part(join, owners, part, k * size);
    let mut parts = std::thread::scope(|scope| {
        let mut chunks = tensors.chunks(size).enumerate();
        let first = chunks.next();
        let others: Vec<_> = chunks
            .map(|(k, part)| scope.spawn(move || probe_part(k, part)))
            .collect();
        let mut parts =
            vec![first.map_or_else(|| probe_part(0, &[]), |(k, part)| probe_part(k, part))];
        for other in others {
            match other.join() {
                Ok(p) => parts.push(p),
                Err(panic) => std::panic::resume_unwind(panic),
            }
        }
        parts
    })
    .into_iter();
    let mut all = parts
        .next()
        .unwrap_or_else(|| Probed::new(join.templates.len()));
    for p in parts {
        all.merge(p);
    }
    missing(join, owners, &all.hits, tensors, &mut all.found);
    all
}

/// What probing (part of) a checkpoint found.
struct Probed {
    found: Findings,
    /// Distinct checkpoint tuples each template claimed: fewer than it stands for means some
    /// of its tensors are missing.
    hits: Vec<u128>,
    /// Checkpoint tensors some leaf claims.
    matched: usize,
    /// Bytes of the checkpoint's tensors (counted here, where each shape is read anyway).
    bytes: u128,
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
fn probe_part(join: &Join, owners: &[&str], tensors: &[TensorInfo], offset: usize) -> Probed {
    let mut out = Probed::new(join.templates.len());
    let found = &mut out.found;
    let (mut pattern, mut tuple) = (String::new(), Tuple::new());
    for (k, t) in tensors.iter().enumerate() {
        out.bytes += t.nbytes();
        tuple.clear();
        normalize(&t.name, false, &mut pattern, |slot| {
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
        found.compare(&join.templates[first], t, (&pattern, &tuple));
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
                let dtype_shape = unclaimed.get(&(key.pattern.clone(), ex.clone())).map(|&k| format!(" {} {}", tensors[k].dtype, shape_str(&tensors[k].shape.iter().map(|d| *d as i128).collect::<Vec<_>>()))).unwrap_or_default();
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

/// The probe against the join as defined: every row's cartesian product listed, both sides
/// keyed by (pattern, tuple), each key's claims in row order.
#[cfg(test)]
mod probe_matches_listing {
    use super::*;
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
                    found.compare(owner, t, (pattern, tuple));
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
                    shape,
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
            let probed = probe_in_parts(&join, &owners, &tensors, 3);
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
