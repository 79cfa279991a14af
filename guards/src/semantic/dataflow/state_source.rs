//! The dtype a forward source keeps a recurrent state in, read from its text.
//!
//! The value a layer stores into its cache's state list
//! (`cache_params.recurrent_states[self.layer_idx] = last_recurrent_state`) is traced to the
//! call that produced it, the call to the functions defined in the source
//! (`self.recurrent_gated_delta_rule = fused_recurrent_gated_delta_rule or
//! torch_recurrent_gated_delta_rule`), and each function to where it builds the state it returns.
//! The state is float32 when that construction casts to float32, directly or through a value the
//! function cast before (`.to(value)` after `value.to(torch.float32)`). Only positive evidence
//! counts: when the trail breaks, nothing is concluded.

/// A dtype the source keeps a state in, and where it says so.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SourceDtype {
    pub dtype: &'static str,
    /// `file:line` and the function, for messages.
    pub evidence: String,
    /// One source line that says it, usable verbatim as an anchor.
    pub snippet: String,
}

/// One logical Python statement: its physical lines joined, comments dropped.
struct Stmt {
    indent: usize,
    text: String,
    /// (line number, trimmed text) of each physical line.
    lines: Vec<(usize, String)>,
}

struct File<'a> {
    name: &'a str,
    stmts: Vec<Stmt>,
}

/// Stores of a state that are followed; the source may be hostile, and real models store one
/// state per layer kind.
const MAX_STORES: usize = 16;

pub fn recurrent_state_dtype(files: &[(&String, &String)]) -> Option<SourceDtype> {
    let files: Vec<File> = files
        .iter()
        .map(|(n, t)| File {
            name: n.as_str(),
            stmts: statements(t),
        })
        .collect();
    let mut verdicts: Vec<Option<SourceDtype>> = Vec::new();
    let stores = files.iter().enumerate().flat_map(|(fi, f)| {
        f.stmts
            .iter()
            .enumerate()
            .filter_map(move |(si, s)| Some((fi, si, state_store(&s.text)?)))
    });
    for (fi, si, stored) in stores.take(MAX_STORES) {
        let stmts = &files[fi].stmts;
        let Some(func) = enclosing_function(stmts, si) else {
            continue;
        };
        let var = match stored {
            Stored::Var(v) => v,
            Stored::Cast => {
                let s = &stmts[si];
                let (line, text) = s
                    .lines
                    .iter()
                    .find(|(_, l)| says_f32(strip_comment(l)))
                    .unwrap_or(&s.lines[0]);
                let fname = def_name(&stmts[func].text).unwrap_or("?");
                verdicts.push(Some(SourceDtype {
                    dtype: "F32",
                    evidence: format!(
                        "`{fname}` ({}:{line}) casts the state to float32 as it stores it",
                        files[fi].name
                    ),
                    snippet: strip_comment(text).trim().to_string(),
                }));
                continue;
            }
        };
        for (callee, pos, arity) in producing_calls(stmts, func, si, &var)
            .into_iter()
            .take(MAX_STORES)
        {
            for (gi, di) in resolve(&files, fi, &callee).into_iter().take(MAX_STORES) {
                verdicts.push(function_state_dtype(&files[gi], di, pos, arity));
            }
        }
    }
    if verdicts.is_empty() || verdicts.iter().any(Option::is_none) {
        return None;
    }
    verdicts.into_iter().next().flatten()
}

