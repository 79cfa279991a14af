//! This job's facts, as a claim is checked against them: config.json, the checkpoint's tensor
//! inventory and the staged forward source. A claim either holds or does not; when it does not,
//! the check says what the facts are instead.

use std::collections::{BTreeMap, BTreeSet};

use harch_guards::truth::{Inventory, Tensor, Truth, ranges};
use serde_json::Value;

use crate::claim::{ANY_INDEX, Claim, ConfigKey, KeyPart, clip, show_shape};
use crate::numbers::Num;

/// Where a workspace shows the staged source: a citation may name a file by its staged name
/// (`modeling_x.py`) or by the path the agent saw it at (`truth/source/modeling_x.py`).
pub const SOURCE_DIRS: [&str; 2] = ["truth/source/", "source/"];

/// The facts a review is checked against. Borrowed from the job's truth; built once per check.
pub struct Facts<'a> {
    config: &'a Value,
    /// Sorted by name, so prefixes are ranges.
    tensors: &'a Inventory,
    sources: BTreeMap<&'a str, Source>,
}

/// A staged source file, whitespace-normalised once with the offset of every line.
struct Source {
    lines: usize,
    normalized: String,
    /// Byte range of each line in `normalized` (1-based line `n` is `spans[n - 1]`).
    spans: Vec<(usize, usize)>,
}

/// The outcome of checking one claim.
#[derive(Clone, Debug, PartialEq)]
pub struct ClaimCheck {
    pub holds: bool,
    /// What the facts say, when the claim does not hold.
    pub truth: Option<String>,
}

impl ClaimCheck {
    fn holds() -> ClaimCheck {
        ClaimCheck {
            holds: true,
            truth: None,
        }
    }
    fn fails(truth: impl Into<String>) -> ClaimCheck {
        ClaimCheck {
            holds: false,
            truth: Some(truth.into()),
        }
    }
}

