//! Inside a statement: the calls it makes (callee, arguments), the names it reads, and the
//! integer an expression computes from config (`config.num_hidden_layers + 1`,
//! `getattr(config, "n_group", 1)`), so that an anchor can be held to the value it claims.

use std::ops::Range;

use super::{Module, Tok};

/// Calls read from one range; a statement has far fewer.
const MAX_CALLS: usize = 512;
/// Nesting of an evaluated expression.
const MAX_DEPTH: usize = 48;

#[derive(Clone, Debug)]
pub struct Call {
    /// The dotted name called (`past_key_values.update`, `torch.topk`); a method called on an
    /// expression starts with `.` (`.to` in `x.float().to(y)`).
    pub callee: String,
    /// Positional and keyword arguments, in order.
    pub args: Vec<Arg>,
    /// The whole call's tokens (callee to closing parenthesis).
    pub span: Range<usize>,
}

#[derive(Clone, Debug)]
pub struct Arg {
    pub kw: Option<String>,
    pub value: Range<usize>,
}

impl Call {
    /// The last segment of the callee (`update` for `past_key_values.update`).
    pub fn method(&self) -> &str {
        self.callee.rsplit('.').next().unwrap_or("")
    }

    /// What the method is called on (`past_key_values`), empty for a plain function.
    pub fn receiver(&self) -> &str {
        self.callee.rsplit_once('.').map(|(r, _)| r).unwrap_or("")
    }

    pub fn positional(&self) -> impl Iterator<Item = &Arg> {
        self.args.iter().filter(|a| a.kw.is_none())
    }

    pub fn keyword(&self, kw: &str) -> Option<&Arg> {
        self.args.iter().find(|a| a.kw.as_deref() == Some(kw))
    }
}

const KEYWORDS: [&str; 24] = [
    "if", "else", "elif", "for", "in", "and", "or", "not", "is", "return", "lambda", "while",
    "with", "as", "yield", "await", "assert", "del", "raise", "from", "import", "None", "True",
    "False",
];

/// Every call in `r`, nested ones included, outermost first.
pub fn calls(m: &Module, r: Range<usize>) -> Vec<Call> {
    let mut out = Vec::new();
    for k in r.clone() {
        if out.len() >= MAX_CALLS {
            break;
        }
        if m.tok(k) != "(" || k == r.start {
            continue;
        }
        let Some(callee_start) = dotted_start(m, r.start, k) else {
            continue;
        };
        let Some(close) = m.matching_close(k, r.end) else {
            continue;
        };
        let mut callee = m.span(callee_start..k).to_string();
        if callee_start > r.start && m.tok(callee_start - 1) == "." {
            callee.insert(0, '.');
        }
        let args = m
            .split_top(k + 1..close)
            .into_iter()
            .map(|a| {
                let kw = (a.len() >= 2
                    && m.tokens[a.start].kind == Tok::Name
                    && m.tok(a.start + 1) == "=")
                    .then(|| m.tok(a.start).to_string());
                let value = if kw.is_some() { a.start + 2..a.end } else { a };
                Arg { kw, value }
            })
            .collect();
        out.push(Call {
            callee,
            args,
            span: callee_start..close + 1,
        });
    }
    out
}

/// The first token of the dotted name ending just before token `open`.
fn dotted_start(m: &Module, from: usize, open: usize) -> Option<usize> {
    let mut k = open.checked_sub(1)?;
    if k < from || m.tokens[k].kind != Tok::Name || KEYWORDS.contains(&m.tok(k)) {
        return None;
    }
    while k >= from + 2 && m.tok(k - 1) == "." && m.tokens[k - 2].kind == Tok::Name {
        k -= 2;
    }
    Some(k)
}

