//! The parts of a composite checkpoint in its forward source: the classes an encoder (a vision
//! tower) is built from, and the rest (the text model). A rotary function the tower calls says
//! nothing about the text model's rope, and the other way round (Kimi-K2.6's MoonViT rotates
//! halves, its DeepSeek-V3 text model adjacent pairs), so the guards that read the source's
//! rope read each part's own code.
//!
//! The tower's classes are found from the checkpoint: the modules its weights sit under that no
//! text-model weight shares (`model.visual`, `vision_tower`, `mm_projector`), the classes the
//! source builds there, and every class those build in turn. Everything else is the text
//! model's (its stack may be built through `AutoModel.from_config`, which names no class).

use std::collections::BTreeSet;

use harch_engine::Analysis;
use harch_engine::analysis::NodeRow;

use super::skeleton::{Skeleton, calls};

/// How deep the walk through `self.<attr> = Class(...)` goes from a tower's module.
const MAX_DEPTH: usize = 8;
/// The most classes one part may have (the text is hostile input).
const MAX_CLASSES: usize = 4096;

/// Which part a row belongs to.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum Part {
    Text,
    Tower,
}

impl Part {
    pub fn of(n: &NodeRow) -> Part {
        if n.per_image.is_some() {
            Part::Tower
        } else {
            Part::Text
        }
    }
    pub fn say(self) -> &'static str {
        match self {
            Part::Text => "the text model",
            Part::Tower => "the vision tower",
        }
    }
}

/// The source's lines split by part: each `(indent, line)` of the class bodies of that part.
pub struct PartLines<'s> {
    pub text: Vec<(usize, &'s str)>,
    pub tower: Vec<(usize, &'s str)>,
    /// Whether the checkpoint has a tower at all (else `text` is every class's lines).
    pub has_tower: bool,
}

impl<'s> PartLines<'s> {
    pub fn get(&self, p: Part) -> &[(usize, &'s str)] {
        match p {
            Part::Text => &self.text,
            Part::Tower => &self.tower,
        }
    }
}

/// The class a constructor call names: `Qwen3VisionBlock(...)`, or the class of a
/// `Kimi_K25VisionModel._from_config(...)` factory call.
fn class_of<'s>(sk: &Skeleton<'s>, ctor: &str) -> Option<&'s str> {
    if let Some((k, _)) = sk.classes.get_key_value(ctor) {
        return Some(*k);
    }
    let head = ctor.split('.').next()?;
    sk.classes.get_key_value(head).map(|(k, _)| *k)
}

fn prefixes(module: &str) -> Vec<String> {
    let segs: Vec<&str> = module.split('.').collect();
    (1..=segs.len()).map(|k| segs[..k].join(".")).collect()
}

/// The classes the source builds for the tower: at each of its modules no text weight shares,
/// then everything those classes build.
pub fn tower_classes<'s>(a: &Analysis, sk: &Skeleton<'s>, root: &str) -> BTreeSet<&'s str> {
    let module = |name: &str| name.rsplit_once('.').map(|(m, _)| m.to_string());
    let mut text_prefixes: BTreeSet<String> = BTreeSet::new();
    let mut tower_modules: BTreeSet<String> = BTreeSet::new();
    for w in &a.weights {
        let Some(m) = module(&w.name) else { continue };
        if a.nodes[w.node].per_image.is_some() {
            tower_modules.insert(m);
        } else {
            text_prefixes.extend(prefixes(&m));
        }
    }
    // The outermost module of each tower weight that no text weight sits under.
    let starts: BTreeSet<String> = tower_modules
        .iter()
        .filter_map(|m| prefixes(m).into_iter().find(|p| !text_prefixes.contains(p)))
        .collect();
    let mut found: BTreeSet<&'s str> = BTreeSet::new();
    let mut frontier: Vec<&'s str> = starts
        .iter()
        .flat_map(|p| sk.module_ctors(root, p))
        .filter_map(|c| class_of(sk, c))
        .collect();
    for _ in 0..MAX_DEPTH {
        let mut next = Vec::new();
        for c in frontier {
            if found.len() >= MAX_CLASSES || !found.insert(c) {
                continue;
            }
            if let Some(class) = sk.classes.get(c) {
                next.extend(
                    class
                        .attrs
                        .values()
                        .flatten()
                        .filter_map(|ctor| class_of(sk, ctor)),
                );
            }
        }
        frontier = next;
    }
    found
}

/// The class-body lines of each part. A tower class's bases count as the tower's too (its
/// forward may be inherited); a base the text model's classes share stays theirs as well.
pub fn split<'k>(a: &Analysis, sk: &'k Skeleton<'_>, root: &str) -> PartLines<'k> {
    let tower = tower_classes(a, sk, root);
    let mut tower_all: BTreeSet<&str> = BTreeSet::new();
    for c in &tower {
        for b in sk.lineage(c) {
            if let Some(k) = class_of(sk, &b) {
                tower_all.insert(k);
            }
        }
    }
    let lines_of = |keep: &dyn Fn(&str) -> bool| -> Vec<(usize, &'k str)> {
        sk.classes
            .iter()
            .filter(|(name, _)| keep(name))
            .flat_map(|(_, c)| c.body.lines())
            .map(|l| (l.len() - l.trim_start().len(), l))
            .collect()
    };
    PartLines {
        text: lines_of(&|n| !tower.contains(n)),
        tower: lines_of(&|n| tower_all.contains(n)),
        has_tower: !tower.is_empty(),
    }
}

/// The text of a part's code: its class bodies and the bodies of the top-level functions they
/// call, two calls deep.
pub fn code_text(sk: &Skeleton, lines: &[(usize, &str)]) -> String {
    let mut out: String = lines.iter().map(|(_, l)| *l).collect::<Vec<_>>().join("\n");
    let mut seen: BTreeSet<&str> = BTreeSet::new();
    let mut frontier: Vec<&str> = lines.iter().flat_map(|(_, l)| calls(l)).collect();
    for _ in 0..2 {
        let mut next = Vec::new();
        for f in frontier {
            if let Some((k, body)) = sk.functions.get_key_value(f)
                && seen.insert(k)
            {
                out.push('\n');
                out.push_str(body);
                next.extend(calls(body));
            }
        }
        frontier = next;
    }
    out
}
