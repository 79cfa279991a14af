//! A constant a spec multiplies by or adds (`scale`'s `factor`, `shift`'s `by`) is one the
//! forward source computes (code M028): DeepSeek-V4's indexer scales its scores by
//! `config.index_head_dim ** -0.5`, its hyper-connections double a sigmoid and add
//! `config.hc_eps`; a factor written from memory (`head_dim ** -0.5`, `1 / 30` where the
//! softcap is 50) is a number nothing backs.
//!
//! The spec's constant is read as the source would compute it (Python arithmetic over numbers
//! and config keys, [`crate::pysrc::real`]); the source's constants are the operands of its
//! `*`, `/`, `+` and `-`, the constants its classes assign to attributes, and the arguments of
//! calls that read config or an attribute; a divisor, and a value passed on (the callee may
//! divide by it: `attn_weights / softcap`), also as its reciprocal, as a spec multiplies by
//! `1 / cap`. The spec's value must be one of them. Where some constant of the source reads a key config does not have, a value outside
//! the set concludes nothing: the missing one might be it.

use crate::source::Forward;
use harch_engine::Analysis;

use crate::pysrc::real::{self, Env, NotReal};
use crate::pysrc::{Kind, Module, Sources, Tok};
use crate::report::Diagnostic;
use crate::truth::Truth;

pub mod code {
    /// A `scale` factor or `shift` constant that does not evaluate, or that no statement of the
    /// forward source computes.
    pub const CONSTANT_SOURCE: &str = "M028";
}

/// The constants a source computes, and whether some constant it computes could not be read.
#[derive(Debug, Default)]
pub struct Constants {
    pub values: Vec<(f64, String)>,
    /// The first statement computing a constant the reader could not read, if any.
    pub unknown: Option<String>,
}

impl Constants {
    fn has(&self, v: f64) -> Option<&str> {
        self.values
            .iter()
            .find(|(c, _)| same(*c, v))
            .map(|(_, at)| at.as_str())
    }
}

impl Constants {
    /// The source's constant closest to `v` by ratio, for a hint.
    fn nearest(&self, v: f64) -> Option<(f64, &str)> {
        let far = |c: f64| {
            (c.abs().ln() - v.abs().ln()).abs() + if (c < 0.0) != (v < 0.0) { 100.0 } else { 0.0 }
        };
        self.values
            .iter()
            .filter(|(c, _)| *c != 0.0 && c.is_finite())
            .min_by(|a, b| far(a.0).total_cmp(&far(b.0)))
            .map(|(c, at)| (*c, at.as_str()))
    }
}

fn same(a: f64, b: f64) -> bool {
    (a - b).abs() <= 1e-9 * a.abs().max(b.abs()).max(1e-300)
}

/// The class statement whose body holds statement `s`.
fn class_of_stmt(m: &Module, s: usize) -> Option<usize> {
    let mut p = m.stmts[s].parent;
    for _ in 0..256 {
        let k = p?;
        if matches!(m.stmts[k].kind, Kind::Class(_)) {
            return Some(k);
        }
        p = m.stmts[k].parent;
    }
    None
}

/// `self.<attr>` inside class `class`: the value of the class's assignments of it, when they
/// agree.
fn attr_value(
    m: &Module,
    class: Option<usize>,
    attr: &str,
    config: &dyn Fn(&str) -> Option<serde_json::Value>,
    depth: usize,
) -> Result<f64, NotReal> {
    let Some(class) = class else {
        return Err(NotReal::NotConstant);
    };
    // Attributes defined through each other: a few hops, a few assignments each, so that
    // the reading stays small on any class.
    if depth > 12 {
        return Err(NotReal::NotConstant);
    }
    let target = format!("self.{attr}");
    let mut found: Option<f64> = None;
    let assigned = m.body(class).filter(|&k| {
        matches!(&m.stmts[k].kind, Kind::Assign { targets, aug: false, .. } if m.span(targets.clone()).trim() == target)
    });
    for k in assigned.take(4) {
        let Kind::Assign { value, .. } = &m.stmts[k].kind else {
            continue;
        };
        let resolve = |a: &str, d: usize| attr_value(m, Some(class), a, config, d);
        let env = Env {
            config,
            attr: &resolve,
        };
        let v = value_of(m, value.clone(), &env, depth)?;
        match found {
            Some(f) if !same(f, v) => return Err(NotReal::Unknown),
            _ => found = Some(v),
        }
    }
    found.ok_or(NotReal::NotConstant)
}

