//! A reader of the forward source's structure: the statements of a modeling file, each with its
//! enclosing block (class, function, `if`/`for`/`with`), assignments with their targets and
//! values, calls with their arguments, and the cache writes a decode step makes.
//!
//! Guards ask it which statement a quote belongs to and what that statement does, instead of
//! whether a string occurs: an anchor is the statement that computes what it justifies.
//!
//! Not a full Python parser: it covers the statement level (indentation, logical lines) and,
//! inside a statement, token slices with bracket structure. Bounded on any input (see
//! [`lex::MAX_BYTES`], [`lex::MAX_TOKENS`] and the budgets of `expr` and `flow`).

pub mod expr;
pub mod flow;
mod lex;
pub mod real;

use std::ops::Range;

pub use lex::{Tok, Token};

/// What a statement is.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Kind {
    Class(String),
    Def(String),
    /// `targets = value` (or `targets op= value` when `aug`); token ranges.
    Assign {
        targets: Range<usize>,
        value: Range<usize>,
        aug: bool,
    },
    Return(Range<usize>),
    /// Another compound statement's header (`if`, `for`, `with`, `else:` …).
    Block,
    Other,
}

#[derive(Clone, Debug)]
pub struct Stmt {
    pub tokens: Range<usize>,
    pub indent: u32,
    /// The compound statement whose body holds this one.
    pub parent: Option<usize>,
    pub first_line: u32,
    pub last_line: u32,
    pub kind: Kind,
}

/// One source file read into statements.
pub struct Module<'s> {
    pub name: &'s str,
    pub text: &'s str,
    pub tokens: Vec<Token>,
    pub stmts: Vec<Stmt>,
    /// Each statement's text with whitespace runs collapsed, back to back with one space
    /// between them, and where each statement starts in it.
    normalized: String,
    starts: Vec<usize>,
}

