//! Load-time renames of transformers 5 (`conversion_mapping.py`): where a checkpoint's tensor
//! names differ from the module attributes (DeepSeek-V4 stores `layers.3.attn.wq_a.weight`; the
//! module is `layers.3.self_attn.q_a_proj`), the source's structure is looked up under the
//! renamed name, as transformers loads it.
//!
//! Only `WeightRenaming(source_patterns=r"...", target_patterns=r"...")` entries are read (the
//! converters merge tensors, they do not rename modules). Patterns are the small regex subset
//! those entries use: literal text, `\.` escapes, `^` at the start, `.` and `.*`; an entry using
//! anything else is skipped rather than guessed. The text is hostile input: the scan is bounded.

/// The truth's source-file key holding the model type's entry of `conversion_mapping.py`.
pub const CONVERSION_FILE: &str = "conversion_mapping.py";

const MAX_ENTRY_CHARS: usize = 64 * 1024;
const MAX_RENAMES: usize = 256;

#[derive(Clone, Debug, PartialEq)]
enum Tok {
    Char(char),
    Any,
    AnyRun,
}

#[derive(Clone, Debug, PartialEq)]
struct Pattern {
    anchored: bool,
    toks: Vec<Tok>,
}

/// The renames of one model type, applied in order (each to the result of the one before).
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Renames(Vec<(Pattern, String)>);

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

fn parse_pattern(p: &str) -> Option<Pattern> {
    let (anchored, p) = match p.strip_prefix('^') {
        Some(rest) => (true, rest),
        None => (false, p),
    };
    let mut toks = Vec::new();
    let mut it = p.chars().peekable();
    while let Some(c) = it.next() {
        match c {
            '\\' => toks.push(Tok::Char(it.next()?)),
            '.' if it.peek() == Some(&'*') => {
                it.next();
                toks.push(Tok::AnyRun);
            }
            '.' => toks.push(Tok::Any),
            '[' | ']' | '(' | ')' | '|' | '+' | '?' | '{' | '}' | '$' | '*' | '^' => return None,
            c => toks.push(Tok::Char(c)),
        }
    }
    Some(Pattern { anchored, toks })
}

/// The length of the match of `toks` at the start of `s`, if any (`.*` as long as it can).
fn match_at(toks: &[Tok], s: &[char]) -> Option<usize> {
    match toks.split_first() {
        None => Some(0),
        Some((Tok::Char(c), rest)) => (s.first() == Some(c))
            .then(|| match_at(rest, &s[1..]).map(|n| n + 1))
            .flatten(),
        Some((Tok::Any, rest)) => (!s.is_empty())
            .then(|| match_at(rest, &s[1..]).map(|n| n + 1))
            .flatten(),
        Some((Tok::AnyRun, rest)) => (0..=s.len())
            .rev()
            .find_map(|k| match_at(rest, &s[k..]).map(|n| n + k)),
    }
}

impl Pattern {
    /// Every non-overlapping match replaced by `to`, left to right (Python's `re.sub`).
    fn replace_all(&self, s: &str, to: &str) -> String {
        let chars: Vec<char> = s.chars().collect();
        let mut out = String::new();
        let mut i = 0;
        while i <= chars.len() {
            if (i == 0 || !self.anchored)
                && let Some(n) = match_at(&self.toks, &chars[i..])
                && n > 0
            {
                out.push_str(to);
                i += n;
                continue;
            }
            if i < chars.len() {
                out.push(chars[i]);
            }
            i += 1;
        }
        out
    }
}

impl Renames {
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
            if let Some(p) = parse_pattern(from) {
                out.push((p, to.replace('\\', "")));
            }
        }
        Renames(out)
    }

    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    /// A checkpoint tensor name as transformers loads it.
    pub fn apply(&self, name: &str) -> String {
        self.0
            .iter()
            .fold(name.to_string(), |n, (p, to)| p.replace_all(&n, to))
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
            WeightRenaming(source_patterns=r"(a|b)", target_patterns=r"c"),
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
        // The alternation is not in the subset read: skipped, not guessed.
        assert_eq!(r.0.len(), 6);
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
        let p = parse_pattern(r"\.e.*\.w").unwrap();
        assert_eq!(p.replace_all("a.e1.w.e2.w", "|"), "a|");
        let p = parse_pattern(r"\.n.").unwrap();
        assert_eq!(p.replace_all("x.nA.nB", "_"), "x__");
        assert!(parse_pattern(r"a+").is_none());
        assert!(parse_pattern(r"trailing\").is_none());
        // Unbalanced or huge input is bounded, not a panic.
        assert!(model_entry("\"m\": [[[", "m").is_none());
        assert!(model_entry("\"m\": ]]", "m").is_none());
    }
}
