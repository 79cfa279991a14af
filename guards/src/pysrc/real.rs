//! Real-valued constants a statement computes: `config.index_head_dim ** -0.5`, `2`,
//! `math.sqrt(self.head_dim)`, `self.hc_eps` (an attribute the class assigns one of those).
//!
//! The grammar is Python's arithmetic over numbers, config keys (`config.K`,
//! `self.config.K`, `getattr(config, "K", d)`), attributes of the running object, `sqrt` and
//! parentheses; anything else (a tensor, a call of another function, a bare name) is not a
//! constant. Bounded: a depth budget stops runaway nesting and attribute chains.

use std::ops::Range;

use super::{Module, Tok};

const MAX_DEPTH: usize = 24;

/// Why an expression gives no value.
#[derive(Clone, Debug, PartialEq)]
pub enum NotReal {
    /// It is not a constant expression (a tensor, a call, a bare name).
    NotConstant,
    /// It is one, but reads a config key config does not have, or an attribute whose value
    /// cannot be read: a value the reader cannot know.
    Unknown,
}

/// What an expression's names resolve to.
pub struct Env<'a> {
    /// A config key's value (after whatever aliasing the caller does).
    pub config: &'a dyn Fn(&str) -> Option<serde_json::Value>,
    /// `self.<a>`: the value the class assigns it, if any (`None`: not an attribute the class
    /// assigns a constant).
    pub attr: &'a dyn Fn(&str, usize) -> Result<f64, NotReal>,
}

/// The value of the whole range `r`.
pub fn whole(m: &Module, r: Range<usize>, env: &Env, depth: usize) -> Result<f64, NotReal> {
    let mut p = Parser {
        m,
        at: r.start,
        end: r.end,
        env,
        depth,
        missing: false,
    };
    let v = p.sum()?;
    match (p.at == p.end, p.missing) {
        (false, _) => Err(NotReal::NotConstant),
        (true, true) => Err(NotReal::Unknown),
        (true, false) => Ok(v),
    }
}

/// The value of the operand that starts at token `at` and binds tighter than `*` (a unary
/// power expression), and the token after it.
pub fn operand_at(m: &Module, at: usize, end: usize, env: &Env) -> Result<(f64, usize), NotReal> {
    let mut p = Parser {
        m,
        at,
        end,
        env,
        depth: 0,
        missing: false,
    };
    let v = p.unary()?;
    if p.missing {
        return Err(NotReal::Unknown);
    }
    Ok((v, p.at))
}

