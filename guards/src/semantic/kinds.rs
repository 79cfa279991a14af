//! Kinds from source (codes M020–M029): what kind of norm, activation and rotary layout each
//! component uses is read from the forward source's module skeleton and the config, not from
//! the names the spec gives its nodes.
//!
//! - norms: the module at a norm's checkpoint path is built by some class
//!   (`self.input_layernorm = Qwen3RMSNorm(...)`); that class normalizes by RMS or by mean and
//!   variance, and scales by `weight` or by `1 + weight` (Qwen3-Next's zero-centred weight);
//! - activations: the MLP classes' `ACT2FN[config.hidden_act]` (or a literal) names the
//!   activation; with none in the source, config's `hidden_act`/`hidden_activation` does;
//! - rotary layout: the rotary function the attention calls (under the config condition the
//!   source guards it with) rotates halves (`rotate_half`) or interleaved pairs; a vision
//!   tower's rope is held to the tower's code, the text model's to the rest (`parts`);
//! - mRoPE sections (M026, `mrope`): how a multi-axis rope shares its frequencies out.
//!
//! A fact the source does not settle (no such module, two classes that disagree) is not
//! checked: the guard never guesses.

use std::collections::BTreeSet;

use harch_engine::Analysis;
use harch_engine::ir::ModelIr;

use super::parts::{self, Part, PartLines};
use super::skeleton::{Skeleton, calls};
use crate::report::Diagnostic;
use crate::truth::Truth;

pub mod code {
    /// A norm op of another kind (RMSNorm vs LayerNorm) than the class the source builds.
    pub const NORM_KIND: &str = "M020";
    /// An MLP activation other than the one config and the source's ACT2FN use name.
    pub const ACTIVATION: &str = "M021";
    /// A rotary op with another channel layout (halves vs interleaved pairs) than the source's.
    pub const ROPE_LAYOUT: &str = "M022";
    /// An RMSNorm that scales by `weight` where the source's class scales by `1 + weight`
    /// (a zero-centred weight), or the other way round.
    pub const NORM_OFFSET: &str = "M023";
    /// A multi-axis rope whose sections or their interleaving differ from the source's and
    /// config's (or a rope with sections where the source has one position axis).
    pub const MROPE_SECTIONS: &str = "M026";
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
enum NormKind {
    Rms,
    Layer,
}

impl NormKind {
    fn op(self) -> &'static str {
        match self {
            NormKind::Rms => "rmsnorm",
            NormKind::Layer => "layernorm",
        }
    }
}

pub fn check(
    _ir: &ModelIr,
    a: &Analysis,
    truth: &Truth,
    renames: &crate::conversion::Renames,
) -> Vec<Diagnostic> {
    if truth.sources.is_empty() {
        return Vec::new();
    }
    let sk = Skeleton::read(&truth.sources, renames);
    let mut out = norms(a, truth, &sk);
    out.extend(norm_offsets(a, truth, &sk));
    out.extend(activations(a, truth, &sk));
    let parts = parts::split(a, &sk, &root_class(truth));
    out.extend(rope_layout(a, truth, &sk, &parts));
    out.extend(super::mrope::check(a, truth, &sk, &parts));
    out.extend(super::towers::check(a, &sk));
    out
}

pub(super) fn once(seen: &mut BTreeSet<String>, d: Diagnostic, out: &mut Vec<Diagnostic>) {
    let l = &d.location;
    if seen.insert(format!("{}{:?}{}{}", d.code, l.file, l.line, l.column)) {
        out.push(d);
    }
}

fn norm_kind(sk: &Skeleton, ctor: &str) -> Option<NormKind> {
    let base = ctor.rsplit('.').next().unwrap_or(ctor);
    if sk.classes.contains_key(ctor) {
        let lineage = sk.lineage(ctor);
        if lineage
            .iter()
            .any(|b| b == "nn.LayerNorm" || b == "LayerNorm")
        {
            return Some(NormKind::Layer);
        }
        if lineage.iter().any(|b| b == "nn.RMSNorm" || b == "RMSNorm") {
            return Some(NormKind::Rms);
        }
        let text = sk.class_text(ctor);
        if text.contains("layer_norm(") || text.contains("- mean") || text.contains("-mean") {
            return Some(NormKind::Layer);
        }
        if text.contains("rsqrt") || text.contains("pow(2).mean") {
            return Some(NormKind::Rms);
        }
    }
    if base.contains("RMSNorm") || base.contains("RmsNorm") {
        Some(NormKind::Rms)
    } else if base.contains("LayerNorm") {
        Some(NormKind::Layer)
    } else {
        None
    }
}