/// Names an expression reads: not attribute names after a dot, keyword-argument names or
/// keywords.
pub fn names<'s>(m: &Module<'s>, r: Range<usize>) -> Vec<&'s str> {
    let mut out: Vec<&str> = Vec::new();
    for k in r.clone() {
        if m.tokens.get(k).is_none_or(|t| t.kind != Tok::Name) {
            continue;
        }
        let w = m.tok(k);
        if KEYWORDS.contains(&w) || (k > r.start && m.tok(k - 1) == ".") {
            continue;
        }
        let kwarg = k + 1 < r.end
            && m.tok(k + 1) == "="
            && k > r.start
            && matches!(m.tok(k - 1), "(" | ",");
        if !kwarg && !out.contains(&w) {
            out.push(w);
        }
    }
    out
}

/// The integer an expression computes, and the config keys it read; `None` when it reads
/// something other than config, integers and `+ - * // / % min max int len getattr`.
/// `lookup` finds a config key (after any aliasing the caller does).
pub fn eval(
    m: &Module,
    r: Range<usize>,
    lookup: &dyn Fn(&str) -> Option<serde_json::Value>,
) -> Option<(i128, Vec<String>)> {
    eval_with(m, r, lookup, None)
}

/// An attribute of the object a method runs on (`self.sliding_window`), resolved by the caller
/// to the integer it holds and the config keys that integer was computed from.
pub type Attrs<'a> = &'a dyn Fn(&str) -> Option<(i128, Vec<String>)>;

/// [`eval`], with `self.<attr>` read through `attrs`.
pub fn eval_with(
    m: &Module,
    r: Range<usize>,
    lookup: &dyn Fn(&str) -> Option<serde_json::Value>,
    attrs: Option<Attrs>,
) -> Option<(i128, Vec<String>)> {
    let mut p = Parser {
        m,
        at: r.start,
        end: r.end,
        lookup,
        attrs,
        keys: Vec::new(),
        depth: 0,
    };
    let v = p.sum()?;
    (p.at == p.end).then_some((v, p.keys))
}

/// How many iterations a `range(...)` call runs, and the config keys it read.
pub fn range_count(
    m: &Module,
    c: &Call,
    lookup: &dyn Fn(&str) -> Option<serde_json::Value>,
) -> Option<(i128, Vec<String>)> {
    if c.callee != "range" || c.args.iter().any(|a| a.kw.is_some()) {
        return None;
    }
    match c.args.as_slice() {
        [n] => eval(m, n.value.clone(), lookup),
        [a, b] => {
            let (a, mut ka) = eval(m, a.value.clone(), lookup)?;
            let (b, kb) = eval(m, b.value.clone(), lookup)?;
            ka.extend(kb);
            Some(((b - a).max(0), ka))
        }
        _ => None,
    }
}

struct Parser<'a, 'm> {
    m: &'a Module<'m>,
    at: usize,
    end: usize,
    lookup: &'a dyn Fn(&str) -> Option<serde_json::Value>,
    attrs: Option<Attrs<'a>>,
    keys: Vec<String>,
    depth: usize,
}

impl Parser<'_, '_> {
    fn peek(&self) -> &str {
        if self.at < self.end {
            self.m.tok(self.at)
        } else {
            ""
        }
    }

    fn eat(&mut self, t: &str) -> bool {
        if self.peek() == t {
            self.at += 1;
            true
        } else {
            false
        }
    }

    fn sum(&mut self) -> Option<i128> {
        self.depth += 1;
        if self.depth > MAX_DEPTH {
            return None;
        }
        let mut v = self.product()?;
        loop {
            if self.eat("+") {
                v = v.checked_add(self.product()?)?;
            } else if self.eat("-") {
                v = v.checked_sub(self.product()?)?;
            } else {
                break;
            }
        }
        self.depth -= 1;
        Some(v)
    }

    fn product(&mut self) -> Option<i128> {
        let mut v = self.unary()?;
        loop {
            if self.eat("*") {
                v = v.checked_mul(self.unary()?)?;
            } else if self.eat("//") {
                v = v.checked_div_euclid(self.unary()?)?;
            } else if self.eat("/") {
                let d = self.unary()?;
                // True division is exact or not an integer.
                if d == 0 || v % d != 0 {
                    return None;
                }
                v /= d;
            } else if self.eat("%") {
                v = v.checked_rem_euclid(self.unary()?)?;
            } else {
                break;
            }
        }
        Some(v)
    }

