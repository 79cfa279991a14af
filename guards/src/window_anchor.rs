//! A cache that keeps another window than its attention attends, anchored (M055). DeepSeek-V4's
//! cache keeps `sliding_window - 1` positions (`self.keys = full[:, :, -self.sliding_window + 1
//! :, :]`) and its attention attends them with the current token: a 127-position cache beside a
//! 128-position attention. The spec says so with `window: "attn_window - 1"` and a `window_src:`
//! quote of that statement; the guards that hold a cache's window to its attention's (X002,
//! M053, R005) accept the difference only when the quote is an assignment of state kept across
//! calls (`self.<attr> = …`) whose value is a slice of trailing positions (`x[..., -n :, ...]`)
//! that keeps exactly the declared window, computed from config (`self.<attr>` read through the
//! class that sets it, its base classes, or the keyword it passes to `super().__init__`). What
//! they then compare with the attention is the window that statement reads from config.

use std::collections::{BTreeMap, BTreeSet};

use harch_engine::Analysis;
use harch_engine::ir::Growth;

use crate::pysrc::expr::{calls, eval, eval_with};
use crate::pysrc::{At, Kind, Module, Sources};
use crate::report::Diagnostic;
use crate::source::anchor_snippets;

pub const CODE: &str = "M055";

/// Bases followed when resolving `self.<attr>`: a class hierarchy is shallow.
const MAX_BASES: usize = 6;

/// Caches whose declared window a source statement keeps: cache index → the config values the
/// statement computes it from (the attention window the cache serves).
#[derive(Default, Debug)]
pub struct Anchored {
    by_cache: BTreeMap<usize, Vec<i128>>,
}

impl Anchored {
    /// Whether cache `k` keeps, by its anchor, what an attention over a window of `w` needs.
    pub fn serves(&self, k: usize, w: Option<i128>) -> bool {
        match (self.by_cache.get(&k), w) {
            (Some(from), Some(w)) => from.contains(&w),
            _ => false,
        }
    }
}

/// Reads every cache's `window_src:`; an anchor that does not hold is a located M055 (once per
/// entry and message: a component's cache repeats in every layer).
pub fn read(
    a: &Analysis,
    sources: &BTreeMap<String, String>,
    config: &serde_json::Value,
) -> (Anchored, Vec<Diagnostic>) {
    let mut out = Anchored::default();
    let mut diags = Vec::new();
    if a.caches.iter().all(|c| c.window_src.is_none()) {
        return (out, diags);
    }
    let files: Vec<(&String, &String)> = sources.iter().collect();
    let src = Sources::read(&files);
    let lookup = |k: &str| config.get(k).cloned();
    let mut said = BTreeSet::new();
    for (k, c) in a.caches.iter().enumerate() {
        let Some(quote) = &c.window_src else { continue };
        let declared = c.window.as_ref().map(|w| w.v);
        let fault = match (c.growth, declared) {
            (Growth::Window, Some(w)) => match keeps(&src, quote, w, &lookup) {
                Ok(from) => {
                    out.by_cache.insert(k, from);
                    continue;
                }
                Err(why) => why,
            },
            _ => format!(
                "`window_src:` on a cache that grows `{}`: only a window cache keeps a window",
                c.growth.as_str()
            ),
        };
        let msg = format!(
            "cache entry `{}`: the window anchor does not hold: {fault}",
            a.nodes[c.node].id.rsplit('.').next().unwrap_or("")
        );
        if said.insert((c.loc.file.clone(), c.loc.line, msg.clone())) {
            diags.push(
                Diagnostic::new("semantic", CODE, msg, c.loc.clone()).hint(
                    "quote (in backticks) the statement that computes what the cache keeps, e.g. `self.keys = full[:, :, -self.sliding_window + 1 :, :]` for `window: \"attn_window - 1\"`; or declare the attention's own window",
                ),
            );
        }
    }
    (out, diags)
}

