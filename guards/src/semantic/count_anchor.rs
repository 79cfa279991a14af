//! A count exception's anchor is the statement that computes the declared count from the
//! config key (M008): `self.top_k = config.num_experts_per_tok` computes the configured value,
//! so it cannot justify `top_k: num_experts_per_tok + 1`; `range(config.num_hidden_layers)` runs
//! the configured layers, so it cannot justify a trunk one layer longer.
//!
//! The quote's statements are read by [`crate::pysrc`]; their expressions are evaluated with the
//! config (integers, `config.<key>`, `getattr(config, …)`, `+ - * // %`, `min`/`max`). An
//! expression that reads a key of the quantity and computes the declared value holds.

use crate::pysrc::expr::{calls, eval, range_count};
use crate::pysrc::{At, Kind, Module, Sources};

/// What the declared count is.
#[derive(Clone, Copy, PartialEq, Eq)]
pub enum Count {
    /// A value a statement computes (`self.top_k = …`, an argument `k=…`).
    Value,
    /// How many layers a statement runs (`range(…)`, `self.layers[: …]`).
    Iterations,
}

pub struct CountSource<'s> {
    src: Sources<'s>,
}

type Lookup<'a> = &'a dyn Fn(&str) -> Option<serde_json::Value>;

impl<'s> CountSource<'s> {
    pub fn read(files: &[(&'s String, &'s String)]) -> CountSource<'s> {
        CountSource {
            src: Sources::read(files),
        }
    }

    /// Why no snippet is a statement that computes `want` from one of `keys`; `None` when one
    /// is.
    pub fn fault(
        &self,
        snippets: &[String],
        keys: &[&str],
        want: i128,
        count: Count,
        lookup: Lookup,
    ) -> Option<String> {
        let mut computed: Vec<String> = Vec::new();
        let mut first: Option<At> = None;
        for s in snippets {
            for occ in self.src.locate(s) {
                for at in occ {
                    first.get_or_insert(at);
                    let m = &self.src.modules[at.0];
                    for (v, read) in values(m, at.1, count, lookup) {
                        if !read.iter().any(|k| keys.contains(&k.as_str())) {
                            continue;
                        }
                        if v == want {
                            return None;
                        }
                        computed.push(format!(
                            "{} computes {v} from `{}`",
                            self.src.describe(at),
                            read.join("`, `")
                        ));
                    }
                }
            }
        }
        let what = match count {
            Count::Value => format!("the statement that computes {want}"),
            Count::Iterations => format!("the statement that runs {want} layers"),
        };
        let keys = keys
            .iter()
            .map(|k| format!("`{k}`"))
            .collect::<Vec<_>>()
            .join(" or ");
        Some(match (computed.first(), first) {
            (Some(c), _) => format!("{c}, not {want}; the guard expected {what} from {keys}"),
            (None, Some(at)) => format!(
                "{} computes no count from {keys}; the guard expected {what} from {keys}",
                self.src.describe(at)
            ),
            (None, None) => format!(
                "the quote lies in no statement (a comment or docstring); the guard expected {what} from {keys}"
            ),
        })
    }
}

/// The counts statement `s` computes, each with the config keys it read.
fn values(m: &Module, s: usize, count: Count, lookup: Lookup) -> Vec<(i128, Vec<String>)> {
    let st = &m.stmts[s];
    let mut out = Vec::new();
    let cs = calls(m, st.tokens.clone());
    match count {
        Count::Value => {
            if let Kind::Assign {
                value, aug: false, ..
            } = &st.kind
            {
                out.extend(eval(m, value.clone(), lookup));
            }
            for c in &cs {
                for a in &c.args {
                    out.extend(eval(m, a.value.clone(), lookup));
                }
            }
        }
        Count::Iterations => {
            for c in &cs {
                out.extend(range_count(m, c, lookup));
            }
            // `xs[: n]` and `xs[a: b]` take n and b - a.
            for k in st.tokens.clone() {
                if m.tok(k) != "[" {
                    continue;
                }
                let Some(close) = m.matching_close(k, st.tokens.end) else {
                    continue;
                };
                let Some(colon) = (k + 1..close).find(|&j| m.tok(j) == ":") else {
                    continue;
                };
                let lo = if colon == k + 1 {
                    Some((0, Vec::new()))
                } else {
                    eval(m, k + 1..colon, lookup)
                };
                if let (Some((a, mut ka)), Some((b, kb))) = (lo, eval(m, colon + 1..close, lookup))
                {
                    ka.extend(kb);
                    out.push(((b - a).max(0), ka));
                }
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    const SRC: &str = r#"
class Router(nn.Module):
    def __init__(self, config):
        self.top_k = config.num_experts_per_tok
        self.n_routed = config.n_routed_experts + getattr(config, "n_null_experts", 0)
        # self.top_k = config.num_experts_per_tok + 1

class Model(nn.Module):
    def __init__(self, config):
        self.layers = nn.ModuleList([Layer(config, i) for i in range(config.num_hidden_layers + config.num_nextn_predict_layers)])

    def forward(self, h):
        for layer in self.layers[: self.config.num_hidden_layers]:
            h = layer(h)
"#;

    fn check(quote: &str, keys: &[&str], want: i128, count: Count) -> Option<String> {
        let (n, t) = ("modeling_x.py".to_string(), SRC.to_string());
        let cs = CountSource::read(&[(&n, &t)]);
        let cfg = serde_json::json!({"num_experts_per_tok": 8, "n_routed_experts": 64, "num_hidden_layers": 4, "num_nextn_predict_layers": 1});
        let look = |k: &str| cfg.get(k).cloned();
        cs.fault(&[quote.to_string()], keys, want, count, &look)
    }

    #[test]
    fn a_statement_holds_only_for_the_value_it_computes() {
        let q = "self.top_k = config.num_experts_per_tok";
        assert_eq!(check(q, &["num_experts_per_tok"], 8, Count::Value), None);
        let why = check(q, &["num_experts_per_tok"], 9, Count::Value).unwrap();
        assert!(
            why.contains("computes 8 from `num_experts_per_tok`, not 9")
                && why.contains("(modeling_x.py:4)"),
            "{why}"
        );
        // The same words in a comment are no statement.
        let why = check(
            "top_k = config.num_experts_per_tok + 1",
            &["num_experts_per_tok"],
            9,
            Count::Value,
        )
        .unwrap();
        assert!(why.contains("no statement"), "{why}");
        // A default the config lacks is the source's.
        assert_eq!(
            check(
                "self.n_routed = config.n_routed_experts",
                &["n_routed_experts"],
                64,
                Count::Value
            ),
            None
        );
    }

    #[test]
    fn layers_are_counted_by_the_statement_that_runs_them() {
        let keys = ["num_hidden_layers", "num_nextn_predict_layers"];
        let built = "range(config.num_hidden_layers + config.num_nextn_predict_layers)";
        assert_eq!(check(built, &keys, 5, Count::Iterations), None);
        let run = "for layer in self.layers[: self.config.num_hidden_layers]:";
        let why = check(run, &keys, 5, Count::Iterations).unwrap();
        assert!(
            why.contains("computes 4 from `num_hidden_layers`, not 5"),
            "{why}"
        );
        assert!(why.contains("runs 5 layers"), "{why}");
    }
}
