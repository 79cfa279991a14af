//! Numbers as the checker compares them: `128`, `128.0` and `1.28e2` are the same number, and a
//! number in a conclusion's text is found the way a reader would find it (`1024` in "window is
//! 1024"), not inside identifiers or paths (`l2norm`, `fp8`, `model.layers.3`).

use std::fmt;

/// A number from a claim, a config value or a conclusion's text. Integers compare exactly;
/// anything with a fraction or an exponent compares as `f64`. Signs are dropped when numbers
/// are read from text (`head_dim**-0.5` states 0.5 next to a minus operator), but kept in
/// config values.
#[derive(Clone, Copy, Debug)]
pub enum Num {
    Int(i128),
    Float(f64),
}

impl Num {
    /// Parses a numeric literal (`128`, `-3`, `1e-6`, `0.25`, `1E7`); `None` for anything else,
    /// including `inf` and `NaN`.
    pub fn parse(s: &str) -> Option<Num> {
        let s = s.trim();
        if s.is_empty() {
            return None;
        }
        let body = s.strip_prefix(['-', '+']).unwrap_or(s);
        if body.is_empty() || !body.starts_with(|c: char| c.is_ascii_digit() || c == '.') {
            return None;
        }
        if body.bytes().all(|b| b.is_ascii_digit())
            && let Ok(i) = s.parse::<i128>()
        {
            return Some(Num::Int(i));
        }
        if !body
            .bytes()
            .all(|b| b.is_ascii_digit() || matches!(b, b'.' | b'e' | b'E' | b'-' | b'+'))
        {
            return None;
        }
        s.parse::<f64>()
            .ok()
            .filter(|f| f.is_finite())
            .map(Num::Float)
    }

    pub fn from_json(n: &serde_json::Number) -> Option<Num> {
        if let Some(i) = n.as_i64() {
            Some(Num::Int(i as i128))
        } else if let Some(u) = n.as_u64() {
            Some(Num::Int(u as i128))
        } else {
            n.as_f64().filter(|f| f.is_finite()).map(Num::Float)
        }
    }

    fn as_f64(self) -> f64 {
        match self {
            Num::Int(i) => i as f64,
            Num::Float(f) => f,
        }
    }

    pub fn abs(self) -> Num {
        match self {
            Num::Int(i) => Num::Int(i.abs()),
            Num::Float(f) => Num::Float(f.abs()),
        }
    }
}

impl PartialEq for Num {
    fn eq(&self, other: &Num) -> bool {
        match (*self, *other) {
            (Num::Int(a), Num::Int(b)) => a == b,
            (a, b) => a.as_f64() == b.as_f64(),
        }
    }
}

impl fmt::Display for Num {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Num::Int(i) => write!(f, "{i}"),
            Num::Float(x) => write!(f, "{x}"),
        }
    }
}

fn is_word(c: char) -> bool {
    c.is_alphanumeric() || c == '_'
}

/// The numbers a reader sees in `text`, in order, without signs. A digit run glued to a word
/// (`l2norm`, `q_proj2`, `8B`, `fp8`) or reached through a dotted path (`layers.3.mlp`) is part
/// of a name, not a number. Exponents (`1e-6`) and fractions (`0.25`) belong to their number.
pub fn numbers_in(text: &str) -> Vec<Num> {
    let chars: Vec<char> = text.chars().collect();
    let mut out = Vec::new();
    let mut i = 0;
    while i < chars.len() {
        let c = chars[i];
        let starts_fraction = c == '.'
            && chars.get(i + 1).is_some_and(char::is_ascii_digit)
            && !i
                .checked_sub(1)
                .and_then(|p| chars.get(p))
                .is_some_and(|&p| is_word(p) || p == '.');
        if !c.is_ascii_digit() && !starts_fraction {
            i += 1;
            continue;
        }
        // `layers.3`, `x[0].5`: an index reached through a path.
        let glued = i.checked_sub(1).map(|p| chars[p]).is_some_and(|p| {
            is_word(p)
                || (p == '.'
                    && i.checked_sub(2)
                        .map(|q| chars[q])
                        .is_some_and(|q| is_word(q) || q == ']'))
        });
        let start = i;
        let mut j = i;
        let mut seen_dot = false;
        while j < chars.len() {
            let d = chars[j];
            if d.is_ascii_digit() {
                j += 1;
            } else if d == '.' && !seen_dot && chars.get(j + 1).is_some_and(char::is_ascii_digit) {
                seen_dot = true;
                j += 1;
            } else {
                break;
            }
        }
        // An exponent only when digits follow it: `1e-6`, `2E+3`, not `2e` in `2easy`.
        if j < chars.len() && matches!(chars[j], 'e' | 'E') {
            let mut k = j + 1;
            if k < chars.len() && matches!(chars[k], '-' | '+') {
                k += 1;
            }
            if k < chars.len() && chars[k].is_ascii_digit() {
                while k < chars.len() && chars[k].is_ascii_digit() {
                    k += 1;
                }
                j = k;
            }
        }
        let glued_after = chars.get(j).is_some_and(|&d| is_word(d))
            || (chars.get(j) == Some(&'.') && chars.get(j + 1).is_some_and(|&d| is_word(d)));
        if !glued && !glued_after {
            let lit: String = chars[start..j].iter().collect();
            if let Some(n) = Num::parse(&lit) {
                out.push(n.abs());
            }
        }
        // Skip the rest of a glued word so `q2x3` does not yield `3`.
        i = j;
        if glued || glued_after {
            while i < chars.len() && (is_word(chars[i]) || chars[i] == '.') {
                i += 1;
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn nums(s: &str) -> Vec<String> {
        numbers_in(s).iter().map(|n| n.to_string()).collect()
    }

    #[test]
    fn numbers_compare_as_numbers() {
        assert_eq!(Num::parse("128"), Num::parse("128.0"));
        assert_eq!(Num::parse("1e-6"), Num::parse("0.000001"));
        assert_eq!(Num::parse("1E7"), Num::parse("10000000"));
        assert_ne!(Num::parse("1024"), Num::parse("128"));
        assert_eq!(Num::parse("inf"), None);
        assert_eq!(Num::parse("NaN"), None);
        assert_eq!(Num::parse("abc"), None);
        assert_eq!(Num::parse("-"), None);
        // Exact beyond f64's 53 bits.
        assert_ne!(
            Num::parse("9007199254740993"),
            Num::parse("9007199254740992")
        );
    }

    #[test]
    fn numbers_in_prose_not_in_names() {
        assert_eq!(nums("sliding window is 1024 in the spec"), ["1024"]);
        assert_eq!(
            nums("q/k L2 normalisation before the delta rule"),
            [] as [&str; 0]
        );
        assert_eq!(nums("l2norm on fp8 q_proj2 weights of 8B"), [] as [&str; 0]);
        assert_eq!(nums("model.layers.3.mlp has 512 experts"), ["512"]);
        assert_eq!(nums("scaling = head_dim**-0.5"), ["0.5"]);
        assert_eq!(nums("eps=1e-6, theta 1e7."), ["0.000001", "10000000"]);
        assert_eq!(nums("shape [2048, 6144]"), ["2048", "6144"]);
        assert_eq!(nums("a quarter (0.25) of the head"), ["0.25"]);
        assert_eq!(nums("x[..., :64] and .5"), ["64", "0.5"]);
        assert_eq!(nums("layer_types[3] is full"), ["3"]);
        assert_eq!(nums("transformers 4.57.6"), [] as [&str; 0]);
    }
}