/// The config values the quoted statement keeps `want` trailing positions from, or why not.
fn keeps(
    src: &Sources,
    quote: &str,
    want: i128,
    lookup: &dyn Fn(&str) -> Option<serde_json::Value>,
) -> Result<Vec<i128>, String> {
    let snippets = anchor_snippets(quote);
    let mut seen: Option<String> = None;
    for s in &snippets {
        for occ in src.locate(s) {
            for at in occ {
                let m = &src.modules[at.0];
                match trailing_slice(src, m, at, lookup) {
                    Some((kept, keys)) if kept == want => {
                        return Ok(keys
                            .iter()
                            .filter_map(|k| lookup(k).and_then(|v| v.as_i64()).map(i128::from))
                            .collect());
                    }
                    Some((kept, keys)) => {
                        seen.get_or_insert(format!(
                            "{} keeps {kept} positions (from `{}`), not the {want} the cache declares",
                            src.describe(at),
                            keys.join("`, `")
                        ));
                    }
                    None => {
                        seen.get_or_insert(format!(
                            "{} is no assignment of kept state to a slice of the last positions computed from config",
                            src.describe(at)
                        ));
                    }
                }
            }
        }
    }
    Err(seen.unwrap_or_else(|| {
        if snippets.is_empty() {
            "the anchor quotes nothing".into()
        } else {
            "the quote lies in no statement of the forward source (absent, or in a comment or docstring)".into()
        }
    }))
}

/// `self.<attr> = base[…, -n :, …]`: the n trailing positions kept, and the config keys n reads.
fn trailing_slice(
    src: &Sources,
    m: &Module,
    (mi, s): At,
    lookup: &dyn Fn(&str) -> Option<serde_json::Value>,
) -> Option<(i128, Vec<String>)> {
    let Kind::Assign {
        targets,
        value,
        aug: false,
    } = &m.stmts[s].kind
    else {
        return None;
    };
    if !m
        .targets(targets.clone())
        .iter()
        .any(|t| t.starts_with("self."))
    {
        return None;
    }
    m.subscript_target(value.clone())?;
    let close = value.end.checked_sub(1)?;
    let open = value
        .clone()
        .find(|&k| m.tok(k) == "[" && m.matching_close(k, value.end) == Some(close))?;
    // The one axis sliced from a start to the end; the other axes are taken whole (`:`).
    let mut sliced = None;
    for item in m.split_top(open + 1..close) {
        let colons: Vec<usize> = item.clone().filter(|&j| m.tok(j) == ":").collect();
        match colons.as_slice() {
            [c] if *c == item.start && item.len() == 1 => {}
            [c] if *c + 1 == item.end && *c > item.start && sliced.is_none() => {
                sliced = Some(item.start..*c)
            }
            _ => return None,
        }
    }
    let attrs = |attr: &str| attribute(src, mi, s, attr, lookup);
    let (start, keys) = eval_with(m, sliced?, lookup, Some(&attrs))?;
    (start < 0 && !keys.is_empty()).then_some((-start, keys))
}

/// What `self.<attr>` holds in the class whose method holds statement `s`: its assignment in
/// that class (or a base class), or the keyword the class passes to `super().__init__`.
fn attribute(
    src: &Sources,
    mi: usize,
    s: usize,
    attr: &str,
    lookup: &dyn Fn(&str) -> Option<serde_json::Value>,
) -> Option<(i128, Vec<String>)> {
    let m = &src.modules[mi];
    let def = m.enclosing_def(s)?;
    let class = m.stmts[def].parent?;
    let mut todo = vec![(mi, class)];
    let mut visited = 0;
    while let Some((mi, class)) = todo.pop() {
        visited += 1;
        if visited > MAX_BASES {
            break;
        }
        let m = &src.modules[mi];
        for k in m.body(class) {
            let st = &m.stmts[k];
            if let Kind::Assign {
                targets,
                value,
                aug: false,
            } = &st.kind
                && m.targets(targets.clone())
                    .contains(&format!("self.{attr}").as_str())
                && let Some(v) = eval(m, value.clone(), lookup)
            {
                return Some(v);
            }
            for c in calls(m, st.tokens.clone()) {
                if c.callee == ".__init__"
                    && let Some(a) = c.keyword(attr)
                    && let Some(v) = eval(m, a.value.clone(), lookup)
                {
                    return Some(v);
                }
            }
        }
        todo.extend(bases(src, m, class));
    }
    None
}

