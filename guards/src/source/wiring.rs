//! A layer's wiring compared with the forward source (O008, O009): what each norm and each
//! filled slot (the attention, the MLP) is applied to, where each residual add takes its
//! operands from, and what the layer returns.
//!
//! Both sides are reduced to the same small terms: the layer's input, `self.<module>(<term>)`,
//! the sum of two terms, and everything else (opaque). A block's template gives its terms from
//! its graph; the source's from the straight-line statements of the `forward` of the one class
//! that calls every module the block names. Only terms known on both sides are compared: a
//! value the reader cannot follow (assigned under an `if`, computed by an op other than a norm,
//! a slot or an add, a module called inside a larger expression) is not an error but a line of
//! [`Wiring::unverified`], which the review is given to check by hand.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt;
use std::ops::Range;

use harch_engine::diag::Location;
use harch_engine::ir::{BlockIr, ComponentIr, FillIr, ModelIr, NodeIr, NodeKind};

use crate::conversion::Renames;
use crate::pysrc::expr::calls;
use crate::pysrc::{Kind, Module, Sources, Tok};
use crate::report::Diagnostic;

/// Nesting of a followed expression.
const MAX_DEPTH: usize = 16;

#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord)]
enum Term {
    Input,
    Module(String, Box<Term>),
    /// Operands sorted: `a + b` is `b + a`.
    Add(Vec<Term>),
    /// The output of a module whose own argument is compared on its own (see [`Term::local`]).
    Out(String),
    Opaque,
}

impl Term {
    fn known(&self) -> bool {
        match self {
            Term::Input => true,
            Term::Module(_, a) => a.known(),
            Term::Add(v) => v.iter().all(Term::known),
            Term::Out(_) => true,
            Term::Opaque => false,
        }
    }
    /// The term as one step of the layer sees it: a module's output stands for itself, its
    /// argument being compared where that module is. One misplaced module is then one error at
    /// that module, not one at every value computed after it.
    fn local(&self) -> Term {
        match self {
            Term::Module(m, _) => Term::Out(m.clone()),
            Term::Add(v) => {
                let mut v: Vec<Term> = v.iter().map(Term::local).collect();
                v.sort();
                Term::Add(v)
            }
            t => t.clone(),
        }
    }
    fn add(a: Term, b: Term) -> Term {
        let mut v = vec![a, b];
        v.sort();
        Term::Add(v)
    }
}

impl fmt::Display for Term {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Term::Input => write!(f, "the layer's input"),
            Term::Module(m, a) => write!(f, "{m}({a})"),
            Term::Add(v) => write!(f, "({} + {})", v[0], v[1]),
            Term::Out(m) => write!(f, "{m}(…)"),
            Term::Opaque => write!(f, "…"),
        }
    }
}

/// What the comparison found.
#[derive(Default)]
pub struct Wiring {
    pub errors: Vec<Diagnostic>,
    /// Blocks (or parts of them) whose wiring the reader could not follow in the source.
    pub unverified: Vec<String>,
}