impl<'a> Facts<'a> {
    /// `sources` are the staged source files by name (what the agent could read).
    pub fn new(
        config: &'a Value,
        inventory: &'a Inventory,
        sources: &'a BTreeMap<String, String>,
    ) -> Facts<'a> {
        Facts {
            config,
            tensors: inventory,
            sources: sources
                .iter()
                .map(|(k, v)| (k.as_str(), Source::new(v)))
                .collect(),
        }
    }

    pub fn from_truth(truth: &'a Truth) -> Facts<'a> {
        Facts::new(&truth.config, &truth.inventory, &truth.sources)
    }

    pub fn check(&self, claim: &Claim) -> ClaimCheck {
        match claim {
            Claim::Src {
                file,
                first,
                last,
                quote,
            } => self.check_src(file, *first, *last, quote),
            Claim::Cfg { key, value } => self.check_cfg(key, value),
            Claim::Ckpt {
                tensor,
                shape,
                dtype,
            } => self.check_ckpt(tensor, shape, *dtype),
            Claim::Count { prefix, n } => self.check_count(prefix, *n),
        }
    }

    fn source(&self, file: &str) -> Option<(&'a str, &Source)> {
        let file = file.strip_prefix("./").unwrap_or(file);
        let bare = SOURCE_DIRS
            .iter()
            .find_map(|d| file.strip_prefix(d))
            .unwrap_or(file);
        self.sources.get_key_value(bare).map(|(k, v)| (*k, v))
    }

    fn check_src(&self, file: &str, first: u32, last: u32, quote: &str) -> ClaimCheck {
        let Some((name, src)) = self.source(file) else {
            let staged: Vec<&str> = self.sources.keys().copied().collect();
            let mut msg = format!("no staged source file `{}`", clip(file, 80));
            if staged.is_empty() {
                msg.push_str(" (no source is staged for this job)");
            } else {
                msg.push_str(&format!(" (staged: {})", staged.join(", ")));
            }
            return ClaimCheck::fails(msg);
        };
        if first == 0 || last < first {
            return ClaimCheck::fails(format!("{first}-{last} is not a line range"));
        }
        if last as usize > src.lines {
            return ClaimCheck::fails(format!("{name} has {} lines", src.lines));
        }
        let q = normalize(quote);
        let cited = src.slice(first as usize, last as usize);
        if cited.contains(&q) {
            return ClaimCheck::holds();
        }
        let range = if first == last {
            format!("line {first}")
        } else {
            format!("lines {first}-{last}")
        };
        let mut msg = format!("{range} of {name} read `{}`", clip(cited, 160));
        if let Some((a, b)) = src.find(&q) {
            if a == b {
                msg.push_str(&format!("; the quote is at line {a}"));
            } else {
                msg.push_str(&format!("; the quote is at lines {a}-{b}"));
            }
        } else {
            msg.push_str(&format!("; the quote is nowhere in {name}"));
        }
        ClaimCheck::fails(msg)
    }

    fn check_cfg(&self, key: &ConfigKey, claimed: &Value) -> ClaimCheck {
        let mut at = self.config;
        let mut walked = ConfigKey(Vec::new());
        for part in &key.0 {
            let next = match (part, at) {
                (KeyPart::Key(k), Value::Object(m)) => m.get(k).ok_or_else(|| {
                    let here: Vec<&str> = m.keys().map(String::as_str).collect();
                    missing_key(self.config, &walked, k, &here)
                }),
                (KeyPart::Index(i), Value::Array(a)) => a.get(*i).ok_or_else(|| {
                    format!(
                        "config.json `{}` has {} elements",
                        show_key(&walked),
                        a.len()
                    )
                }),
                (KeyPart::Key(_), other) => Err(format!(
                    "config.json has no `{}`: `{}` is {}",
                    with(&walked, part),
                    show_key(&walked),
                    json_kind(other)
                )),
                (KeyPart::Index(_), other) => Err(format!(
                    "config.json `{}` is {}, not a list",
                    show_key(&walked),
                    json_kind(other)
                )),
            };
            match next {
                Ok(v) => at = v,
                Err(msg) => return ClaimCheck::fails(msg),
            }
            walked.0.push(part.clone());
        }
        if json_eq(at, claimed) {
            ClaimCheck::holds()
        } else {
            ClaimCheck::fails(format!("config.json has {key} = {}", show_json(at)))
        }
    }

    /// Tensors whose name matches `pattern` (`X` segments match any index), or the one tensor
    /// with exactly that name.
    fn matching(&self, pattern: &str) -> Vec<Tensor<'a>> {
        if let Some(t) = self.tensors.find(pattern) {
            return vec![t];
        }
        let segs: Vec<&str> = pattern.split('.').collect();
        let Some(last_x) = segs.iter().rposition(|s| *s == ANY_INDEX) else {
            return Vec::new();
        };
        // The literal tail after the last `X` rules out most names without walking segments.
        let tail: usize = segs[last_x + 1..].iter().map(|s| s.len() + 1).sum();
        let tail = &pattern[pattern.len() - tail..];
        self.candidates(pattern)
            .filter(|t| t.name.ends_with(tail) && match_head(&segs, t.name) == Some(t.name.len()))
            .collect()
    }

    /// Tensors that share the literal part of `pattern` before its first `X` (a range of the
    /// sorted list).
    fn candidates(&self, pattern: &str) -> impl Iterator<Item = Tensor<'a>> + use<'a> {
        let literal = match pattern.split('.').position(|s| s == ANY_INDEX) {
            Some(0) => "",
            Some(p) => {
                let end: usize = pattern.split('.').take(p).map(|s| s.len() + 1).sum();
                &pattern[..end]
            }
            None => pattern,
        };
        self.tensors.range(self.tensors.with_prefix(literal))
    }

    fn check_ckpt(
        &self,
        tensor: &str,
        shape: &[u64],
        dtype: Option<harch_guards::truth::Dtype>,
    ) -> ClaimCheck {
        let found = self.matching(tensor);
        if found.is_empty() {
            return ClaimCheck::fails(self.no_tensor(tensor));
        }
        let differs = |t: &Tensor| t.shape != shape || dtype.is_some_and(|d| d != t.dtype);
        let wrong: Vec<Tensor> = found
            .iter()
            .filter(|t| differs(t))
            .map(|t| Tensor { shard: None, ..*t })
            .collect();
        if wrong.is_empty() {
            return ClaimCheck::holds();
        }
        if found.len() == 1 {
            let t = found[0];
            return ClaimCheck::fails(format!("{} is {} {}", t.name, t.dtype, show_shape(t.shape)));
        }
        ClaimCheck::fails(format!(
            "{} of the {} tensors matching {tensor} differ: {}",
            wrong.len(),
            found.len(),
            first_lines(&ranges::compress(wrong.iter().copied()), 3)
        ))
    }

    /// What exists near a tensor name that does not: the deepest existing prefix and a few of
    /// the names under it.
    fn no_tensor(&self, name: &str) -> String {
        let segs: Vec<&str> = name.split('.').collect();
        for keep in (1..segs.len()).rev() {
            let prefix = format!("{}.", segs[..keep].join("."));
            let under: Vec<Tensor> = self
                .matching_prefix(&prefix)
                .into_iter()
                .take(4000)
                .collect();
            if under.is_empty() {
                continue;
            }
            let mut children: BTreeSet<String> = BTreeSet::new();
            for t in &under {
                let rest = &t.name[t.name.len().min(prefix.len())..];
                let child: Vec<&str> = rest.split('.').take(2).collect();
                children.insert(child.join("."));
                if children.len() >= 6 {
                    break;
                }
            }
            let list: Vec<String> = children.into_iter().collect();
            return format!(
                "no tensor named {name}; under {prefix}… there are {}",
                list.join(", ")
            );
        }
        format!("no tensor named {name}")
    }

    fn matching_prefix(&self, prefix: &str) -> Vec<Tensor<'a>> {
        let pattern = prefix.trim_end_matches('.');
        let segs: Vec<&str> = pattern.split('.').collect();
        self.candidates(prefix)
            .filter(|t| match_head(&segs, t.name).is_some_and(|end| end < t.name.len()))
            .collect()
    }

    fn check_count(&self, prefix: &str, n: u64) -> ClaimCheck {
        let segs: Vec<&str> = prefix.split('.').collect();
        // Distinct indices under each instance of the prefix (one instance unless it has `X`).
        let mut per: BTreeMap<&str, BTreeSet<u64>> = BTreeMap::new();
        // Names are sorted: the tensors of one index are neighbours, counted once.
        let mut last: Option<&str> = None;
        for t in self.candidates(prefix) {
            let Some(end) = match_head(&segs, t.name).filter(|&e| e < t.name.len()) else {
                continue;
            };
            let next = t.name[end + 1..].split('.').next().unwrap_or("");
            let head = &t.name[..end + 1 + next.len()];
            if last == Some(head) {
                continue;
            }
            last = Some(head);
            if let Some(i) = index_of(next) {
                per.entry(&t.name[..end]).or_default().insert(i);
            }
        }
        if per.is_empty() {
            if n == 0 {
                return ClaimCheck::holds();
            }
            return ClaimCheck::fails(format!(
                "no tensor is named {prefix}.<index>.…: the count is 0"
            ));
        }
        let wrong: Vec<String> = per
            .iter()
            .filter(|(_, set)| set.len() as u64 != n)
            .map(|(p, set)| format!("{p} has {}", set.len()))
            .collect();
        if wrong.is_empty() {
            return ClaimCheck::holds();
        }
        let shown: Vec<&String> = wrong.iter().take(4).collect();
        let more = if wrong.len() > 4 {
            format!(" and {} more", wrong.len() - 4)
        } else {
            String::new()
        };
        ClaimCheck::fails(format!(
            "{}{more} distinct indices",
            shown
                .iter()
                .map(|s| s.as_str())
                .collect::<Vec<_>>()
                .join(", ")
        ))
    }
}