/// The classes a class statement names as bases, where the sources define them.
fn bases(src: &Sources, m: &Module, class: usize) -> Vec<(usize, usize)> {
    let toks = m.stmts[class].tokens.clone();
    let Some(open) = toks.clone().find(|&k| m.tok(k) == "(") else {
        return Vec::new();
    };
    let Some(close) = m.matching_close(open, toks.end) else {
        return Vec::new();
    };
    let names: Vec<&str> = m
        .split_top(open + 1..close)
        .into_iter()
        .map(|r| m.span(r).trim())
        .collect();
    let mut out = Vec::new();
    for (mi, md) in src.modules.iter().enumerate() {
        for (k, st) in md.stmts.iter().enumerate() {
            if let Kind::Class(n) = &st.kind
                && names.contains(&n.as_str())
            {
                out.push((mi, k));
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    const SRC: &str = r#"
class SlidingLayer(CacheLayer):
    def __init__(self, sliding_window):
        self.sliding_window = sliding_window

class V4Cache(SlidingLayer):
    def __init__(self, config):
        super().__init__(sliding_window=config.sliding_window)

    def update(self, key_states):
        full = torch.cat([self.keys, key_states], dim=-2)
        # self.keys = full[:, :, -self.sliding_window :, :]
        self.keys = full[:, :, -self.sliding_window + 1 :, :]
        return full, full

class Other(nn.Module):
    def __init__(self, config):
        self.window = config.sliding_window

    def forward(self, full):
        kept = full[:, :, -self.window :, :]
        self.tail = full[:, :, -self.window :, :]
"#;

    fn check(quote: &str, want: i128) -> Result<Vec<i128>, String> {
        let (n, t) = ("modeling_x.py".to_string(), SRC.to_string());
        let src = Sources::read(&[(&n, &t)]);
        let cfg = serde_json::json!({ "sliding_window": 128 });
        keeps(&src, quote, want, &|k: &str| cfg.get(k).cloned())
    }

    #[test]
    fn the_slice_that_keeps_the_window_anchors_it() {
        let q = "`self.keys = full[:, :, -self.sliding_window + 1 :, :]`";
        // Read through the keyword the class passes to its base's constructor.
        assert_eq!(check(q, 127), Ok(vec![128]));
        let why = check(q, 128).unwrap_err();
        assert!(
            why.contains("keeps 127 positions (from `sliding_window`), not the 128")
                && why.contains("modeling_x.py:13"),
            "{why}"
        );
    }

    #[test]
    fn a_quote_that_is_not_the_statement_does_not_anchor() {
        // In a comment only.
        let why = check("`self.keys = full[:, :, -self.sliding_window :, :]`", 128).unwrap_err();
        assert!(why.contains("no statement"), "{why}");
        // A statement that computes something else (no kept state, a concatenation).
        let why = check("`full = torch.cat([self.keys, key_states], dim=-2)`", 127).unwrap_err();
        assert!(why.contains("is no assignment of kept state"), "{why}");
        let why = check("`kept = full[:, :, -self.window :, :]`", 128).unwrap_err();
        assert!(why.contains("is no assignment of kept state"), "{why}");
        // Kept state, its attribute set in the class itself.
        assert_eq!(
            check("`self.tail = full[:, :, -self.window :, :]`", 128),
            Ok(vec![128])
        );
        // A bare number, no statement.
        assert!(check("127", 127).is_err());
    }
}
