//! The evidence grammar: one claim per line, each checkable against one kind of external fact.
//!
//! ```text
//! src:   FILE:LINE[-LINE] "quote"          the staged source file's lines contain the quote
//! cfg:   dotted.key[index] = VALUE         config.json has that value
//! ckpt:  tensor.name = [d0, d1, ...] DTYPE the checkpoint has that tensor, shape (and dtype)
//! count: prefix = N                        distinct indices under that prefix in the checkpoint
//! ```
//!
//! `X` as a whole segment of a `ckpt:` name or `count:` prefix stands for any index
//! (`model.layers.X.mlp.gate.weight`): the claim then holds for every tensor it matches.

use std::fmt;

use harch_guards::truth::Dtype;
use serde::Serialize;

use crate::numbers::{Num, numbers_in};

/// The grammar as prompts and docs show it (one origin: the review prompt renders this).
pub const GRAMMAR: &str = r#"src:   FILE:LINE[-LINE] "quote"               the staged source file's lines contain the quote (whitespace-normalised)
cfg:   dotted.key[index] = VALUE              config.json has that value (numbers compared as numbers)
ckpt:  tensor.name = [d0, d1, ...] [DTYPE]    the checkpoint has that tensor with that shape (and dtype)
count: prefix = N                             the number of distinct indices under that prefix in the checkpoint"#;

/// Worked examples of each form, for prompts and docs.
pub const EXAMPLES: &str = r#"src:   modeling_x.py:120-122 "self.scaling = self.head_dim**-0.5"
cfg:   text_config.sliding_window = 128
ckpt:  model.layers.X.mlp.gate_proj.weight = [2048, 6144] BF16
count: model.mtp.layers = 3"#;

/// A `src:` citation spans at most this many lines: a citation points at a statement, not a
/// file.
pub const MAX_SRC_LINES: u32 = 50;

/// The segment that stands for any index in `ckpt:` names and `count:` prefixes.
pub const ANY_INDEX: &str = "X";

#[derive(Clone, Debug, PartialEq, Serialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum Claim {
    Src {
        file: String,
        first: u32,
        last: u32,
        quote: String,
    },
    Cfg {
        key: ConfigKey,
        value: serde_json::Value,
    },
    Ckpt {
        tensor: String,
        shape: Vec<u64>,
        dtype: Option<Dtype>,
    },
    Count {
        prefix: String,
        n: u64,
    },
}

/// `text_config.layer_types[3]`: object keys and array indices, in order.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ConfigKey(pub Vec<KeyPart>);

#[derive(Clone, Debug, PartialEq, Eq)]
pub enum KeyPart {
    Key(String),
    Index(usize),
}

impl Serialize for ConfigKey {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_str(self)
    }
}

impl fmt::Display for ConfigKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (i, p) in self.0.iter().enumerate() {
            match p {
                KeyPart::Key(k) if i == 0 => write!(f, "{k}")?,
                KeyPart::Key(k) => write!(f, ".{k}")?,
                KeyPart::Index(n) => write!(f, "[{n}]")?,
            }
        }
        Ok(())
    }
}

impl fmt::Display for Claim {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Claim::Src {
                file,
                first,
                last,
                quote,
            } if first == last => write!(f, "src: {file}:{first} \"{quote}\""),
            Claim::Src {
                file,
                first,
                last,
                quote,
            } => write!(f, "src: {file}:{first}-{last} \"{quote}\""),
            Claim::Cfg { key, value } => write!(f, "cfg: {key} = {value}"),
            Claim::Ckpt {
                tensor,
                shape,
                dtype,
            } => {
                write!(f, "ckpt: {tensor} = {}", show_shape(shape))?;
                if let Some(d) = dtype {
                    write!(f, " {d}")?;
                }
                Ok(())
            }
            Claim::Count { prefix, n } => write!(f, "count: {prefix} = {n}"),
        }
    }
}

pub fn show_shape(shape: &[u64]) -> String {
    let dims: Vec<String> = shape.iter().map(u64::to_string).collect();
    format!("[{}]", dims.join(", "))
}

impl Claim {
    /// Every number the claim states: a holding claim backs these numbers in its conclusion.
    /// Line numbers of a citation are where, not what, and back nothing.
    pub fn numbers(&self) -> Vec<Num> {
        match self {
            Claim::Src { quote, .. } => numbers_in(quote),
            Claim::Cfg { key, value } => {
                let mut out: Vec<Num> = key
                    .0
                    .iter()
                    .filter_map(|p| match p {
                        KeyPart::Index(n) => Some(Num::Int(*n as i128)),
                        KeyPart::Key(_) => None,
                    })
                    .collect();
                value_numbers(value, &mut out);
                out
            }
            Claim::Ckpt { tensor, shape, .. } => {
                let mut out = index_segments(tensor);
                out.extend(shape.iter().map(|&d| Num::Int(d as i128)));
                out
            }
            Claim::Count { prefix, n } => {
                let mut out = index_segments(prefix);
                out.push(Num::Int(*n as i128));
                out
            }
        }
    }
}

