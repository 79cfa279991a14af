//! Where config has no `routed_scaling_factor`, the factor on the routed experts' weights is the
//! forward source's (code M027): Step-3.7 scales by `self.routed_scaling_factor =
//! config.moe_router_scaling_factor`, a key the structural check (R009) never reads; a router
//! may multiply by a literal; Qwen3-MoE's routers multiply by nothing.
//!
//! Read from the bodies of the routing classes (those whose methods call `topk`, and those that
//! build one of them in `__init__`): a statement `w = w * F`, `w *= F` or `return …, w * F, …`
//! whose factor `F` is a number, `config.K`, `getattr(config, "K", d)` or `self.a` assigned one
//! of those in the class. One factor everywhere is the fact; none anywhere means 1; factors that
//! disagree conclude nothing.

use std::collections::BTreeSet;

use crate::source::Forward;
use harch_engine::Analysis;

use crate::pysrc::expr::calls;
use crate::pysrc::{Kind, Module, Sources, Tok};
use crate::report::Diagnostic;
use crate::truth::Truth;

pub mod code {
    /// A router whose kept weights are scaled otherwise than the forward source scales them,
    /// where config has no `routed_scaling_factor`.
    pub const ROUTER_SCALE_SOURCE: &str = "M027";
}

/// What the routed weights are multiplied by.
#[derive(Clone, Debug, PartialEq)]
pub enum Factor {
    Literal(f64),
    /// A config key (the class default is the configuration class's, not read here).
    Key(String),
}

#[derive(Clone, Debug, PartialEq)]
pub enum Scale {
    /// No routing class multiplies the weights by a factor.
    None,
    /// One factor, with the statement that applies it.
    By(Factor, String),
    /// Different factors in different places: nothing concluded.
    Unknown,
}

/// The factor a one-term expression names, with `self.<a>` read through the class's
/// assignments.
fn factor(m: &Module, r: std::ops::Range<usize>, class: usize) -> Option<Factor> {
    let text = m.span(r.clone()).trim();
    if let Ok(v) = text.parse::<f64>() {
        return Some(Factor::Literal(v));
    }
    if let Some(key) = text.strip_prefix("config.").filter(|k| is_ident(k)) {
        return Some(Factor::Key(key.to_string()));
    }
    if let [c] = calls(m, r.clone()).as_slice()
        && c.callee == "getattr"
        && m.span(r.clone()).ends_with(')')
        && let [obj, key, ..] = c.args.as_slice()
        && m.span(obj.value.clone()) == "config"
    {
        let key = m
            .span(key.value.clone())
            .trim_matches(|ch| ch == '"' || ch == '\'');
        return is_ident(key).then(|| Factor::Key(key.to_string()));
    }
    let attr = text.strip_prefix("self.").filter(|a| is_ident(a))?;
    // The class's own assignment of the attribute (its `__init__`), read once: no recursion.
    let mut found = None;
    for k in m.body(class) {
        if let Kind::Assign {
            targets,
            value,
            aug: false,
        } = &m.stmts[k].kind
            && m.span(targets.clone()) == format!("self.{attr}")
        {
            let v = m.span(value.clone()).trim();
            let f = if let Ok(x) = v.parse::<f64>() {
                Some(Factor::Literal(x))
            } else if v.starts_with("self.") {
                None
            } else {
                factor(m, value.clone(), class)
            };
            match (&found, f) {
                (None, Some(f)) => found = Some(f),
                (Some(a), Some(f)) if *a == f => {}
                _ => return None,
            }
        }
    }
    found
}

fn is_ident(s: &str) -> bool {
    !s.is_empty()
        && s.chars().all(|c| c.is_ascii_alphanumeric() || c == '_')
        && !s.starts_with(|c: char| c.is_ascii_digit())
}

/// The top-level `a * b` of a range (one `*`, at bracket depth 0), as its two operands.
fn product(m: &Module, r: std::ops::Range<usize>) -> Option<[std::ops::Range<usize>; 2]> {
    let mut depth = 0i32;
    let mut at = None;
    for k in r.clone() {
        match m.tok(k) {
            "(" | "[" | "{" => depth += 1,
            ")" | "]" | "}" => depth -= 1,
            "*" if depth == 0 => {
                if at.is_some() {
                    return None;
                }
                at = Some(k);
            }
            "+" | "-" | "/" | "//" | "@" | "%" | "**" | "if" | "lambda" if depth == 0 => {
                return None;
            }
            _ => {}
        }
    }
    let at = at?;
    (at > r.start && at + 1 < r.end).then(|| [r.start..at, at + 1..r.end])
}

