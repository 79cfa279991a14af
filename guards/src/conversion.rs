//! Load-time renames of transformers 5 (`conversion_mapping.py`): where a checkpoint's tensor
//! names differ from the module attributes (DeepSeek-V4 stores `layers.3.attn.wq_a.weight`; the
//! module is `layers.3.self_attn.q_a_proj`), the source's structure is looked up under the
//! renamed name, as transformers loads it.
//!
//! Only `WeightRenaming(source_patterns=r"...", target_patterns=r"...")` entries are read (the
//! converters merge tensors, they do not rename modules). Patterns are compiled by the `regex`
//! crate, whose syntax covers the Python patterns these entries use (escapes, anchors, `.*`,
//! groups, alternations, `\1` in targets); one it refuses (a lookaround, a backreference in the
//! pattern) is skipped rather than guessed. The text is hostile input: the scan is bounded and
//! each compiled pattern is size-capped; matching is linear in the name.

/// The truth's source-file key holding the model type's entry of `conversion_mapping.py`.
pub const CONVERSION_FILE: &str = "conversion_mapping.py";

const MAX_ENTRY_CHARS: usize = 64 * 1024;
const MAX_RENAMES: usize = 256;

/// One rename: Python's pattern compiled by the `regex` crate (whose syntax covers what these
/// entries use: literals, escapes, `^`, `.`, `.*`, groups and alternations; one it refuses is
/// skipped rather than guessed), and the target with `\N` group references as `${N}`.
#[derive(Clone, Debug)]
struct Rename {
    pattern: regex::Regex,
    to: String,
}

/// A compiled pattern's size cap: the text is hostile input.
const MAX_PATTERN_BYTES: usize = 1 << 16;

fn compile(pattern: &str) -> Option<regex::Regex> {
    regex::RegexBuilder::new(pattern)
        .size_limit(MAX_PATTERN_BYTES)
        .build()
        .ok()
}

/// A Python `re.sub` target as the `regex` crate's replacement: `\1`..`\9` name groups, any
/// other escape is the character itself, and a literal `$` stays literal.
fn replacement(to: &str) -> String {
    let mut out = String::new();
    let mut it = to.chars();
    while let Some(c) = it.next() {
        match c {
            '\\' => match it.next() {
                Some(d) if d.is_ascii_digit() => out.push_str(&format!("${{{d}}}")),
                Some(d) => out.push(d),
                None => {}
            },
            '$' => out.push_str("$$"),
            c => out.push(c),
        }
    }
    out
}

/// The renames of one model type, applied in order (each to the result of the one before).
#[derive(Clone, Debug, Default)]
pub struct Renames(Vec<Rename>);

/// The text of `"<model_type>": [ ... ]` in a conversion_mapping.py, brackets balanced.
pub fn model_entry<'t>(text: &'t str, model_type: &str) -> Option<&'t str> {
    let key = format!("\"{model_type}\": [");
    let start = text.find(&key)?;
    let body = &text[start..];
    let mut depth = 0usize;
    for (i, c) in body.char_indices().take(MAX_ENTRY_CHARS) {
        match c {
            '[' => depth += 1,
            ']' => {
                depth = depth.checked_sub(1)?;
                if depth == 0 {
                    return Some(&body[..=i]);
                }
            }
            _ => {}
        }
    }
    None
}

/// The string literal after `name=` (`r"..."`, `"..."` or `'...'`), if a single string.
fn literal_after<'t>(text: &'t str, name: &str) -> Option<&'t str> {
    let at = text.find(&format!("{name}="))? + name.len() + 1;
    let rest = text[at..].trim_start();
    let rest = rest.strip_prefix('r').unwrap_or(rest);
    let q = rest.chars().next().filter(|c| *c == '"' || *c == '\'')?;
    let end = rest[1..].find(q)?;
    Some(&rest[1..1 + end])
}

impl Renames {
    /// The renames of the truth's staged entry ([`CONVERSION_FILE`]); none when it has none.
    pub fn of(sources: &std::collections::BTreeMap<String, String>) -> Renames {
        sources
            .get(CONVERSION_FILE)
            .map(|t| Renames::read(t))
            .unwrap_or_default()
    }

    /// The `WeightRenaming` entries of a model type's entry text ([`model_entry`]).
    pub fn read(entry: &str) -> Renames {
        let mut out = Vec::new();
        for part in entry.split("WeightRenaming(").skip(1).take(MAX_RENAMES) {
            let call = part.split("WeightConverter(").next().unwrap_or(part);
            let (Some(from), Some(to)) = (
                literal_after(call, "source_patterns"),
                literal_after(call, "target_patterns"),
            ) else {
                continue;
            };
            if let Some(pattern) = compile(from) {
                out.push(Rename {
                    pattern,
                    to: replacement(to),
                });
            }
        }
        Renames(out)
    }

    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    /// A checkpoint tensor name as transformers loads it.
    pub fn apply(&self, name: &str) -> String {
        self.0.iter().fold(name.to_string(), |n, r| {
            r.pattern.replace_all(&n, r.to.as_str()).into_owned()
        })
    }