fn is_operand_end(m: &Module, k: usize) -> bool {
    match m.tokens.get(k) {
        Some(t) => match t.kind {
            Tok::Name => !matches!(
                m.tok(k),
                "return" | "in" | "and" | "or" | "not" | "if" | "else" | "lambda" | "yield"
            ),
            Tok::Number | Tok::Str => true,
            Tok::Op => matches!(m.tok(k), ")" | "]"),
            Tok::Newline => false,
        },
        None => false,
    }
}

/// Start of the dotted name or number that ends at token `end - 1`, when that is all the
/// left operand is (no call or subscript before the operator).
fn left_operand_start(m: &Module, start: usize, end: usize) -> Option<usize> {
    let last = end.checked_sub(1).filter(|&k| k >= start)?;
    let t = m.tokens.get(last)?;
    let mut s = match t.kind {
        Tok::Number => last,
        Tok::Name => {
            let mut s = last;
            while s >= start + 2 && m.tok(s - 1) == "." && m.tokens[s - 2].kind == Tok::Name {
                s -= 2;
            }
            s
        }
        _ => return None,
    };
    if s > start && matches!(m.tok(s - 1), "." | ")" | "]" | "**") {
        return None;
    }
    if s > start && m.tok(s - 1) == "-" && !(s - 1 > start && is_operand_end(m, s - 2)) {
        s -= 1;
    }
    Some(s)
}

/// The value of a whole expression, where a lone config key that config does not have is no
/// constant (token ids and the like, whose defaults live on the base configuration class).
fn value_of(
    m: &Module,
    r: std::ops::Range<usize>,
    env: &Env,
    depth: usize,
) -> Result<f64, NotReal> {
    match real::whole(m, r.clone(), env, depth) {
        Err(NotReal::Unknown) if is_config_key(m.span(r).trim()) => Err(NotReal::NotConstant),
        other => other,
    }
}

fn is_config_key(text: &str) -> bool {
    let key = text
        .strip_prefix("self.config.")
        .or_else(|| text.strip_prefix("config."));
    key.is_some_and(|k| !k.is_empty() && k.chars().all(|c| c.is_ascii_alphanumeric() || c == '_'))
}

/// Every constant the sources compute (see the module's doc).
pub fn source_constants(
    src: &Sources,
    config: &dyn Fn(&str) -> Option<serde_json::Value>,
) -> Constants {
    let mut out = Constants::default();
    for (mi, m) in src.modules.iter().enumerate() {
        for (k, st) in m.stmts.iter().enumerate() {
            if matches!(st.kind, Kind::Class(_) | Kind::Def(_)) {
                continue;
            }
            let class = class_of_stmt(m, k);
            let resolve = |a: &str, d: usize| attr_value(m, class, a, config, d);
            let env = Env {
                config,
                attr: &resolve,
            };
            let at = || src.describe((mi, k));
            let note = |r: Result<f64, NotReal>, recip: bool, out: &mut Constants| match r {
                Ok(v) if v.is_finite() => {
                    out.values.push((v, at()));
                    if recip && v != 0.0 {
                        out.values.push((1.0 / v, at()));
                    }
                }
                Err(NotReal::Unknown) => {
                    out.unknown.get_or_insert_with(at);
                }
                _ => {}
            };
            let r = st.tokens.clone();
            if let Kind::Assign { value, .. } = &st.kind {
                note(value_of(m, value.clone(), &env, 0), false, &mut out);
            }
            for i in r.clone() {
                let op = m.tok(i);
                let binary =
                    matches!(op, "*" | "/" | "+" | "-") && i > r.start && is_operand_end(m, i - 1);
                if binary {
                    let right = real::operand_at(m, i + 1, r.end, &env).map(|(v, _)| v);
                    let right = if op == "-" { right.map(|v| -v) } else { right };
                    note(right, op == "/", &mut out);
                    if let Some(s) = left_operand_start(m, r.start, i) {
                        note(real::whole(m, s..i, &env, 0), false, &mut out);
                    }
                }
                // Arguments of calls that read config or an attribute (`eps=config.rms_norm_eps`,
                // `torch.tensor(self.config.hidden_size**0.5, …)`, `softcap=self.softcap`).
                if op == "("
                    && i > r.start
                    && m.tokens[i - 1].kind == Tok::Name
                    && let Some(close) = m.matching_close(i, r.end)
                {
                    for a in m.split_top(i + 1..close) {
                        let a = match (m.tok(a.start + 1), a.len() > 2) {
                            ("=", true) => a.start + 2..a.end,
                            _ => a,
                        };
                        // Passed on, it may be a divisor there (`attn_weights / softcap`).
                        let text = m.span(a.clone()).trim();
                        if text.contains("config") || text.starts_with("self.") {
                            note(value_of(m, a, &env, 0), true, &mut out);
                        }
                    }
                }
            }
        }
    }
    out
}

