//! The engine's formula text (`Q::formula`) read back and evaluated: the same grammar and
//! functions the page's script evaluates for the context slider, here so tests can hold the
//! embedded formulas and bindings to the engine's values.
//!
//! Grammar: sums and differences of products and exact quotients of numbers, atoms and calls.
//! A name followed by `(` is a call when it is one of [`FUNCTIONS`], else an atom that spells
//! its own parentheses (`layers(moe)`, `state(conv)`).

use std::collections::BTreeMap;

use harch_engine::Q;
use harch_engine::q::Sym;

/// The functions the engine's formulas call (`expr.rs` and `analysis.rs`).
pub const FUNCTIONS: &[&str] = &[
    "min",
    "max",
    "ceil_div",
    "floor_div",
    "isqrt",
    "causal_positions",
    "windowed_positions",
    // One compressed entry per `r` tokens (rows.rs): floor(ctx / r), and bytes per ratio.
    "entries",
    "per_ratio",
];

#[derive(Debug, Clone, PartialEq)]
enum Tok {
    Num(i128),
    Atom(String),
    Call(String),
    Op(char),
}

fn tokens(text: &str) -> Result<Vec<Tok>, String> {
    let b = text.as_bytes();
    let mut out = Vec::new();
    let mut i = 0;
    while i < b.len() {
        let c = b[i] as char;
        if c.is_ascii_whitespace() {
            i += 1;
        } else if c.is_ascii_digit() {
            let s = i;
            while i < b.len() && b[i].is_ascii_digit() {
                i += 1;
            }
            out.push(Tok::Num(text[s..i].parse().map_err(|e| format!("{e}"))?));
        } else if c.is_ascii_alphabetic() || c == '_' {
            let s = i;
            while i < b.len() && (b[i].is_ascii_alphanumeric() || b[i] == b'_' || b[i] == b'.') {
                i += 1;
            }
            let name = &text[s..i];
            if i < b.len() && b[i] == b'(' && !FUNCTIONS.contains(&name) {
                // An atom that spells its parentheses: up to the matching one.
                let mut depth = 0;
                let mut j = i;
                while j < b.len() {
                    match b[j] {
                        b'(' => depth += 1,
                        b')' => {
                            depth -= 1;
                            if depth == 0 {
                                break;
                            }
                        }
                        _ => {}
                    }
                    j += 1;
                }
                if j == b.len() {
                    return Err(format!("unclosed `(` after `{name}`"));
                }
                out.push(Tok::Atom(text[s..=j].to_string()));
                i = j + 1;
            } else if i < b.len() && b[i] == b'(' {
                out.push(Tok::Call(name.to_string()));
            } else {
                out.push(Tok::Atom(name.to_string()));
            }
        } else if "+-*/(),".contains(c) {
            out.push(Tok::Op(c));
            i += 1;
        } else {
            return Err(format!("unexpected `{c}` at {i}"));
        }
    }
    Ok(out)
}

/// The atoms a formula names, with their position among its tokens.
pub fn names(text: &str) -> Vec<(String, usize)> {
    tokens(text)
        .unwrap_or_default()
        .into_iter()
        .enumerate()
        .filter_map(|(i, t)| match t {
            Tok::Atom(a) => Some((a, i)),
            _ => None,
        })
        .collect()
}

struct Parser<'a> {
    toks: Vec<Tok>,
    at: usize,
    env: &'a BTreeMap<String, i128>,
}