impl<'s> Module<'s> {
    pub fn read(name: &'s str, text: &'s str) -> Module<'s> {
        let (tokens, lines) = lex::lex(text);
        let mut stmts: Vec<Stmt> = Vec::with_capacity(lines.len());
        // Open compound statements: (indent, statement index).
        let mut open: Vec<(u32, usize)> = Vec::new();
        for l in lines {
            while open.last().is_some_and(|(ind, _)| *ind >= l.indent) {
                open.pop();
            }
            let kind = kind_of(text, &tokens, l.tokens.clone());
            let compound = tokens[l.tokens.clone()]
                .last()
                .is_some_and(|t| tok_text(text, t) == ":");
            let idx = stmts.len();
            stmts.push(Stmt {
                tokens: l.tokens,
                indent: l.indent,
                parent: open.last().map(|(_, s)| *s),
                first_line: l.first_line,
                last_line: l.last_line,
                kind,
            });
            if compound {
                open.push((l.indent, idx));
            }
        }
        let mut normalized = String::new();
        let mut starts = Vec::with_capacity(stmts.len());
        for s in &stmts {
            starts.push(normalized.len());
            for w in span_text(text, &tokens, s.tokens.clone()).split_whitespace() {
                normalized.push_str(w);
                normalized.push(' ');
            }
        }
        Module {
            name,
            text,
            tokens,
            stmts,
            normalized,
            starts,
        }
    }

    /// The source text of a token range, as written.
    pub fn span(&self, r: Range<usize>) -> &'s str {
        span_text(self.text, &self.tokens, r)
    }

    pub fn tok(&self, i: usize) -> &'s str {
        self.tokens
            .get(i)
            .map(|t| tok_text(self.text, t))
            .unwrap_or("")
    }

    /// A statement's text as written.
    pub fn stmt_text(&self, s: usize) -> &'s str {
        self.span(self.stmts[s].tokens.clone())
    }

    /// The innermost function whose body holds statement `s`.
    pub fn enclosing_def(&self, s: usize) -> Option<usize> {
        let mut p = self.stmts[s].parent;
        let mut guard = 0;
        while let Some(k) = p {
            if matches!(self.stmts[k].kind, Kind::Def(_)) {
                return Some(k);
            }
            p = self.stmts[k].parent;
            guard += 1;
            if guard > 256 {
                break;
            }
        }
        None
    }

    /// The class whose body defines function `def` (directly).
    pub fn class_of(&self, def: usize) -> Option<&str> {
        let p = self.stmts[def].parent?;
        match &self.stmts[p].kind {
            Kind::Class(n) => Some(n),
            _ => None,
        }
    }

    /// The statements inside compound statement `s` (every depth).
    pub fn body(&self, s: usize) -> Range<usize> {
        let ind = self.stmts[s].indent;
        let end = (s + 1..self.stmts.len())
            .find(|&k| self.stmts[k].indent <= ind)
            .unwrap_or(self.stmts.len());
        s + 1..end
    }

    /// Function definitions: (statement, name, class it is a method of).
    pub fn defs(&self) -> impl Iterator<Item = (usize, &str, Option<&str>)> + '_ {
        self.stmts
            .iter()
            .enumerate()
            .filter_map(|(k, s)| match &s.kind {
                Kind::Def(n) => Some((k, n.as_str(), self.class_of(k))),
                _ => None,
            })
    }

    /// The statements a quote lies in (whitespace-insensitive): each occurrence's statements,
    /// first to last. A quote inside a comment or docstring alone lies in none.
    pub fn locate(&self, quote: &str) -> Vec<Vec<usize>> {
        let want = normalize(quote);
        if want.is_empty() {
            return Vec::new();
        }
        let stmt_at = |off: usize| self.starts.partition_point(|&s| s <= off).saturating_sub(1);
        self.normalized
            .match_indices(&want)
            .take(64)
            .map(|(at, _)| (stmt_at(at)..=stmt_at(at + want.len().saturating_sub(1))).collect())
            .collect()
    }

    /// Names an assignment binds: plain names and dotted attributes (`self.top_k`), each
    /// element of a tuple target, subscripts as their base (`cache.states[i]` binds nothing
    /// here; see [`Module::subscript_target`]).
    pub fn targets(&self, r: Range<usize>) -> Vec<&'s str> {
        self.split_top(r)
            .into_iter()
            .filter_map(|p| {
                let p = self.strip_brackets(p);
                let t = self.span(p.clone());
                let dotted = !t.is_empty()
                    && self.tokens[p]
                        .iter()
                        .all(|k| k.kind == Tok::Name || tok_text(self.text, k) == ".");
                dotted.then_some(t)
            })
            .collect()
    }

    /// `base[...]` as a whole target: `base`.
    pub fn subscript_target(&self, r: Range<usize>) -> Option<&'s str> {
        let last = r.end.checked_sub(1)?;
        if self.tok(last) != "]" {
            return None;
        }
        let open = self.matching_open(r.start, last)?;
        let base = r.start..open;
        let ok = !base.is_empty()
            && self.tokens[base.clone()]
                .iter()
                .all(|k| k.kind == Tok::Name || tok_text(self.text, k) == ".");
        ok.then(|| self.span(base))
    }

    /// Elements of a comma-separated range at bracket depth 0.
    pub fn split_top(&self, r: Range<usize>) -> Vec<Range<usize>> {
        let mut out = Vec::new();
        let (mut depth, mut from) = (0i32, r.start);
        for k in r.clone() {
            match self.tok(k) {
                "(" | "[" | "{" => depth += 1,
                ")" | "]" | "}" => depth -= 1,
                "," if depth == 0 => {
                    if from < k {
                        out.push(from..k);
                    }
                    from = k + 1;
                }
                _ => {}
            }
        }
        if from < r.end {
            out.push(from..r.end);
        }
        out
    }

    /// A range without one pair of enclosing parentheses or brackets.
    pub fn strip_brackets(&self, r: Range<usize>) -> Range<usize> {
        if r.len() >= 2
            && matches!(self.tok(r.start), "(" | "[")
            && self.matching_close(r.start, r.end) == Some(r.end - 1)
        {
            return r.start + 1..r.end - 1;
        }
        r
    }

    /// The bracket that closes the one opening at `open`, before `end`.
    pub fn matching_close(&self, open: usize, end: usize) -> Option<usize> {
        let mut depth = 0i32;
        for k in open..end.min(self.tokens.len()) {
            match self.tok(k) {
                "(" | "[" | "{" => depth += 1,
                ")" | "]" | "}" => {
                    depth -= 1;
                    if depth == 0 {
                        return Some(k);
                    }
                }
                _ => {}
            }
        }
        None
    }

    fn matching_open(&self, from: usize, close: usize) -> Option<usize> {
        let mut depth = 0i32;
        for k in (from..=close).rev() {
            match self.tok(k) {
                ")" | "]" | "}" => depth += 1,
                "(" | "[" | "{" => {
                    depth -= 1;
                    if depth == 0 {
                        return Some(k);
                    }
                }
                _ => {}
            }
        }
        None
    }
}