fn index_segments(name: &str) -> Vec<Num> {
    name.split('.')
        .filter(|s| !s.is_empty() && s.bytes().all(|b| b.is_ascii_digit()))
        .filter_map(Num::parse)
        .collect()
}

fn value_numbers(v: &serde_json::Value, out: &mut Vec<Num>) {
    match v {
        serde_json::Value::Number(n) => out.extend(Num::from_json(n).map(Num::abs)),
        serde_json::Value::String(s) => out.extend(numbers_in(s)),
        serde_json::Value::Array(a) => a.iter().for_each(|x| value_numbers(x, out)),
        serde_json::Value::Object(m) => m.values().for_each(|x| value_numbers(x, out)),
        serde_json::Value::Bool(_) | serde_json::Value::Null => {}
    }
}

/// Why an evidence line is not a claim, and the form it should have.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct GrammarError {
    pub message: String,
    pub hint: String,
}

fn err(message: impl Into<String>, hint: &str) -> GrammarError {
    GrammarError {
        message: message.into(),
        hint: hint.to_string(),
    }
}

const SRC_FORM: &str = r#"write `src: FILE:LINE[-LINE] "quote"`, e.g. `src: modeling_x.py:120-122 "self.scaling = self.head_dim**-0.5"`"#;
const CFG_FORM: &str =
    "write `cfg: dotted.key[index] = VALUE`, e.g. `cfg: text_config.sliding_window = 128`";
const CKPT_FORM: &str = "write `ckpt: tensor.name = [d0, d1, ...]` with an optional dtype, e.g. `ckpt: model.layers.X.mlp.gate_proj.weight = [2048, 6144] BF16` (X: any layer)";
const COUNT_FORM: &str = "write `count: prefix = N`, e.g. `count: model.layers = 61`";

/// Parses one evidence line.
pub fn parse_claim(line: &str) -> Result<Claim, GrammarError> {
    let line = line.trim();
    let Some((kind, rest)) = line.split_once(':') else {
        return Err(err(
            format!("`{}` is not a claim", clip(line, 80)),
            "each evidence line starts with `src:`, `cfg:`, `ckpt:` or `count:`",
        ));
    };
    let rest = rest.trim();
    match kind.trim() {
        "src" => parse_src(rest),
        "cfg" => parse_cfg(rest),
        "ckpt" => parse_ckpt(rest),
        "count" => parse_count(rest),
        other => Err(err(
            format!("unknown evidence kind `{}`", clip(other, 40)),
            "each evidence line starts with `src:`, `cfg:`, `ckpt:` or `count:`",
        )),
    }
}

fn parse_src(rest: &str) -> Result<Claim, GrammarError> {
    let Some(open) = rest.find('"') else {
        return Err(err(
            "a `src:` claim needs a quote in double quotes",
            SRC_FORM,
        ));
    };
    let loc = rest[..open].trim();
    let tail = rest[open + 1..].trim_end();
    let Some(quote) = tail.strip_suffix('"') else {
        return Err(err(
            "the quote of a `src:` claim must end the line with a closing `\"`",
            SRC_FORM,
        ));
    };
    if quote.trim().is_empty() {
        return Err(err("the quote of a `src:` claim is empty", SRC_FORM));
    }
    let Some((file, lines)) = loc.rsplit_once(':') else {
        return Err(err(
            format!("`{}` is not FILE:LINE", clip(loc, 80)),
            SRC_FORM,
        ));
    };
    if file.is_empty() || file.chars().any(char::is_whitespace) {
        return Err(err(
            format!("`{}` is not a file name", clip(file, 80)),
            SRC_FORM,
        ));
    }
    let (first, last) = match lines.split_once('-') {
        Some((a, b)) => (line_number(a)?, line_number(b)?),
        None => {
            let n = line_number(lines)?;
            (n, n)
        }
    };
    if last < first {
        return Err(err(
            format!("line range {first}-{last} runs backwards"),
            SRC_FORM,
        ));
    }
    if last - first >= MAX_SRC_LINES {
        return Err(err(
            format!(
                "lines {first}-{last} span {} lines; a citation spans at most {MAX_SRC_LINES}",
                last - first + 1
            ),
            "cite the lines of the statement itself",
        ));
    }
    Ok(Claim::Src {
        file: file.to_string(),
        first,
        last,
        quote: quote.to_string(),
    })
}

