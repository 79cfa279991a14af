//! What a decode step writes into its cache, and which statements produce what it writes.
//!
//! A cache write is a call on a cache object (`past_key_values.update(key_states, value_states,
//! …)`, `cache_params.update_recurrent_state(state, …)`) or a store into one of its lists
//! (`cache_params.recurrent_states[self.layer_idx] = state`). The statements that produce a
//! written value are found backwards from the write: the assignments in the same function that
//! bind the names it reads, again for the names those read, and through a call to a function
//! the sources define (`self.rule = chunk_rule or torch_chunk_rule`) into that function's
//! returned value. Module calls (`self.norm(x)`) are not followed: a module's internal upcast is
//! not what the cache keeps.

use std::collections::BTreeSet;
use std::ops::Range;

use super::expr::{calls, names};
use super::{At, Kind, Sources};

/// Statements visited by one backward walk.
const MAX_VISITS: usize = 4096;
/// Calls into defined functions followed, nested.
const MAX_CALL_DEPTH: usize = 3;

#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum CacheKind {
    /// Attention keys and values (and latents held in their place).
    Kv,
    /// A recurrent (linear-attention, SSM) state.
    State,
    /// A convolution's window of inputs.
    Conv,
}

#[derive(Clone, Debug)]
pub struct Write {
    pub at: At,
    pub kind: CacheKind,
    /// The written values' token ranges in the write's statement.
    pub values: Vec<Range<usize>>,
}

fn cache_object(receiver: &str) -> bool {
    let r = receiver.to_ascii_lowercase();
    r.contains("cache") || r.contains("past_key") || r.contains("layer_past")
}

fn kind_named(name: &str) -> CacheKind {
    let n = name.to_ascii_lowercase();
    if n.contains("conv") {
        CacheKind::Conv
    } else if n.contains("state") || n.contains("ssm") || n.contains("recurrent") {
        CacheKind::State
    } else {
        CacheKind::Kv
    }
}

/// Every cache write in the sources.
pub fn cache_writes(src: &Sources) -> Vec<Write> {
    let mut out = Vec::new();
    for (mi, m) in src.modules.iter().enumerate() {
        for (si, s) in m.stmts.iter().enumerate() {
            if let Kind::Assign { targets, value, .. } = &s.kind
                && let Some(base) = m.subscript_target(targets.clone())
                && let Some((recv, list)) = base.rsplit_once('.')
                && cache_object(recv)
            {
                out.push(Write {
                    at: (mi, si),
                    kind: kind_named(list),
                    values: vec![value.clone()],
                });
                continue;
            }
            for c in calls(m, s.tokens.clone()) {
                let method = c.method();
                if !(method == "update" || method.starts_with("update_"))
                    || !cache_object(c.receiver())
                {
                    continue;
                }
                let kind = kind_named(method);
                let n = if kind == CacheKind::Kv { 2 } else { 1 };
                let values: Vec<Range<usize>> =
                    c.positional().take(n).map(|a| a.value.clone()).collect();
                if !values.is_empty() {
                    out.push(Write {
                        at: (mi, si),
                        kind,
                        values,
                    });
                }
            }
        }
    }
    out
}

/// The statements that produce what `w` writes, the write itself included.
pub fn producers(src: &Sources, w: &Write) -> BTreeSet<At> {
    let mut out = BTreeSet::new();
    out.insert(w.at);
    let (mi, si) = w.at;
    let m = &src.modules[mi];
    let Some(def) = m.enclosing_def(si) else {
        return out;
    };
    let mut visits = 0usize;
    for v in &w.values {
        let wanted = names(m, v.clone());
        walk(src, mi, def, si, &wanted, 0, &mut out, &mut visits);
    }
    out
}

/// Statements of function `def` (module `mi`) before `before` that bind `wanted`, and theirs.
#[allow(clippy::too_many_arguments)]
fn walk(
    src: &Sources,
    mi: usize,
    def: usize,
    before: usize,
    wanted: &[&str],
    depth: usize,
    out: &mut BTreeSet<At>,
    visits: &mut usize,
) {
    let m = &src.modules[mi];
    let body = m.body(def);
    let mut todo: Vec<String> = wanted
        .iter()
        .filter(|n| **n != "self")
        .map(|n| n.to_string())
        .collect();
    let mut seen: BTreeSet<String> = todo.iter().cloned().collect();
    while let Some(name) = todo.pop() {
        for k in body.start..before.min(body.end) {
            *visits += 1;
            if *visits > MAX_VISITS {
                return;
            }
            let s = &m.stmts[k];
            let (bound, value) = match &s.kind {
                Kind::Assign { targets, value, .. } => (m.targets(targets.clone()), value.clone()),
                // `for x in xs:` binds x from xs.
                Kind::Block if m.tok(s.tokens.start) == "for" => {
                    let toks = s.tokens.clone();
                    let Some(inn) = toks.clone().find(|&j| m.tok(j) == "in") else {
                        continue;
                    };
                    (
                        m.targets(toks.start + 1..inn),
                        inn + 1..toks.end.saturating_sub(1),
                    )
                }
                _ => continue,
            };
            let Some(pos) = bound.iter().position(|b| *b == name) else {
                continue;
            };
            if !out.insert((mi, k)) {
                continue;
            }
            for n in names(m, value.clone()) {
                if n != "self" && seen.insert(n.to_string()) {
                    todo.push(n.to_string());
                }
            }
            if depth < MAX_CALL_DEPTH {
                let arity = bound.len();
                for c in calls(m, value.clone()) {
                    for (gi, gdef) in resolve(src, mi, def, &c.callee) {
                        returned(src, gi, gdef, pos, arity, depth + 1, out, visits);
                    }
                }
            }
        }
    }
}

