//! `Q`: a quantity that carries its exact value and, when asked, the formula that produced it.
//!
//! The walk computes every number with `Q` arithmetic. With formulas on, the same operations
//! build the symbolic expression alongside the value, so a number and its formula come from one
//! walk and cannot disagree.

use std::fmt;
use std::ops::{Add, Mul, Sub};
use std::rc::Rc;

/// Exact integer value. Arithmetic saturates; a saturated value is reported as an overflow.
pub type Num = i128;

#[derive(Clone, Debug, PartialEq)]
pub enum Sym {
    Lit(Num),
    Atom(Rc<str>),
    Add(Vec<Rc<Sym>>),
    Sub(Rc<Sym>, Rc<Sym>),
    Mul(Vec<Rc<Sym>>),
    Div(Rc<Sym>, Rc<Sym>),
    Call(Rc<str>, Vec<Rc<Sym>>),
}

#[derive(Clone, Debug)]
pub struct Q {
    pub v: Num,
    pub f: Option<Rc<Sym>>,
}

impl PartialEq for Q {
    fn eq(&self, other: &Self) -> bool {
        self.v == other.v
    }
}

impl Q {
    pub fn lit(v: Num) -> Q {
        Q { v, f: None }
    }
    /// A literal that still shows in formulas.
    pub fn lit_sym(v: Num, symbolic: bool) -> Q {
        Q {
            v,
            f: symbolic.then(|| Rc::new(Sym::Lit(v))),
        }
    }
    pub fn atom(name: &str, v: Num, symbolic: bool) -> Q {
        Q {
            v,
            f: symbolic.then(|| Rc::new(Sym::Atom(name.into()))),
        }
    }
    pub fn zero() -> Q {
        Q::lit(0)
    }
    pub fn one() -> Q {
        Q::lit(1)
    }
    pub fn overflowed(&self) -> bool {
        self.v == Num::MAX || self.v == Num::MIN
    }
    fn sym(&self) -> Rc<Sym> {
        self.f.clone().unwrap_or_else(|| Rc::new(Sym::Lit(self.v)))
    }
    fn any_sym(a: &Q, b: &Q) -> bool {
        a.f.is_some() || b.f.is_some()
    }
    /// Exact division; `None` when `d` is zero or does not divide.
    pub fn div_exact(&self, d: &Q) -> Option<Q> {
        if d.v == 0 || self.v.checked_rem(d.v).unwrap_or(0) != 0 {
            return None;
        }
        let f = Q::any_sym(self, d).then(|| Rc::new(Sym::Div(self.sym(), d.sym())));
        // i128::MIN / -1 is the one quotient that does not fit: saturate, reported as overflow.
        let v = self.v.checked_div(d.v).unwrap_or(Num::MAX);
        Some(Q { v, f })
    }
    pub fn call(name: &str, args: &[Q], v: Num) -> Q {
        let f = args
            .iter()
            .any(|a| a.f.is_some())
            .then(|| Rc::new(Sym::Call(name.into(), args.iter().map(Q::sym).collect())));
        Q { v, f }
    }
    pub fn sum<'a>(items: impl IntoIterator<Item = &'a Q>) -> Q {
        items.into_iter().fold(Q::zero(), |acc, q| &acc + q)
    }
    pub fn product<'a>(items: impl IntoIterator<Item = &'a Q>) -> Q {
        items.into_iter().fold(Q::one(), |acc, q| &acc * q)
    }
    /// The atoms multiplying each additive term of the formula: `n_heads * (d_nope + d_rope)`
    /// gives `[[n_heads, d_nope], [n_heads, d_rope]]`. This is how a tensor axis says which dims
    /// it carries (the deployment analysis splits an axis by a dim only when every term carries
    /// it). A plain number, a function call, or a formula past `MAX_TERMS` terms carries nothing.
    pub fn term_atoms(&self) -> Vec<Vec<Rc<str>>> {
        const MAX_TERMS: usize = 64;
        fn terms(s: &Sym) -> Option<Vec<Vec<Rc<str>>>> {
            let t = match s {
                Sym::Lit(_) | Sym::Call(..) => vec![vec![]],
                Sym::Atom(a) => vec![vec![a.clone()]],
                Sym::Add(ts) => {
                    let mut out = Vec::new();
                    for t in ts {
                        out.extend(terms(t)?);
                    }
                    out
                }
                Sym::Sub(a, b) => {
                    let mut out = terms(a)?;
                    out.extend(terms(b)?);
                    out
                }
                // Dividing keeps the numerator's factors (`n_heads * d / 2` still carries heads).
                Sym::Div(a, _) => terms(a)?,
                Sym::Mul(fs) => {
                    let mut out: Vec<Vec<Rc<str>>> = vec![vec![]];
                    for f in fs {
                        let ft = terms(f)?;
                        let mut next = Vec::with_capacity(out.len() * ft.len());
                        for a in &out {
                            for b in &ft {
                                next.push(a.iter().chain(b).cloned().collect());
                            }
                        }
                        out = next;
                    }
                    out
                }
            };
            (t.len() <= MAX_TERMS).then_some(t)
        }
        match &self.f {
            Some(s) => terms(s).unwrap_or_else(|| vec![vec![]]),
            None => vec![vec![]],
        }
    }

    pub fn formula(&self) -> String {
        match &self.f {
            Some(s) => render(s, 0),
            None => self.v.to_string(),
        }
    }
}