/// Whether a norm class scales by `1 + weight` (a zero-centred weight) rather than by `weight`:
/// `(1.0 + self.weight.float())`, `(1 + weight)`, `self.weight + 1`. `None` for a class the
/// source does not define (other than torch's own norms, which scale by `weight`).
fn norm_offset(sk: &Skeleton, ctor: &str) -> Option<bool> {
    if !sk.classes.contains_key(ctor) {
        let torch = [
            "nn.LayerNorm",
            "nn.RMSNorm",
            "torch.nn.LayerNorm",
            "torch.nn.RMSNorm",
        ];
        return torch.contains(&ctor).then_some(false);
    }
    let text: String = sk
        .class_text(ctor)
        .chars()
        .filter(|c| !c.is_whitespace())
        .collect();
    Some(has_unit_offset(&text))
}

/// `1 + weight` in whitespace-free source text, in any of the spellings real norms use
/// (`1+self.weight`, `1.0+weight`, `self.weight+1`), never part of a longer name or number.
fn has_unit_offset(text: &str) -> bool {
    let word = |c: char| c.is_ascii_alphanumeric() || c == '_';
    let standalone = |pat: &str| {
        text.match_indices(pat).any(|(at, _)| {
            let before = text[..at].chars().next_back();
            let after = text[at + pat.len()..].chars().next();
            !before.is_some_and(|c| word(c) || c == '.') && !after.is_some_and(word)
        })
    };
    ["1+", "1.0+", "1.+"]
        .iter()
        .any(|one| standalone(&format!("{one}self.weight")) || standalone(&format!("{one}weight")))
        || ["self.weight+1", "weight+1"].iter().any(|p| standalone(p))
}

/// An op's boolean argument (`interleaved: true`, `unit_offset: norm_unit_offset`).
pub(super) fn arg_flag(n: &harch_engine::analysis::NodeRow, name: &str) -> bool {
    n.args
        .get(name)
        .map(|v| v.int.map(|i| i != 0).unwrap_or(v.text == "true"))
        .unwrap_or(false)
}

fn root_class(truth: &Truth) -> String {
    truth
        .config
        .get("architectures")
        .and_then(|v| v.get(0))
        .and_then(|v| v.as_str())
        .unwrap_or_default()
        .to_string()
}

