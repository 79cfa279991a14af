//! Range-compressed tensor lists, one line per group of same-shaped tensors:
//!
//! ```text
//! model.layers.{3-60}.mlp.experts.{0-255}.down_proj.weight F8_E4M3 [7168, 2048]
//! ```
//!
//! Numeric path segments become index sets (`{0-2,5,7-9}`); a line stands for the cartesian
//! product of its sets, so groups whose indices are not a product split into several lines.
//! [`expand`] reproduces exactly the tensor set [`compress`] was given (names, dtypes, shapes;
//! shard placement is not kept). Names the pattern syntax cannot carry (braces, whitespace,
//! quotes) are written as a JSON string with no sets.
//!
//! Used by the bundled snapshots and in agent prompts: DeepSeek-V3's 91,991 tensors are a few
//! dozen lines.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt::Write as _;

use super::{Dtype, Inventory, Shape, Tensor};

/// Expansion refuses to produce more tensors than this: a hostile line like
/// `x.{0-99999999999}` must fail, not exhaust memory.
pub const MAX_EXPANDED: u64 = 10_000_000;

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum RangesError {
    #[error("line {line}: {message}")]
    Syntax { line: usize, message: String },
    #[error("line {line}: expands to more than {max} tensors")]
    TooMany { line: usize, max: u64 },
    #[error("line {line}: tensor `{tensor}` was already listed")]
    Duplicate { line: usize, tensor: String },
}

#[derive(Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
enum Segment {
    Literal(String),
    Index,
}

/// Group key: the name with numeric segments replaced by placeholders, dtype and shape.
type GroupKey = (Vec<Segment>, Dtype, Vec<u64>);

/// Compresses a tensor list into lines (sorted, newline-terminated).
pub fn compress<'a>(tensors: impl IntoIterator<Item = Tensor<'a>>) -> String {
    let mut groups: BTreeMap<GroupKey, Vec<Vec<u64>>> = BTreeMap::new();
    let mut verbatim: Vec<Tensor> = Vec::new();
    for t in tensors {
        if needs_quoting(t.name) {
            verbatim.push(t);
            continue;
        }
        let mut template = Vec::new();
        let mut indices = Vec::new();
        for seg in t.name.split('.') {
            match canonical_index(seg) {
                Some(i) => {
                    template.push(Segment::Index);
                    indices.push(i);
                }
                None => template.push(Segment::Literal(seg.to_string())),
            }
        }
        groups
            .entry((template, t.dtype, t.shape.to_vec()))
            .or_default()
            .push(indices);
    }
    let mut lines = Vec::new();
    for ((template, dtype, shape), tuples) in groups {
        let tuples: BTreeSet<Vec<u64>> = tuples.into_iter().collect();
        let tuples: Vec<Vec<u64>> = tuples.into_iter().collect();
        for product in cover(&tuples) {
            lines.push(format!(
                "{} {dtype} {}",
                render_name(&template, &product),
                render_shape(&shape)
            ));
        }
    }
    for t in verbatim {
        let quoted = serde_json::to_string(&t.name).unwrap_or_default();
        lines.push(format!("{quoted} {} {}", t.dtype, render_shape(t.shape)));
    }
    lines.sort();
    let mut out = String::new();
    for l in lines {
        out.push_str(&l);
        out.push('\n');
    }
    out
}

/// Expands compressed lines back into tensors, sorted by name. Blank lines and lines starting
/// with `#` are ignored.
pub fn expand(text: &str) -> Result<Inventory, RangesError> {
    let mut out = Inventory::default();
    for_each_line(text, |line, names, dtype, shape| {
        if (out.len() as u64).saturating_add(names.len()) > MAX_EXPANDED {
            return Err(RangesError::TooMany {
                line,
                max: MAX_EXPANDED,
            });
        }
        out.reserve(names.len() as usize);
        let shape = Shape::from_slice(shape);
        names.for_each(|name| out.push(name, dtype, shape.clone(), None));
        Ok(())
    })?;
    // Each line's names come out in name order (`Names::for_each`), so this stable sort merges
    // one run per line. Repeated names end up side by side; which line repeats one is found
    // only then, by reading the lines again.
    out.sort_by_name();
    if let Some(tensor) = out.repeated().and_then(|i| out.get(i)) {
        let tensor = tensor.name.to_string();
        return Err(first_repeat(text).unwrap_or(RangesError::Duplicate { line: 0, tensor }));
    }
    Ok(out)
}