fn statements(text: &str) -> Vec<Stmt> {
    let mut out = Vec::new();
    let mut cur: Option<Stmt> = None;
    let mut depth: i32 = 0;
    let mut in_doc: Option<&str> = None;
    for (k, raw) in text.lines().enumerate() {
        let line_no = k + 1;
        if let Some(q) = in_doc {
            if raw.matches(q).count() % 2 == 1 {
                in_doc = None;
            }
            continue;
        }
        let trimmed = raw.trim();
        if cur.is_none() {
            for q in ["\"\"\"", "'''"] {
                if trimmed.starts_with(q) && trimmed.matches(q).count() % 2 == 1 {
                    in_doc = Some(q);
                }
            }
            if in_doc.is_some() || trimmed.is_empty() || trimmed.starts_with('#') {
                continue;
            }
        }
        let code = strip_comment(raw);
        let mut quote: Option<char> = None;
        for ch in code.chars() {
            match (quote, ch) {
                (None, '"' | '\'') => quote = Some(ch),
                (Some(q), c) if c == q => quote = None,
                (None, '(' | '[' | '{') => depth += 1,
                (None, ')' | ']' | '}') => depth -= 1,
                _ => {}
            }
        }
        let st = cur.get_or_insert_with(|| Stmt {
            indent: raw.len() - raw.trim_start().len(),
            text: String::new(),
            lines: Vec::new(),
        });
        if !st.text.is_empty() {
            st.text.push(' ');
        }
        st.text
            .push_str(code.trim().trim_end_matches('\\').trim_end());
        st.lines.push((line_no, trimmed.to_string()));
        if depth <= 0 && !code.trim_end().ends_with('\\') {
            depth = 0;
            out.extend(cur.take());
        }
    }
    out.extend(cur);
    out
}

/// A line without its comment (a `#` outside string quotes).
fn strip_comment(line: &str) -> &str {
    let mut quote: Option<char> = None;
    for (i, ch) in line.char_indices() {
        match (quote, ch) {
            (None, '#') => return &line[..i],
            (None, '"' | '\'') => quote = Some(ch),
            (Some(q), c) if c == q => quote = None,
            _ => {}
        }
    }
    line
}

/// `lhs = rhs` of an assignment statement (not `==`, `+=`, a keyword argument inside a call).
fn assignment(text: &str) -> Option<(&str, &str)> {
    let bytes = text.as_bytes();
    let mut depth = 0;
    for (i, &b) in bytes.iter().enumerate() {
        match b {
            b'(' | b'[' | b'{' => depth += 1,
            b')' | b']' | b'}' => depth -= 1,
            b'=' if depth == 0 => {
                let prev = if i > 0 { bytes[i - 1] } else { b' ' };
                let next = bytes.get(i + 1).copied().unwrap_or(b' ');
                if next == b'=' || b"=!<>+-*/%&|^:@".contains(&prev) {
                    return None;
                }
                return Some((text[..i].trim(), text[i + 1..].trim()));
            }
            _ => {}
        }
    }
    None
}

fn is_ident(s: &str) -> bool {
    let mut c = s.chars();
    c.next()
        .is_some_and(|f| f.is_ascii_alphabetic() || f == '_')
        && c.all(|x| x.is_ascii_alphanumeric() || x == '_')
}

/// Names on the left of a (tuple) assignment.
fn targets(lhs: &str) -> Vec<&str> {
    lhs.trim_matches(|c| c == '(' || c == ')')
        .split(',')
        .map(str::trim)
        .filter(|s| !s.is_empty())
        .collect()
}

/// What a statement stores into a cache's state.
enum Stored {
    /// A value bound earlier (`= last_recurrent_state`).
    Var(String),
    /// An expression that casts to float32 as it is stored
    /// (`update_recurrent_state(state.to(torch.float32), i)`).
    Cast,
}