/// What the classes the source builds at checkpoint module `module` say by `classify` (None
/// for a class it cannot tell), with the first such class by name: only when every class that
/// tells says the same.
fn settled<'s, T: Ord + Copy>(
    sk: &Skeleton<'s>,
    root: &str,
    module: &str,
    classify: impl Fn(&Skeleton<'s>, &str) -> Option<T>,
) -> Option<(T, &'s str)> {
    let told: BTreeSet<(T, &'s str)> = sk
        .module_ctors(root, module)
        .into_iter()
        .filter_map(|c| Some((classify(sk, c)?, c)))
        .collect();
    let first = *told.first()?;
    told.iter().all(|(t, _)| *t == first.0).then_some(first)
}

/// M020: each norm's checkpoint module is built by a class of the same kind.
fn norms(a: &Analysis, truth: &Truth, sk: &Skeleton) -> Vec<Diagnostic> {
    let mut out = Vec::new();
    let mut seen = BTreeSet::new();
    let root = root_class(truth);
    for w in &a.weights {
        let n = &a.nodes[w.node];
        let got = match n.op.as_str() {
            "rmsnorm" => NormKind::Rms,
            "layernorm" => NormKind::Layer,
            _ => continue,
        };
        if w.leaf != "weight" {
            continue;
        }
        let Some((module, _)) = w.name.rsplit_once('.') else {
            continue;
        };
        let Some((want, class)) = settled(sk, &root, module, norm_kind) else {
            continue;
        };
        if want != got {
            once(
                &mut seen,
                Diagnostic::new(
                    "semantic",
                    code::NORM_KIND,
                    format!(
                        "`{}` is a {} but the source builds `{module}` as `{class}`, a {}",
                        n.id,
                        got.op(),
                        want.op()
                    ),
                    n.loc.clone(),
                )
                .hint(format!(
                    "use `op: {}` as the source's `{class}` does (an RMSNorm has no mean subtraction and no bias)",
                    want.op()
                )),
                &mut out,
            );
        }
    }
    out
}

/// M023: an RMSNorm scales by `1 + weight` exactly when the class the source builds at its
/// checkpoint path does.
fn norm_offsets(a: &Analysis, truth: &Truth, sk: &Skeleton) -> Vec<Diagnostic> {
    let mut out = Vec::new();
    let mut seen = BTreeSet::new();
    let root = root_class(truth);
    for w in &a.weights {
        let n = &a.nodes[w.node];
        if n.op != "rmsnorm" || w.leaf != "weight" {
            continue;
        }
        let Some((module, _)) = w.name.rsplit_once('.') else {
            continue;
        };
        // An imported class the source does not define (`FusedRMSNormGated`, the fused kernel
        // chosen when installed) tells nothing: it computes what the source's own class does.
        let Some((want, class)) = settled(sk, &root, module, norm_offset) else {
            continue;
        };
        let got = arg_flag(n, "unit_offset");
        if want == got {
            continue;
        }
        let scale = |offset: bool| if offset { "(1 + weight)" } else { "weight" };
        let message = format!(
            "rmsnorm `{}` scales by `{}` but the source builds `{module}` as `{class}`, which scales by `{}`{}",
            n.id,
            scale(got),
            scale(want),
            if want {
                " (a zero-centred weight: a stored 0 scales by 1)"
            } else {
                ""
            }
        );
        let hint = if want {
            format!(
                "set `unit_offset: true` on the rmsnorm, as `{class}` computes `x * (1 + weight)` (the library's blocks and attentions switch it with the flag dim `norm_unit_offset: 1`)"
            )
        } else {
            format!("drop `unit_offset` (or set it false): `{class}` computes `weight * x`")
        };
        once(
            &mut seen,
            Diagnostic::new("semantic", code::NORM_OFFSET, message, n.loc.clone()).hint(hint),
            &mut out,
        );
    }
    out
}

/// The activation family a name belongs to (`swiglu` is SiLU-gated, `gelu_pytorch_tanh` a GELU).
fn act_family(name: &str) -> String {
    let n = name.trim().trim_matches(['"', '\'']).to_ascii_lowercase();
    match n.as_str() {
        // `swigluoai` is the name serving stacks give gpt-oss's clamped SwiGLU.
        "silu" | "swish" | "swiglu" | "clamped_swiglu" | "swigluoai" => "silu".into(),
        "relu" => "relu".into(),
        "relu2" | "relu_squared" | "relu2_squared" => "relu2".into(),
        s if s.starts_with("gelu") || s == "geglu" => "gelu".into(),
        s => s.into(),
    }
}

/// The activation config and source agree on for MLPs, with where it was read.
fn expected_activation(truth: &Truth, sk: &Skeleton) -> Option<(String, String)> {
    let text_config = crate::config_view::text(&truth.config);
    let config_str = |k: &str| text_config.get(k).and_then(|v| v.as_str());
    let mut found: BTreeSet<(String, String)> = BTreeSet::new();
    for (name, c) in &sk.classes {
        let mlp = ["MLP", "Mlp", "Expert", "FeedForward", "FFN"]
            .iter()
            .any(|m| name.contains(m));
        if !mlp {
            continue;
        }
        let mut rest = c.body.as_str();
        while let Some(at) = rest.find("ACT2FN[") {
            let inner = &rest[at + 7..];
            let Some(end) = inner.find(']') else { break };
            let key = inner[..end].trim();
            rest = &inner[end..];
            let key = key
                .strip_prefix("self.config.")
                .or_else(|| key.strip_prefix("config."));
            let (act, from) = match key {
                Some(k) => match config_str(k) {
                    Some(v) => (
                        v.to_string(),
                        format!("config `{k}` via `ACT2FN` in `{name}`"),
                    ),
                    None => continue,
                },
                None => {
                    let lit = inner[..end].trim();
                    if !(lit.starts_with('"') || lit.starts_with('\'')) {
                        continue;
                    }
                    (lit.to_string(), format!("`ACT2FN[{lit}]` in `{name}`"))
                }
            };
            found.insert((act_family(&act), from));
        }
    }
    let families: BTreeSet<&String> = found.iter().map(|(f, _)| f).collect();
    match families.len() {
        1 => found.into_iter().next(),
        0 => ["hidden_act", "hidden_activation"].iter().find_map(|k| {
            config_str(k).map(|v| (act_family(v), format!("config `{k}` = \"{v}\"")))
        }),
        _ => None,
    }
}

/// M021: the activation of every MLP is the configured one.
fn activations(a: &Analysis, truth: &Truth, sk: &Skeleton) -> Vec<Diagnostic> {
    let mut out = Vec::new();
    let Some((want, from)) = expected_activation(truth, sk) else {
        return out;
    };
    let mut seen = BTreeSet::new();
    // An encoder's MLPs take the activation of its own sub-config (`vision_config.hidden_act`).
    let encoder_act = crate::config_view::ENCODER_SCOPES.iter().find_map(|s| {
        let v = truth.config.get(*s)?.get("hidden_act")?.as_str()?;
        Some((act_family(v), format!("config `{s}.hidden_act` = \"{v}\"")))
    });
    for n in &a.nodes {
        if !n.role.starts_with("ffn") {
            continue;
        }
        let (want, from) = match (&n.per_image, &encoder_act) {
            (None, _) => (&want, &from),
            (Some(_), Some((w, f))) => (w, f),
            (Some(_), None) => continue,
        };
        let got = match n.op.as_str() {
            "silu" | "gelu" | "relu" => n.op.clone(),
            "glu" => match n.args.get("act") {
                Some(v) => v.text.clone(),
                None => continue,
            },
            _ => continue,
        };
        if &act_family(&got) != want {
            once(
                &mut seen,
                Diagnostic::new(
                    "semantic",
                    code::ACTIVATION,
                    format!(
                        "MLP activation `{}` is {got}, but {from} makes it {want}",
                        n.id
                    ),
                    n.loc.clone(),
                )
                .hint(format!(
                    "use the {want} activation the MLP applies (`op: {want}`, or `act:` of a glu)"
                )),
                &mut out,
            );
        }
    }
    out
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
enum Layout {
    Half,
    Interleaved,
}

impl Layout {
    fn say(self) -> &'static str {
        match self {
            Layout::Half => "rotate_half (first and second halves)",
            Layout::Interleaved => "interleaved (adjacent pairs)",
        }
    }
}

fn is_rotary_fn(name: &str) -> bool {
    let l = name.to_ascii_lowercase();
    l.contains("rotary") || l.contains("rope")
}

/// How a function body pairs channels, by what it computes (never by names: DeepSeek-V4's
/// `rotate_half` pairs adjacent channels): complex pairs, strided slices (`x[..., 0::2]`) or a
/// view into pairs (`view(…, d // 2, 2)`) are adjacent pairs; a split at the middle
/// (`x[..., : d // 2]`, `torch.chunk(x, 2, …)`) is halves.
fn pairing(body: &str) -> Option<Layout> {
    let b: String = body.split_whitespace().collect();
    if b.contains("view_as_complex") || b.contains("::2]") || b.contains("//2,2)") {
        return Some(Layout::Interleaved);
    }
    if b.contains("//2]")
        || b.contains("//2:]")
        || b.contains("torch.chunk(")
        || b.contains(".chunk(2")
    {
        return Some(Layout::Half);
    }
    None
}

/// Which channels of a head a partial rotary rotates.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
enum End {
    Leading,
    Trailing,
}

impl End {
    fn say(self) -> &'static str {
        match self {
            End::Leading => "the leading channels",
            End::Trailing => "the trailing channels",
        }
    }
}