/// The return statements of a function, and the producers of its result at `pos`.
#[allow(clippy::too_many_arguments)]
fn returned(
    src: &Sources,
    mi: usize,
    def: usize,
    pos: usize,
    arity: usize,
    depth: usize,
    out: &mut BTreeSet<At>,
    visits: &mut usize,
) {
    let m = &src.modules[mi];
    let body = m.body(def);
    for k in body.clone() {
        let Kind::Return(r) = &m.stmts[k].kind else {
            continue;
        };
        if m.enclosing_def(k) != Some(def) {
            continue;
        }
        let parts = m.split_top(r.clone());
        let part = if parts.len() == arity && arity > 1 {
            parts[pos].clone()
        } else {
            r.clone()
        };
        out.insert((mi, k));
        let wanted = names(m, part);
        walk(src, mi, def, k, &wanted, depth, out, visits);
    }
}

/// Functions the sources define that a callee names: `f`, `self.f` (a method of the calling
/// class, or the functions `self.f = a or b` binds).
fn resolve(src: &Sources, mi: usize, caller: usize, callee: &str) -> Vec<At> {
    let m = &src.modules[mi];
    let mut fns: Vec<String> = Vec::new();
    let mut methods_of: Option<&str> = None;
    match callee.strip_prefix("self.") {
        Some(attr) if !attr.contains('.') => {
            methods_of = m.class_of(caller);
            let target = format!("self.{attr}");
            for s in &m.stmts {
                if let Kind::Assign { targets, value, .. } = &s.kind
                    && m.targets(targets.clone()) == [target.as_str()]
                {
                    for n in names(m, value.clone()) {
                        if !fns.iter().any(|f| f == n) {
                            fns.push(n.to_string());
                        }
                    }
                }
            }
            if methods_of.is_some() {
                fns.push(format!("{attr}\0method"));
            }
        }
        Some(_) => return Vec::new(),
        None if !callee.contains('.') => fns.push(callee.to_string()),
        None => return Vec::new(),
    }
    fns.truncate(16);
    let mut out = Vec::new();
    for f in &fns {
        let (name, method) = match f.strip_suffix("\0method") {
            Some(n) => (n, true),
            None => (f.as_str(), false),
        };
        for (gi, g) in src.modules.iter().enumerate() {
            for (k, n, class) in g.defs() {
                let wanted = if method {
                    gi == mi && class.is_some() && class == methods_of
                } else {
                    class.is_none() && g.stmts[k].parent.is_none()
                };
                if n == name && wanted && !out.contains(&(gi, k)) {
                    out.push((gi, k));
                }
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    const SRC: &str = r#"
def torch_rule(query, key, value, initial_state=None):
    query, key, value = [x.to(torch.float32) for x in (query, key, value)]
    attn = torch.softmax(query @ key, dim=-1, dtype=torch.float32)
    last_state = torch.zeros(2).to(value) if initial_state is None else initial_state
    for i in range(3):
        last_state = last_state * 2
    return attn, last_state

class Norm(nn.Module):
    def forward(self, h):
        h = h.to(torch.float32)
        return self.weight * h

class Attn(nn.Module):
    def __init__(self, config):
        self.rule = fused_rule or torch_rule
        self.norm = Norm(config)

    def forward(self, x, past_key_values=None, cache_params=None):
        k = self.norm(self.k_proj(x))
        v = self.v_proj(x)
        scores = torch.softmax(k @ v, dim=-1, dtype=torch.float32)
        k, v = past_key_values.update(k, v, self.layer_idx)
        out, state = self.rule(x, k, v)
        cache_params.recurrent_states[self.layer_idx] = state
        cache_params.update_conv_state(x.to(torch.float32), self.layer_idx)
        return out
"#;

    fn lines(src: &Sources, set: &BTreeSet<At>) -> Vec<u32> {
        set.iter()
            .map(|(m, s)| src.modules[*m].stmts[*s].first_line)
            .collect()
    }

    #[test]
    fn writes_and_their_producers() {
        let (n, t) = ("m.py".to_string(), SRC.to_string());
        let src = Sources::read(&[(&n, &t)]);
        let ws = cache_writes(&src);
        let kinds: Vec<CacheKind> = ws.iter().map(|w| w.kind).collect();
        assert_eq!(kinds, [CacheKind::Kv, CacheKind::State, CacheKind::Conv]);
        // Keys and values: their projections and the write, not the softmax's or the norm's
        // upcast.
        assert_eq!(lines(&src, &producers(&src, &ws[0])), [21, 22, 24]);
        // The state: traced through `self.rule` into `torch_rule`'s second result.
        assert_eq!(
            lines(&src, &producers(&src, &ws[1])),
            [3, 5, 7, 8, 21, 22, 24, 25, 26]
        );
    }

    proptest::proptest! {
        #[test]
        fn any_text_is_walked_within_bounds(lines in proptest::collection::vec(
            "[ ]{0,8}(def f\\(|return |self\\.|cache\\.update\\(|cache\\.s\\[0\\] = |[a-c] = |\\(|\\)|,|:|[a-c]|\\.to\\(|for [a-c] in |f\\(){0,10}",
            0..30,
        )) {
            let text = lines.join("\n");
            let n = "m.py".to_string();
            let src = Sources::read(&[(&n, &text)]);
            for w in cache_writes(&src) {
                let _ = producers(&src, &w);
            }
        }
    }
}