/// The spec's constant as the source would compute it.
fn spec_value(
    text: &str,
    config: &dyn Fn(&str) -> Option<serde_json::Value>,
) -> Result<f64, NotReal> {
    let name = "constant".to_string();
    let text = text
        .trim()
        .trim_matches(|c| c == '"' || c == '\'')
        .to_string();
    let m = Module::read(&name, &text);
    let Some(st) = m.stmts.first().filter(|_| m.stmts.len() == 1) else {
        return Err(NotReal::NotConstant);
    };
    let none = |_: &str, _: usize| Err(NotReal::NotConstant);
    let env = Env {
        config,
        attr: &none,
    };
    real::whole(&m, st.tokens.clone(), &env, 0)
}

/// A key as the configuration class reads it: under the name its `attribute_map` sends it to,
/// and where config.json leaves it out, at the class's default.
fn config_value(
    config: &serde_json::Value,
    map: &[(String, String)],
    defaults: &[(String, serde_json::Value)],
    k: &str,
) -> Option<serde_json::Value> {
    let k = map
        .iter()
        .find(|(alias, _)| alias == k)
        .map_or(k, |(_, target)| target.as_str());
    // An explicit null is config's value (None, no number), not a key left out.
    config
        .get(k)
        .or_else(|| defaults.iter().find(|(d, _)| d == k).map(|(_, v)| v))
        .cloned()
}