    /// A checkpoint module path (no leaf) as transformers names the module: the renames run
    /// over the path with a `.weight` leaf, as they run over tensor names.
    pub fn module(&self, path: &str) -> String {
        let full = self.apply(&format!("{path}.weight"));
        match full.strip_suffix(".weight") {
            Some(m) => m.to_string(),
            None => full
                .rsplit_once('.')
                .map_or(full.clone(), |(m, _)| m.to_string()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    // A mapping in the format transformers 5 writes (written for this test).
    const MAPPING: &str = r#"
    mapping = {
        "other_model": [WeightRenaming(source_patterns=r"\.x\.", target_patterns=r".y.")],
        "toy_v4": [
            # mid-key renames first, then leaves
            WeightRenaming(source_patterns=r"\.attn\.", target_patterns=r".self_attn."),
            WeightRenaming(source_patterns=r"\.indexer\.compressor\.", target_patterns=r"\.compressor\.indexer\."),
            WeightRenaming(source_patterns=r"^embed\.weight", target_patterns="embed_tokens.weight"),
            WeightRenaming(source_patterns=r"\.wq_a\.", target_patterns=r".q_a_proj."),
            WeightRenaming(source_patterns=r"\.self_attn\.wq_b\.", target_patterns=r"\.self_attn\.q_b_proj\."),
            WeightRenaming(source_patterns=r"\.norm\.", target_patterns=r"\.kv_norm\."),
            WeightRenaming(source_patterns=r"\.moe\.(experts|gate)\.", target_patterns=r"\.mlp\.\1\."),
            WeightRenaming(source_patterns=r"(?<=x)y", target_patterns=r"z"),
            WeightConverter(
                source_patterns=[r"\.experts.*.w1.weight", r"\.experts.*.w3.weight"],
                target_patterns=r"\.experts.gate_up_proj",
            ),
        ],
    }
    "#;

    #[test]
    fn renames_follow_the_model_types_entry_in_order() {
        let entry = model_entry(MAPPING, "toy_v4").expect("entry");
        assert!(!entry.contains("other_model"));
        let r = Renames::read(entry);
        // A lookbehind is not in the syntax the regex crate reads: skipped, not guessed.
        assert_eq!(r.0.len(), 7);
        // A group and its reference in the target (MiniMax-M3's `block_sparse_moe` is `mlp`).
        assert_eq!(r.module("layers.{i}.moe.gate"), "layers.{i}.mlp.gate");
        assert_eq!(r.module("layers.{i}.moe.router"), "layers.{i}.moe.router");
        assert_eq!(r.apply("embed.weight"), "embed_tokens.weight");
        assert_eq!(r.apply("layers.3.embed.weight"), "layers.3.embed.weight");
        assert_eq!(
            r.apply("layers.3.attn.wq_a.weight"),
            "layers.3.self_attn.q_a_proj.weight"
        );
        // A rename that needs an earlier one's result.
        assert_eq!(
            r.module("layers.{i}.attn.wq_b"),
            "layers.{i}.self_attn.q_b_proj"
        );
        assert_eq!(
            r.module("layers.{i}.attn.indexer.compressor.norm"),
            "layers.{i}.self_attn.compressor.indexer.kv_norm"
        );
        assert_eq!(r.module("embed"), "embed_tokens");
        assert!(model_entry(MAPPING, "absent").is_none());
        assert!(Renames::read("").is_empty());
    }

    #[test]
    fn patterns_match_like_python_re_sub() {
        let p = compile(r"\.e.*\.w").unwrap();
        assert_eq!(p.replace_all("a.e1.w.e2.w", "|"), "a|");
        let p = compile(r"\.n.").unwrap();
        assert_eq!(p.replace_all("x.nA.nB", "_"), "x__");
        assert!(compile(r"trailing\").is_none());
        assert!(compile(&"(a|b)*".repeat(20_000)).is_none());
        assert_eq!(replacement(r"\.mlp\.\1\.$"), ".mlp.${1}.$$");
        // Unbalanced or huge input is bounded, not a panic.
        assert!(model_entry("\"m\": [[[", "m").is_none());
        assert!(model_entry("\"m\": ]]", "m").is_none());
    }
}