/// Whether a statement divides a plain name by a factor (`w = w / self.top_k`, `w /= 2`): the
/// reader does not combine a division with a later product (OpenAI's privacy filter divides
/// the scores by top_k and multiplies the experts' output by it again), so it concludes nothing.
fn divides_by_factor(m: &Module, k: usize, class: usize) -> bool {
    match &m.stmts[k].kind {
        Kind::Assign {
            value, aug: true, ..
        } => {
            value.start > 0
                && m.tok(value.start - 1) == "/="
                && factor(m, value.clone(), class).is_some()
        }
        Kind::Assign {
            value, aug: false, ..
        } => {
            let v = value.clone();
            let mut depth = 0i32;
            v.clone().any(|t| {
                match m.tok(t) {
                    "(" | "[" | "{" => depth += 1,
                    ")" | "]" | "}" => depth -= 1,
                    _ => {}
                }
                depth == 0
                    && m.tok(t) == "/"
                    && t > v.start
                    && is_name(m, &(t - 1..t))
                    && factor(m, t + 1..v.end, class).is_some()
            })
        }
        _ => false,
    }
}

/// A plain name (the weights), not a call or an expression.
fn is_name(m: &Module, r: &std::ops::Range<usize>) -> bool {
    r.len() == 1 && m.tokens[r.start].kind == Tok::Name
}

/// The factors one statement applies to a plain name.
fn factors_of(m: &Module, k: usize, class: usize) -> Vec<Factor> {
    let st = &m.stmts[k];
    let values: Vec<std::ops::Range<usize>> = match &st.kind {
        Kind::Assign {
            value, aug: true, ..
        } if value.start > 0 && m.tok(value.start - 1) == "*=" => {
            return factor(m, value.clone(), class).into_iter().collect();
        }
        Kind::Assign {
            value, aug: false, ..
        } => vec![value.clone()],
        Kind::Return(r) => m.split_top(m.strip_brackets(r.clone())),
        _ => return vec![],
    };
    values
        .into_iter()
        .filter_map(|v| {
            let [a, b] = product(m, v)?;
            match (is_name(m, &a), is_name(m, &b)) {
                (true, _) if factor(m, b.clone(), class).is_some() => factor(m, b, class),
                (_, true) => factor(m, a, class),
                _ => None,
            }
        })
        .collect()
}

/// Routing classes: (module, class statement) of those whose methods call `topk`, and of those
/// that build one of them.
fn routing_classes(src: &Sources) -> Vec<(usize, usize)> {
    let routers = super::router_source::router_classes(src);
    let names: BTreeSet<&str> = routers
        .iter()
        .filter_map(|&(mi, c)| match &src.modules[mi].stmts[c].kind {
            Kind::Class(n) => Some(n.as_str()),
            _ => None,
        })
        .collect();
    let mut out: BTreeSet<(usize, usize)> = routers.iter().copied().collect();
    for (mi, m) in src.modules.iter().enumerate() {
        for (c, st) in m.stmts.iter().enumerate() {
            if !matches!(st.kind, Kind::Class(_)) {
                continue;
            }
            let builds = m.body(c).any(|k| {
                matches!(m.stmts[k].kind, Kind::Assign { .. })
                    && calls(m, m.stmts[k].tokens.clone())
                        .iter()
                        .any(|call| names.contains(call.callee.as_str()))
            });
            if builds {
                out.insert((mi, c));
            }
        }
    }
    out.into_iter().collect()
}

/// The scale the forward source applies to the routed weights, if it has routers.
pub fn routed_scale(src: &Sources) -> Option<Scale> {
    let classes = routing_classes(src);
    if classes.is_empty() {
        return None;
    }
    let mut found: Option<(Factor, String)> = None;
    for (mi, class) in classes {
        let m = &src.modules[mi];
        for k in m.body(class) {
            let in_init = m
                .enclosing_def(k)
                .is_some_and(|d| matches!(&m.stmts[d].kind, Kind::Def(n) if n == "__init__"));
            if in_init {
                continue;
            }
            if divides_by_factor(m, k, class) {
                return Some(Scale::Unknown);
            }
            for f in factors_of(m, k, class) {
                match &found {
                    None => found = Some((f, src.describe((mi, k)))),
                    Some((g, _)) if *g == f => {}
                    Some(_) => return Some(Scale::Unknown),
                }
            }
        }
    }
    Some(match found {
        None => Scale::None,
        Some((f, stmt)) => Scale::By(f, stmt),
    })
}

