//! Dimension expressions: `n_heads * (d_qk_nope + d_v_head)`, `config.head_dim ?? d_model / n_heads`,
//! `config.layer_types[i] == "full_attention"`, `ceil_div(in, 128)`.
//!
//! Expressions parse once at load; evaluation binds them against an [`Env`] (dims, loop variables,
//! config). Integer results are [`Q`]s, so they carry formulas when the walk asks for them.

use std::fmt;
use std::rc::Rc;

use crate::q::{Num, Q};

#[derive(Clone, Debug, PartialEq)]
pub enum Expr {
    /// `[]`: an empty list, the usual default for an absent config list.
    EmptyList,
    Int(Num),
    Bool(bool),
    Real(f64),
    Str(Rc<str>),
    /// A dim or loop variable.
    Name(Rc<str>),
    /// `config.a.b[0]`: a path into config.json.
    Config(Vec<PathSeg>),
    Unary(UnOp, Box<Expr>),
    Binary(BinOp, Box<Expr>, Box<Expr>),
    Call(Rc<str>, Vec<Expr>),
}

#[derive(Clone, Debug, PartialEq)]
pub enum PathSeg {
    Key(Rc<str>),
    Index(Box<Expr>),
}

#[derive(Clone, Copy, Debug, PartialEq)]
pub enum UnOp {
    Neg,
    Not,
}

#[derive(Clone, Copy, Debug, PartialEq)]
pub enum BinOp {
    Coalesce,
    Or,
    And,
    Eq,
    Ne,
    Lt,
    Le,
    Gt,
    Ge,
    Add,
    Sub,
    Mul,
    Div,
    Rem,
}

/// Functions an expression may call.
pub const FUNCTIONS: &[(&str, &str)] = &[
    ("ceil_div(a, b)", "a / b rounded up"),
    ("floor_div(a, b)", "a / b rounded down"),
    ("min(a, b)", "the smaller"),
    ("max(a, b)", "the larger"),
    (
        "isqrt(a)",
        "the side of a square of a entries (a must be a perfect square)",
    ),
    ("len(list)", "length of a config list"),
    ("contains(list, x)", "whether a config list holds x"),
    (
        "count(list, x)",
        "how many entries of a config list equal x",
    ),
];

#[derive(Clone, Debug, PartialEq)]
pub struct ParseError {
    pub offset: usize,
    pub message: String,
}

impl fmt::Display for ParseError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "at character {}: {}", self.offset + 1, self.message)
    }
}

// ---------------------------------------------------------------- lexer

#[derive(Clone, Debug, PartialEq)]
enum Tok {
    Int(Num),
    Real(f64),
    Str(Rc<str>),
    Ident(Rc<str>),
    Sym(&'static str),
}

fn lex(src: &str) -> Result<Vec<(usize, Tok)>, ParseError> {
    const SYMS: &[&str] = &[
        "??", "||", "&&", "==", "!=", "<=", ">=", "<", ">", "+", "-", "*", "/", "%", "(", ")", "[",
        "]", ",", ".", "!",
    ];
    let b = src.as_bytes();
    let mut out = Vec::new();
    let mut i = 0;
    while i < b.len() {
        let c = b[i];
        if c.is_ascii_whitespace() {
            i += 1;
        } else if c.is_ascii_digit() {
            let start = i;
            while i < b.len() && (b[i].is_ascii_digit() || b[i] == b'_') {
                i += 1;
            }
            let is_real = i + 1 < b.len() && b[i] == b'.' && b[i + 1].is_ascii_digit();
            if is_real {
                i += 1;
                while i < b.len() && b[i].is_ascii_digit() {
                    i += 1;
                }
                let text = &src[start..i];
                let v: f64 = text.parse().map_err(|_| ParseError {
                    offset: start,
                    message: format!("bad number `{text}`"),
                })?;
                out.push((start, Tok::Real(v)));
            } else {
                let text: String = src[start..i].chars().filter(|&c| c != '_').collect();
                let v: Num = text.parse().map_err(|_| ParseError {
                    offset: start,
                    message: format!("integer `{text}` is too large"),
                })?;
                out.push((start, Tok::Int(v)));
            }
        } else if c.is_ascii_alphabetic() || c == b'_' {
            let start = i;
            while i < b.len() && (b[i].is_ascii_alphanumeric() || b[i] == b'_') {
                i += 1;
            }
            out.push((start, Tok::Ident(src[start..i].into())));
        } else if c == b'"' || c == b'\'' {
            let start = i;
            i += 1;
            while i < b.len() && b[i] != c {
                i += 1;
            }
            if i >= b.len() {
                return Err(ParseError {
                    offset: start,
                    message: "unterminated string".into(),
                });
            }
            out.push((start, Tok::Str(src[start + 1..i].into())));
            i += 1;
        } else {
            let rest = &src[i..];
            match SYMS.iter().find(|s| rest.starts_with(**s)) {
                Some(s) => {
                    out.push((i, Tok::Sym(s)));
                    i += s.len();
                }
                None => {
                    let ch = rest.chars().next().unwrap_or('?');
                    return Err(ParseError {
                        offset: i,
                        message: format!("unexpected character `{ch}`"),
                    });
                }
            }
        }
    }
    Ok(out)
}

// ---------------------------------------------------------------- parser

struct Parser {
    toks: Vec<(usize, Tok)>,
    pos: usize,
    end: usize,
    depth: usize,
}

const MAX_DEPTH: usize = 64;

impl Parser {
    fn peek(&self) -> Option<&Tok> {
        self.toks.get(self.pos).map(|(_, t)| t)
    }
    fn offset(&self) -> usize {
        self.toks.get(self.pos).map(|(o, _)| *o).unwrap_or(self.end)
    }
    fn eat(&mut self, s: &str) -> bool {
        if matches!(self.peek(), Some(Tok::Sym(x)) if *x == s) {
            self.pos += 1;
            true
        } else {
            false
        }
    }
    fn err<T>(&self, message: impl Into<String>) -> Result<T, ParseError> {
        Err(ParseError {
            offset: self.offset(),
            message: message.into(),
        })
    }
    fn expect(&mut self, s: &str) -> Result<(), ParseError> {
        if self.eat(s) {
            Ok(())
        } else {
            self.err(format!("expected `{s}`"))
        }
    }