fn index_of(seg: &str) -> Option<u64> {
    if seg.is_empty() || !seg.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    seg.parse().ok()
}

/// Matches `name`'s leading segments against `pattern` (`X` matches any index) and returns the
/// byte offset where the matched segments end (`name.len()` for a whole-name match, else the
/// offset of the `.` that follows). Allocation-free: it runs over every tensor of a checkpoint.
fn match_head(pattern: &[&str], name: &str) -> Option<usize> {
    let mut off = 0;
    for (i, p) in pattern.iter().enumerate() {
        if i > 0 {
            if name.as_bytes().get(off) != Some(&b'.') {
                return None;
            }
            off += 1;
        }
        let rest = &name[off..];
        let end = rest.find('.').unwrap_or(rest.len());
        let seg = &rest[..end];
        if seg != *p && !(*p == ANY_INDEX && index_of(seg).is_some()) {
            return None;
        }
        off += end;
    }
    Some(off)
}

fn first_lines(text: &str, n: usize) -> String {
    let lines: Vec<&str> = text.lines().collect();
    let mut out = lines[..lines.len().min(n)].join("; ");
    if lines.len() > n {
        out.push_str(&format!("; … {} more", lines.len() - n));
    }
    out
}

fn show_key(k: &ConfigKey) -> String {
    if k.0.is_empty() {
        "the top level".into()
    } else {
        k.to_string()
    }
}