fn line_number(s: &str) -> Result<u32, GrammarError> {
    match s.trim().parse::<u32>() {
        Ok(n) if n >= 1 => Ok(n),
        _ => Err(err(
            format!("`{}` is not a line number (1 or more)", clip(s, 40)),
            SRC_FORM,
        )),
    }
}

fn parse_cfg(rest: &str) -> Result<Claim, GrammarError> {
    let Some((key, value)) = rest.split_once('=') else {
        return Err(err("a `cfg:` claim needs `= VALUE`", CFG_FORM));
    };
    let key = parse_key(key.trim())?;
    let value = value.trim();
    if value.is_empty() {
        return Err(err("a `cfg:` claim needs a value after `=`", CFG_FORM));
    }
    Ok(Claim::Cfg {
        key,
        value: parse_value(value),
    })
}

fn parse_key(s: &str) -> Result<ConfigKey, GrammarError> {
    if s.is_empty() {
        return Err(err("a `cfg:` claim needs a config key", CFG_FORM));
    }
    let mut parts = Vec::new();
    for seg in s.split('.') {
        let (name, mut idx) = match seg.find('[') {
            Some(i) => (&seg[..i], &seg[i..]),
            None => (seg, ""),
        };
        let bad_name = name.is_empty()
            || name
                .chars()
                .any(|c| c.is_whitespace() || matches!(c, ']' | '"' | '\''));
        if bad_name {
            return Err(err(
                format!("`{}` is not a dotted config key", clip(s, 80)),
                CFG_FORM,
            ));
        }
        parts.push(KeyPart::Key(name.to_string()));
        while !idx.is_empty() {
            let close = idx.find(']');
            let n = close.and_then(|c| idx[1..c].trim().parse::<usize>().ok());
            match (close, n) {
                (Some(c), Some(n)) => {
                    parts.push(KeyPart::Index(n));
                    idx = &idx[c + 1..];
                    if !idx.is_empty() && !idx.starts_with('[') {
                        return Err(err(
                            format!("`{}` is not a dotted config key", clip(s, 80)),
                            CFG_FORM,
                        ));
                    }
                }
                _ => {
                    return Err(err(
                        format!("`{}`: an index is a number in brackets", clip(s, 80)),
                        CFG_FORM,
                    ));
                }
            }
        }
    }
    Ok(ConfigKey(parts))
}

/// A claimed config value: JSON when it is JSON (`128`, `"silu"`, `[1, 2]`, `null`), a number
/// when Rust reads one (`.5`), a single-quoted string, else the bare text as a string (`silu`).
fn parse_value(s: &str) -> serde_json::Value {
    if let Ok(v) = serde_json::from_str::<serde_json::Value>(s) {
        return v;
    }
    if let Some(n) = Num::parse(s) {
        return match n {
            Num::Int(i) => i64::try_from(i)
                .map(serde_json::Value::from)
                .unwrap_or_else(|_| serde_json::json!(i as f64)),
            Num::Float(f) => serde_json::json!(f),
        };
    }
    if let Some(inner) = s
        .strip_prefix('\'')
        .and_then(|x| x.strip_suffix('\''))
        .filter(|x| !x.contains('\''))
    {
        return serde_json::Value::String(inner.to_string());
    }
    serde_json::Value::String(s.to_string())
}

fn tensor_name(s: &str, form: &str) -> Result<String, GrammarError> {
    if s.is_empty() || s.chars().any(char::is_whitespace) {
        return Err(err(format!("`{}` is not a tensor name", clip(s, 80)), form));
    }
    Ok(s.to_string())
}

fn parse_ckpt(rest: &str) -> Result<Claim, GrammarError> {
    let Some((name, rhs)) = rest.split_once('=') else {
        return Err(err("a `ckpt:` claim needs `= [shape]`", CKPT_FORM));
    };
    let tensor = tensor_name(name.trim(), CKPT_FORM)?;
    let rhs = rhs.trim();
    let (Some(inner), Some(close)) = (rhs.strip_prefix('['), rhs.find(']')) else {
        return Err(err(
            format!("`{}` is not a shape in brackets", clip(rhs, 80)),
            CKPT_FORM,
        ));
    };
    let inner = &inner[..close - 1];
    let mut shape = Vec::new();
    if !inner.trim().is_empty() {
        for d in inner.split(',') {
            match d.trim().parse::<u64>() {
                Ok(n) => shape.push(n),
                Err(_) => {
                    return Err(err(
                        format!("`{}` is not a dimension", clip(d.trim(), 40)),
                        CKPT_FORM,
                    ));
                }
            }
        }
    }
    let tail = rhs[close + 1..].trim();
    let dtype = if tail.is_empty() {
        None
    } else {
        match Dtype::parse(&tail.to_ascii_uppercase()) {
            Some(d) => Some(d),
            None => {
                return Err(err(
                    format!("`{}` is not a safetensors dtype", clip(tail, 40)),
                    "dtypes: BOOL U8 I8 F8_E4M3 F8_E5M2 F8_E8M0 I16 U16 F16 BF16 I32 U32 F32 I64 U64 F64",
                ));
            }
        }
    };
    Ok(Claim::Ckpt {
        tensor,
        shape,
        dtype,
    })
}