    fn binary(&mut self, level: usize) -> Result<Expr, ParseError> {
        const LEVELS: &[&[(&str, BinOp)]] = &[
            &[("??", BinOp::Coalesce)],
            &[("||", BinOp::Or)],
            &[("&&", BinOp::And)],
            &[
                ("==", BinOp::Eq),
                ("!=", BinOp::Ne),
                ("<=", BinOp::Le),
                (">=", BinOp::Ge),
                ("<", BinOp::Lt),
                (">", BinOp::Gt),
            ],
            &[("+", BinOp::Add), ("-", BinOp::Sub)],
            &[("*", BinOp::Mul), ("/", BinOp::Div), ("%", BinOp::Rem)],
        ];
        if level == LEVELS.len() {
            return self.unary();
        }
        let mut lhs = self.binary(level + 1)?;
        'outer: loop {
            for (s, op) in LEVELS[level] {
                if self.eat(s) {
                    let rhs = self.binary(level + 1)?;
                    lhs = Expr::Binary(*op, Box::new(lhs), Box::new(rhs));
                    continue 'outer;
                }
            }
            return Ok(lhs);
        }
    }

    fn unary(&mut self) -> Result<Expr, ParseError> {
        self.depth += 1;
        if self.depth > MAX_DEPTH {
            return self.err("expression nests too deeply");
        }
        let r = if self.eat("-") {
            Ok(Expr::Unary(UnOp::Neg, Box::new(self.unary()?)))
        } else if self.eat("!") {
            Ok(Expr::Unary(UnOp::Not, Box::new(self.unary()?)))
        } else {
            self.primary()
        };
        self.depth -= 1;
        r
    }