fn tok_text<'s>(text: &'s str, t: &Token) -> &'s str {
    text.get(t.start as usize..t.end as usize).unwrap_or("")
}

fn span_text<'s>(text: &'s str, tokens: &[Token], r: Range<usize>) -> &'s str {
    if r.is_empty() || r.end > tokens.len() {
        return "";
    }
    text.get(tokens[r.start].start as usize..tokens[r.end - 1].end as usize)
        .unwrap_or("")
}

/// Whitespace runs collapsed to one space.
pub fn normalize(s: &str) -> String {
    s.split_whitespace().collect::<Vec<_>>().join(" ")
}

fn kind_of(text: &str, tokens: &[Token], r: Range<usize>) -> Kind {
    let t = |k: usize| tokens.get(k).map(|x| tok_text(text, x)).unwrap_or("");
    let mut first = r.start;
    while t(first) == "@" || t(first) == "async" {
        if t(first) == "async" {
            first += 1;
            continue;
        }
        return Kind::Other; // a decorator line
    }
    match t(first) {
        "class" => return Kind::Class(t(first + 1).to_string()),
        "def" => return Kind::Def(t(first + 1).to_string()),
        "return" => return Kind::Return(first + 1..r.end),
        "if" | "elif" | "else" | "for" | "while" | "with" | "try" | "except" | "finally"
        | "match" | "case" => return Kind::Block,
        _ => {}
    }
    // The last `=` (or augmented operator) at depth 0 splits targets from the value;
    // `a = b = c` binds `a = b` as targets, which is enough for the guards.
    let mut depth = 0i32;
    let mut split: Option<(usize, bool)> = None;
    for k in r.clone() {
        match t(k) {
            "(" | "[" | "{" => depth += 1,
            ")" | "]" | "}" => depth -= 1,
            "=" if depth == 0 && split.is_none() => split = Some((k, false)),
            "lambda" if depth == 0 => break,
            op if depth == 0
                && split.is_none()
                && op.len() >= 2
                && op.ends_with('=')
                && !matches!(op, "==" | "!=" | "<=" | ">=" | ":=") =>
            {
                split = Some((k, true))
            }
            _ => {}
        }
    }
    match split {
        Some((k, aug)) => {
            // An annotated target (`x: int = 3`) binds `x`.
            let mut end = k;
            let mut d = 0i32;
            for j in r.start..k {
                match t(j) {
                    "(" | "[" | "{" => d += 1,
                    ")" | "]" | "}" => d -= 1,
                    ":" if d == 0 => {
                        end = j;
                        break;
                    }
                    _ => {}
                }
            }
            Kind::Assign {
                targets: r.start..end,
                value: k + 1..r.end,
                aug,
            }
        }
        None => Kind::Other,
    }
}

/// Several files read into statements.
pub struct Sources<'s> {
    pub modules: Vec<Module<'s>>,
}

/// A statement of one of the files: (module index, statement index).
pub type At = (usize, usize);