/// `cache.recurrent_states[i] = v` (a state list other than a convolution's), or
/// `cache.update_recurrent_state(v, i)` (a state update other than a convolution's).
fn state_store(text: &str) -> Option<Stored> {
    let stored = |v: &str, state: &str| {
        let state = state.to_ascii_lowercase();
        if !state.contains("state") || state.contains("conv") {
            return None;
        }
        if is_ident(v) {
            Some(Stored::Var(v.to_string()))
        } else {
            says_f32(v).then_some(Stored::Cast)
        }
    };
    if let Some((lhs, rhs)) = assignment(text) {
        let base = lhs.strip_suffix(']')?.rsplit_once('[')?.0;
        let attr = base.rsplit_once('.')?.1;
        return stored(rhs, attr);
    }
    // A call on a cache object: `<recv>.update_<...>state(<value>, ...)`.
    let at = text.find(".update_")?;
    let recv = text[..at]
        .rsplit(|c: char| !(c.is_ascii_alphanumeric() || c == '_' || c == '.'))
        .next()?;
    if !recv.to_ascii_lowercase().contains("cache") {
        return None;
    }
    let rest = &text[at + 1..];
    let (method, args) = rest.split_once('(')?;
    // The first argument: up to the first comma at bracket depth 0.
    let mut depth = 0i32;
    let mut end = args.len();
    for (i, ch) in args.char_indices() {
        match ch {
            '(' | '[' | '{' => depth += 1,
            ')' | ']' | '}' if depth == 0 => {
                end = i;
                break;
            }
            ')' | ']' | '}' => depth -= 1,
            ',' if depth == 0 => {
                end = i;
                break;
            }
            _ => {}
        }
    }
    stored(args[..end].trim(), method)
}

fn def_name(text: &str) -> Option<&str> {
    let rest = text
        .strip_prefix("def ")
        .or_else(|| text.strip_prefix("async def "))?;
    rest.split('(')
        .next()
        .map(str::trim)
        .filter(|n| is_ident(n))
}

/// The statement index of the `def` whose body holds statement `at`.
fn enclosing_function(stmts: &[Stmt], at: usize) -> Option<usize> {
    let mut indent = stmts[at].indent;
    for k in (0..at).rev() {
        let s = &stmts[k];
        if s.indent < indent {
            if def_name(&s.text).is_some() {
                return Some(k);
            }
            indent = s.indent;
        }
    }
    None
}

/// The statements of a function's body.
fn body(stmts: &[Stmt], def: usize) -> std::ops::Range<usize> {
    let end = (def + 1..stmts.len())
        .find(|&k| stmts[k].indent <= stmts[def].indent)
        .unwrap_or(stmts.len());
    def + 1..end
}

/// Calls before statement `at` in the function whose results bind `var`: (callee, position of
/// `var` among the targets, number of targets).
fn producing_calls(
    stmts: &[Stmt],
    func: usize,
    at: usize,
    var: &str,
) -> Vec<(String, usize, usize)> {
    let mut out = Vec::new();
    for s in &stmts[body(stmts, func).start..at] {
        let Some((lhs, rhs)) = assignment(&s.text) else {
            continue;
        };
        let names = targets(lhs);
        let Some(pos) = names.iter().position(|n| *n == var) else {
            continue;
        };
        let rhs = rhs.strip_prefix("await ").unwrap_or(rhs);
        if let Some((callee, _)) = rhs.split_once('(')
            && callee.split('.').all(|p| is_ident(p.trim()))
        {
            out.push((callee.trim().to_string(), pos, names.len()));
        }
    }
    out
}