    fn primary(&mut self) -> Result<Expr, ParseError> {
        let tok = match self.peek() {
            Some(t) => t.clone(),
            None => return self.err("expected a value"),
        };
        self.pos += 1;
        match tok {
            Tok::Int(v) => Ok(Expr::Int(v)),
            Tok::Real(v) => Ok(Expr::Real(v)),
            Tok::Str(s) => Ok(Expr::Str(s)),
            Tok::Sym("[") => {
                self.expect("]")?;
                Ok(Expr::EmptyList)
            }
            Tok::Sym("(") => {
                let e = self.binary(0)?;
                self.expect(")")?;
                Ok(e)
            }
            Tok::Ident(name) if &*name == "true" || &*name == "false" => {
                Ok(Expr::Bool(&*name == "true"))
            }
            Tok::Ident(name) if &*name == "config" => {
                let mut path = Vec::new();
                loop {
                    if self.eat(".") {
                        match self.peek().cloned() {
                            Some(Tok::Ident(k)) => {
                                self.pos += 1;
                                path.push(PathSeg::Key(k));
                            }
                            Some(Tok::Int(i)) => {
                                self.pos += 1;
                                path.push(PathSeg::Key(i.to_string().into()));
                            }
                            _ => return self.err("expected a config key after `.`"),
                        }
                    } else if self.eat("[") {
                        let e = self.binary(0)?;
                        self.expect("]")?;
                        path.push(PathSeg::Index(Box::new(e)));
                    } else {
                        break;
                    }
                }
                if path.is_empty() {
                    return self.err("`config` needs a key, e.g. `config.hidden_size`");
                }
                Ok(Expr::Config(path))
            }
            Tok::Ident(name) => {
                if self.eat("(") {
                    let mut args = Vec::new();
                    if !self.eat(")") {
                        loop {
                            args.push(self.binary(0)?);
                            if self.eat(")") {
                                break;
                            }
                            self.expect(",")?;
                        }
                    }
                    let known = FUNCTIONS
                        .iter()
                        .any(|(sig, _)| sig.split('(').next() == Some(&*name));
                    if !known {
                        let names: Vec<_> = FUNCTIONS.iter().map(|(s, _)| *s).collect();
                        return Err(ParseError {
                            offset: self.offset(),
                            message: format!(
                                "unknown function `{name}`; known: {}",
                                names.join(", ")
                            ),
                        });
                    }
                    Ok(Expr::Call(name, args))
                } else {
                    Ok(Expr::Name(name))
                }
            }
            Tok::Sym(s) => {
                self.pos -= 1;
                self.err(format!("unexpected `{s}`"))
            }
        }
    }
}

pub fn parse(src: &str) -> Result<Expr, ParseError> {
    let toks = lex(src)?;
    let mut p = Parser {
        toks,
        pos: 0,
        end: src.len(),
        depth: 0,
    };
    if p.toks.is_empty() {
        return Err(ParseError {
            offset: 0,
            message: "empty expression".into(),
        });
    }
    let e = p.binary(0)?;
    if p.pos != p.toks.len() {
        return p.err("unexpected text after the expression");
    }
    Ok(e)
}

impl Expr {
    /// Names (dims and loop variables) this expression reads.
    pub fn names(&self, out: &mut Vec<Rc<str>>) {
        match self {
            Expr::Name(n) => out.push(n.clone()),
            Expr::Config(path) => {
                for seg in path {
                    if let PathSeg::Index(e) = seg {
                        e.names(out);
                    }
                }
            }
            Expr::Unary(_, e) => e.names(out),
            Expr::Binary(_, a, b) => {
                a.names(out);
                b.names(out);
            }
            Expr::Call(_, args) => args.iter().for_each(|a| a.names(out)),
            _ => {}
        }
    }
}

// ---------------------------------------------------------------- evaluation

/// A value an expression evaluates to.
#[derive(Clone, Debug)]
pub enum Val {
    Int(Q),
    Real(f64),
    Bool(bool),
    Str(Rc<str>),
    /// A config list or object.
    Json(serde_json::Value),
}

impl Val {
    fn kind(&self) -> &'static str {
        match self {
            Val::Int(_) => "an integer",
            Val::Real(_) => "a real number",
            Val::Bool(_) => "a boolean",
            Val::Str(_) => "a string",
            Val::Json(v) if v.is_array() => "a list",
            Val::Json(_) => "an object",
        }
    }
}

#[derive(Clone, Debug, PartialEq)]
pub enum EvalError {
    /// A config path that is absent or null; `??` catches it.
    MissingConfig(String),
    UnknownName(String),
    Type(String),
    NotDivisible(String),
    Overflow,
}

impl fmt::Display for EvalError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            EvalError::MissingConfig(p) => write!(f, "config has no value at `{p}`"),
            EvalError::UnknownName(n) => write!(f, "`{n}` is not bound"),
            EvalError::Type(m) | EvalError::NotDivisible(m) => f.write_str(m),
            EvalError::Overflow => f.write_str("arithmetic overflow"),
        }
    }
}

/// What an expression may read while it evaluates.
pub trait Env {
    fn name(&self, name: &str) -> Result<Q, EvalError>;
    fn config(&self) -> &serde_json::Value;
    /// Called for every config path read, so guards can tell which config keys a spec binds.
    fn note_config(&self, _path: &str) {}
    fn symbolic(&self) -> bool {
        false
    }
}

