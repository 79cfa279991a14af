//! A gated unit splits its fused gate/up projection as the forward source does (code M029):
//! gpt-oss takes `gate_up[..., ::2]` and `gate_up[..., 1::2]` (adjacent channels), most fused
//! experts `gate_up.chunk(2, dim=-1)` (halves). The two give the same counts and different
//! models: a `glu` with the wrong `interleaved:` gates each channel by another's value.
//!
//! Read from the statements, not names: the value computed from the checkpoint tensor the
//! glu's input projection claims (`x @ self.gate_up_proj[e]`, `F.linear(x, self.gate_up_proj)`)
//! is followed to the two-target assignment that splits it; strided slices are adjacent pairs,
//! a chunk in two or slices at a bound are halves. No such split, or splits that disagree,
//! concludes nothing.

use std::collections::BTreeSet;

use harch_engine::Analysis;

use crate::pysrc::{Kind, Module, Sources};
use crate::report::Diagnostic;
use crate::source::Forward;

pub mod code {
    /// A `glu` whose channel layout (halves or adjacent pairs) is not the forward source's.
    pub const GLU_LAYOUT_SOURCE: &str = "M029";
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum Split {
    Halves,
    Interleaved,
}

impl Split {
    fn say(self) -> &'static str {
        match self {
            Split::Halves => "halves (gate first, up second)",
            Split::Interleaved => "adjacent channels (gate even, up odd)",
        }
    }
}

/// The attribute a checkpoint name's tensor is loaded into: its last segment, or the one
/// before a `weight`/`bias` suffix.
fn attribute(name: &str) -> Option<&str> {
    let mut parts = name.rsplit('.');
    let last = parts.next()?;
    if matches!(last, "weight" | "bias") {
        parts.next()
    } else {
        Some(last)
    }
}

/// How the sources split the values computed from `self.<attr>`, with the statement.
pub fn split_of(src: &Sources, attr: &str) -> Option<(Split, String)> {
    let needle = format!("self.{attr}");
    let mut found: BTreeSet<(Split, String)> = BTreeSet::new();
    for (mi, m) in src.modules.iter().enumerate() {
        for (k, st) in m.stmts.iter().enumerate() {
            let Kind::Assign {
                targets,
                value,
                aug: false,
            } = &st.kind
            else {
                continue;
            };
            let text = m.span(value.clone());
            let reads = reads_attr(text, &needle) && m.enclosing_def(k).is_some();
            if !reads {
                continue;
            }
            let names = m.targets(targets.clone());
            // Split where it is computed: `gate, up = F.linear(x, self.gate_up_proj[e]).chunk(2, dim=-1)`.
            if names.len() == 2 {
                let v: String = text.split_whitespace().collect();
                let split = if v.contains(").chunk(2") {
                    Some(Split::Halves)
                } else if v.contains("[...,::2]") || v.contains("[...,0::2]") {
                    Some(Split::Interleaved)
                } else {
                    None
                };
                if let Some(sp) = split {
                    found.insert((sp, src.describe((mi, k))));
                }
                continue;
            }
            let [fused] = names[..] else {
                continue;
            };
            // The split of `fused` that follows in the same function.
            let def = m.enclosing_def(k);
            for j in k + 1..m.body(def.unwrap_or(k)).end.min(k + 40) {
                if let Some(s) = split_in(m, j, fused) {
                    found.insert((s, src.describe((mi, j))));
                    break;
                }
            }
        }
    }
    let kinds: BTreeSet<Split> = found.iter().map(|(s, _)| *s).collect();
    if kinds.len() == 1 {
        found.into_iter().next()
    } else {
        None
    }
}

/// Whether `text` reads `needle` itself, not a longer name it begins (`self.gate_up_proj_bias`).
fn reads_attr(text: &str, needle: &str) -> bool {
    text.match_indices(needle).any(|(at, _)| {
        text[at + needle.len()..]
            .chars()
            .next()
            .is_none_or(|c| !(c.is_alphanumeric() || c == '_'))
    })
}

