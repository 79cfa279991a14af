//! The module skeleton of a forward source: classes, the modules each `__init__` assigns
//! (`self.q_norm = Qwen3RMSNorm(...)`), top-level functions, and the defaults of the
//! configuration class, read from the Python text without running it.
//!
//! The text is hostile input: everything here is a bounded scan over lines; nothing recurses
//! on the text's shape beyond fixed depths.

use std::collections::BTreeMap;

/// A class definition: its bases, its body text and the constructors each `self.<attr> = …`
/// assignment names.
#[derive(Debug, Default)]
pub struct Class<'s> {
    pub bases: Vec<&'s str>,
    pub body: String,
    /// attr → constructor names on the right-hand side (`nn.Linear`, `Qwen3RMSNorm`).
    pub attrs: BTreeMap<&'s str, Vec<&'s str>>,
}

#[derive(Debug, Default)]
pub struct Skeleton<'s> {
    pub classes: BTreeMap<&'s str, Class<'s>>,
    /// Top-level `def name(…)` → body text.
    pub functions: BTreeMap<&'s str, String>,
    /// `key=default` of every configuration class's `__init__` signature.
    pub config_defaults: BTreeMap<&'s str, &'s str>,
    /// Every `(indent, line)` of the modeling sources' class bodies: the forward code whose
    /// calls say which functions run.
    pub lines: Vec<(usize, &'s str)>,
    /// Load-time renames (transformers 5's conversion_mapping.py entry for the model type):
    /// checkpoint module paths are looked up under the names the modules have.
    pub renames: crate::conversion::Renames,
}

/// Bounds on what is read from one source set.
const MAX_LINES: usize = 200_000;
const MAX_RHS_LINES: usize = 40;

fn indent(line: &str) -> usize {
    line.len() - line.trim_start().len()
}