impl Parser<'_> {
    fn peek(&self) -> Option<&Tok> {
        self.toks.get(self.at)
    }
    fn eat(&mut self, c: char) -> bool {
        if self.peek() == Some(&Tok::Op(c)) {
            self.at += 1;
            true
        } else {
            false
        }
    }
    fn sum(&mut self) -> Result<i128, String> {
        let mut v = self.product()?;
        loop {
            if self.eat('+') {
                v = v.saturating_add(self.product()?);
            } else if self.eat('-') {
                v = v.saturating_sub(self.product()?);
            } else {
                return Ok(v);
            }
        }
    }
    fn product(&mut self) -> Result<i128, String> {
        let mut v = self.factor()?;
        loop {
            if self.eat('*') {
                v = v.saturating_mul(self.factor()?);
            } else if self.eat('/') {
                let d = self.factor()?;
                if d == 0 {
                    return Err("division by zero".into());
                }
                v /= d;
            } else {
                return Ok(v);
            }
        }
    }
    fn factor(&mut self) -> Result<i128, String> {
        let t = self.peek().cloned().ok_or("formula ends early")?;
        self.at += 1;
        match t {
            Tok::Num(n) => Ok(n),
            Tok::Atom(a) => self
                .env
                .get(&a)
                .copied()
                .ok_or_else(|| format!("unbound `{a}`")),
            Tok::Op('(') => {
                let v = self.sum()?;
                if !self.eat(')') {
                    return Err("missing `)`".into());
                }
                Ok(v)
            }
            Tok::Call(f) => {
                if !self.eat('(') {
                    return Err(format!("`{f}` without arguments"));
                }
                let mut args = vec![self.sum()?];
                while self.eat(',') {
                    args.push(self.sum()?);
                }
                if !self.eat(')') {
                    return Err(format!("missing `)` after `{f}(`"));
                }
                call(&f, &args)
            }
            Tok::Op('-') => Ok(-self.factor()?),
            Tok::Op(c) => Err(format!("unexpected `{c}`")),
        }
    }
}

fn call(f: &str, a: &[i128]) -> Result<i128, String> {
    let arg = |i: usize| {
        a.get(i)
            .copied()
            .ok_or(format!("`{f}` needs {} args", i + 1))
    };
    let causal = |s: i128| s.saturating_mul(s.saturating_add(1)) / 2;
    Ok(match f {
        "min" => arg(0)?.min(arg(1)?),
        "max" => arg(0)?.max(arg(1)?),
        "ceil_div" | "floor_div" | "entries" | "per_ratio" => {
            let (x, y) = (arg(0)?, arg(1)?);
            if y <= 0 {
                return Err(format!("`{f}` by {y}"));
            }
            x.div_euclid(y) + (f == "ceil_div" && x.rem_euclid(y) != 0) as i128
        }
        "isqrt" => (arg(0)?.max(0) as f64).sqrt().round() as i128,
        "causal_positions" => causal(arg(0)?),
        "windowed_positions" => {
            let (s, w) = (arg(0)?, arg(1)?);
            if w < s {
                w * (w + 1) / 2 + (s - w) * w
            } else {
                causal(s)
            }
        }
        other => return Err(format!("unknown function `{other}`")),
    })
}

/// Evaluates a formula's text with its atoms bound.
pub fn eval(text: &str, env: &BTreeMap<String, i128>) -> Result<i128, String> {
    let mut p = Parser {
        toks: tokens(text)?,
        at: 0,
        env,
    };
    let v = p.sum()?;
    if p.at != p.toks.len() {
        return Err(format!("trailing input in `{text}`"));
    }
    Ok(v)
}

/// A quantity's formula text, or its value when the engine kept no formula.
pub fn text_of(q: &Q) -> String {
    match &q.f {
        Some(s) if !matches!(**s, Sym::Lit(_)) => q.formula(),
        _ => q.v.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_back_what_the_engine_renders() {
        let env: BTreeMap<String, i128> = [
            ("d_model".to_string(), 10),
            ("layers(moe)".to_string(), 3),
            ("ctx".to_string(), 7),
        ]
        .into();
        assert_eq!(eval("2 * d_model * layers(moe)", &env), Ok(60));
        assert_eq!(eval("(d_model + 2) * 3 - 4 / 2", &env), Ok(34));
        assert_eq!(eval("d_model - (ctx + 1)", &env), Ok(2));
        assert_eq!(
            eval("5 * min(4, ctx) + causal_positions(ctx)", &env),
            Ok(48)
        );
        // A compressed cache holds one entry per ratio tokens (engine rows.rs `entries`).
        assert_eq!(eval("3 * entries(ctx, 4) + entries(ctx, 128)", &env), Ok(3));
        assert!(
            eval("nope * 2", &env)
                .unwrap_err()
                .contains("unbound `nope`")
        );
        assert_eq!(
            names("layers(moe) * min(d_model, ctx)")
                .into_iter()
                .map(|(n, _)| n)
                .collect::<Vec<_>>(),
            ["layers(moe)", "d_model", "ctx"]
        );
    }
}