/// Which channels a body rotates, by the slices it takes: `x[..., -rope_dim:]` or
/// `x[..., :-rope_dim]` (DeepSeek-V4) split off the trailing ones; `x[..., :rot]` beside
/// `x[..., rot:]` the leading ones. A split at the middle is a pairing, not a partial rotary.
fn rotated_end(body: &str) -> Option<End> {
    let b: String = body.split_whitespace().collect();
    if b.contains("[...,-") || b.contains("[...,:-") {
        return Some(End::Trailing);
    }
    let mut rest = b.as_str();
    while let Some(at) = rest.find("[...,:") {
        rest = &rest[at + "[...,:".len()..];
        let Some(close) = rest.find(']') else { break };
        let bound = &rest[..close];
        let plain = !bound.is_empty()
            && !bound.contains("//")
            && bound
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || "_.".contains(c));
        if plain && b.contains(&format!("[...,{bound}:]")) {
            return Some(End::Leading);
        }
    }
    None
}

/// What a rotary function computes, by `read` of its body, following its calls three deep.
fn read_through<T>(sk: &Skeleton, f: &str, depth: usize, read: fn(&str) -> Option<T>) -> Option<T> {
    let body = sk.functions.get(f)?;
    if let Some(l) = read(body) {
        return Some(l);
    }
    if depth == 0 {
        return None;
    }
    calls(body)
        .into_iter()
        .filter(|g| *g != f && sk.functions.contains_key(g))
        .find_map(|g| read_through(sk, g, depth - 1, read))
}