pub fn check(a: &Analysis, truth: &Truth, forward: &Forward) -> Vec<Diagnostic> {
    let nodes: Vec<_> = a
        .nodes
        .iter()
        .filter(|n| matches!(n.op.as_str(), "scale" | "shift"))
        .collect();
    if nodes.is_empty() {
        return Vec::new();
    }
    let config = crate::config_view::text(&truth.config);
    let defaults = config
        .get("model_type")
        .and_then(|t| t.as_str())
        .map(|t| crate::config_spelling::class_defaults(&truth.sources, t))
        .unwrap_or_default();
    let map = crate::config_spelling::attribute_map(&truth.sources);
    let lookup = |k: &str| config_value(&config, &map, &defaults, k);
    let have = source_constants(forward.sources(), &lookup);
    let mut out = Vec::new();
    let mut seen = std::collections::BTreeSet::new();
    for n in nodes {
        let arg = if n.op == "scale" { "factor" } else { "by" };
        let text = n.args.get(arg).map(|v| v.text.clone()).unwrap_or_default();
        let (problem, hint) = match spec_value(&text, &lookup) {
            Ok(v) if have.has(v).is_some() || have.unknown.is_some() || forward.files.is_empty() => {
                continue;
            }
            Ok(v) => (
                format!(
                    "`{text}` = {v}, a value no statement of the forward source computes (its constants: operands of `*`, `/`, `+`, `-`, attributes its classes assign, config read in calls)"
                ),
                match have.nearest(v) {
                    Some((c, at)) => format!(
                        "write the constant of the statement that applies it; the nearest the source computes is {c} at {at}"
                    ),
                    None => "write the constant of the statement that applies it".to_string(),
                },
            ),
            Err(_) if text.trim() == "none" => (
                "reads a config key config does not have (it evaluates to none)".to_string(),
                "bind it to the key the source reads".to_string(),
            ),
            Err(NotReal::Unknown) => (
                format!("`{text}` reads a config key config does not have"),
                "bind it to the key the source reads".to_string(),
            ),
            Err(NotReal::NotConstant) => (
                format!(
                    "`{text}` is not a constant: write it as the source computes it (numbers and config keys, `**`, `sqrt`)"
                ),
                "e.g. \"'config.index_head_dim ** -0.5'\" for `self.softmax_scale = config.index_head_dim**-0.5`".to_string(),
            ),
        };
        if !seen.insert((n.component.clone(), n.loc.line, n.loc.file.clone())) {
            continue;
        }
        out.push(
            Diagnostic::new(
                "semantic",
                code::CONSTANT_SOURCE,
                format!("`{}`: {} {arg} {problem}", n.id, n.op),
                n.loc.clone(),
            )
            .hint(hint),
        );
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn constants(version: &str, model_type: &str, config: serde_json::Value) -> Constants {
        let (name, text) = crate::pinned::file(version, model_type, "modeling");
        let lookup = |k: &str| config.get(k).cloned();
        source_constants(&Sources::read(&[(&name, &text)]), &lookup)
    }

    #[test]
    fn deepseek_v4_computes_its_scales_and_epsilons() {
        let c = serde_json::json!({ "index_head_dim": 128, "index_n_heads": 64, "hc_eps": 1e-6, "head_dim": 512, "rms_norm_eps": 1e-6 });
        let have = constants("5.23.0", "deepseek_v4", c);
        for (v, what) in [
            (128f64.powf(-0.5), "the indexer's softmax_scale"),
            (64f64.powf(-0.5), "the indexer weights' scale"),
            (2.0, "post = 2 * sigmoid"),
            (1e-6, "hc_eps"),
        ] {
            assert!(have.has(v).is_some(), "{what} ({v}) not read");
        }
        for v in [128f64.powf(0.5), 0.5, 3.0, 1.0 / 30.0, 1e-5] {
            assert!(
                have.has(v).is_none(),
                "{v} read as a constant of the source: {:?}",
                have.has(v)
            );
        }
    }

    #[test]
    fn gemma_scales_by_the_square_root_of_its_width_and_caps_by_its_softcap() {
        let c = serde_json::json!({ "hidden_size": 2304, "final_logit_softcapping": 30.0, "attn_logit_softcapping": 50.0, "query_pre_attn_scalar": 256, "head_dim": 256 });
        let have = constants("4.57.6", "gemma2", c);
        assert!(have.has(48.0).is_some(), "sqrt(hidden_size)");
        assert!(
            have.has(30.0).is_some() && have.has(1.0 / 30.0).is_some(),
            "final softcap"
        );
        assert!(have.has(1.0 / 50.0).is_some(), "attention softcap");
        assert!(have.has(1.0 / 40.0).is_none());
    }

    #[test]
    fn a_spec_constant_is_read_as_python_over_config() {
        let c = serde_json::json!({ "index_head_dim": 128 });
        let lookup = |k: &str| c.get(k).cloned();
        assert_eq!(
            spec_value("'config.index_head_dim ** -0.5'", &lookup),
            Ok(128f64.powf(-0.5))
        );
        assert_eq!(spec_value("2", &lookup), Ok(2.0));
        assert_eq!(spec_value("0.000001", &lookup), Ok(1e-6));
        assert_eq!(spec_value("config.nope", &lookup), Err(NotReal::Unknown));
        assert_eq!(
            spec_value("index_head_dim ** -0.5", &lookup),
            Err(NotReal::NotConstant)
        );
        assert_eq!(spec_value("none", &lookup), Err(NotReal::NotConstant));
        assert_eq!(spec_value("1\n2", &lookup), Err(NotReal::NotConstant));
    }

    proptest::proptest! {
        /// Any source text is read for constants without a panic, attributes that refer to
        /// each other included.
        #[test]
        fn any_source_is_read_within_bounds(lines in proptest::collection::vec(
            "(    ){0,2}(class A:|def f\\(self\\):|self\\.[ab] = (self\\.[ab]|config\\.k|2)( [*+] self\\.[ab])?( \\*\\* -0\\.5)?|x = y \\* self\\.[ab]|f\\(eps=config\\.k\\)|return 2 \\* x - 1)",
            0..40,
        )) {
            let text = lines.join("\n");
            let name = "m.py".to_string();
            let c = serde_json::json!({ "k": 4 });
            let lookup = |k: &str| c.get(k).cloned();
            let _ = source_constants(&Sources::read(&[(&name, &text)]), &lookup);
        }
    }
}