pub fn eval(e: &Expr, env: &dyn Env) -> Result<Val, EvalError> {
    Ok(match e {
        Expr::Int(v) => Val::Int(Q::lit_sym(*v, env.symbolic())),
        Expr::Bool(b) => Val::Bool(*b),
        Expr::EmptyList => Val::Json(serde_json::Value::Array(vec![])),
        Expr::Real(v) => Val::Real(*v),
        Expr::Str(s) => Val::Str(s.clone()),
        Expr::Name(n) => Val::Int(env.name(n)?),
        Expr::Config(path) => config_value(path, env)?,
        Expr::Unary(UnOp::Neg, a) => match eval(a, env)? {
            Val::Int(q) => Val::Int(&Q::lit(0) - &q),
            Val::Real(r) => Val::Real(-r),
            v => return Err(EvalError::Type(format!("cannot negate {}", v.kind()))),
        },
        Expr::Unary(UnOp::Not, a) => Val::Bool(!truthy(&eval(a, env)?)?),
        Expr::Binary(BinOp::Coalesce, a, b) => match eval(a, env) {
            Err(EvalError::MissingConfig(_)) => eval(b, env)?,
            other => other?,
        },
        Expr::Binary(BinOp::And, a, b) => {
            Val::Bool(truthy(&eval(a, env)?)? && truthy(&eval(b, env)?)?)
        }
        Expr::Binary(BinOp::Or, a, b) => {
            Val::Bool(truthy(&eval(a, env)?)? || truthy(&eval(b, env)?)?)
        }
        Expr::Binary(op, a, b) => binary(*op, eval(a, env)?, eval(b, env)?)?,
        Expr::Call(name, args) => {
            let vals = args
                .iter()
                .map(|a| eval(a, env))
                .collect::<Result<Vec<_>, _>>()?;
            call(name, &vals)?
        }
    })
}

/// Evaluate to an integer quantity.
pub fn eval_int(e: &Expr, env: &dyn Env) -> Result<Q, EvalError> {
    match eval(e, env)? {
        Val::Int(q) if q.overflowed() => Err(EvalError::Overflow),
        Val::Int(q) => Ok(q),
        Val::Real(r) if r.fract() == 0.0 && r.abs() < 1e30 => Ok(Q::lit(r as Num)),
        Val::Bool(b) => Ok(Q::lit(b as Num)),
        v => Err(EvalError::Type(format!(
            "expected an integer, got {}",
            v.kind()
        ))),
    }
}

pub fn eval_bool(e: &Expr, env: &dyn Env) -> Result<bool, EvalError> {
    truthy(&eval(e, env)?)
}

fn truthy(v: &Val) -> Result<bool, EvalError> {
    match v {
        Val::Bool(b) => Ok(*b),
        Val::Int(q) => Ok(q.v != 0),
        v => Err(EvalError::Type(format!(
            "expected a condition, got {}",
            v.kind()
        ))),
    }
}

fn config_value(path: &[PathSeg], env: &dyn Env) -> Result<Val, EvalError> {
    let mut cur = env.config();
    let mut shown = String::from("config");
    for seg in path {
        match seg {
            PathSeg::Key(k) => {
                shown.push('.');
                shown.push_str(k);
                cur = match cur.get(&**k) {
                    Some(v) => v,
                    None => return Err(EvalError::MissingConfig(shown)),
                };
            }
            PathSeg::Index(e) => {
                let i = eval_int(e, env)?.v;
                shown.push_str(&format!("[{i}]"));
                cur = match usize::try_from(i).ok().and_then(|i| cur.get(i)) {
                    Some(v) => v,
                    None => return Err(EvalError::MissingConfig(shown)),
                };
            }
        }
    }
    env.note_config(&shown);
    json_val(cur).ok_or(EvalError::MissingConfig(shown))
}

pub fn json_val(v: &serde_json::Value) -> Option<Val> {
    Some(match v {
        serde_json::Value::Null => return None,
        serde_json::Value::Bool(b) => Val::Bool(*b),
        serde_json::Value::Number(n) => match n.as_i64() {
            Some(i) => Val::Int(Q::lit(i as Num)),
            None => match n.as_u64() {
                Some(u) => Val::Int(Q::lit(u as Num)),
                None => Val::Real(n.as_f64().unwrap_or(f64::NAN)),
            },
        },
        serde_json::Value::String(s) => Val::Str(s.as_str().into()),
        other => Val::Json(other.clone()),
    })
}