fn with(k: &ConfigKey, part: &KeyPart) -> ConfigKey {
    let mut k = k.clone();
    k.0.push(part.clone());
    k
}

/// `config.json has no a.b`, with where that key does live, or the closest key at that level.
fn missing_key(config: &Value, walked: &ConfigKey, key: &str, here: &[&str]) -> String {
    let full = with(walked, &KeyPart::Key(key.to_string()));
    let mut msg = format!("config.json has no `{full}`");
    let mut elsewhere = Vec::new();
    find_key(config, key, &mut ConfigKey(Vec::new()), &mut elsewhere, 0);
    if !elsewhere.is_empty() {
        let shown: Vec<String> = elsewhere.iter().take(3).map(|k| format!("`{k}`")).collect();
        msg.push_str(&format!(" (it is at {})", shown.join(", ")));
    } else if let Some(c) = harch_engine::diag::closest(key, here.iter().copied()) {
        msg.push_str(&format!(
            " (did you mean `{}`?)",
            with(walked, &KeyPart::Key(c.into()))
        ));
    }
    msg
}

fn find_key(v: &Value, key: &str, path: &mut ConfigKey, out: &mut Vec<ConfigKey>, depth: usize) {
    if depth > 8 || out.len() >= 3 {
        return;
    }
    match v {
        Value::Object(m) => {
            for (k, x) in m {
                path.0.push(KeyPart::Key(k.clone()));
                if k == key {
                    out.push(path.clone());
                }
                find_key(x, key, path, out, depth + 1);
                path.0.pop();
            }
        }
        Value::Array(a) => {
            for (i, x) in a.iter().enumerate() {
                path.0.push(KeyPart::Index(i));
                find_key(x, key, path, out, depth + 1);
                path.0.pop();
            }
        }
        _ => {}
    }
}

fn json_kind(v: &Value) -> &'static str {
    match v {
        Value::Null => "null",
        Value::Bool(_) => "a boolean",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Array(_) => "a list",
        Value::Object(_) => "an object",
    }
}

fn show_json(v: &Value) -> String {
    clip(&serde_json::to_string(v).unwrap_or_default(), 200)
}

/// JSON equality with numbers compared as numbers (`128` = `128.0`, `1e-6` = `0.000001`).
pub fn json_eq(a: &Value, b: &Value) -> bool {
    match (a, b) {
        (Value::Number(x), Value::Number(y)) => {
            matches!((Num::from_json(x), Num::from_json(y)), (Some(p), Some(q)) if p == q)
        }
        (Value::Array(x), Value::Array(y)) => {
            x.len() == y.len() && x.iter().zip(y).all(|(p, q)| json_eq(p, q))
        }
        (Value::Object(x), Value::Object(y)) => {
            x.len() == y.len()
                && x.iter()
                    .all(|(k, p)| y.get(k).is_some_and(|q| json_eq(p, q)))
        }
        _ => a == b,
    }
}

fn is_word(c: char) -> bool {
    c.is_alphanumeric() || c == '_'
}