/// A block's terms: each module's argument (with the node that applies it) and the output.
struct SpecSide<'a> {
    calls: BTreeMap<String, (Term, &'a NodeIr, bool)>,
    output: (Term, Option<&'a NodeIr>),
}

/// A norm that is a module call: one with a weight (`weight: false` is a function, not a
/// module of the layer).
fn is_norm_module(n: &NodeIr, op: &str) -> bool {
    let weightless = n
        .args
        .get("weight")
        .is_some_and(|a| a.raw.trim() == "false");
    matches!(op, "rmsnorm" | "layernorm") && !weightless
}

/// The module attribute a checkpoint path names once transformers 5's load-time renames ran
/// (DeepSeek-V4's `attn` is `self_attn`): the renames run over the path as a layer's, and the
/// part after the layer index is kept. A path no rename touches is itself.
fn attribute(renames: &Renames, path: &str) -> String {
    const LAYER: &str = "layers.0.";
    if path == "." || path.contains('{') || renames.is_empty() {
        return path.to_string();
    }
    let full = renames.module(&format!("model.{LAYER}{path}"));
    match full.rfind(LAYER) {
        Some(at) => full[at + LAYER.len()..].to_string(),
        None => path.to_string(),
    }
}

/// The attribute a slot's checkpoint path names, where the renames move the slot only together
/// with a child (MiniMax-M3: `.block_sparse_moe.(experts|gate|shared_experts).` -> `.mlp.\1.`):
/// each child the filling component stores under it is renamed in place, and when every such
/// child lands under one new parent with its own name kept, that parent is the attribute. A child
/// left where it was, or children that disagree, keep the path as it is.
fn slot_attribute(renames: &Renames, path: &str, children: &BTreeSet<&str>) -> String {
    const LAYER: &str = "model.layers.0.";
    let direct = attribute(renames, path);
    if direct != path || path == "." || path.contains('{') {
        return direct;
    }
    let mut parents = children.iter().map(|child| {
        let leaf = format!(".{child}.weight");
        let full = renames.apply(&format!("{LAYER}{path}{leaf}"));
        full.strip_suffix(&leaf)
            .and_then(|m| m.strip_prefix(LAYER))
            .map(str::to_string)
    });
    match parents.next().flatten() {
        Some(first) if first != path && parents.all(|p| p.as_deref() == Some(&first)) => first,
        _ => direct,
    }
}

/// The first path segment of everything a component stores under its own path: its nodes'
/// paths, the leaves of a node stored at the component's path (`path: "."`), and nested
/// components and leaf-bearing nodes stored under their ids.
fn stored_children(c: Option<&ComponentIr>) -> BTreeSet<&str> {
    c.into_iter()
        .flat_map(|c| &c.nodes)
        .flat_map(|n| match n.path.as_deref() {
            Some(".") => n.leaves.values().map(String::as_str).collect::<Vec<_>>(),
            Some(p) => vec![p],
            None if matches!(n.kind, NodeKind::Component { .. }) || !n.leaves.is_empty() => {
                vec![n.id.as_str()]
            }
            None => vec![],
        })
        .filter_map(|p| p.split('.').next())
        .filter(|c| !c.is_empty() && !c.contains('{'))
        .collect()
}

fn spec_side<'a>(ir: &'a ModelIr, block: &'a BlockIr, renames: &Renames) -> Option<SpecSide<'a>> {
    let t = ir.component(&block.template)?;
    let mut terms: BTreeMap<&str, Term> = BTreeMap::new();
    if let Some(first) = t.inputs.first() {
        terms.insert(first, Term::Input);
    }
    let mut out = SpecSide {
        calls: BTreeMap::new(),
        output: (Term::Opaque, None),
    };
    let get = |terms: &BTreeMap<&str, Term>, n: &NodeIr, k: usize| -> Term {
        n.inputs
            .get(k)
            .and_then(|i| terms.get(i.as_str()).cloned())
            .unwrap_or(Term::Opaque)
    };
    for n in &t.nodes {
        let own_path = attribute(renames, n.path.as_deref().unwrap_or(&n.id));
        let term = if n.when.is_some() || n.instances.is_some() {
            Term::Opaque
        } else {
            match &n.kind {
                NodeKind::Op(spec) if is_norm_module(n, spec.name) && own_path != "." => {
                    let arg = get(&terms, n, 0);
                    out.calls.insert(own_path.clone(), (arg.clone(), n, true));
                    Term::Module(own_path, Box::new(arg))
                }
                NodeKind::Op(spec) if spec.name == "add" && n.inputs.len() == 2 => {
                    Term::add(get(&terms, n, 0), get(&terms, n, 1))
                }
                NodeKind::Slot(slot) => {
                    let path = match block.fills.get(slot) {
                        Some(f @ FillIr { path: Some(p), .. }) => slot_attribute(
                            renames,
                            p,
                            &stored_children(ir.component(&f.name).map(|c| &**c)),
                        ),
                        _ => own_path,
                    };
                    if path == "." || path.contains('{') {
                        Term::Opaque
                    } else {
                        let arg = get(&terms, n, 0);
                        out.calls.insert(path.clone(), (arg.clone(), n, false));
                        Term::Module(path, Box::new(arg))
                    }
                }
                _ => Term::Opaque,
            }
        };
        terms.insert(&n.id, term);
    }
    if let Some(o) = t.outputs.first() {
        out.output = (
            terms.get(o.as_str()).cloned().unwrap_or(Term::Opaque),
            t.nodes.iter().find(|n| &n.id == o),
        );
    }
    Some(out)
}

/// The source's terms of one `forward`: each module's arguments (every call) and the return.
struct SourceSide {
    calls: BTreeMap<String, Vec<Term>>,
    output: Term,
    /// Modules called where the reader does not follow (inside a larger expression or a block).
    unfollowed: BTreeSet<String>,
}

fn forward_params(m: &Module, def: usize) -> Vec<String> {
    let s = &m.stmts[def];
    let Some(open) = (s.tokens.clone()).find(|&k| m.tok(k) == "(") else {
        return vec![];
    };
    let Some(close) = m.matching_close(open, s.tokens.end) else {
        return vec![];
    };
    m.split_top(open + 1..close)
        .into_iter()
        .filter(|r| !r.is_empty())
        .map(|r| m.tok(r.start).to_string())
        .collect()
}

/// The attribute a `self.<name>(...)` call names (a direct child module, not `self.a.b`).
fn self_module(callee: &str) -> Option<&str> {
    callee.strip_prefix("self.").filter(|n| !n.contains('.'))
}

/// `self.<name>` called in a range, by attribute name.
fn self_calls(m: &Module, r: Range<usize>) -> Vec<String> {
    calls(m, r)
        .into_iter()
        .filter_map(|c| self_module(&c.callee).map(str::to_string))
        .collect()
}

fn term_of(
    m: &Module,
    r: Range<usize>,
    vars: &BTreeMap<String, Term>,
    side: &mut SourceSide,
    depth: usize,
) -> Term {
    if depth > MAX_DEPTH || r.is_empty() {
        return Term::Opaque;
    }
    let mut r = m.strip_brackets(r);
    // `self.attn(...)[0]`: the first of its outputs.
    if r.len() >= 4 && m.tok(r.end - 1) == "]" && m.tok(r.end - 2) == "0" && m.tok(r.end - 3) == "["
    {
        r = r.start..r.end - 3;
    }
    if r.len() == 1 && m.tokens[r.start].kind == Tok::Name {
        return vars.get(m.tok(r.start)).cloned().unwrap_or(Term::Opaque);
    }
    // A sum of exactly two operands at depth 0.
    let mut depth0 = 0i32;
    let mut plus = Vec::new();
    for k in r.clone() {
        match m.tok(k) {
            "(" | "[" | "{" => depth0 += 1,
            ")" | "]" | "}" => depth0 -= 1,
            "+" if depth0 == 0 => plus.push(k),
            "-" | "*" | "/" | "@" | "if" | "%" if depth0 == 0 => return opaque(m, r, side),
            _ => {}
        }
    }
    if plus.len() == 1 {
        let a = term_of(m, r.start..plus[0], vars, side, depth + 1);
        let b = term_of(m, plus[0] + 1..r.end, vars, side, depth + 1);
        return Term::add(a, b);
    }
    if !plus.is_empty() {
        return opaque(m, r, side);
    }
    let cs = calls(m, r.clone());
    if let Some(c) = cs.first()
        && c.span == r
        && let Some(name) = self_module(&c.callee)
    {
        // The value it is applied to: the first positional argument (not `*args`/`**kwargs`),
        // or the keyword the layers pass it by.
        let arg = c
            .positional()
            .find(|a| !matches!(m.tok(a.value.start), "*" | "**"))
            .or_else(|| c.keyword("hidden_states"))
            .or_else(|| c.keyword("x"))
            .map(|a| a.value.clone());
        let arg = match arg {
            Some(a) => term_of(m, a, vars, side, depth + 1),
            None => Term::Opaque,
        };
        side.calls
            .entry(name.to_string())
            .or_default()
            .push(arg.clone());
        return Term::Module(name.to_string(), Box::new(arg));
    }
    opaque(m, r, side)
}

/// An expression not followed: the modules it calls are not compared.
fn opaque(m: &Module, r: Range<usize>, side: &mut SourceSide) -> Term {
    side.unfollowed.extend(self_calls(m, r));
    Term::Opaque
}

fn source_side(m: &Module, def: usize) -> SourceSide {
    let mut side = SourceSide {
        calls: BTreeMap::new(),
        output: Term::Opaque,
        unfollowed: BTreeSet::new(),
    };
    let mut vars: BTreeMap<String, Term> = BTreeMap::new();
    if let Some(first) = forward_params(m, def).into_iter().find(|p| p != "self") {
        vars.insert(first, Term::Input);
    }
    let body = m.body(def);
    for k in body {
        let s = &m.stmts[k];
        let straight = s.parent == Some(def);
        match &s.kind {
            Kind::Assign {
                targets,
                value,
                aug,
            } => {
                let names = m.targets(targets.clone());
                let Some(first) = names.first().map(|n| n.to_string()) else {
                    side.unfollowed.extend(self_calls(m, s.tokens.clone()));
                    continue;
                };
                let term = if !straight {
                    opaque(m, s.tokens.clone(), &mut side)
                } else if *aug {
                    // The operator is the token before the value.
                    if m.tok(value.start - 1) == "+=" {
                        let prev = vars.get(&first).cloned().unwrap_or(Term::Opaque);
                        let v = term_of(m, value.clone(), &vars, &mut side, 0);
                        Term::add(prev, v)
                    } else {
                        opaque(m, s.tokens.clone(), &mut side)
                    }
                } else {
                    term_of(m, value.clone(), &vars, &mut side, 0)
                };
                // Every other name a tuple target binds is not followed.
                for n in names.iter().skip(1) {
                    vars.insert(n.to_string(), Term::Opaque);
                }
                vars.insert(first, term);
            }
            Kind::Return(r) if straight => {
                let first = m.split_top(r.clone()).into_iter().next();
                side.output = match first {
                    Some(f) => term_of(m, f, &vars, &mut side, 0),
                    None => Term::Opaque,
                };
            }
            Kind::Def(_) | Kind::Class(_) => break,
            _ => side.unfollowed.extend(self_calls(m, s.tokens.clone())),
        }
    }
    side
}

/// The tokens of a compound statement's body.
fn body_tokens(m: &Module, def: usize) -> Range<usize> {
    let body = m.body(def);
    match (
        m.stmts.get(body.start),
        body.end.checked_sub(1).and_then(|e| m.stmts.get(e)),
    ) {
        (Some(first), Some(last)) if !body.is_empty() => first.tokens.start..last.tokens.end,
        _ => 0..0,
    }
}

/// A class's `forward` (module, def) and the modules it calls, read once for every block.
struct Forward {
    at: (usize, usize),
    called: BTreeSet<String>,
}

fn forwards(src: &Sources) -> Vec<Forward> {
    let mut out = Vec::new();
    for (mi, m) in src.modules.iter().enumerate() {
        for (def, name, class) in m.defs() {
            if name == "forward" && class.is_some() {
                out.push(Forward {
                    at: (mi, def),
                    called: self_calls(m, body_tokens(m, def)).into_iter().collect(),
                });
            }
        }
    }
    out
}

/// The one `forward` (module, def) that calls every module in `wanted`, if exactly one does.
fn forward_calling(fwds: &[Forward], wanted: &BTreeSet<&str>) -> Result<(usize, usize), usize> {
    let found: Vec<(usize, usize)> = fwds
        .iter()
        .filter(|f| wanted.iter().all(|w| f.called.contains(*w)))
        .map(|f| f.at)
        .collect();
    match found.as_slice() {
        [one] => Ok(*one),
        _ => Err(found.len()),
    }
}

/// Compares each block of each stack with the source's layer forward.
pub fn check(ir: &ModelIr, src: &Sources, renames: &Renames) -> Wiring {
    let mut w = Wiring::default();
    let fwds = forwards(src);
    // Blocks of one layer class share its forward: each is read into terms once.
    let mut sides: BTreeMap<(usize, usize), SourceSide> = BTreeMap::new();
    let mut blocks: Vec<&str> = Vec::new();
    for n in &ir.graph {
        if let NodeKind::Stack(st) = &n.kind {
            for s in &st.schedule {
                if !blocks.contains(&s.block.as_str()) {
                    blocks.push(&s.block);
                }
            }
        }
    }
    for name in blocks {
        let Some(block) = ir.blocks.get(name) else {
            continue;
        };
        let Some(spec) = spec_side(ir, block, renames) else {
            continue;
        };
        if spec.calls.is_empty() {
            w.unverified.push(format!("block `{name}`: its template names no norm or slot module the source's forward could be read against"));
            continue;
        }
        let wanted: BTreeSet<&str> = spec.calls.keys().map(String::as_str).collect();
        let (mi, def) = match forward_calling(&fwds, &wanted) {
            Ok(at) => at,
            Err(n) => {
                let list: Vec<&str> = wanted.iter().copied().collect();
                w.unverified.push(format!(
                    "block `{name}`: {} forward() calls all of {}; its wiring is not compared with the source",
                    if n == 0 { "no" } else { "more than one" },
                    list.join(", ")
                ));
                continue;
            }
        };
        let m = &src.modules[mi];
        let side = sides
            .entry((mi, def))
            .or_insert_with(|| source_side(m, def));
        let class = m.class_of(def).unwrap_or("?");
        let mut skipped: Vec<String> = Vec::new();
        for (module, (want, node, norm)) in &spec.calls {
            let got = match side.calls.get(module).map(Vec::as_slice) {
                Some([one]) if !side.unfollowed.contains(module) => one,
                _ => {
                    skipped.push(module.clone());
                    continue;
                }
            };
            let (want, got) = (want.local(), got.local());
            if !want.known() || !got.known() {
                skipped.push(module.clone());
                continue;
            }
            if want != got {
                w.errors.push(mismatch(
                    name, class, &node.loc, &node.id, module, *norm, &want, &got,
                ));
            }
        }
        let (want, node) = &spec.output;
        let (want, got) = (want.local(), side.output.local());
        match node {
            Some(node) if want.known() && got.known() => {
                if want != got {
                    w.errors.push(
                        Diagnostic::new("source", super::code::RESIDUAL_SOURCE, format!("block `{name}` returns {want}, but {class}.forward returns {got}"), located(&node.loc, &node.id))
                            .hint("take each residual add's operands where forward() does: the value saved before the norm (`residual = hidden_states`) and the module's output"),
                    );
                }
            }
            _ => skipped.push("the layer's output".into()),
        }
        if !skipped.is_empty() {
            w.unverified.push(format!(
                "block `{name}` against {class}.forward: the reader does not follow {}",
                skipped.join(", ")
            ));
        }
    }
    w
}

fn located(loc: &Location, id: &str) -> Location {
    let mut l = loc.clone();
    if l.node.is_none() {
        l.node = Some(id.to_string());
    }
    l
}

#[allow(clippy::too_many_arguments)]
fn mismatch(
    block: &str,
    class: &str,
    loc: &Location,
    id: &str,
    module: &str,
    norm: bool,
    want: &Term,
    got: &Term,
) -> Diagnostic {
    // A different sum is a residual taken from the wrong value; otherwise the module is placed
    // elsewhere in the layer.
    let residual = matches!(want, Term::Add(_)) && matches!(got, Term::Add(_));
    let (code, what) = if residual {
        (
            super::code::RESIDUAL_SOURCE,
            "a residual sum of other values",
        )
    } else {
        (
            super::code::MODULE_PLACEMENT,
            if norm {
                "another place in the layer"
            } else {
                "another value"
            },
        )
    };
    Diagnostic::new(
        "source",
        code,
        format!("block `{block}`: `{module}` is applied to {want}, but {class}.forward applies it to {got} ({what})"),
        located(loc, id),
    )
    .hint(format!("wire `{id}` as forward() does: `self.{module}(...)` takes {got}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    const LAYER: &str = "class Layer(nn.Module):
    def forward(self, hidden_states, mask=None):
        residual = hidden_states
        hidden_states = self.input_layernorm(hidden_states)
        hidden_states, _ = self.self_attn(hidden_states=hidden_states, mask=mask)
        hidden_states = residual + hidden_states
        residual = hidden_states
        hidden_states = self.post_attention_layernorm(hidden_states)
        hidden_states = self.mlp(hidden_states)
        hidden_states = residual + hidden_states
        return hidden_states
";

    fn side(text: &str) -> SourceSide {
        let name = "m.py".to_string();
        let text = text.to_string();
        let files = [(&name, &text)];
        let src = Sources::read(&files);
        let m = &src.modules[0];
        let (def, _, _) = m.defs().find(|(_, n, _)| *n == "forward").unwrap();
        source_side(m, def)
    }

    #[test]
    fn a_pre_norm_layer_reads_as_terms() {
        let s = side(LAYER);
        let norm = Term::Module("input_layernorm".into(), Box::new(Term::Input));
        let attn = Term::Module("self_attn".into(), Box::new(norm));
        let res = Term::add(Term::Input, attn);
        assert_eq!(
            s.calls["post_attention_layernorm"],
            std::slice::from_ref(&res)
        );
        let mlp = Term::Module(
            "mlp".into(),
            Box::new(Term::Module(
                "post_attention_layernorm".into(),
                Box::new(res.clone()),
            )),
        );
        assert_eq!(s.output, Term::add(res, mlp));
        assert!(s.unfollowed.is_empty());
    }

    #[test]
    fn checkpoint_paths_are_read_as_the_attributes_they_load_into() {
        // Entries in the format transformers 5 writes (written for this test).
        let r = Renames::read(
            r#"WeightRenaming(source_patterns=r"\.attn\.", target_patterns=r".self_attn."),
            WeightRenaming(source_patterns=r"^embed\.weight", target_patterns="embed_tokens.weight"),"#,
        );
        assert_eq!(attribute(&r, "attn"), "self_attn");
        assert_eq!(attribute(&r, "attn_norm"), "attn_norm");
        assert_eq!(attribute(&r, "."), ".");
        assert_eq!(attribute(&Renames::default(), "attn"), "attn");
    }

    #[test]
    fn a_slot_moved_with_its_children_is_read_where_they_all_land() {
        // Entries in the format transformers 5 writes (written for this test).
        let r = Renames::read(
            r#"WeightRenaming(source_patterns=r"\.moe\.(experts|gate)\.", target_patterns=r"\.mlp\.\1\."),
            WeightRenaming(source_patterns=r"\.split\.gate\.", target_patterns=r".router."),
            WeightRenaming(source_patterns=r"\.half\.gate\.", target_patterns=r".mlp.gate."),"#,
        );
        let kids = |k: &[&'static str]| k.iter().copied().collect::<BTreeSet<&str>>();
        assert_eq!(
            slot_attribute(&r, "moe", &kids(&["experts", "gate"])),
            "mlp"
        );
        // A child renamed away (not kept under a parent) says nothing of the slot.
        assert_eq!(
            slot_attribute(&r, "split", &kids(&["gate", "experts"])),
            "split"
        );
        // Children that land under different parents keep the path.
        assert_eq!(
            slot_attribute(&r, "half", &kids(&["gate", "experts"])),
            "half"
        );
        assert_eq!(slot_attribute(&r, "moe", &kids(&[])), "moe");
    }

    #[test]
    fn a_local_term_stops_at_the_modules_it_reads() {
        let s = side(LAYER);
        let got = s.calls["post_attention_layernorm"][0].local();
        let attn = Term::Out("self_attn".into());
        assert_eq!(got, Term::add(Term::Input, attn.clone()));
        assert_eq!(got.to_string(), "(the layer's input + self_attn(…))");
        // The same sum reached through a differently wired attention reads the same locally.
        let other = Term::add(
            Term::Input,
            Term::Module("self_attn".into(), Box::new(Term::Input)),
        );
        assert_eq!(other.local(), got);
    }

    #[test]
    fn what_the_reader_cannot_follow_is_opaque_not_wrong() {
        let s = side(&LAYER.replace(
            "        hidden_states, _ = self.self_attn(hidden_states=hidden_states, mask=mask)\n",
            "        if mask is not None:\n            hidden_states, _ = self.self_attn(hidden_states, mask)\n",
        ));
        assert!(s.unfollowed.contains("self_attn"));
        assert!(!s.output.known());
        // A module inside a larger expression is not followed either.
        let s = side(&LAYER.replace(
            "hidden_states = self.mlp(hidden_states)",
            "hidden_states = self.dropout(self.mlp(hidden_states)) * 2",
        ));
        assert!(s.unfollowed.contains("mlp"));
    }

    #[test]
    fn hostile_source_is_bounded() {
        let deep = format!(
            "class L:\n    def forward(self, x):\n        y = {}x{}\n        return y\n",
            "(".repeat(5000),
            ")".repeat(5000)
        );
        let s = side(&deep);
        assert!(!s.output.known());
        let sum = format!(
            "class L:\n    def forward(self, x):\n        y = {}\n        return y\n",
            vec!["x"; 3000].join(" + ")
        );
        let _ = side(&sum);
    }
}