impl<'s> Sources<'s> {
    pub fn read(files: &[(&'s String, &'s String)]) -> Sources<'s> {
        Sources {
            modules: files
                .iter()
                .map(|(n, t)| Module::read(n.as_str(), t.as_str()))
                .collect(),
        }
    }

    /// The statements a quote lies in, over every file (each occurrence's first statement
    /// is enough for most guards; all are returned).
    pub fn locate(&self, quote: &str) -> Vec<Vec<At>> {
        let mut out = Vec::new();
        for (mi, m) in self.modules.iter().enumerate() {
            for occ in m.locate(quote) {
                out.push(occ.into_iter().map(|s| (mi, s)).collect());
            }
        }
        out
    }

    /// `file:line` and the statement's first line, for messages.
    pub fn describe(&self, (m, s): At) -> String {
        let md = &self.modules[m];
        let text = md.stmt_text(s);
        let first = text.lines().next().unwrap_or("").trim();
        let more = if text.lines().nth(1).is_some() {
            " …"
        } else {
            ""
        };
        format!("`{first}{more}` ({}:{})", md.name, md.stmts[s].first_line)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const SRC: &str = r#"
class Gate(nn.Module):
    """A gate (with a bracket: [ in its docstring)."""

    def __init__(self, config):
        super().__init__()
        self.top_k = config.num_experts_per_tok  # the experts per token
        self.norm: bool = config.norm_topk_prob

    def forward(self, x):
        scores = x.sigmoid()
        if self.norm:
            w, i = torch.topk(
                scores, k=self.top_k, dim=-1
            )
        return w / w.sum(-1, keepdim=True), i
"#;

    #[test]
    fn statements_blocks_and_targets() {
        let m = Module::read("m.py", SRC);
        let kinds: Vec<&Kind> = m.stmts.iter().map(|s| &s.kind).collect();
        assert_eq!(kinds[0], &Kind::Class("Gate".into()));
        assert!(matches!(kinds[2], Kind::Def(n) if n == "__init__"));
        let topk = (0..m.stmts.len())
            .find(|&s| m.stmt_text(s).starts_with("w, i ="))
            .unwrap();
        let Kind::Assign {
            targets,
            value,
            aug,
        } = m.stmts[topk].kind.clone()
        else {
            panic!("{:?}", m.stmts[topk].kind)
        };
        assert!(!aug);
        assert_eq!(m.targets(targets), ["w", "i"]);
        assert!(m.span(value).starts_with("torch.topk("));
        assert_eq!(
            (m.stmts[topk].first_line, m.stmts[topk].last_line),
            (13, 15)
        );
        let def = m.enclosing_def(topk).unwrap();
        assert_eq!(m.class_of(def), Some("Gate"));
        assert!(matches!(
            &m.stmts[m.stmts[topk].parent.unwrap()].kind,
            Kind::Block
        ));
        let norm = (0..m.stmts.len())
            .find(|&s| m.stmt_text(s).starts_with("self.norm"))
            .unwrap();
        let Kind::Assign { targets, .. } = m.stmts[norm].kind.clone() else {
            panic!()
        };
        assert_eq!(m.targets(targets), ["self.norm"]);
    }

    #[test]
    fn quotes_locate_statements_not_comments() {
        let m = Module::read("m.py", SRC);
        let at = m.locate("self.top_k =   config.num_experts_per_tok");
        assert_eq!(at.len(), 1);
        assert!(m.stmt_text(at[0][0]).starts_with("self.top_k"));
        assert!(m.locate("the experts per token").is_empty());
        assert!(m.locate("with a bracket").len() == 1); // inside the docstring statement
        let span = m.locate("k=self.top_k, dim=-1 ) return w");
        assert_eq!(span[0].len(), 2);
        let (n, t) = ("m.py".to_string(), SRC.to_string());
        let s = Sources::read(&[(&n, &t)]);
        let d = s.describe((0, at[0][0]));
        assert!(d.contains("(m.py:7)"), "{d}");
    }

    proptest::proptest! {
        /// Forward source is hostile input: any text is read without a panic, and every
        /// statement's tokens lie inside the text.
        #[test]
        fn any_text_is_read(lines in proptest::collection::vec(
            "[ \t]{0,6}(class |def |return |self\\.|=|==|\\+=|:|,|\\(|\\)|\\[|\\]|\\{|\\}|#|\"\"\"|'''|\"|'|\\\\|rb|[a-z_]{1,5}|[0-9]{1,3}|é|\\.){0,14}",
            0..40,
        )) {
            let text = lines.join("\n");
            let m = Module::read("x.py", &text);
            for (k, s) in m.stmts.iter().enumerate() {
                let _ = m.stmt_text(k);
                let _ = m.enclosing_def(k);
                let _ = m.body(k);
                if let Kind::Assign { targets, value, .. } = &s.kind {
                    let _ = m.targets(targets.clone());
                    let _ = m.subscript_target(targets.clone());
                    let _ = expr::calls(&m, value.clone());
                }
            }
            let _ = m.locate(&text);
        }
    }
}