fn ident_at(s: &str) -> &str {
    let end = s
        .find(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
        .unwrap_or(s.len());
    &s[..end]
}

/// Dotted names followed by `(` in `text`: the calls it makes.
pub fn calls(text: &str) -> Vec<&str> {
    let b = text.as_bytes();
    let mut out = Vec::new();
    let mut i = 0;
    while i < b.len() {
        if b[i].is_ascii_alphabetic() || b[i] == b'_' {
            let start = i;
            while i < b.len() && (b[i].is_ascii_alphanumeric() || b[i] == b'_' || b[i] == b'.') {
                i += 1;
            }
            if i < b.len() && b[i] == b'(' && (start == 0 || b[start - 1] != b'.') {
                out.push(&text[start..i]);
            }
        } else {
            i += 1;
        }
    }
    out
}

impl<'s> Skeleton<'s> {
    pub fn read(
        sources: &'s BTreeMap<String, String>,
        renames: &crate::conversion::Renames,
    ) -> Skeleton<'s> {
        let mut sk = Skeleton {
            renames: renames.clone(),
            ..Skeleton::default()
        };
        for (name, text) in sources {
            if name == crate::conversion::CONVERSION_FILE {
                continue;
            }
            let lines: Vec<&str> = text.lines().take(MAX_LINES).collect();
            if name.starts_with("configuration_") {
                sk.read_config_defaults(&lines);
                continue;
            }
            sk.read_module(&lines);
        }
        sk
    }

    fn read_module(&mut self, lines: &[&'s str]) {
        let mut k = 0;
        while k < lines.len() {
            let line = lines[k];
            let head = if let Some(rest) = line.strip_prefix("class ") {
                Some((true, rest))
            } else {
                line.strip_prefix("def ").map(|rest| (false, rest))
            };
            let Some((is_class, rest)) = head else {
                k += 1;
                continue;
            };
            let name = ident_at(rest);
            let mut end = k + 1;
            while end < lines.len() {
                let l = lines[end];
                if !l.trim().is_empty() && indent(l) == 0 && !l.starts_with(')') {
                    break;
                }
                end += 1;
            }
            let body = lines[k + 1..end].join("\n");
            if is_class {
                self.lines
                    .extend(lines[k + 1..end].iter().map(|l| (indent(l), *l)));
                let bases = rest[name.len()..]
                    .trim_start_matches('(')
                    .split([',', ')', ':'])
                    .map(str::trim)
                    .filter(|b| !b.is_empty())
                    .collect();
                let attrs = assignments(&lines[k + 1..end]);
                self.classes.insert(name, Class { bases, body, attrs });
            } else {
                self.functions.insert(name, body);
            }
            k = end;
        }
    }

    fn read_config_defaults(&mut self, lines: &[&'s str]) {
        for l in lines {
            let t = l.trim();
            let key = ident_at(t);
            if key.is_empty() || t.starts_with("self.") {
                continue;
            }
            let rest = t[key.len()..].trim_start();
            let (rest, annotated) = match rest.strip_prefix(':') {
                // `key: Optional[bool] = True,`
                Some(r) => match r.find('=') {
                    Some(eq) => (&r[eq..], true),
                    None => continue,
                },
                None => (rest, false),
            };
            if let Some(v) = rest.strip_prefix('=')
                && !v.starts_with('=')
            {
                let v = v.trim();
                // An `__init__` argument ends in a comma; a dataclass field of a transformers-5
                // configuration (`rope_interleave: bool | None = True`) does not.
                let value = match v.strip_suffix(',') {
                    Some(arg) => Some(arg),
                    None if annotated && indent(l) > 0 => Some(v),
                    None => None,
                };
                if let Some(value) = value {
                    self.config_defaults.entry(key).or_insert(value.trim());
                }
            }
        }
    }

    /// The classes the module at `attr` of any of `owners` may be, by its constructors.
    pub fn attr_ctors(&self, owners: &[&'s str], attr: &str) -> Vec<&'s str> {
        let mut out = Vec::new();
        for o in owners {
            if let Some(c) = self.classes.get(o)
                && let Some(ctors) = c.attrs.get(attr)
            {
                out.extend(ctors.iter().copied());
            }
        }
        out
    }

    /// The constructors of the module at a checkpoint path (`model.layers.{i}.self_attn.q_norm`)
    /// walked from `root` (the architecture's class) through `self.<attr>` assignments; when the
    /// walk loses its way, every class's `self.<last> = …`.
    pub fn module_ctors(&self, root: &str, path: &str) -> Vec<&'s str> {
        let renamed;
        let path = if self.renames.is_empty() {
            path
        } else {
            renamed = self.renames.module(path);
            renamed.as_str()
        };
        let segs: Vec<&str> = path
            .split('.')
            .filter(|s| !s.is_empty() && !s.starts_with('{') && s.parse::<u64>().is_err())
            .collect();
        let Some((last, inner)) = segs.split_last() else {
            return Vec::new();
        };
        let mut owners: Vec<&'s str> = self
            .classes
            .get_key_value(root)
            .map(|(k, _)| vec![*k])
            .unwrap_or_default();
        for seg in inner {
            let next: Vec<&'s str> = self
                .attr_ctors(&owners, seg)
                .into_iter()
                .filter(|c| self.classes.contains_key(c))
                .collect();
            owners = next;
            if owners.is_empty() {
                break;
            }
        }
        let found = self.attr_ctors(&owners, last);
        if !found.is_empty() {
            return found;
        }
        let all: Vec<&'s str> = self.classes.keys().copied().collect();
        self.attr_ctors(&all, last)
    }

    /// A class's body with its defined bases' bodies (three levels at most).
    pub fn class_text(&self, name: &str) -> String {
        let mut out = String::new();
        let mut at = vec![name.to_string()];
        for _ in 0..3 {
            let mut next = Vec::new();
            for n in &at {
                if let Some(c) = self.classes.get(n.as_str()) {
                    out.push_str(&c.body);
                    out.push('\n');
                    next.extend(c.bases.iter().map(|b| b.to_string()));
                }
            }
            at = next;
        }
        out
    }

    /// A class's bases, transitively (three levels at most), itself included.
    pub fn lineage(&self, name: &str) -> Vec<String> {
        let mut out = vec![name.to_string()];
        let mut at = vec![name.to_string()];
        for _ in 0..3 {
            let mut next = Vec::new();
            for n in &at {
                if let Some(c) = self.classes.get(n.as_str()) {
                    next.extend(c.bases.iter().map(|b| b.to_string()));
                }
            }
            out.extend(next.iter().cloned());
            at = next;
        }
        out
    }
}

/// `self.<attr> = <rhs>` in a class body, with the constructors the right-hand side calls.
fn assignments<'s>(lines: &[&'s str]) -> BTreeMap<&'s str, Vec<&'s str>> {
    let mut out: BTreeMap<&'s str, Vec<&'s str>> = BTreeMap::new();
    for (k, l) in lines.iter().enumerate() {
        let t = l.trim_start();
        let Some(rest) = t.strip_prefix("self.") else {
            continue;
        };
        let attr = ident_at(rest);
        let mut after = rest[attr.len()..].trim_start();
        if let Some(r) = after.strip_prefix(':') {
            match r.find('=') {
                Some(eq) => after = &r[eq..],
                None => continue,
            }
        }
        let Some(rhs) = after.strip_prefix('=') else {
            continue;
        };
        if rhs.starts_with('=') || attr.is_empty() {
            continue;
        }
        // The right-hand side runs until its brackets close.
        let mut depth: i64 = 0;
        let mut ctors = Vec::new();
        let mut piece: &'s str = rhs;
        for n in 0..MAX_RHS_LINES {
            ctors.extend(calls(piece).into_iter().filter_map(|c| {
                let upper = |s: &str| s.chars().next().is_some_and(|ch| ch.is_ascii_uppercase());
                let base = c.rsplit('.').next().unwrap_or(c);
                if upper(base) {
                    return Some(c);
                }
                // A factory on a class builds that class:
                // `Kimi_K25VisionModel._from_config(config.vision_config)`.
                let (class, method) = c.split_once('.')?;
                (upper(class) && matches!(method, "_from_config" | "from_config")).then_some(class)
            }));
            for ch in piece.chars() {
                match ch {
                    '(' | '[' | '{' => depth += 1,
                    ')' | ']' | '}' => depth -= 1,
                    _ => {}
                }
            }
            if depth <= 0 {
                break;
            }
            match lines.get(k + n + 1) {
                Some(next) => piece = next,
                None => break,
            }
        }
        out.entry(attr).or_default().extend(ctors);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    const SRC: &str = r#"
from torch import nn

class FooRMSNorm(nn.Module):
    def __init__(self, dim):
        super().__init__()
        self.weight = nn.Parameter(torch.zeros(dim))

    def forward(self, x):
        return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True)) * (1.0 + self.weight)


class FooAttention(nn.Module):
    def __init__(self, config):
        self.q_norm = FooRMSNorm(config.head_dim)
        self.k_proj: nn.Linear = nn.Linear(
            config.hidden_size,
            config.head_dim,
        )


class FooLayer(nn.Module):
    def __init__(self, config):
        self.self_attn = FooAttention(config)
        self.input_layernorm = nn.LayerNorm(config.hidden_size)


class FooModel(nn.Module):
    def __init__(self, config):
        self.layers = nn.ModuleList(
            [FooLayer(config, i) for i in range(config.num_hidden_layers)]
        )
        self.norm = FooRMSNorm(config.hidden_size)


class FooForCausalLM(nn.Module):
    def __init__(self, config):
        self.model = FooModel(config)


def apply_rotary_pos_emb(q, k, cos, sin):
    return q * cos + rotate_half(q) * sin
"#;

    #[test]
    fn walks_module_paths() {
        let mut m = BTreeMap::new();
        m.insert("modeling_foo.py".to_string(), SRC.to_string());
        m.insert(
            "configuration_foo.py".to_string(),
            "class FooConfig:\n    def __init__(\n        self,\n        rope_interleave=True,\n        head_dim: Optional[int] = 128,\n    ):\n".to_string(),
        );
        m.insert(
            "configuration_bar.py".to_string(),
            "class BarConfig(PreTrainedConfig):\n    model_type = \"bar\"\n    qk_norm: bool | None = False\n".to_string(),
        );
        let sk = Skeleton::read(&m, &crate::conversion::Renames::of(&m));
        // Transformers-5 configurations declare defaults as dataclass fields.
        assert_eq!(sk.config_defaults["qk_norm"], "False");
        assert!(!sk.config_defaults.contains_key("model_type"));
        assert_eq!(
            sk.module_ctors("FooForCausalLM", "model.layers.{i}.self_attn.q_norm"),
            vec!["FooRMSNorm"]
        );
        assert_eq!(
            sk.module_ctors("FooForCausalLM", "model.layers.3.input_layernorm"),
            vec!["nn.LayerNorm"]
        );
        assert_eq!(
            sk.module_ctors("FooForCausalLM", "model.layers.{i}.self_attn.k_proj"),
            vec!["nn.Linear"]
        );
        // An unknown root falls back on every class's attr of that name.
        assert_eq!(sk.module_ctors("Nope", "x.norm"), vec!["FooRMSNorm"]);
        assert!(sk.functions["apply_rotary_pos_emb"].contains("rotate_half"));
        assert_eq!(sk.config_defaults["rope_interleave"], "True");
        assert_eq!(sk.config_defaults["head_dim"], "128");
        assert!(sk.class_text("FooRMSNorm").contains("1.0 + self.weight"));
    }

    #[test]
    fn a_factory_on_a_class_builds_that_class() {
        let src = "class Tower(nn.Module):\n    pass\n\n\nclass Composite(nn.Module):\n    def __init__(self, config):\n        self.vision_tower = Tower._from_config(config.vision_config)\n        self.language_model = AutoModel.from_config(config.text_config)\n        self.helper = Tower.build_helper(config)\n";
        let mut m = BTreeMap::new();
        m.insert("modeling_c.py".to_string(), src.to_string());
        let sk = Skeleton::read(&m, &crate::conversion::Renames::of(&m));
        assert_eq!(sk.module_ctors("Composite", "vision_tower"), vec!["Tower"]);
        // A class the source does not define is named as written; another method is no
        // constructor.
        assert_eq!(
            sk.module_ctors("Composite", "language_model"),
            vec!["AutoModel"]
        );
        assert!(sk.module_ctors("Composite", "helper").is_empty());
    }

    #[test]
    fn checkpoint_names_are_looked_up_under_the_load_time_renames() {
        let mut m = BTreeMap::new();
        m.insert("modeling_foo.py".to_string(), SRC.to_string());
        // The checkpoint says `model.layers.N.attn.qn`; transformers loads it as self_attn.q_norm.
        m.insert(
            crate::conversion::CONVERSION_FILE.to_string(),
            r#""foo": [
                WeightRenaming(source_patterns=r"\.attn\.", target_patterns=r".self_attn."),
                WeightRenaming(source_patterns=r"\.qn\.", target_patterns=r".q_norm."),
            ]"#
            .to_string(),
        );
        let sk = Skeleton::read(&m, &crate::conversion::Renames::of(&m));
        assert_eq!(
            sk.module_ctors("FooForCausalLM", "model.layers.{i}.attn.qn"),
            vec!["FooRMSNorm"]
        );
        // The renames are no module of the source.
        assert!(!sk.classes.keys().any(|c| c.contains("WeightRenaming")));
    }

    #[test]
    fn hostile_text_is_bounded() {
        let mut m = BTreeMap::new();
        let deep = format!("class A:\n    self.x = {}\n", "(".repeat(100_000));
        m.insert("modeling_x.py".to_string(), deep);
        let sk = Skeleton::read(&m, &crate::conversion::Renames::of(&m));
        assert!(sk.classes.contains_key("A"));
        assert!(sk.module_ctors("A", "x").is_empty());
    }
}