    fn unary(&mut self) -> Option<i128> {
        if self.eat("-") {
            self.depth += 1;
            if self.depth > MAX_DEPTH {
                return None;
            }
            return self.unary()?.checked_neg();
        }
        self.atom()
    }

    fn atom(&mut self) -> Option<i128> {
        if self.eat("(") {
            let v = self.sum()?;
            return self.eat(")").then_some(v);
        }
        let t = self.m.tokens.get(self.at).copied()?;
        if self.at >= self.end {
            return None;
        }
        match t.kind {
            Tok::Number => {
                self.at += 1;
                let s = self.m.tok(self.at - 1).replace('_', "");
                s.parse::<i128>().ok()
            }
            Tok::Name => {
                let mut path = vec![self.m.tok(self.at).to_string()];
                self.at += 1;
                while self.peek() == "." {
                    self.at += 1;
                    if self
                        .m
                        .tokens
                        .get(self.at)
                        .is_none_or(|t| t.kind != Tok::Name)
                    {
                        return None;
                    }
                    path.push(self.m.tok(self.at).to_string());
                    self.at += 1;
                }
                if self.peek() == "(" {
                    return self.call(&path);
                }
                if let (Some(attrs), [s, attr]) = (self.attrs, path.as_slice())
                    && s == "self"
                    && config_key(&path).is_none()
                {
                    let (v, keys) = attrs(attr)?;
                    self.keys.extend(keys);
                    return Some(v);
                }
                let key = config_key(&path)?;
                self.read(&key)?.as_i64().map(i128::from)
            }
            _ => None,
        }
    }

    fn read(&mut self, key: &str) -> Option<serde_json::Value> {
        self.keys.push(key.to_string());
        (self.lookup)(key).filter(|v| !v.is_null())
    }

    fn args(&mut self) -> Option<Vec<Range<usize>>> {
        let open = self.at;
        let close = self.m.matching_close(open, self.end)?;
        self.at = close + 1;
        Some(self.m.split_top(open + 1..close))
    }

    fn sub(&mut self, r: Range<usize>) -> Option<i128> {
        let (at, end) = (self.at, self.end);
        self.at = r.start;
        self.end = r.end;
        let v = self.sum();
        let whole = self.at == self.end;
        self.at = at;
        self.end = end;
        v.filter(|_| whole)
    }

    fn call(&mut self, path: &[String]) -> Option<i128> {
        let name = path.join(".");
        let args = self.args()?;
        match name.as_str() {
            "int" if args.len() == 1 => self.sub(args[0].clone()),
            "min" | "max" if args.len() >= 2 => {
                let mut vs = Vec::new();
                for a in args {
                    vs.push(self.sub(a)?);
                }
                if name == "min" {
                    vs.into_iter().min()
                } else {
                    vs.into_iter().max()
                }
            }
            "len" if args.len() == 1 => {
                let r = args[0].clone();
                let path: Vec<String> = self.m.span(r).split('.').map(str::to_string).collect();
                let key = config_key(&path)?;
                self.read(&key)?.as_array().map(|a| a.len() as i128)
            }
            "getattr" if args.len() >= 2 => {
                let obj: Vec<String> = self
                    .m
                    .span(args[0].clone())
                    .split('.')
                    .map(str::to_string)
                    .collect();
                if !is_config(&obj) {
                    return None;
                }
                let key = string_literal(self.m.span(args[1].clone()))?;
                match self.read(&key) {
                    Some(v) => v.as_i64().map(i128::from),
                    None => self.sub(args.get(2)?.clone()),
                }
            }
            _ => {
                // `config.get("key", default)`
                let (obj, method) = path.split_at(path.len().checked_sub(1)?);
                if method[0] != "get" || !is_config(obj) || args.is_empty() {
                    return None;
                }
                let key = string_literal(self.m.span(args[0].clone()))?;
                match self.read(&key) {
                    Some(v) => v.as_i64().map(i128::from),
                    None => self.sub(args.get(1)?.clone()),
                }
            }
        }
    }
}