/// Whether config (or the configuration class's default) makes `key` true.
fn config_truthy(truth: &Truth, sk: &Skeleton, key: &str) -> Option<bool> {
    match crate::config_view::text(&truth.config).get(key) {
        Some(serde_json::Value::Bool(b)) => Some(*b),
        Some(serde_json::Value::Number(n)) => Some(n.as_f64() != Some(0.0)),
        Some(serde_json::Value::Null) | None => match sk.config_defaults.get(key).copied() {
            Some("True") => Some(true),
            Some("False") | Some("None") => Some(false),
            _ => None,
        },
        _ => None,
    }
}

/// The `config.<key>` an `if` line tests, when it tests exactly one.
fn tested_key(line: &str) -> Option<&str> {
    let t = line.trim();
    let cond = t.strip_prefix("if ")?.strip_suffix(':').or_else(|| {
        t.strip_prefix("if ")
            .and_then(|s| s.split_once(':').map(|(c, _)| c))
    })?;
    let at = cond.find("config.")?;
    let key = &cond[at + 7..];
    let end = key
        .find(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
        .unwrap_or(key.len());
    (cond.trim_start_matches("self.").trim() == format!("config.{}", &key[..end]))
        .then_some(&key[..end])
}

/// The layout of the rotary calls `lines` of the forward code make under the config it runs
/// with.
fn expected_layout<T: Copy + Ord>(
    truth: &Truth,
    sk: &Skeleton,
    lines: &[(usize, &str)],
    read: fn(&str) -> Option<T>,
) -> Option<(T, String)> {
    let mut found: BTreeSet<(T, String)> = BTreeSet::new();
    for (j, (ind, line)) in lines.iter().enumerate() {
        let t = line.trim_start();
        if t.starts_with("def ") || t.starts_with('#') {
            continue;
        }
        for f in calls(line) {
            if !is_rotary_fn(f) || !sk.functions.contains_key(f) {
                continue;
            }
            // The block the call sits in: an `if config.x:` or its `else:` applies only when
            // config says so.
            let mut applies = true;
            let mut why = String::new();
            let opener = lines[..j]
                .iter()
                .rposition(|(i, l)| *i < *ind && !l.trim().is_empty());
            if let Some(o) = opener {
                let (oi, ol) = lines[o];
                let ot = ol.trim();
                let test = if ot.starts_with("if ") {
                    tested_key(ot).map(|k| (k, true))
                } else if ot == "else:" {
                    lines[..o]
                        .iter()
                        .rev()
                        .find(|(i, l)| *i == oi && !l.trim().is_empty())
                        .and_then(|(_, l)| tested_key(l))
                        .map(|k| (k, false))
                } else {
                    None
                };
                if let Some((k, when)) = test {
                    // A branch config does not decide may run: its layout is one the source
                    // may apply, so the expected layout is not settled unless it agrees.
                    if let Some(v) = config_truthy(truth, sk, k) {
                        applies = v == when;
                        why = format!(" (config `{k}` is {v})");
                    }
                }
            }
            if applies && let Some(l) = read_through(sk, f, 3, read) {
                found.insert((l, format!("`{f}`{why}")));
            }
        }
    }
    let layouts: BTreeSet<T> = found.iter().map(|(l, _)| *l).collect();
    if layouts.len() == 1 {
        found.into_iter().next()
    } else {
        None
    }
}

/// M022: every rotary op pairs channels as the rotary function its part of the source (the
/// vision tower's classes, or the text model's) calls does.
fn rope_layout(a: &Analysis, truth: &Truth, sk: &Skeleton, parts: &PartLines) -> Vec<Diagnostic> {
    let mut out = Vec::new();
    let expected =
        [Part::Text, Part::Tower].map(|p| expected_layout(truth, sk, parts.get(p), pairing));
    let ends =
        [Part::Text, Part::Tower].map(|p| expected_layout(truth, sk, parts.get(p), rotated_end));
    let mut seen = BTreeSet::new();
    for n in a.nodes.iter().filter(|n| n.op == "rope") {
        let part = Part::of(n);
        let partial = match (n.args.get("rotary_dim"), n.args.get("dim")) {
            (Some(r), Some(d)) => r.int.is_some() && r.int != d.int,
            _ => false,
        };
        if let (true, Some((want, from))) = (partial, &ends[part as usize]) {
            let got = if arg_flag(n, "trailing") {
                End::Trailing
            } else {
                End::Leading
            };
            if got != *want {
                once(
                    &mut seen,
                    Diagnostic::new(
                        "semantic",
                        code::ROPE_LAYOUT,
                        format!(
                            "rope `{}` rotates {} but the source's {from} rotates {}",
                            n.id,
                            got.say(),
                            want.say()
                        ),
                        n.loc.clone(),
                    )
                    .hint(format!(
                        "set `trailing: {}` on the rope op",
                        *want == End::Trailing
                    )),
                    &mut out,
                );
            }
        }
        let Some((want, from)) = &expected[part as usize] else {
            continue;
        };
        let want = *want;
        let whose = if parts.has_tower {
            format!("{} of the source applies", part.say())
        } else {
            "the source applies".to_string()
        };
        let got = if arg_flag(n, "interleaved") {
            Layout::Interleaved
        } else {
            Layout::Half
        };
        if got != want {
            once(
                &mut seen,
                Diagnostic::new(
                    "semantic",
                    code::ROPE_LAYOUT,
                    format!(
                        "rope `{}` pairs channels {} but {whose} {from}, {}",
                        n.id,
                        got.say(),
                        want.say()
                    ),
                    n.loc.clone(),
                )
                .hint(format!(
                    "set `interleaved: {}` on the rope op",
                    want == Layout::Interleaved
                )),
                &mut out,
            );
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::{Layout, has_unit_offset, pairing};

    fn offset(src: &str) -> bool {
        has_unit_offset(
            &src.chars()
                .filter(|c| !c.is_whitespace())
                .collect::<String>(),
        )
    }

    #[test]
    fn pairing_is_read_from_what_the_body_computes() {
        // DeepSeek-V4's `rotate_half` pairs adjacent channels, whatever its name says.
        let v4 = "x1 = x[..., 0::2]\n    x2 = x[..., 1::2]\n    return torch.stack((-x2, x1), dim=-1).flatten(-2)";
        assert_eq!(pairing(v4), Some(Layout::Interleaved));
        let llama = "x1 = x[..., : x.shape[-1] // 2]\n    x2 = x[..., x.shape[-1] // 2 :]\n    return torch.cat((-x2, x1), dim=-1)";
        assert_eq!(pairing(llama), Some(Layout::Half));
        let ds3 = "q = q.view(b, h, s, d // 2, 2).transpose(4, 3).reshape(b, h, s, d)\n    q_embed = (q * cos) + (rotate_half(q) * sin)";
        assert_eq!(pairing(ds3), Some(Layout::Interleaved));
        assert_eq!(
            pairing("first_half, second_half = torch.chunk(x, 2, dim=-1)"),
            Some(Layout::Half)
        );
        // A body that only calls another function says nothing itself.
        assert_eq!(
            pairing("q_embed = (q * cos) + (rotate_half(q) * sin)"),
            None
        );
    }

    #[test]
    fn the_rotated_channels_are_read_from_the_slices_taken() {
        use super::{End, rotated_end};
        let v4 =
            "rope_dim = cos.shape[-1]\n    nope, rope = x[..., :-rope_dim], x[..., -rope_dim:]";
        assert_eq!(rotated_end(v4), Some(End::Trailing));
        let glm = "q_rot, q_pass = q[..., :rotary_dim], q[..., rotary_dim:]";
        assert_eq!(rotated_end(glm), Some(End::Leading));
        // Halves of a full rotary are a pairing, not a partial rotary.
        let llama = "x1 = x[..., : x.shape[-1] // 2]\n    x2 = x[..., x.shape[-1] // 2 :]";
        assert_eq!(rotated_end(llama), None);
        assert_eq!(
            rotated_end("return (q * cos) + (rotate_half(q) * sin)"),
            None
        );
    }

    #[test]
    fn reads_every_spelling_of_a_unit_offset() {
        assert!(offset("output = output * (1.0 + self.weight.float())"));
        assert!(offset("return x * (1 + weight)"));
        assert!(offset("return (self.weight + 1) * x"));
        assert!(offset("return x * (1. + self.weight)"));
        assert!(!offset(
            "hidden_states = self.weight * hidden_states.to(input_dtype)"
        ));
        assert!(!offset("x = 0.1 + weight_decay"));
        assert!(!offset("y = 21 + weight"));
        assert!(!offset("y = self.weight + 10"));
    }
}