/// Functions defined in the sources that a callee names: `f`, or for `self.f` (and a module
/// name bound to several) the defined functions on the right of its assignments.
fn resolve(files: &[File], file: usize, callee: &str) -> Vec<(usize, usize)> {
    let mut names: Vec<String> = Vec::new();
    let look = |target: &str, names: &mut Vec<String>| {
        for s in &files[file].stmts {
            if let Some((lhs, rhs)) = assignment(&s.text)
                && lhs == target
            {
                names.extend(
                    rhs.split(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
                        .filter(|w| is_ident(w))
                        .map(str::to_string),
                );
            }
        }
    };
    match callee.strip_prefix("self.") {
        Some(attr) => look(&format!("self.{attr}"), &mut names),
        None => {
            names.push(callee.to_string());
            look(callee, &mut names);
        }
    }
    names.sort();
    names.dedup();
    names.truncate(MAX_STORES);
    let mut out = Vec::new();
    for n in names {
        for (fi, f) in files.iter().enumerate() {
            for (si, s) in f.stmts.iter().enumerate() {
                if s.indent == 0
                    && def_name(&s.text) == Some(n.as_str())
                    && !out.contains(&(fi, si))
                {
                    out.push((fi, si));
                }
            }
        }
    }
    out
}

fn says_f32(text: &str) -> bool {
    text.contains("float32") || text.contains(".float()")
}

/// Arguments `x` of `.to(x)` and `*_like(x` in an expression.
fn dtype_sources(text: &str) -> Vec<&str> {
    let mut out = Vec::new();
    for pat in [".to(", "_like("] {
        for (i, _) in text.match_indices(pat) {
            let rest = &text[i + pat.len()..];
            let end = rest
                .find(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
                .unwrap_or(rest.len());
            if is_ident(&rest[..end]) {
                out.push(&rest[..end]);
            }
        }
    }
    out
}

/// The dtype of the state a function returns at `pos` (of `arity` results), when its text
/// shows it is float32.
fn function_state_dtype(f: &File, def: usize, pos: usize, arity: usize) -> Option<SourceDtype> {
    let range = body(&f.stmts, def);
    let stmts = &f.stmts[range.clone()];
    let ret = stmts
        .iter()
        .rev()
        .find_map(|s| s.text.strip_prefix("return "))?;
    let results = targets(ret);
    let state = if results.len() == arity {
        results.get(pos).copied()
    } else {
        results.iter().copied().find(|r| r.contains("state"))
    }
    .filter(|s| is_ident(s))?;
    let (init_at, init) = stmts.iter().enumerate().find_map(|(k, s)| {
        let (lhs, rhs) = assignment(&s.text)?;
        targets(lhs).contains(&state).then_some((k, rhs))
    })?;
    let fname = def_name(&f.stmts[def].text).unwrap_or("?");
    let found = |s: &Stmt, how: String| {
        let (line, text) = s
            .lines
            .iter()
            .find(|(_, l)| says_f32(strip_comment(l)))
            .unwrap_or(&s.lines[0]);
        let (line, snippet) = (*line, strip_comment(text).trim().to_string());
        SourceDtype {
            dtype: "F32",
            evidence: format!("`{fname}` ({}:{line}) {how}", f.name),
            snippet,
        }
    };
    if says_f32(init) {
        return Some(found(
            &stmts[init_at],
            format!("builds `{state}` in float32"),
        ));
    }
    for v in dtype_sources(init) {
        let cast = stmts[..init_at].iter().find(|s| {
            says_f32(&s.text)
                && assignment(&s.text).is_some_and(|(lhs, _)| targets(lhs).contains(&v))
        });
        if let Some(s) = cast {
            return Some(found(
                s,
                format!("casts `{v}` to float32 and builds `{state}` from it"),
            ));
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    const SRC: &str = r#"
from fla.ops import chunk_rule

def torch_chunk_rule(query, key, value, initial_state=None):
    """Reference path.

    (a docstring with a bracket: [
    """
    initial_dtype = query.dtype
    query, key, value = [
        x.contiguous().to(torch.float32) for x in (query, key, value)  # fp32 math
    ]
    last_state = (
        torch.zeros(2, 3).to(value)
        if initial_state is None
        else initial_state.to(value)
    )
    out = query @ last_state
    return out, last_state

def torch_bf16_rule(query, key, value, initial_state=None):
    last_state = torch.zeros(2, 3, dtype=query.dtype)
    return query, last_state

class Mixer(nn.Module):
    def __init__(self, config):
        self.rule = chunk_rule or torch_chunk_rule

    def forward(self, x, cache_params=None):
        if cache_params is not None:
            s = cache_params.recurrent_states[self.layer_idx]
        core, new_state = self.rule(x, x, x, initial_state=s)
        if cache_params is not None:
            cache_params.recurrent_states[self.layer_idx] = new_state
            cache_params.conv_states[self.layer_idx] = conv_state
        return core
"#;

    fn run(src: &str) -> Option<SourceDtype> {
        let (n, t) = ("modeling_x.py".to_string(), src.to_string());
        recurrent_state_dtype(&[(&n, &t)])
    }

    #[test]
    fn a_state_built_from_a_float32_cast_is_float32() {
        let d = run(SRC).expect("traced");
        assert_eq!(d.dtype, "F32");
        assert_eq!(
            d.snippet,
            "x.contiguous().to(torch.float32) for x in (query, key, value)"
        );
        assert!(
            d.evidence.contains("`torch_chunk_rule` (modeling_x.py:11)"),
            "{}",
            d.evidence
        );
    }

    #[test]
    fn a_state_cast_as_it_is_stored_is_float32() {
        let kimi = SRC.replace(
            "cache_params.recurrent_states[self.layer_idx] = new_state",
            "cache_params.update_recurrent_state(new_state.to(torch.float32), self.layer_idx)",
        );
        let d = run(&kimi).expect("traced");
        assert_eq!(d.dtype, "F32");
        assert!(
            d.snippet
                .starts_with("cache_params.update_recurrent_state("),
            "{}",
            d.snippet
        );
        // The same call with a value bound earlier is traced as the list store is.
        let bound = SRC.replace(
            "cache_params.recurrent_states[self.layer_idx] = new_state",
            "cache_params.update_recurrent_state(new_state, self.layer_idx)",
        );
        assert_eq!(run(&bound).map(|d| d.snippet), run(SRC).map(|d| d.snippet));
        // A convolution's update is not the state.
        let conv = SRC.replace(
            "cache_params.recurrent_states[self.layer_idx] = new_state",
            "cache_params.update_conv_state(new_state.to(torch.float32), self.layer_idx)",
        );
        assert_eq!(run(&conv), None);
    }

    #[test]
    fn kimi_linear_keeps_its_state_in_float32() {
        let (_, text) = crate::pinned::file("5.23.0", "kimi_linear", "modeling");
        let d = run(&text).expect("Kimi-Linear's state store is traced");
        assert_eq!(d.dtype, "F32");
        assert_eq!(
            d.snippet,
            "cache_params.update_recurrent_state(last_recurrent_state.to(torch.float32), self.layer_idx)"
        );
    }

    #[test]
    fn no_conclusion_without_positive_evidence() {
        let bf16 = SRC.replace("chunk_rule or torch_chunk_rule", "torch_bf16_rule");
        assert_eq!(run(&bf16), None);
        // Two paths that disagree conclude nothing.
        let both = SRC.replace(
            "chunk_rule or torch_chunk_rule",
            "torch_chunk_rule or torch_bf16_rule",
        );
        assert_eq!(run(&both), None);
        // No state stored into a cache: nothing to trace.
        let none = SRC.replace(
            "recurrent_states[self.layer_idx] = new_state",
            "update(new_state)",
        );
        assert_eq!(run(&none), None);
    }

    proptest::proptest! {
        /// Forward source is hostile input: any text is read without a panic.
        #[test]
        fn any_text_is_read_without_panic(lines in proptest::collection::vec(
            "[ \t]{0,8}(def |return |self\\.|\\.to\\(|float32|\\[|\\]|\\(|\\)|=|,|#|\"\"\"|'|[a-z_]{1,6}|é){0,12}",
            0..40,
        )) {
            let text = lines.join("\n");
            let _ = run(&text);
            let _ = run(&format!("{SRC}\n{text}"));
        }
    }

    #[test]
    fn statements_join_brackets_and_skip_docstrings() {
        let s = statements(SRC);
        let cast = s.iter().find(|s| s.text.contains("float32")).unwrap();
        assert!(
            cast.text.starts_with("query, key, value = ["),
            "{}",
            cast.text
        );
        assert!(!cast.text.contains('#'));
        assert!(s.iter().all(|s| !s.text.contains("docstring")));
        assert_eq!(assignment("a == b"), None);
        assert_eq!(assignment("f(x=1)"), None);
        assert_eq!(assignment("a, b = g(x)"), Some(("a, b", "g(x)")));
    }
}