/// `config`, `self.config`, `text_config`: an object whose attributes are config keys.
fn is_config(path: &[String]) -> bool {
    match path {
        [c] => c == "config" || c.ends_with("_config") || c == "cfg",
        [s, c] => s == "self" && (c == "config" || c.ends_with("_config")),
        _ => false,
    }
}

/// The key a dotted read names (`config.num_hidden_layers`, `self.config.n_group`).
fn config_key(path: &[String]) -> Option<String> {
    let (key, obj) = path.split_last()?;
    is_config(obj).then(|| key.clone())
}

fn string_literal(s: &str) -> Option<String> {
    let s = s.trim();
    let q = s.chars().next().filter(|c| *c == '"' || *c == '\'')?;
    s.strip_prefix(q)?.strip_suffix(q).map(str::to_string)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::pysrc::Kind;

    fn value_of(m: &Module, prefix: &str) -> Range<usize> {
        m.stmts
            .iter()
            .enumerate()
            .find_map(|(k, s)| match &s.kind {
                Kind::Assign { value, .. } if m.stmt_text(k).starts_with(prefix) => {
                    Some(value.clone())
                }
                _ => None,
            })
            .unwrap()
    }

    #[test]
    fn calls_and_names() {
        let src = "out = x.transpose(1, 2).to(torch.float32, non_blocking=y)\n";
        let m = Module::read("m.py", src);
        let cs = calls(&m, value_of(&m, "out"));
        let names_: Vec<&str> = cs.iter().map(|c| c.callee.as_str()).collect();
        assert_eq!(names_, ["x.transpose", ".to"]);
        assert_eq!(
            cs[1]
                .keyword("non_blocking")
                .map(|a| m.span(a.value.clone())),
            Some("y")
        );
        assert_eq!(cs[0].receiver(), "x");
        assert_eq!(names(&m, value_of(&m, "out")), ["x", "torch", "y"]);
    }

    #[test]
    fn evaluates_config_arithmetic() {
        let src = "a = config.num_experts_per_tok + 1\nb = getattr(config, 'n_group', 2) * (self.config.top_k // 2)\nc = x.top_k\nfor i in range(config.n + config.m): pass\n";
        let m = Module::read("m.py", src);
        let cfg = serde_json::json!({"num_experts_per_tok": 8, "top_k": 6, "n": 3, "m": 1});
        let look = |k: &str| cfg.get(k).cloned();
        assert_eq!(
            eval(&m, value_of(&m, "a"), &look),
            Some((9, vec!["num_experts_per_tok".to_string()]))
        );
        assert_eq!(eval(&m, value_of(&m, "b"), &look).map(|v| v.0), Some(6));
        assert_eq!(eval(&m, value_of(&m, "c"), &look), None);
        let for_ = m.stmts.iter().position(|s| s.kind == Kind::Block).unwrap();
        let cs = calls(&m, m.stmts[for_].tokens.clone());
        assert_eq!(range_count(&m, &cs[0], &look).map(|v| v.0), Some(4));
    }

    proptest::proptest! {
        /// Any expression text evaluates or not without a panic (overflow, division by zero,
        /// deep nesting are `None`).
        #[test]
        fn any_expression_is_bounded(e in "(\\(|\\)|-|\\+|\\*|//|/|%|config\\.[a-c]|[0-9]{1,20}|min\\(|max\\(|,|getattr\\(config, 'a', |len\\(){0,60}") {
            let src = format!("v = {e}\n");
            let m = Module::read("m.py", &src);
            let cfg = serde_json::json!({"a": 170141183460469231731687303715884105727i128 as f64, "b": 0, "c": [1, 2]});
            let look = |k: &str| cfg.get(k).cloned();
            for (k, s) in m.stmts.iter().enumerate() {
                let _ = eval(&m, s.tokens.clone(), &look);
                for c in calls(&m, m.stmts[k].tokens.clone()) {
                    let _ = range_count(&m, &c, &look);
                }
            }
        }
    }
}