/// Whether statement `j` splits `fused` into two targets, and how.
fn split_in(m: &Module, j: usize, fused: &str) -> Option<Split> {
    let Kind::Assign {
        targets,
        value,
        aug: false,
    } = &m.stmts[j].kind
    else {
        return None;
    };
    if m.targets(targets.clone()).len() != 2 {
        return None;
    }
    let v: String = m.span(value.clone()).split_whitespace().collect();
    let f = fused;
    if v.contains(&format!("{f}[...,::2]")) || v.contains(&format!("{f}[...,0::2]")) {
        return Some(Split::Interleaved);
    }
    if v.contains(&format!("{f}.chunk(2"))
        || v.contains(&format!("torch.chunk({f},2"))
        || v.contains(&format!("{f}[...,:"))
    {
        return Some(Split::Halves);
    }
    None
}

pub fn check(a: &Analysis, forward: &Forward) -> Vec<Diagnostic> {
    let glus: Vec<_> = a.nodes.iter().filter(|n| n.op == "glu").collect();
    if glus.is_empty() {
        return Vec::new();
    }
    let mut out = Vec::new();
    let mut seen = BTreeSet::new();
    for n in glus {
        let producers = n.inputs.first().cloned().unwrap_or_default();
        let attrs: BTreeSet<&str> = a
            .weights
            .iter()
            .filter(|w| producers.contains(&w.node) && w.leaf == "weight")
            .filter_map(|w| attribute(&w.name))
            .collect();
        let [attr] = attrs.into_iter().collect::<Vec<_>>()[..] else {
            continue;
        };
        let Some((want, stmt)) = split_of(forward.sources(), attr) else {
            continue;
        };
        let got = if super::kinds::arg_flag(n, "interleaved") {
            Split::Interleaved
        } else {
            Split::Halves
        };
        if got != want && seen.insert((n.component.clone(), n.loc.line)) {
            out.push(
                Diagnostic::new(
                    "semantic",
                    code::GLU_LAYOUT_SOURCE,
                    format!(
                        "glu `{}` splits `{attr}` into {}, but the source splits it into {}: {stmt}",
                        n.id,
                        got.say(),
                        want.say()
                    ),
                    n.loc.clone(),
                )
                .hint(format!(
                    "set `interleaved: {}` on the glu",
                    want == Split::Interleaved
                )),
            );
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn split(version: &str, model_type: &str, attr: &str) -> Option<Split> {
        let (name, text) = crate::pinned::file(version, model_type, "modeling");
        split_of(&Sources::read(&[(&name, &text)]), attr).map(|(s, _)| s)
    }

    #[test]
    fn the_split_is_read_from_the_statement_that_splits_the_fused_value() {
        assert_eq!(
            split("4.57.6", "gpt_oss", "gate_up_proj"),
            Some(Split::Interleaved)
        );
        let halves = "class E:\n    def forward(self, x):\n        gate_up = F.linear(x, self.gate_up_proj)\n        gate, up = gate_up.chunk(2, dim=-1)\n        return gate * up\n";
        let n = "m.py".to_string();
        let t = halves.to_string();
        assert_eq!(
            split_of(&Sources::read(&[(&n, &t)]), "gate_up_proj").map(|s| s.0),
            Some(Split::Halves)
        );
        assert_eq!(
            split("5.23.0", "qwen3_5_moe", "gate_up_proj"),
            Some(Split::Halves)
        );
        // Another tensor's value says nothing about this one.
        assert_eq!(
            split_of(&Sources::read(&[(&n, &t)]), "gate_up_proj_bias"),
            None
        );
        assert_eq!(
            attribute("model.layers.{i}.mlp.experts.gate_up_proj"),
            Some("gate_up_proj")
        );
        assert_eq!(
            attribute("model.layers.{i}.mlp.gate_up_proj.weight"),
            Some("gate_up_proj")
        );
    }

    proptest::proptest! {
        /// Hostile source: read without a panic.
        #[test]
        fn any_source_is_read(lines in proptest::collection::vec(
            "(    ){0,2}(class E:|def f\\(self, x\\):|g = x @ self\\.w|g = self\\.w\\(x\\)|a, b = g\\[\\.\\.\\., ::2\\], g\\[\\.\\.\\., 1::2\\]|a, b = g\\.chunk\\(2, dim=-1\\)|a, b = F\\.linear\\(x, self\\.w\\)\\.chunk\\(2|return a \\* b)",
            0..40,
        )) {
            let text = lines.join("\n");
            let name = "m.py".to_string();
            let _ = split_of(&Sources::read(&[(&name, &text)]), "w");
        }
    }
}