/// Each non-blank, non-comment line's number, names, dtype and shape, in order, to `f`; the
/// first error (the line's or `f`'s) ends the reading.
fn for_each_line(
    text: &str,
    mut f: impl FnMut(usize, Names, Dtype, &[u64]) -> Result<(), RangesError>,
) -> Result<(), RangesError> {
    for (i, raw) in text.lines().enumerate() {
        let line = i + 1;
        let trimmed = raw.trim();
        if trimmed.is_empty() || trimmed.starts_with('#') {
            continue;
        }
        let syntax = |message: String| RangesError::Syntax { line, message };
        let (name_part, rest) = split_name(trimmed).map_err(syntax)?;
        let (dtype_text, shape_text) = rest
            .trim_start()
            .split_once(' ')
            .ok_or_else(|| syntax("expected `NAME DTYPE [SHAPE]`".into()))?;
        let dtype = Dtype::parse(dtype_text)
            .ok_or_else(|| syntax(format!("unknown dtype `{dtype_text}`")))?;
        let shape = parse_shape(shape_text.trim()).map_err(syntax)?;
        let names = Names::parse(name_part, line)?;
        f(line, names, dtype, &shape)?;
    }
    Ok(())
}

/// The earliest line that names a tensor named before it (or earlier in it), with the first
/// such name in name order.
fn first_repeat(text: &str) -> Option<RangesError> {
    let mut seen: BTreeSet<String> = BTreeSet::new();
    let scan = for_each_line(text, |line, names, _, _| {
        let mut repeat: Option<String> = None;
        names.for_each(|n| {
            if seen.contains(n) {
                if repeat.as_deref().is_none_or(|r| n < r) {
                    repeat = Some(n.to_string());
                }
            } else {
                seen.insert(n.to_string());
            }
        });
        match repeat {
            Some(tensor) => Err(RangesError::Duplicate { line, tensor }),
            None => Ok(()),
        }
    });
    scan.err()
}

fn needs_quoting(name: &str) -> bool {
    name.is_empty()
        || name.starts_with('"')
        || name.starts_with('#')
        || name
            .chars()
            .any(|c| c == '{' || c == '}' || c.is_whitespace())
}

/// Only canonical decimals are indices, so `expand` writes back the very same text
/// (`007` stays a literal).
fn canonical_index(seg: &str) -> Option<u64> {
    if seg.is_empty() || !seg.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    if seg.len() > 1 && seg.starts_with('0') {
        return None;
    }
    seg.parse().ok()
}

/// Covers a set of index tuples (all the same length, sorted, distinct) exactly by cartesian
/// products of index sets. Leading values whose remaining tuples are identical share a line,
/// which is what makes `layers × experts` one line.
fn cover(tuples: &[Vec<u64>]) -> Vec<Vec<BTreeSet<u64>>> {
    let Some(first) = tuples.first() else {
        return Vec::new();
    };
    if first.is_empty() {
        return vec![Vec::new()];
    }
    let mut rest_by_head: BTreeMap<u64, Vec<Vec<u64>>> = BTreeMap::new();
    for t in tuples {
        rest_by_head.entry(t[0]).or_default().push(t[1..].to_vec());
    }
    let mut heads_by_rest: BTreeMap<Vec<Vec<u64>>, BTreeSet<u64>> = BTreeMap::new();
    for (head, rest) in rest_by_head {
        heads_by_rest.entry(rest).or_default().insert(head);
    }
    let mut out = Vec::new();
    for (rest, heads) in heads_by_rest {
        for mut tail in cover(&rest) {
            tail.insert(0, heads.clone());
            out.push(tail);
        }
    }
    out
}

fn render_name(template: &[Segment], sets: &[BTreeSet<u64>]) -> String {
    let mut sets = sets.iter();
    let mut parts = Vec::with_capacity(template.len());
    for seg in template {
        match seg {
            Segment::Literal(s) => parts.push(s.clone()),
            Segment::Index => {
                let set = sets.next().cloned().unwrap_or_default();
                parts.push(render_set(&set));
            }
        }
    }
    parts.join(".")
}

/// A single index is written bare (`layers.61`); several as `{0-2,5}`.
fn render_set(set: &BTreeSet<u64>) -> String {
    if set.len() == 1 {
        return set.iter().next().map(u64::to_string).unwrap_or_default();
    }
    let mut out = String::from("{");
    let mut iter = set.iter().copied().peekable();
    let mut first = true;
    while let Some(start) = iter.next() {
        let mut end = start;
        while iter.peek() == Some(&(end + 1)) {
            end += 1;
            iter.next();
        }
        if !first {
            out.push(',');
        }
        first = false;
        if start == end {
            let _ = write!(out, "{start}");
        } else {
            let _ = write!(out, "{start}-{end}");
        }
    }
    out.push('}');
    out
}

fn render_shape(shape: &[u64]) -> String {
    let dims: Vec<String> = shape.iter().map(u64::to_string).collect();
    format!("[{}]", dims.join(", "))
}