pub fn check(a: &Analysis, truth: &Truth, forward: &Forward) -> Vec<Diagnostic> {
    let config = crate::config_view::text(&truth.config);
    let routers: Vec<_> = a
        .nodes
        .iter()
        .filter(|n| matches!(n.op.as_str(), "router" | "hash_router"))
        .collect();
    if routers.is_empty() || config.get("routed_scaling_factor").is_some() {
        return Vec::new();
    }
    let (want, why) = match routed_scale(forward.sources()) {
        Some(Scale::None) => (
            1.0,
            "no statement of the forward source's routing classes multiplies the routed weights by a factor".to_string(),
        ),
        Some(Scale::By(Factor::Literal(v), stmt)) => (v, format!("the forward source multiplies them by {v}: {stmt}")),
        Some(Scale::By(Factor::Key(k), stmt)) => match config.get(&k).and_then(|v| v.as_f64())
        {
            Some(v) => (v, format!("the forward source multiplies them by config `{k}` = {v}: {stmt}")),
            None => return Vec::new(),
        },
        _ => return Vec::new(),
    };
    let mut out = Vec::new();
    let mut seen = BTreeSet::new();
    for n in routers {
        let got = n
            .args
            .get("routed_scaling_factor")
            .and_then(|v| v.text.parse::<f64>().ok())
            .unwrap_or(1.0);
        if (got - want).abs() > 1e-9 * want.abs().max(1.0) && seen.insert(n.component.clone()) {
            out.push(
                Diagnostic::new(
                    "semantic",
                    code::ROUTER_SCALE_SOURCE,
                    format!(
                        "router `{}`: scales the kept weights by {got}, but config has no `routed_scaling_factor` and {why}",
                        n.id
                    ),
                    n.loc.clone(),
                )
                .hint(if want == 1.0 {
                    "drop `routed_scaling_factor:` from the router (the source's function bodies are the fact where config is silent)".to_string()
                } else {
                    format!("set `routed_scaling_factor: {want}` on the router, bound to the config key the source reads where it reads one")
                }),
            );
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn scale_of(text: &str) -> Option<Scale> {
        let n = "modeling_x.py".to_string();
        let t = text.to_string();
        routed_scale(&Sources::read(&[(&n, &t)]))
    }

    fn real(version: &str, model_type: &str) -> Option<Scale> {
        let (name, text) = crate::pinned::file(version, model_type, "modeling");
        routed_scale(&Sources::read(&[(&name, &text)]))
    }

    fn key(s: &Option<Scale>) -> Option<&str> {
        match s {
            Some(Scale::By(Factor::Key(k), _)) => Some(k),
            _ => None,
        }
    }

    #[test]
    fn the_factor_is_read_where_the_weights_are_multiplied() {
        // Step-3.7: the MoE block that builds the router scales its output by a key R009 does
        // not know.
        let step = real("5.23.0", "step3p7");
        assert_eq!(key(&step), Some("moe_router_scaling_factor"), "{step:?}");
        // DeepSeek-V3 and Kimi-Linear: in the router, by the usual key.
        assert_eq!(
            key(&real("4.57.6", "deepseek_v3")),
            Some("routed_scaling_factor")
        );
        assert_eq!(
            key(&real("5.23.0", "kimi_linear")),
            Some("routed_scaling_factor")
        );
        // Returned scaled (Inkling-2: `return logits, weights * self.routed_scaling_factor, indices`).
        assert_eq!(
            key(&real("5.23.0", "inkling2")),
            Some("routed_scaling_factor")
        );
        // Qwen3-MoE and gpt-oss: nothing scales the routed weights.
        assert_eq!(real("4.57.6", "qwen3_moe"), Some(Scale::None));
        assert_eq!(real("4.57.6", "gpt_oss"), Some(Scale::None));
    }

    #[test]
    fn literals_attributes_and_disagreement() {
        let lit = "class R:\n    def forward(self, x):\n        w, i = torch.topk(x, self.n_experts_per_tok)\n        w = w * 2.5\n        return w, i\n";
        assert!(matches!(scale_of(lit), Some(Scale::By(Factor::Literal(v), _)) if v == 2.5));
        let attr = "class R:\n    def __init__(self, config):\n        self.s = getattr(config, \"route_scale\", 1.0)\n    def forward(self, x):\n        w, i = torch.topk(x, self.n_experts_per_tok)\n        w *= self.s\n        return w, i\n";
        assert_eq!(key(&scale_of(attr)), Some("route_scale"));
        let two = "class R:\n    def forward(self, x):\n        w, i = torch.topk(x, self.n_experts_per_tok)\n        w = w * 2.5\n        v = 3 * w\n        return w, i\n";
        assert_eq!(scale_of(two), Some(Scale::Unknown));
        // A product with a call or a sum is not a factor on the weights.
        let call = "class R:\n    def forward(self, x):\n        w, i = torch.topk(x, self.n_experts_per_tok)\n        y = torch.sigmoid(x) * 2\n        z = w * 2 + 1\n        return w, i\n";
        assert_eq!(scale_of(call), Some(Scale::None));
        // Divided by top_k, then multiplied by it again: not read as a factor of k.
        let undone = "class R:\n    def __init__(self, config):\n        self.k = config.num_experts_per_tok\n    def forward(self, x):\n        w, i = torch.topk(x, self.n_experts_per_tok)\n        w = w / self.k\n        return w * self.k, i\n";
        assert_eq!(scale_of(undone), Some(Scale::Unknown));
        assert_eq!(
            scale_of("class A:\n    def f(self):\n        x = y * 2\n"),
            None
        );
    }

    proptest::proptest! {
        /// Hostile source: read without a panic.
        #[test]
        fn any_text_is_read(lines in proptest::collection::vec(
            "[ ]{0,8}(class A:|def f\\(self\\):|def __init__\\(self, config\\):|self.s = |config.k|getattr\\(config, 'k', 1\\)|x = |w \\*= |return |torch.topk\\(|\\*|self.s|2.5|\\(|\\)|,){0,8}",
            0..30,
        )) {
            let text = lines.join("\n");
            let _ = scale_of(&text);
        }
    }
}