/// Whitespace-normalised text: runs of whitespace (line breaks included) count as one space,
/// and a space only separates two word characters (`foo( bar )` reads as `foo(bar)`, `a = b`
/// as `a=b`), so a quote matches however the source wrapped or spaced it.
pub fn normalize(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let mut pending = false;
    for c in text.chars() {
        if c.is_whitespace() {
            pending = true;
            continue;
        }
        if pending && out.chars().next_back().is_some_and(is_word) && is_word(c) {
            out.push(' ');
        }
        pending = false;
        out.push(c);
    }
    out
}

impl Source {
    fn new(text: &str) -> Source {
        let raw: Vec<&str> = text.lines().collect();
        let mut normalized = String::with_capacity(text.len());
        let mut spans = Vec::with_capacity(raw.len());
        let mut pending = false;
        for line in &raw {
            let mut start = None;
            for c in line.chars() {
                if c.is_whitespace() {
                    pending = true;
                    continue;
                }
                if pending && normalized.chars().next_back().is_some_and(is_word) && is_word(c) {
                    normalized.push(' ');
                }
                pending = false;
                start.get_or_insert(normalized.len());
                normalized.push(c);
            }
            let end = normalized.len();
            spans.push((start.unwrap_or(end), end));
            pending = true;
        }
        Source {
            lines: raw.len(),
            normalized,
            spans,
        }
    }

    /// Lines `first..=last` (1-based, in range), normalised as one text.
    fn slice(&self, first: usize, last: usize) -> &str {
        let a = self.spans[first - 1].0;
        let b = self.spans[last - 1].1.max(a);
        &self.normalized[a..b]
    }

    /// The first lines that contain `quote` (normalised), 1-based.
    fn find(&self, quote: &str) -> Option<(usize, usize)> {
        if quote.is_empty() {
            return None;
        }
        let at = self.normalized.find(quote)?;
        let end = at + quote.len();
        let first = self.spans.partition_point(|&(_, e)| e <= at) + 1;
        let last = self.spans.partition_point(|&(s, _)| s < end).max(first);
        Some((first, last))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn normalisation_ignores_wrapping_and_spacing() {
        assert_eq!(
            normalize("  query = l2norm(query,\n   dim=-1 )"),
            "query=l2norm(query,dim=-1)"
        );
        assert_eq!(normalize("return  x"), "return x");
        assert_ne!(normalize("returnx"), normalize("return x"));
    }

    #[test]
    fn a_quote_spanning_lines_is_found_where_it_is() {
        let text = "def f(x):\n    y = g(\n        x, 1)\n    return y\n";
        let s = Source::new(text);
        assert_eq!(s.lines, 4);
        assert!(s.slice(2, 3).contains(&normalize("y = g( x, 1)")));
        assert!(!s.slice(2, 2).contains(&normalize("y = g( x, 1)")));
        assert_eq!(s.find(&normalize("g(x, 1)")), Some((2, 3)));
        assert_eq!(s.find(&normalize("return y")), Some((4, 4)));
        assert_eq!(s.find("absent"), None);
    }

    #[test]
    fn name_heads_match_segment_by_segment() {
        let p = ["model", "layers", "X", "mlp"];
        assert_eq!(match_head(&p, "model.layers.12.mlp"), Some(19));
        assert_eq!(match_head(&p, "model.layers.12.mlp.gate.weight"), Some(19));
        assert_eq!(match_head(&p, "model.layers.x.mlp"), None);
        assert_eq!(match_head(&p, "model.layers.12.mlpx"), None);
        assert_eq!(match_head(&p, "model.layers.12"), None);
        assert_eq!(match_head(&p, "model.layers..mlp"), None);
        assert_eq!(
            match_head(&["X"], "X"),
            Some(1),
            "a literal X segment is itself"
        );
    }

    #[test]
    fn json_numbers_compare_as_numbers() {
        use serde_json::json;
        assert!(json_eq(&json!(128), &json!(128.0)));
        assert!(json_eq(&json!(1e-6), &json!(0.000001)));
        assert!(json_eq(&json!([1, 2.0]), &json!([1.0, 2])));
        assert!(!json_eq(&json!(128), &json!("128")));
        assert!(!json_eq(&json!([1]), &json!([1, 2])));
    }
}
