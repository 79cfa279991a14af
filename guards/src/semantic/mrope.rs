//! M026: a multi-axis rope (mRoPE) shares its rotary_dim/2 frequencies among the time, height
//! and width positions as its part of the forward source does, with config's sections.
//!
//! The source is the fact: a part whose code reads `mrope_section` applies sections, taking
//! them round-robin where it slices the frequencies with a stride of three
//! (`idx = slice(offset, length, 3)`: Qwen3-VL, Qwen3.5) or in one run per axis where it
//! splits them by the sections (`cos.split(mrope_section, dim=-1)`: Qwen2-VL). The sections
//! themselves are config's (`rope_parameters.mrope_section`, `rope_scaling.mrope_section`),
//! else the default the source reads them with (`.get("mrope_section", [11, 11, 10])`). That
//! they sum to rotary_dim/2 the engine holds (S002).

use std::collections::BTreeSet;

use harch_engine::Analysis;
use harch_engine::analysis::NodeRow;

use super::kinds::{arg_flag, code, once};
use super::parts::{self, Part, PartLines};
use super::skeleton::Skeleton;
use crate::report::Diagnostic;
use crate::truth::Truth;

const KEY: &str = "mrope_section";

/// How a part of the source lays its sections out.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Layout {
    RoundRobin,
    Runs,
}

impl Layout {
    fn say(self) -> &'static str {
        match self {
            Layout::RoundRobin => "round-robin (t h w t h w ...)",
            Layout::Runs => "one contiguous run per axis",
        }
    }
}

/// What a part's code says of sections: `None` when it reads no `mrope_section` (one
/// position axis), else the layout it applies them in, if it can be told.
fn source_layout(code: &str) -> Option<Option<Layout>> {
    let b: String = code.split_whitespace().collect();
    if !b.contains(KEY) {
        return None;
    }
    let stride3 = b.contains("::3]")
        || b.match_indices("slice(").any(|(i, _)| {
            b[i..]
                .find(')')
                .is_some_and(|end| b[i..i + end].ends_with(",3"))
        });
    let split = b.contains(".split(mrope_section") || b.contains(".split(self.mrope_section");
    Some(match (stride3, split) {
        (true, false) => Some(Layout::RoundRobin),
        (false, true) => Some(Layout::Runs),
        _ => None,
    })
}

/// The default the source reads the sections with: `get("mrope_section", [11, 11, 10])`.
fn source_default(code: &str) -> Option<Vec<i64>> {
    let b: String = code.split_whitespace().collect();
    let at = b
        .find("\"mrope_section\",[")
        .or_else(|| b.find("'mrope_section',["))?;
    let rest = &b[at + KEY.len() + 4..];
    let list = &rest[..rest.find(']')?];
    list.split(',').map(|v| v.parse().ok()).collect()
}

/// Config's sections, under the text config's rope settings.
fn config_sections(truth: &Truth) -> Option<Vec<i64>> {
    let text = crate::config_view::text(&truth.config);
    ["rope_parameters", "rope_scaling"].iter().find_map(|k| {
        text.get(*k)?
            .get(KEY)?
            .as_array()?
            .iter()
            .map(|v| v.as_i64())
            .collect()
    })
}

/// A rope's bound sections (`[]` or absent: none).
fn spec_sections(n: &NodeRow) -> Option<Vec<i64>> {
    let text = &n.args.get("sections")?.text;
    let v: Vec<i64> = serde_json::from_str(text).ok()?;
    (!v.is_empty()).then_some(v)
}

pub fn check(a: &Analysis, truth: &Truth, sk: &Skeleton, parts: &PartLines) -> Vec<Diagnostic> {
    let mut out = Vec::new();
    let mut seen = BTreeSet::new();
    let facts = [Part::Text, Part::Tower].map(|p| {
        let code = parts::code_text(sk, parts.get(p));
        (source_layout(&code), source_default(&code))
    });
    let config = config_sections(truth);
    for n in a.nodes.iter().filter(|n| n.op == "rope") {
        let part = Part::of(n);
        let (layout, default) = &facts[part as usize];
        let got = spec_sections(n);
        let whose = if parts.has_tower {
            format!("{} of the source", part.say())
        } else {
            "the source".to_string()
        };
        let mut say = |msg: String, hint: &str| {
            let d = Diagnostic::new("semantic", code::MROPE_SECTIONS, msg, n.loc.clone());
            once(&mut seen, d.hint(hint.to_string()), &mut out);
        };
        let (Some(layout), Some(got)) = (layout, &got) else {
            match (layout, &got) {
                (Some(_), None) => say(
                    format!(
                        "rope `{}` rotates by one position, but {whose} splits its frequencies among the time, height and width positions (`{KEY}`)",
                        n.id
                    ),
                    "give the rope `sections:` bound to config's mrope_section (through a model attr) and `sections_interleaved:` as the source lays them out",
                ),
                (None, Some(s)) => say(
                    format!(
                        "rope `{}` has mRoPE sections {s:?}, but {whose} reads no `{KEY}`: it rotates by one position",
                        n.id
                    ),
                    "drop `sections:` (and `sections_interleaved:`) from this rope",
                ),
                _ => {}
            }
            continue;
        };
        if let Some(want) = config.as_ref().or(default.as_ref())
            && want != got
        {
            let from = if config.is_some() {
                "config's"
            } else {
                "the source's default"
            };
            say(
                format!(
                    "rope `{}` has sections {got:?}, but {from} `{KEY}` is {want:?}",
                    n.id
                ),
                "bind the sections to config's mrope_section (e.g. `config.text_config.rope_parameters.mrope_section`)",
            );
        }
        if let Some(want) = layout {
            let declared = if arg_flag(n, "sections_interleaved") {
                Layout::RoundRobin
            } else {
                Layout::Runs
            };
            if declared != *want {
                say(
                    format!(
                        "rope `{}` takes its sections {}, but {whose} takes them {}",
                        n.id,
                        declared.say(),
                        want.say()
                    ),
                    &format!(
                        "set `sections_interleaved: {}` on the rope (a flag dim, e.g. `mrope_interleaved`)",
                        *want == Layout::RoundRobin
                    ),
                );
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::{Layout, source_default, source_layout};

    #[test]
    fn the_layout_is_read_from_how_the_frequencies_are_indexed() {
        let qwen35 = "self.mrope_section = config.rope_parameters.get(\"mrope_section\", [11, 11, 10])\n\
            length = self.mrope_section[dim] * 3\n            idx = slice(offset, length, 3)";
        assert_eq!(source_layout(qwen35), Some(Some(Layout::RoundRobin)));
        assert_eq!(source_default(qwen35), Some(vec![11, 11, 10]));
        let qwen2 = "mrope_section = mrope_section * 2\n\
            cos = torch.cat([m[i % 3] for i, m in enumerate(cos.split(mrope_section, dim=-1))], dim=-1)";
        assert_eq!(source_layout(qwen2), Some(Some(Layout::Runs)));
        assert_eq!(source_default(qwen2), None);
        // One position axis: no sections at all.
        assert_eq!(
            source_layout("q_embed = (q * cos) + (rotate_half(q) * sin)"),
            None
        );
        // Sections read but laid out by code this reader does not know: not settled.
        assert_eq!(
            source_layout(
                "self.mrope_section = config.mrope_section\nx = f(x, self.mrope_section)"
            ),
            Some(None)
        );
        // An unrelated slice with another step says nothing.
        assert_eq!(
            source_layout("mrope_section = s\nidx = slice(0, n, 2)"),
            Some(None)
        );
    }
}