fn real_of(v: &Val) -> Option<f64> {
    match v {
        Val::Int(q) => Some(q.v as f64),
        Val::Real(r) => Some(*r),
        _ => None,
    }
}

/// A real result must be an exact integer to become a dim (`0.25 * 256`).
fn real_to_int(r: f64, what: &str) -> Result<Val, EvalError> {
    if r.is_finite() && (r - r.round()).abs() < 1e-9 && r.abs() < 1e30 {
        Ok(Val::Int(Q::lit(r.round() as Num)))
    } else {
        Err(EvalError::NotDivisible(format!(
            "{what} gives {r}, not an integer"
        )))
    }
}

fn binary(op: BinOp, a: Val, b: Val) -> Result<Val, EvalError> {
    use BinOp::*;
    match op {
        Eq | Ne => {
            let eq = match (&a, &b) {
                (Val::Str(x), Val::Str(y)) => x == y,
                (Val::Bool(x), Val::Bool(y)) => x == y,
                _ => match (real_of(&a), real_of(&b)) {
                    (Some(x), Some(y)) => x == y,
                    _ => {
                        return Err(EvalError::Type(format!(
                            "cannot compare {} with {}",
                            a.kind(),
                            b.kind()
                        )));
                    }
                },
            };
            return Ok(Val::Bool(if op == Eq { eq } else { !eq }));
        }
        _ => {}
    }
    match (&a, &b) {
        (Val::Int(x), Val::Int(y)) => Ok(match op {
            Add => Val::Int(x + y),
            Sub => Val::Int(x - y),
            Mul => Val::Int(x * y),
            Div => Val::Int(x.div_exact(y).ok_or_else(|| {
                EvalError::NotDivisible(format!("{} / {} is not an exact division", x.v, y.v))
            })?),
            Rem => {
                if y.v == 0 {
                    return Err(EvalError::NotDivisible("remainder by zero".into()));
                }
                // Only i128::MIN % -1 overflows, and its remainder is 0.
                Val::Int(Q::lit(x.v.checked_rem_euclid(y.v).unwrap_or(0)))
            }
            Lt => Val::Bool(x.v < y.v),
            Le => Val::Bool(x.v <= y.v),
            Gt => Val::Bool(x.v > y.v),
            Ge => Val::Bool(x.v >= y.v),
            _ => unreachable!("handled above"),
        }),
        _ => {
            let (x, y) = match (real_of(&a), real_of(&b)) {
                (Some(x), Some(y)) => (x, y),
                _ => {
                    return Err(EvalError::Type(format!(
                        "cannot apply `{op:?}` to {} and {}",
                        a.kind(),
                        b.kind()
                    )));
                }
            };
            match op {
                Add => real_to_int(x + y, "a sum"),
                Sub => real_to_int(x - y, "a difference"),
                Mul => real_to_int(x * y, "a product"),
                Div => real_to_int(x / y, "a division"),
                Lt => Ok(Val::Bool(x < y)),
                Le => Ok(Val::Bool(x <= y)),
                Gt => Ok(Val::Bool(x > y)),
                Ge => Ok(Val::Bool(x >= y)),
                _ => Err(EvalError::Type(format!(
                    "cannot apply `{op:?}` to real numbers"
                ))),
            }
        }
    }
}

fn int_arg(vals: &[Val], i: usize, f: &str) -> Result<Q, EvalError> {
    match vals.get(i) {
        Some(Val::Int(q)) => Ok(q.clone()),
        Some(v) => Err(EvalError::Type(format!(
            "{f}: argument {} is {}, expected an integer",
            i + 1,
            v.kind()
        ))),
        None => Err(EvalError::Type(format!("{f}: missing argument {}", i + 1))),
    }
}

fn list_arg<'a>(vals: &'a [Val], f: &str) -> Result<&'a Vec<serde_json::Value>, EvalError> {
    match vals.first() {
        Some(Val::Json(serde_json::Value::Array(a))) => Ok(a),
        Some(v) => Err(EvalError::Type(format!(
            "{f}: expected a config list, got {}",
            v.kind()
        ))),
        None => Err(EvalError::Type(format!("{f}: missing argument"))),
    }
}

fn same_as_json(v: &Val, j: &serde_json::Value) -> bool {
    match (v, json_val(j)) {
        (Val::Str(a), Some(Val::Str(b))) => a == &b,
        (Val::Int(a), Some(Val::Int(b))) => a.v == b.v,
        (Val::Bool(a), Some(Val::Bool(b))) => *a == b,
        _ => false,
    }
}