impl Add for &Q {
    type Output = Q;
    fn add(self, o: &Q) -> Q {
        let v = self.v.saturating_add(o.v);
        if !Q::any_sym(self, o) {
            return Q::lit(v);
        }
        if self.f.is_none() && self.v == 0 {
            return Q { v, f: o.f.clone() };
        }
        if o.f.is_none() && o.v == 0 {
            return Q {
                v,
                f: self.f.clone(),
            };
        }
        let mut terms = Vec::new();
        for s in [self.sym(), o.sym()] {
            match &*s {
                Sym::Add(ts) => terms.extend(ts.iter().cloned()),
                _ => terms.push(s),
            }
        }
        Q {
            v,
            f: Some(Rc::new(Sym::Add(terms))),
        }
    }
}

impl Sub for &Q {
    type Output = Q;
    fn sub(self, o: &Q) -> Q {
        let v = self.v.saturating_sub(o.v);
        if !Q::any_sym(self, o) {
            return Q::lit(v);
        }
        if o.f.is_none() && o.v == 0 {
            return Q {
                v,
                f: self.f.clone(),
            };
        }
        Q {
            v,
            f: Some(Rc::new(Sym::Sub(self.sym(), o.sym()))),
        }
    }
}

impl Mul for &Q {
    type Output = Q;
    fn mul(self, o: &Q) -> Q {
        let v = self.v.saturating_mul(o.v);
        if !Q::any_sym(self, o) {
            return Q::lit(v);
        }
        // Multiplying by a plain 1 keeps the formula readable.
        if self.f.is_none() && self.v == 1 {
            return Q { v, f: o.f.clone() };
        }
        if o.f.is_none() && o.v == 1 {
            return Q {
                v,
                f: self.f.clone(),
            };
        }
        if (self.f.is_none() && self.v == 0) || (o.f.is_none() && o.v == 0) {
            return Q::lit(0);
        }
        let mut factors = Vec::new();
        for s in [self.sym(), o.sym()] {
            match &*s {
                Sym::Mul(fs) => factors.extend(fs.iter().cloned()),
                _ => factors.push(s),
            }
        }
        Q {
            v,
            f: Some(Rc::new(Sym::Mul(factors))),
        }
    }
}

impl Add for Q {
    type Output = Q;
    fn add(self, o: Q) -> Q {
        &self + &o
    }
}
impl Mul for Q {
    type Output = Q;
    fn mul(self, o: Q) -> Q {
        &self * &o
    }
}
impl Sub for Q {
    type Output = Q;
    fn sub(self, o: Q) -> Q {
        &self - &o
    }
}

impl fmt::Display for Q {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.v)
    }
}

/// Precedence: 0 top, 1 sum, 2 product, 3 atom.
fn render(s: &Sym, ctx: u8) -> String {
    let (text, prec) = match s {
        Sym::Lit(v) => (v.to_string(), 3),
        Sym::Atom(a) => (a.to_string(), 3),
        Sym::Add(ts) => (
            ts.iter()
                .map(|t| render(t, 1))
                .collect::<Vec<_>>()
                .join(" + "),
            1,
        ),
        Sym::Sub(a, b) => (format!("{} - {}", render(a, 1), render(b, 2)), 1),
        Sym::Mul(fs) => (
            fs.iter()
                .map(|t| render(t, 2))
                .collect::<Vec<_>>()
                .join(" * "),
            2,
        ),
        Sym::Div(a, b) => (format!("{} / {}", render(a, 2), render(b, 3)), 2),
        Sym::Call(n, args) => (
            format!(
                "{n}({})",
                args.iter()
                    .map(|t| render(t, 0))
                    .collect::<Vec<_>>()
                    .join(", ")
            ),
            3,
        ),
    };
    if prec < ctx && ctx > 0 && prec < 3 {
        format!("({text})")
    } else {
        text
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn formula_and_value_come_together() {
        let a = Q::atom("n_heads", 32, true);
        let d = Q::atom("d_head", 128, true);
        let two = Q::lit_sym(2, true);
        let q = &(&two * &a) * &d;
        assert_eq!(q.v, 8192);
        assert_eq!(q.formula(), "2 * n_heads * d_head");
        let s = &(&a + &d) * &two;
        assert_eq!(s.formula(), "(n_heads + d_head) * 2");
        assert_eq!(s.v, 320);
    }

    #[test]
    fn term_atoms_name_the_dims_of_every_term() {
        let h = Q::atom("n_heads", 128, true);
        let a = Q::atom("d_nope", 128, true);
        let b = Q::atom("d_rope", 64, true);
        let axis = &h * &(&a + &b);
        let names = |q: &Q| -> Vec<Vec<String>> {
            q.term_atoms()
                .iter()
                .map(|t| t.iter().map(|s| s.to_string()).collect())
                .collect()
        };
        assert_eq!(
            names(&axis),
            vec![vec!["n_heads", "d_nope"], vec!["n_heads", "d_rope"]]
        );
        assert_eq!(
            names(&(&a + &Q::lit_sym(1, true))),
            vec![vec!["d_nope"], vec![]]
        );
        assert_eq!(names(&Q::lit(7)), vec![Vec::<String>::new()]);
        let half = (&h * &a).div_exact(&Q::lit_sym(2, true)).unwrap();
        assert_eq!(names(&half), vec![vec!["n_heads", "d_nope"]]);
    }

    #[test]
    fn saturation_is_reported() {
        let big = Q::lit(Num::MAX / 2);
        assert!((&big * &Q::lit(4)).overflowed());
    }
}