/// Splits the name (a pattern, or a JSON string) from the rest of the line.
fn split_name(line: &str) -> Result<(NamePart<'_>, &str), String> {
    if line.starts_with('"') {
        let mut de = serde_json::Deserializer::from_str(line).into_iter::<String>();
        let name = match de.next() {
            Some(Ok(n)) => n,
            _ => return Err("unterminated or invalid quoted name".into()),
        };
        let used = de.byte_offset();
        Ok((NamePart::Quoted(name), &line[used..]))
    } else {
        let (name, rest) = line
            .split_once(' ')
            .ok_or_else(|| "expected `NAME DTYPE [SHAPE]`".to_string())?;
        Ok((NamePart::Pattern(name), rest))
    }
}

enum NamePart<'a> {
    Quoted(String),
    Pattern(&'a str),
}

/// A line's names, parsed but not yet written: each path segment's choices.
struct Names {
    choices: Vec<Vec<String>>,
}

impl Names {
    fn parse(part: NamePart<'_>, line: usize) -> Result<Names, RangesError> {
        let pattern = match part {
            NamePart::Quoted(name) => {
                return Ok(Names {
                    choices: vec![vec![name]],
                });
            }
            NamePart::Pattern(p) => p,
        };
        let syntax = |message: String| RangesError::Syntax { line, message };
        let mut choices: Vec<Vec<String>> = Vec::new();
        let mut total: u64 = 1;
        for seg in pattern.split('.') {
            if let Some(inner) = seg.strip_prefix('{') {
                let inner = inner
                    .strip_suffix('}')
                    .ok_or_else(|| syntax(format!("unclosed index set `{seg}`")))?;
                let set = parse_set(inner).map_err(syntax)?;
                let n = set.iter().map(|(a, b)| b - a + 1).sum::<u64>();
                total = total.saturating_mul(n);
                if total > MAX_EXPANDED {
                    return Err(RangesError::TooMany {
                        line,
                        max: MAX_EXPANDED,
                    });
                }
                // In text order ("1" < "10" < "2"): what follows an index is a dot or the end,
                // both before any digit, so each line's names come out in name order and the
                // sort in `expand` only merges one run per line.
                let mut options: Vec<String> = set
                    .iter()
                    .flat_map(|&(a, b)| (a..=b).map(|i| i.to_string()))
                    .collect();
                options.sort_unstable();
                choices.push(options);
            } else if seg.contains('{') || seg.contains('}') {
                return Err(syntax(format!(
                    "index set must be a whole path segment, got `{seg}`"
                )));
            } else {
                choices.push(vec![seg.to_string()]);
            }
        }
        Ok(Names { choices })
    }

    /// How many names the line stands for.
    fn len(&self) -> u64 {
        self.choices
            .iter()
            .fold(1u64, |n, o| n.saturating_mul(o.len() as u64))
    }

    /// Each name, in name order, to `f`: the choices as an odometer, last fastest, in one
    /// buffer.
    fn for_each(&self, mut f: impl FnMut(&str)) {
        if self.choices.iter().any(Vec::is_empty) {
            return;
        }
        let mut name = String::new();
        let mut at = vec![0usize; self.choices.len()];
        loop {
            name.clear();
            for (i, (options, &k)) in self.choices.iter().zip(&at).enumerate() {
                if i > 0 {
                    name.push('.');
                }
                name.push_str(&options[k]);
            }
            f(&name);
            let mut i = self.choices.len();
            loop {
                if i == 0 {
                    return;
                }
                i -= 1;
                at[i] += 1;
                if at[i] < self.choices[i].len() {
                    break;
                }
                at[i] = 0;
            }
        }
    }
}

/// `0-2,5,7-9` → [(0,2), (5,5), (7,9)]; ranges must be ascending and disjoint.
fn parse_set(inner: &str) -> Result<Vec<(u64, u64)>, String> {
    let mut out: Vec<(u64, u64)> = Vec::new();
    for item in inner.split(',') {
        let (a, b) = match item.split_once('-') {
            Some((a, b)) => (index(a)?, index(b)?),
            None => {
                let i = index(item)?;
                (i, i)
            }
        };
        if b < a {
            return Err(format!("range `{item}` runs backwards"));
        }
        if let Some(&(_, prev_end)) = out.last()
            && a <= prev_end
        {
            return Err(format!("range `{item}` overlaps or is out of order"));
        }
        out.push((a, b));
    }
    Ok(out)
}

fn index(s: &str) -> Result<u64, String> {
    canonical_index(s).ok_or_else(|| format!("`{s}` is not an index"))
}