struct Parser<'a, 'm> {
    m: &'a Module<'m>,
    at: usize,
    end: usize,
    env: &'a Env<'a>,
    depth: usize,
    /// A config key or attribute of the expression could not be read: its value is unknown,
    /// which matters only if the rest of it is a constant.
    missing: bool,
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
        let hit = self.peek() == t;
        if hit {
            self.at += 1;
        }
        hit
    }

    fn deeper(&mut self) -> Result<(), NotReal> {
        self.depth += 1;
        if self.depth > MAX_DEPTH {
            Err(NotReal::NotConstant)
        } else {
            Ok(())
        }
    }

    fn sum(&mut self) -> Result<f64, NotReal> {
        self.deeper()?;
        let mut v = self.product()?;
        loop {
            if self.eat("+") {
                v += self.product()?;
            } else if self.eat("-") {
                v -= self.product()?;
            } else {
                break;
            }
        }
        self.depth -= 1;
        Ok(v)
    }

    fn product(&mut self) -> Result<f64, NotReal> {
        let mut v = self.unary()?;
        loop {
            if self.eat("*") {
                v *= self.unary()?;
            } else if self.eat("/") {
                v /= self.unary()?;
            } else {
                break;
            }
        }
        Ok(v)
    }

    fn unary(&mut self) -> Result<f64, NotReal> {
        if self.eat("-") {
            self.deeper()?;
            let v = -self.unary()?;
            self.depth -= 1;
            return Ok(v);
        }
        if self.eat("+") {
            return self.unary();
        }
        let base = self.atom()?;
        if self.eat("**") {
            self.deeper()?;
            let e = self.unary()?;
            self.depth -= 1;
            return Ok(base.powf(e));
        }
        Ok(base)
    }

    fn atom(&mut self) -> Result<f64, NotReal> {
        if self.at >= self.end {
            return Err(NotReal::NotConstant);
        }
        if self.eat("(") {
            let v = self.sum()?;
            return if self.eat(")") {
                Ok(v)
            } else {
                Err(NotReal::NotConstant)
            };
        }
        let t = self
            .m
            .tokens
            .get(self.at)
            .copied()
            .ok_or(NotReal::NotConstant)?;
        match t.kind {
            Tok::Number => {
                self.at += 1;
                let s = self.m.tok(self.at - 1).replace('_', "");
                s.parse::<f64>().map_err(|_| NotReal::NotConstant)
            }
            Tok::Name => {
                let mut path = vec![self.m.tok(self.at)];
                self.at += 1;
                while self.peek() == "." {
                    self.at += 1;
                    match self.m.tokens.get(self.at) {
                        Some(t) if t.kind == Tok::Name && self.at < self.end => {
                            path.push(self.m.tok(self.at));
                            self.at += 1;
                        }
                        _ => return Err(NotReal::NotConstant),
                    }
                }
                if self.peek() == "(" {
                    return self.call(&path);
                }
                match path.as_slice() {
                    ["config", key] | ["self", "config", key] => self.key(key),
                    ["self", attr] => {
                        let v = (self.env.attr)(attr, self.depth + 1);
                        self.known(v)
                    }
                    _ => Err(NotReal::NotConstant),
                }
            }
            _ => Err(NotReal::NotConstant),
        }
    }

    fn key(&mut self, key: &str) -> Result<f64, NotReal> {
        // `_attn_implementation` and the like are set at run time, not configured numbers.
        if key.starts_with('_') {
            return Err(NotReal::NotConstant);
        }
        let v = match (self.env.config)(key) {
            Some(v) => v.as_f64().ok_or(NotReal::NotConstant),
            None => Err(NotReal::Unknown),
        };
        self.known(v)
    }

    /// An unknown value reads on as NaN, so that the rest decides whether this is a constant.
    fn known(&mut self, v: Result<f64, NotReal>) -> Result<f64, NotReal> {
        match v {
            Err(NotReal::Unknown) => {
                self.missing = true;
                Ok(f64::NAN)
            }
            other => other,
        }
    }

    fn call(&mut self, path: &[&str]) -> Result<f64, NotReal> {
        let open = self.at;
        let close = self
            .m
            .matching_close(open, self.end)
            .ok_or(NotReal::NotConstant)?;
        self.at = close + 1;
        let args = self.m.split_top(open + 1..close);
        match (path, args.as_slice()) {
            (["sqrt"] | ["math", "sqrt"], [x]) => {
                let v = whole(self.m, x.clone(), self.env, self.depth + 1);
                Ok(self.known(v)?.sqrt())
            }
            (["float"], [x]) => {
                let v = whole(self.m, x.clone(), self.env, self.depth + 1);
                self.known(v)
            }
            (["getattr"], [obj, key, rest @ ..])
                if matches!(self.m.span(obj.clone()).trim(), "config" | "self.config") =>
            {
                let key = self
                    .m
                    .span(key.clone())
                    .trim()
                    .trim_matches(|c| c == '"' || c == '\'');
                match ((self.env.config)(key), rest) {
                    (Some(v), _) => v.as_f64().ok_or(NotReal::NotConstant),
                    (None, [d]) => {
                        let v = whole(self.m, d.clone(), self.env, self.depth + 1);
                        self.known(v)
                    }
                    (None, _) => self.known(Err(NotReal::Unknown)),
                }
            }
            _ => Err(NotReal::NotConstant),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn value(text: &str, config: serde_json::Value) -> Result<f64, NotReal> {
        let name = "x.py".to_string();
        let m = Module::read(&name, text);
        let lookup = |k: &str| config.get(k).cloned();
        let attr = |_: &str, _: usize| Err(NotReal::NotConstant);
        let env = Env {
            config: &lookup,
            attr: &attr,
        };
        let Some(st) = m.stmts.first() else {
            return Err(NotReal::NotConstant);
        };
        whole(&m, st.tokens.clone(), &env, 0)
    }

    #[test]
    fn python_arithmetic_over_config_is_read_and_the_rest_is_not_a_constant() {
        let c = serde_json::json!({ "index_head_dim": 128, "hc_eps": 1e-6, "hidden_size": 4096 });
        assert_eq!(
            value("config.index_head_dim ** -0.5", c.clone()),
            Ok(128f64.powf(-0.5))
        );
        assert_eq!(value("2", c.clone()), Ok(2.0));
        assert_eq!(value("self.config.hc_eps", c.clone()), Ok(1e-6));
        assert_eq!(value("math.sqrt(config.hidden_size)", c.clone()), Ok(64.0));
        assert_eq!(value("1 / (2 * 15)", c.clone()), Ok(1.0 / 30.0));
        assert_eq!(value("-2 ** 2", c.clone()), Ok(-4.0));
        assert_eq!(
            value("getattr(config, 'softcap', 30.0)", c.clone()),
            Ok(30.0)
        );
        assert_eq!(
            value("config.missing ** 0.5", c.clone()),
            Err(NotReal::Unknown)
        );
        for not in [
            "torch.sigmoid(x)",
            "x * 2",
            "eps",
            "self.weight[0]",
            "'text'",
            "((((1",
        ] {
            assert_eq!(value(not, c.clone()), Err(NotReal::NotConstant), "{not}");
        }
    }

    #[test]
    fn deep_nesting_is_refused_not_overflowed() {
        let deep = format!("{}1{}", "(".repeat(10_000), ")".repeat(10_000));
        assert!(value(&deep, serde_json::json!({})).is_err());
        let minus = format!("{}1", "-".repeat(10_000));
        assert!(value(&minus, serde_json::json!({})).is_err());
        let pow = format!("2{}", " ** 2".repeat(10_000));
        assert!(value(&pow, serde_json::json!({})).is_err());
    }

    proptest::proptest! {
        /// Any expression text evaluates or not without a panic (deep nesting, `**` chains,
        /// unclosed calls are errors).
        #[test]
        fn any_expression_is_bounded(e in "(\\(|\\)|-|\\+|\\*\\*|\\*|/|config\\.[a-c]|self\\.[a-c]|[0-9]{1,20}|\\.5|e-9|sqrt\\(|getattr\\(config, 'a', |,){0,80}") {
            let _ = value(&e, serde_json::json!({"a": 1e308, "b": 0, "c": [1, 2]}));
        }
    }
}