fn call(name: &str, vals: &[Val]) -> Result<Val, EvalError> {
    Ok(match name {
        "ceil_div" | "floor_div" => {
            let (a, b) = (int_arg(vals, 0, name)?, int_arg(vals, 1, name)?);
            if b.v <= 0 {
                return Err(EvalError::NotDivisible(format!("{name} by {}", b.v)));
            }
            // Rounding up via the remainder: `a + b - 1` overflows for large `a`.
            let v = if name == "ceil_div" {
                a.v.div_euclid(b.v) + (a.v.rem_euclid(b.v) != 0) as Num
            } else {
                a.v.div_euclid(b.v)
            };
            Val::Int(Q::call(name, &[a, b], v))
        }
        "min" | "max" => {
            let (a, b) = (int_arg(vals, 0, name)?, int_arg(vals, 1, name)?);
            let v = if name == "min" {
                a.v.min(b.v)
            } else {
                a.v.max(b.v)
            };
            Val::Int(Q::call(name, &[a, b], v))
        }
        "isqrt" => {
            let a = int_arg(vals, 0, name)?;
            // A learned square grid (`num_position_embeddings`) has a whole side; anything
            // else is not a grid.
            let r = (a.v.max(0) as f64).sqrt() as Num;
            let side = (r.saturating_sub(1)..=r + 1).find(|s| s.checked_mul(*s) == Some(a.v));
            let Some(side) = side else {
                return Err(EvalError::NotDivisible(format!(
                    "isqrt: {} is not a perfect square",
                    a.v
                )));
            };
            Val::Int(Q::call(name, &[a], side))
        }
        "len" => Val::Int(Q::lit(list_arg(vals, name)?.len() as Num)),
        "contains" | "count" => {
            let list = list_arg(vals, name)?;
            let x = vals
                .get(1)
                .ok_or_else(|| EvalError::Type(format!("{name}: missing argument 2")))?;
            let n = list.iter().filter(|j| same_as_json(x, j)).count();
            if name == "contains" {
                Val::Bool(n > 0)
            } else {
                Val::Int(Q::lit(n as Num))
            }
        }
        other => return Err(EvalError::UnknownName(format!("{other}()"))),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashMap;

    struct E(HashMap<&'static str, Num>, serde_json::Value);
    impl Env for E {
        fn name(&self, n: &str) -> Result<Q, EvalError> {
            self.0
                .get(n)
                .map(|v| Q::atom(n, *v, true))
                .ok_or(EvalError::UnknownName(n.into()))
        }
        fn config(&self) -> &serde_json::Value {
            &self.1
        }
        fn symbolic(&self) -> bool {
            true
        }
    }

    fn env() -> E {
        E(
            HashMap::from([("d_model", 4096), ("n_heads", 32), ("i", 3)]),
            serde_json::json!({"head_dim": null, "layer_types": ["a", "b", "a", "full"], "f": 0.25, "k": {"x": 7}}),
        )
    }

    #[test]
    fn coalesce_falls_back_on_null() {
        let e = parse("config.head_dim ?? d_model / n_heads").unwrap();
        let q = eval_int(&e, &env()).unwrap();
        assert_eq!(q.v, 128);
        assert_eq!(q.formula(), "d_model / n_heads");
    }

    #[test]
    fn list_index_and_string_compare() {
        let e = parse("config.layer_types[i] == \"full\"").unwrap();
        assert!(eval_bool(&e, &env()).unwrap());
        let e = parse("count(config.layer_types, 'a')").unwrap();
        assert_eq!(eval_int(&e, &env()).unwrap().v, 2);
    }

    #[test]
    fn reals_must_land_on_integers() {
        assert_eq!(
            eval_int(&parse("config.f * d_model").unwrap(), &env())
                .unwrap()
                .v,
            1024
        );
        assert!(eval_int(&parse("config.f * 3").unwrap(), &env()).is_err());
        assert!(eval_int(&parse("d_model / 3").unwrap(), &env()).is_err());
        assert_eq!(
            eval_int(&parse("config.k.x + 1").unwrap(), &env())
                .unwrap()
                .v,
            8
        );
    }

    #[test]
    fn parse_errors_are_located() {
        let e = parse("d_model * (n_heads").unwrap_err();
        assert!(e.message.contains("expected `)`"), "{e}");
        assert!(
            parse("foo(1)")
                .unwrap_err()
                .message
                .contains("unknown function")
        );
        assert!(parse("").is_err());
        assert!(parse(&"(".repeat(500)).is_err());
    }
}