fn parse_shape(text: &str) -> Result<Vec<u64>, String> {
    let inner = text
        .strip_prefix('[')
        .and_then(|t| t.strip_suffix(']'))
        .ok_or_else(|| format!("shape must be `[d0, d1, ...]`, got `{text}`"))?;
    if inner.trim().is_empty() {
        return Ok(Vec::new());
    }
    inner
        .split(',')
        .map(|d| {
            d.trim()
                .parse::<u64>()
                .map_err(|_| format!("dimension `{}` is not a non-negative integer", d.trim()))
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::super::TensorInfo;
    use super::*;

    #[test]
    fn a_line_expands_in_name_order() {
        let mut names = Vec::new();
        Names::parse(NamePart::Pattern("m.{0-12,20}.x.{1-10}.w"), 1)
            .unwrap()
            .for_each(|n| names.push(n.to_string()));
        assert_eq!(names.len(), 14 * 10);
        assert!(names.is_sorted(), "{names:?}");
        assert_eq!(names[0], "m.0.x.1.w");
        assert_eq!(names[1], "m.0.x.10.w");
    }

    fn t(name: &str, dtype: Dtype, shape: &[u64]) -> TensorInfo {
        TensorInfo {
            name: name.into(),
            dtype,
            shape: Shape::from_slice(shape),
            shard: None,
        }
    }

    fn sorted(v: Vec<TensorInfo>) -> Inventory {
        Inventory::from_tensors(v, None)
    }

    #[test]
    fn layers_by_experts_is_one_line() {
        let mut ts = Vec::new();
        for l in 3..=60 {
            for e in 0..=255 {
                ts.push(t(
                    &format!("model.layers.{l}.mlp.experts.{e}.down_proj.weight"),
                    Dtype::F8_E4M3,
                    &[7168, 2048],
                ));
            }
        }
        let text = compress(ts.iter().map(TensorInfo::as_tensor));
        assert_eq!(
            text,
            "model.layers.{3-60}.mlp.experts.{0-255}.down_proj.weight F8_E4M3 [7168, 2048]\n"
        );
        assert_eq!(expand(&text).unwrap(), sorted(ts));
    }

    #[test]
    fn non_product_sets_split_into_lines() {
        let ts = vec![
            t("l.0.e.0.w", Dtype::BF16, &[2]),
            t("l.0.e.1.w", Dtype::BF16, &[2]),
            t("l.1.e.0.w", Dtype::BF16, &[2]),
            t("l.2.e.0.w", Dtype::BF16, &[2]),
            t("l.2.e.1.w", Dtype::BF16, &[2]),
            t("l.5.e.1.w", Dtype::BF16, &[2]),
            t("l.7.norm", Dtype::F32, &[]),
        ];
        let text = compress(ts.iter().map(TensorInfo::as_tensor));
        assert_eq!(
            text,
            "l.1.e.0.w BF16 [2]\nl.5.e.1.w BF16 [2]\nl.7.norm F32 []\nl.{0,2}.e.{0-1}.w BF16 [2]\n"
        );
        assert_eq!(expand(&text).unwrap(), sorted(ts));
    }

    #[test]
    fn odd_names_round_trip() {
        let ts = vec![
            t("a.007.b", Dtype::U8, &[1]),
            t("a.7.b", Dtype::U8, &[1]),
            t("weird {name}", Dtype::I64, &[3, 0]),
            t("\"quoted", Dtype::BOOL, &[]),
            t("x..y.", Dtype::F16, &[1, 2, 3]),
        ];
        let text = compress(ts.iter().map(TensorInfo::as_tensor));
        assert_eq!(expand(&text).unwrap(), sorted(ts));
    }

    #[test]
    fn expand_rejects_bad_lines_with_their_number() {
        for (text, want) in [
            ("a.{1-0}.b F32 [1]", "runs backwards"),
            ("a.{0-3,2}.b F32 [1]", "overlaps"),
            ("a.{0-3.b F32 [1]", "unclosed"),
            ("a.x{1}.b F32 [1]", "whole path segment"),
            ("a F33 [1]", "unknown dtype"),
            ("a F32 [1, -2]", "not a non-negative"),
            ("a F32", "expected"),
            ("\"a F32 [1]", "quoted"),
        ] {
            let err = expand(&format!("# c\n{text}\n")).unwrap_err();
            assert!(
                matches!(&err, RangesError::Syntax { line: 2, .. }),
                "{text}: {err}"
            );
            assert!(err.to_string().contains(want), "{text}: {err}");
        }
        assert!(matches!(
            expand("a.{0-99999999999}.b F32 [1]"),
            Err(RangesError::TooMany { .. })
        ));
        assert!(matches!(
            expand("a.{0-1}.b F32 [1]\na.1.b F32 [2]"),
            Err(RangesError::Duplicate { line: 2, .. })
        ));
    }
}