fn parse_count(rest: &str) -> Result<Claim, GrammarError> {
    let Some((prefix, n)) = rest.split_once('=') else {
        return Err(err("a `count:` claim needs `= N`", COUNT_FORM));
    };
    let prefix = tensor_name(prefix.trim(), COUNT_FORM)?;
    let Ok(n) = n.trim().parse::<u64>() else {
        return Err(err(
            format!("`{}` is not a count", clip(n.trim(), 40)),
            COUNT_FORM,
        ));
    };
    Ok(Claim::Count { prefix, n })
}

/// At most `max` characters of `s`, with an ellipsis when cut (error messages echo hostile
/// input).
pub(crate) fn clip(s: &str, max: usize) -> String {
    if s.chars().count() <= max {
        s.to_string()
    } else {
        let mut out: String = s.chars().take(max).collect();
        out.push('…');
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_four_forms_parse() {
        assert_eq!(
            parse_claim(
                r#"src: modeling_qwen3_next.py:527-528 "query = l2norm(query, dim=-1, eps=1e-6)""#
            )
            .unwrap(),
            Claim::Src {
                file: "modeling_qwen3_next.py".into(),
                first: 527,
                last: 528,
                quote: "query = l2norm(query, dim=-1, eps=1e-6)".into()
            }
        );
        let c = parse_claim("cfg: text_config.layer_types[3] = \"full_attention\"").unwrap();
        assert_eq!(
            c.to_string(),
            "cfg: text_config.layer_types[3] = \"full_attention\""
        );
        assert_eq!(
            parse_claim("cfg: hidden_act = silu").unwrap(),
            Claim::Cfg {
                key: ConfigKey(vec![KeyPart::Key("hidden_act".into())]),
                value: serde_json::json!("silu")
            }
        );
        assert_eq!(
            parse_claim("ckpt: model.layers.X.mlp.gate.weight = [512, 2048] bf16").unwrap(),
            Claim::Ckpt {
                tensor: "model.layers.X.mlp.gate.weight".into(),
                shape: vec![512, 2048],
                dtype: Some(Dtype::BF16)
            }
        );
        assert_eq!(
            parse_claim("ckpt: scalar = []").unwrap(),
            Claim::Ckpt {
                tensor: "scalar".into(),
                shape: vec![],
                dtype: None
            }
        );
        assert_eq!(
            parse_claim("count: model.layers = 48").unwrap(),
            Claim::Count {
                prefix: "model.layers".into(),
                n: 48
            }
        );
        // A quote may itself hold double quotes: it runs to the last one.
        let Claim::Src {
            quote, first, last, ..
        } = parse_claim(r#"src: a.py:7 "x = d["k"]""#).unwrap()
        else {
            panic!()
        };
        assert_eq!((quote.as_str(), first, last), (r#"x = d["k"]"#, 7, 7));
    }

    #[test]
    fn malformed_lines_say_the_right_form() {
        for bad in [
            "sliding window is 128",
            "cfgx: a = 1",
            "src: a.py \"x\"",
            "src: a.py:0 \"x\"",
            "src: a.py:9-3 \"x\"",
            "src: a.py:1-200 \"x\"",
            "src: a.py:3 \"\"",
            "src: a.py:3 \"unterminated",
            "src: a.py:3",
            "cfg: a.b",
            "cfg: a.b =",
            "cfg: a[x] = 1",
            "cfg: a[1]b = 1",
            "cfg: = 1",
            "ckpt: a.b = 2048, 6144",
            "ckpt: a.b = [2048, x]",
            "ckpt: a.b = [1] Q4",
            "ckpt: a b = [1]",
            "count: model.layers = many",
            "count: model.layers",
        ] {
            let e = parse_claim(bad).expect_err(bad);
            assert!(!e.hint.is_empty(), "{bad}: {e:?}");
        }
    }

    #[test]
    fn values_read_as_json_or_words() {
        assert_eq!(parse_value("128"), serde_json::json!(128));
        assert_eq!(parse_value("1e-6"), serde_json::json!(1e-6));
        assert_eq!(parse_value(".5"), serde_json::json!(0.5));
        assert_eq!(parse_value("'yarn'"), serde_json::json!("yarn"));
        assert_eq!(parse_value("null"), serde_json::Value::Null);
        assert_eq!(parse_value("[1, 2]"), serde_json::json!([1, 2]));
        assert_eq!(
            parse_value("linear_attention"),
            serde_json::json!("linear_attention")
        );
    }
}
