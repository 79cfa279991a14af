//! The walk: bind dims against a config, propagate shapes along `in:` edges through components,
//! blocks and layer stacks, and fill the analysis tables. One walk yields every number; run
//! with `symbolic: true` and the same walk also yields every formula.

use std::cell::RefCell;
use std::collections::{BTreeSet, HashMap};
use std::rc::Rc;

use indexmap::IndexMap;

use crate::analysis::*;
use crate::diag::{Location, SpecError, closest, code};
use crate::expr::{self, Env, EvalError, Expr, Val};
use crate::ir::*;
use crate::ops::{self, Args, OpError, Shape};
use crate::q::{Num, Q};

mod images;
mod streams;

/// The most layers one stack repeats: far above any real model, low enough that a config
/// with `num_hidden_layers: 1000000000` is a located error, not a walk that runs out of memory.
pub const MAX_REPEAT: i128 = 100_000;
/// The most instances (experts) one node stands for.
pub const MAX_INSTANCES: i128 = 1_000_000;

#[derive(Clone, Copy, Debug, Default)]
pub struct EvalOptions {
    /// Build formulas alongside values.
    pub symbolic: bool,
}

/// A resolution to count image inputs at, in place of each input's default; with `frames`, a
/// video of that many frames (for the inputs that take videos).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ImageSize {
    pub height: i128,
    pub width: i128,
    pub frames: Option<i128>,
}

impl ImageSize {
    /// `16x448x448`: a video of FRAMES frames of HEIGHTxWIDTH pixels.
    pub fn parse_video(s: &str) -> Result<ImageSize, String> {
        let bad =
            || format!("`{s}` is not a video size: write FRAMESxHEIGHTxWIDTH, e.g. 16x448x448");
        let (f, hw) = s.split_once(['x', 'X']).ok_or_else(bad)?;
        let frames = f.trim().parse::<i128>().map_err(|_| bad())?;
        if !(1..=1 << 20).contains(&frames) {
            return Err(format!("`{s}`: frames must be 1 to {}", 1 << 20));
        }
        let image: ImageSize = hw.parse().map_err(|_| bad())?;
        Ok(ImageSize {
            frames: Some(frames),
            ..image
        })
    }
}

impl std::str::FromStr for ImageSize {
    type Err = String;

    /// `448x448` (height x width, pixels).
    fn from_str(s: &str) -> Result<ImageSize, String> {
        let bad =
            || format!("`{s}` is not an image size: write HEIGHTxWIDTH in pixels, e.g. 448x448");
        let (h, w) = s.split_once(['x', 'X']).ok_or_else(bad)?;
        let (Ok(height), Ok(width)) = (h.trim().parse::<i128>(), w.trim().parse::<i128>()) else {
            return Err(bad());
        };
        if height <= 0 || width <= 0 || height > 1 << 20 || width > 1 << 20 {
            return Err(format!("`{s}`: each side must be 1 to {} pixels", 1 << 20));
        }
        Ok(ImageSize {
            height,
            width,
            frames: None,
        })
    }
}

/// Evaluate a loaded spec against a config.json value.
pub fn evaluate(ir: &ModelIr, config: &serde_json::Value, opts: EvalOptions) -> Analysis {
    evaluate_at(ir, config, opts, None)
}

/// Evaluate with image inputs at `image` (each input's default resolution when `None`).
pub fn evaluate_at(
    ir: &ModelIr,
    config: &serde_json::Value,
    opts: EvalOptions,
    image: Option<ImageSize>,
) -> Analysis {
    let mut w = Walker {
        ir,
        config,
        image,
        symbolic: opts.symbolic,
        out: Analysis {
            model: ir.name.clone(),
            symbolic: opts.symbolic,
            ..Default::default()
        },
        reads: RefCell::new(BTreeSet::new()),
        frames: Vec::new(),
        saved: HashMap::new(),
    };
    w.bind_dims();
    if w.out.errors.is_empty() {
        w.top_level();
    }
    w.out.config_reads = w.reads.into_inner();
    let mut out = w.out;
    out.set_read_caps();
    out
}

/// A value flowing along an edge: its per-token shape, the attention window it carries, and the
/// rows that produce it (one op, or every layer group's output for a stack).
#[derive(Clone, Debug)]
struct Flow {
    shape: Shape,
    window: Option<Q>,
    /// This value is a selection of so many positions (`topk_select`'s output).
    selection: Option<Q>,
    /// This value was computed over a selection of so many positions (an attention that
    /// took a selection, and what follows it inside the component).
    selected: Option<Q>,
    /// These values are one entry per so many tokens (a compressor's output, and what is
    /// computed from it token by token).
    compressed: Option<Q>,
    /// This value was computed by attending compressed entries, one per so many positions.
    stride: Option<Q>,
    /// Scores concatenated along the context axis: the key sets after the first, each with
    /// its own law (what follows them inside the component spans them all).
    joint: Vec<KeySpan>,
    from: Rc<[usize]>,
    /// Set on an encoder's values: the image input and its positions per image.
    image: Option<Rc<PerImage>>,
}

impl Flow {
    fn own_span(&self) -> KeySpan {
        KeySpan {
            window: self.window.clone(),
            selected: self.selected.clone(),
            stride: self.stride.clone(),
        }
    }
}

#[derive(Clone)]
struct Scope<'a> {
    env: Rc<HashMap<String, Q>>,
    /// Model dims plus the current block's binds: what a slot's filling component binds from.
    block_env: Rc<HashMap<String, Q>>,
    /// Checkpoint module path so far, with placeholders (`model.layers.{i}`).
    path: String,
    indices: Vec<(String, Vec<i128>)>,
    count: Q,
    active: Q,
    role: String,
    top_role: Option<String>,
    component: String,
    id: String,
    group: Option<String>,
    block: Option<&'a BlockIr>,
    phase: Phase,
    emit_storage: bool,
    /// Path segments renamed in checkpoint names below a fill's `rename:`.
    rename: Rc<Vec<(String, String)>>,
}

impl Scope<'_> {
    /// A node's own path (or leaf name) with this scope's renames applied segment by segment.
    fn renamed(&self, path: &str) -> String {
        if self.rename.is_empty() {
            return path.to_string();
        }
        path.split('.')
            .map(|seg| {
                self.rename
                    .iter()
                    .find(|(from, _)| from == seg)
                    .map_or(seg, |(_, to)| to.as_str())
            })
            .collect::<Vec<_>>()
            .join(".")
    }
}

struct Walker<'a> {
    ir: &'a ModelIr,
    config: &'a serde_json::Value,
    image: Option<ImageSize>,
    symbolic: bool,
    out: Analysis,
    reads: RefCell<BTreeSet<String>>,
    /// The streams of the stacks being walked, innermost last.
    frames: Vec<streams::Frame>,
    /// Append streams of the stacks already walked, by name.
    saved: HashMap<String, streams::Saved>,
}

struct ScopeEnv<'e> {
    env: &'e HashMap<String, Q>,
    config: &'e serde_json::Value,
    reads: &'e RefCell<BTreeSet<String>>,
    symbolic: bool,
}

impl Env for ScopeEnv<'_> {
    fn name(&self, name: &str) -> Result<Q, EvalError> {
        self.env
            .get(name)
            .cloned()
            .ok_or_else(|| EvalError::UnknownName(name.to_string()))
    }
    fn config(&self) -> &serde_json::Value {
        self.config
    }
    fn note_config(&self, path: &str) {
        self.reads.borrow_mut().insert(path.to_string());
    }
    fn symbolic(&self) -> bool {
        self.symbolic
    }
}

fn join_path(a: &str, b: &str) -> String {
    match (a.is_empty(), b.is_empty() || b == ".") {
        (_, true) => a.to_string(),
        (true, false) => b.to_string(),
        (false, false) => format!("{a}.{b}"),
    }
}

fn join_id(a: &str, b: &str) -> String {
    if a.is_empty() {
        b.to_string()
    } else {
        format!("{a}.{b}")
    }
}

/// `*` in a leaf glob matches any run of characters, dots included.
pub fn glob_match(pattern: &str, text: &str) -> bool {
    let p: Vec<char> = pattern.chars().collect();
    let t: Vec<char> = text.chars().collect();
    let (mut pi, mut ti, mut star, mut mark) = (0, 0, None, 0);
    while ti < t.len() {
        if pi < p.len() && p[pi] != '*' && p[pi] == t[ti] {
            pi += 1;
            ti += 1;
        } else if pi < p.len() && p[pi] == '*' {
            star = Some(pi);
            mark = ti;
            pi += 1;
        } else if let Some(s) = star {
            pi = s + 1;
            mark += 1;
            ti = mark;
        } else {
            return false;
        }
    }
    while pi < p.len() && p[pi] == '*' {
        pi += 1;
    }
    pi == p.len()
}

struct NodeArgs<'e> {
    node: &'e NodeIr,
    env: ScopeEnv<'e>,
    attrs: &'e IndexMap<String, String>,
}

impl NodeArgs<'_> {
    fn eval_err(&self, name: &str, e: EvalError) -> OpError {
        let raw = self
            .node
            .args
            .get(name)
            .map(|a| a.raw.as_str())
            .unwrap_or("");
        let code = match e {
            EvalError::Overflow => code::OVERFLOW,
            EvalError::UnknownName(_) | EvalError::MissingConfig(_) => code::UNBOUND,
            _ => code::EVAL,
        };
        let hint = match &e {
            EvalError::UnknownName(n) => {
                Some(match closest(n, self.env.env.keys().map(String::as_str)) {
                    Some(c) => format!("`{n}` is not a dim of this component; did you mean `{c}`?"),
                    None => format!("`{n}` is not a dim of this component"),
                })
            }
            _ => None,
        };
        OpError {
            code,
            message: format!("argument `{name}: {raw}`: {e}"),
            hint,
        }
    }
}

impl Args for NodeArgs<'_> {
    fn int(&self, name: &str) -> Result<Q, OpError> {
        self.opt_int(name)?.ok_or_else(|| OpError {
            code: code::EVAL,
            message: format!("missing argument `{name}`"),
            hint: None,
        })
    }
    fn opt_int(&self, name: &str) -> Result<Option<Q>, OpError> {
        let Some(arg) = self.node.args.get(name) else {
            return Ok(None);
        };
        let Some(e) = &arg.expr else {
            return Err(OpError {
                code: code::EVAL,
                message: format!("argument `{name}: {}` is not an expression", arg.raw),
                hint: None,
            });
        };
        expr::eval_int(e, &self.env)
            .map(Some)
            .map_err(|e| self.eval_err(name, e))
    }
    fn flag(&self, name: &str) -> Result<bool, OpError> {
        let Some(arg) = self.node.args.get(name) else {
            return Ok(false);
        };
        match &arg.expr {
            Some(e) => expr::eval_bool(e, &self.env).map_err(|e| self.eval_err(name, e)),
            None => Err(OpError {
                code: code::EVAL,
                message: format!("argument `{name}: {}` is not a condition", arg.raw),
                hint: None,
            }),
        }
    }
    fn shape(&self) -> Result<Option<Vec<Q>>, OpError> {
        let Some(axes) = &self.node.shape else {
            return Ok(None);
        };
        axes.iter()
            .map(|e| expr::eval_int(e, &self.env).map_err(|err| self.eval_err("shape", err)))
            .collect::<Result<Vec<_>, _>>()
            .map(Some)
    }
    fn int_list(&self, name: &str) -> Result<Option<Vec<i128>>, OpError> {
        let Some(arg) = self.node.args.get(name) else {
            return Ok(None);
        };
        let not_a_list = |what: &str| OpError {
            code: code::EVAL,
            message: format!(
                "argument `{name}: {}` is {what}, not a list of integers",
                arg.raw
            ),
            hint: Some(
                "bind it to a config list, e.g. `config.text_config.rope_parameters.mrope_section`"
                    .into(),
            ),
        };
        let Some(e) = &arg.expr else {
            return Err(not_a_list("not an expression"));
        };
        let items = match e {
            // A component names the model's attr (`sections: rope_sections`); an attr whose
            // config path is absent (`none`) or empty gives no list: the model has none.
            Expr::Name(n) if !self.env.env.contains_key(&**n) => {
                let Some(text) = self.attrs.get(&**n) else {
                    return Err(OpError {
                        code: code::UNBOUND,
                        message: format!(
                            "argument `{name}: {n}`: `{n}` is neither a dim nor a model attr"
                        ),
                        hint: Some(format!(
                            "declare it under the model's `attrs:` (`{n}: config.<path to the list>`)"
                        )),
                    });
                };
                match serde_json::from_str(text) {
                    _ if text == "none" => return Ok(None),
                    Ok(serde_json::Value::Array(items)) => items,
                    _ => return Err(not_a_list(&format!("attr `{n}` = {text}"))),
                }
            }
            _ => match expr::eval(e, &self.env).map_err(|e| self.eval_err(name, e))? {
                Val::Json(serde_json::Value::Array(items)) => items,
                Val::Int(_) => return Err(not_a_list("an integer")),
                _ => return Err(not_a_list("a value")),
            },
        };
        if items.is_empty() {
            return Ok(None);
        }
        items
            .iter()
            .map(|v| {
                v.as_i64()
                    .map(i128::from)
                    .ok_or_else(|| not_a_list(&format!("a list holding {v}")))
            })
            .collect::<Result<Vec<_>, _>>()
            .map(Some)
    }
    fn text(&self, name: &str) -> Result<Option<String>, OpError> {
        let Some(arg) = self.node.args.get(name) else {
            return Ok(None);
        };
        Ok(Some(match &arg.expr {
            Some(Expr::Name(n)) if !self.env.env.contains_key(&**n) => self
                .attrs
                .get(&**n)
                .cloned()
                .unwrap_or_else(|| n.to_string()),
            Some(e @ Expr::Config(_)) | Some(e @ Expr::Binary(expr::BinOp::Coalesce, ..)) => {
                match expr::eval(e, &self.env) {
                    Ok(Val::Str(s)) => s.to_string(),
                    Ok(Val::Bool(b)) => b.to_string(),
                    Ok(Val::Int(q)) => q.v.to_string(),
                    Ok(Val::Real(r)) => r.to_string(),
                    Ok(Val::Json(j)) => j.to_string(),
                    Err(EvalError::MissingConfig(_)) => "none".into(),
                    Err(e) => return Err(self.eval_err(name, e)),
                }
            }
            Some(Expr::Str(s)) => s.to_string(),
            _ => arg.raw.clone(),
        }))
    }
}

impl<'a> Walker<'a> {
    fn env_of<'e>(&'e self, env: &'e HashMap<String, Q>) -> ScopeEnv<'e> {
        ScopeEnv {
            env,
            config: self.config,
            reads: &self.reads,
            symbolic: self.symbolic,
        }
    }

    fn error(&mut self, code: &'static str, message: String, loc: &Location, hint: Option<String>) {
        let mut e = SpecError::new(code, message, loc.clone());
        e.hint = hint;
        self.out.errors.push(e);
    }

    fn eval_int(
        &mut self,
        e: &Expr,
        env: &HashMap<String, Q>,
        loc: &Location,
        what: &str,
    ) -> Option<Q> {
        let r = expr::eval_int(e, &self.env_of(env));
        match r {
            Ok(q) => Some(q),
            Err(err) => {
                let (c, hint) = match &err {
                    EvalError::MissingConfig(p) => (
                        code::UNBOUND,
                        Some(format!(
                            "config.json has no `{}`; use `{} ?? <default>` if the model has a default",
                            p.trim_start_matches("config."),
                            p
                        )),
                    ),
                    EvalError::UnknownName(n) => (
                        code::UNBOUND,
                        Some(format!(
                            "bind `{n}` in the model's `dims:` (or the node's `bind:`)"
                        )),
                    ),
                    EvalError::Overflow => (code::OVERFLOW, None),
                    _ => (code::EVAL, None),
                };
                self.error(c, format!("{what}: {err}"), loc, hint);
                None
            }
        }
    }

    /// Bind the model's dims (in any order; cycles are errors).
    fn bind_dims(&mut self) {
        let defs: HashMap<&str, &DimBinding> =
            self.ir.dims.iter().map(|d| (d.name.as_str(), d)).collect();
        let mut done: HashMap<String, Q> = HashMap::new();
        let mut visiting = BTreeSet::new();
        let mut failed = BTreeSet::new();
        for d in &self.ir.dims {
            self.bind_dim(&d.name, &defs, &mut done, &mut visiting, &mut failed);
        }
        for d in &self.ir.dims {
            if let Some(q) = done.get(&d.name) {
                self.out.dims.insert(d.name.clone(), q.clone());
            }
        }
        for a in &self.ir.attrs {
            let text = match expr::eval(&a.expr, &self.env_of(&done)) {
                Ok(Val::Str(s)) => s.to_string(),
                Ok(Val::Int(q)) => q.v.to_string(),
                Ok(Val::Bool(b)) => b.to_string(),
                Ok(Val::Real(r)) => r.to_string(),
                Ok(Val::Json(j)) => j.to_string(),
                Err(EvalError::MissingConfig(_)) => "none".into(),
                Err(EvalError::UnknownName(n)) if matches!(a.expr, Expr::Name(_)) => n,
                Err(e) => {
                    self.error(code::EVAL, format!("attr `{}`: {e}", a.name), &a.loc, None);
                    continue;
                }
            };
            self.out.attrs.insert(a.name.clone(), text);
        }
    }

    /// Bind one dim and, first, the dims it reads. A dim that failed (an inexact division, a
    /// missing config key) is reported once, where it failed: the dims that read it are left
    /// unbound without a second error, and never mistaken for a cycle.
    fn bind_dim(
        &mut self,
        name: &str,
        defs: &HashMap<&str, &DimBinding>,
        done: &mut HashMap<String, Q>,
        visiting: &mut BTreeSet<String>,
        failed: &mut BTreeSet<String>,
    ) -> Option<Q> {
        if let Some(q) = done.get(name) {
            return Some(q.clone());
        }
        if failed.contains(name) {
            return None;
        }
        let def = *defs.get(name)?;
        if visiting.contains(name) {
            self.error(
                code::EVAL,
                format!("dim `{name}` depends on itself"),
                &def.loc,
                Some("dims must not form a cycle".into()),
            );
            failed.insert(name.to_string());
            return None;
        }
        visiting.insert(name.to_string());
        let q = self.bind_dim_value(name, def, defs, done, visiting, failed);
        visiting.remove(name);
        match &q {
            Some(q) => {
                done.insert(name.to_string(), q.clone());
            }
            None => {
                failed.insert(name.to_string());
            }
        }
        q
    }

    fn bind_dim_value(
        &mut self,
        name: &str,
        def: &DimBinding,
        defs: &HashMap<&str, &DimBinding>,
        done: &mut HashMap<String, Q>,
        visiting: &mut BTreeSet<String>,
        failed: &mut BTreeSet<String>,
    ) -> Option<Q> {
        let mut names = Vec::new();
        def.expr.names(&mut names);
        for n in names {
            if !done.contains_key(&*n) && defs.contains_key(&*n) {
                self.bind_dim(&n, defs, done, visiting, failed)?;
            }
        }
        // Dims show as their own names in formulas; their binding is one `explain` away.
        let plain: HashMap<String, Q> = done.clone();
        let v = self.eval_int(&def.expr, &plain, &def.loc, &format!("dim `{name}`"))?;
        // Zero is a real value (no q compression, no MTP layers); a negative size is not.
        if v.v < 0 {
            self.error(
                code::EVAL,
                format!("dim `{name}` = {} is negative", v.v),
                &def.loc,
                Some(format!("`{}` evaluates to {}", def.raw, v.v)),
            );
            return None;
        }
        Some(Q::atom(name, v.v, self.symbolic))
    }

    /// A node that reads a value a `when:` removed (a disabled node with no input to pass
    /// through) is not evaluated, nor is anything downstream: one located error at the node
    /// whose `when:` removed it, naming the first reader.
    fn removed_read(&mut self, removed: &mut Removed, node: &NodeIr) {
        let Some(origin) = node
            .inputs
            .iter()
            .find_map(|i| removed.origin.get(i.as_str()).cloned())
        else {
            return;
        };
        removed.origin.insert(node.id.clone(), origin.clone());
        if removed.reported.insert(origin.0.clone()) {
            self.error(
                code::WHEN_REMOVES,
                format!(
                    "`when:` switches `{}` off and it has no input to pass through, but `{}` reads it: `{}` and everything downstream of it are not evaluated",
                    origin.0, node.id, node.id
                ),
                &origin.1,
                Some(
                    "a node others read must exist whenever they do: give the readers the same `when:`, or make the condition hold"
                        .into(),
                ),
            );
        }
    }

    fn top_level(&mut self) {
        let env = Rc::new(self.out.dims.clone().into_iter().collect::<HashMap<_, _>>());
        let ir = self.ir;
        let mut flows: HashMap<String, Flow> = HashMap::new();
        flows.insert(
            "input_ids".into(),
            Flow {
                shape: vec![],
                window: None,
                selection: None,
                selected: None,
                compressed: None,
                stride: None,
                joint: vec![],
                from: Rc::from([]),
                image: None,
            },
        );
        for input in &ir.inputs {
            if let Some(f) = self.image_input(input, &env) {
                flows.insert(input.name.clone(), f);
            }
        }
        for input in &ir.inputs {
            if !ir.graph.iter().any(|n| n.inputs.contains(&input.name)) {
                self.error(
                    code::UNKNOWN_INPUT,
                    format!("input `{}` is read by no node", input.name),
                    &input.loc,
                    Some("an image input feeds its encoder: the patch embedding reads it (`in: pixel_values`)".into()),
                );
            }
        }
        let mut removed = Removed::default();
        for node in &ir.graph {
            let inputs: Option<Vec<Flow>> =
                node.inputs.iter().map(|i| flows.get(i).cloned()).collect();
            let Some(inputs) = inputs else {
                self.removed_read(&mut removed, node);
                continue;
            };
            if let Some(w) = &node.when {
                match expr::eval_bool(w, &self.env_of(&env)) {
                    Ok(true) => {}
                    Ok(false) => {
                        // As inside components: a disabled node passes its first input through.
                        if let Some(first) = inputs.first() {
                            flows.insert(node.id.clone(), first.clone());
                        } else {
                            removed.by_when(node);
                        }
                        continue;
                    }
                    Err(e) => {
                        let msg = format!("`when` of `{}`: {e}", node.id);
                        self.error(code::EVAL, msg, &node.loc, None);
                        continue;
                    }
                }
            }
            let scope = Scope {
                env: env.clone(),
                block_env: env.clone(),
                path: String::new(),
                indices: vec![],
                count: Q::one(),
                active: Q::one(),
                role: node.role.clone().unwrap_or_default(),
                top_role: node.role.clone(),
                component: String::new(),
                id: String::new(),
                group: None,
                block: None,
                phase: Phase::Both,
                emit_storage: true,
                rename: Rc::new(vec![]),
            };
            let out = match &node.kind {
                NodeKind::Stack(st) => self.stack(node, st, &scope, &inputs),
                _ => self.node(node, &scope, &inputs),
            };
            if let Some(o) = out {
                flows.insert(node.id.clone(), o);
            }
        }
        // Values that leave the model: its outputs, and what each multi-token prediction module
        // ends in (its logits go through a head the spec may share rather than repeat).
        let read: BTreeSet<&str> = ir
            .graph
            .iter()
            .flat_map(|n| n.inputs.iter().map(String::as_str))
            .collect();
        // The module ends downstream of its layers (an MTP stack or component): an MTP node
        // before them that nothing reads (a bypassed input norm) is dead, not an end.
        let is_mtp = |n: &&NodeIr| n.role.as_deref() == Some("mtp");
        let mut after_layers: BTreeSet<&str> = BTreeSet::new();
        for n in &ir.graph {
            let layers =
                is_mtp(&n) && matches!(n.kind, NodeKind::Stack(_) | NodeKind::Component { .. });
            if layers || n.inputs.iter().any(|i| after_layers.contains(i.as_str())) {
                after_layers.insert(&n.id);
            }
        }
        let any_layers = !after_layers.is_empty();
        let mtp_ends = ir
            .graph
            .iter()
            .filter(|n| {
                is_mtp(n)
                    && !read.contains(n.id.as_str())
                    && (!any_layers || after_layers.contains(n.id.as_str()))
            })
            .map(|n| &n.id);
        for id in ir.outputs.iter().chain(mtp_ends) {
            if let Some(f) = flows.get(id) {
                self.out.sinks.extend(f.from.iter().copied());
            }
        }
        self.out.sinks.sort_unstable();
        self.out.sinks.dedup();
    }

    fn stack(
        &mut self,
        node: &NodeIr,
        st: &StackIr,
        scope: &Scope<'a>,
        inputs: &[Flow],
    ) -> Option<Flow> {
        let ir = self.ir;
        let repeat = self.eval_int(&st.repeat, &scope.env, &node.loc, "stack repeat")?;
        let offset = match &st.index_offset {
            Some(e) => {
                self.eval_int(e, &scope.env, &node.loc, "stack index_offset")?
                    .v
            }
            None => 0,
        };
        if repeat.v < 0 || repeat.v > MAX_REPEAT {
            self.error(
                code::EVAL,
                format!(
                    "stack repeat {} is out of range (0 to {MAX_REPEAT})",
                    repeat.v
                ),
                &node.loc,
                Some("a stack repeats once per layer; a count this large is a config or binding mistake".into()),
            );
            return None;
        }
        let Some(carried) = inputs.first().cloned() else {
            self.error(
                code::SHAPE_ARITY,
                "a stack needs its carried input first in `in:`".into(),
                &node.loc,
                None,
            );
            return None;
        };
        // Assign each layer to exactly one schedule entry.
        let mut groups: IndexMap<String, Vec<i128>> = IndexMap::new();
        for i in 0..repeat.v {
            let mut env = (*scope.env).clone();
            env.insert("i".into(), Q::lit(i));
            let mut hits = Vec::new();
            for e in &st.schedule {
                let m = match &e.when {
                    None => true,
                    Some(w) => match expr::eval_bool(w, &self.env_of(&env)) {
                        Ok(b) => b,
                        Err(err) => {
                            self.error(
                                code::EVAL,
                                format!(
                                    "schedule `where` for block `{}` at layer {i}: {err}",
                                    e.block
                                ),
                                &e.loc,
                                None,
                            );
                            return None;
                        }
                    },
                };
                if m {
                    hits.push(e.block.clone());
                }
            }
            match hits.len() {
                1 => groups.entry(hits.remove(0)).or_default().push(i),
                0 => {
                    self.error(
                        code::SCHEDULE_GAP,
                        format!("stack `{}`: layer {i} matches no schedule entry", node.id),
                        &node.loc,
                        Some("every layer must match exactly one `where:`".into()),
                    );
                    return None;
                }
                _ => {
                    self.error(
                        code::SCHEDULE_GAP,
                        format!(
                            "stack `{}`: layer {i} matches several schedule entries ({})",
                            node.id,
                            hits.join(", ")
                        ),
                        &node.loc,
                        Some("make the `where:` conditions exclusive".into()),
                    );
                    return None;
                }
            }
        }
        let carried_stream = st
            .streams
            .iter()
            .find(|s| s.carries)
            .map(|s| s.name.clone())
            .unwrap_or_default();
        let has_carried = st.streams.iter().any(|s| s.carries);
        let stream_start = self.out.streams.len();
        let plan = self.open_streams(node, st, scope, repeat.v, &carried, &groups)?;
        let single = plan.len() == 1;
        let mut last: Option<Flow> = None;
        let mut produced: Vec<usize> = Vec::new();
        for (group, block_name, layers) in &plan {
            let Some(block) = ir.blocks.get(block_name) else {
                continue;
            };
            self.out.groups.push(GroupRow {
                stack: node.id.clone(),
                block: group.clone(),
                layers: layers.clone(),
                top_role: scope.top_role.clone(),
                encoder: carried.image.as_ref().map(|p| p.input.clone()),
            });
            let n = layers.len() as Num;
            let count = if n == repeat.v && single {
                repeat.clone()
            } else {
                Q::atom(&format!("layers({group})"), n, self.symbolic)
            };
            let path = join_path(&scope.path, node.path.as_deref().unwrap_or(&st.path));
            let mut indices = scope.indices.clone();
            if path.contains("{i}") {
                indices.push(("i".into(), layers.iter().map(|l| l + offset).collect()));
            }
            let sc = Scope {
                env: scope.env.clone(),
                block_env: scope.block_env.clone(),
                path,
                indices,
                count: &scope.count * &count,
                active: &scope.active * &count,
                role: scope.role.clone(),
                top_role: scope.top_role.clone(),
                component: String::new(),
                id: format!("{}[{group}]", join_id(&scope.id, &node.id)),
                group: Some(group.clone()),
                block: Some(block),
                phase: scope.phase,
                emit_storage: scope.emit_storage,
                rename: scope.rename.clone(),
            };
            let mut ins = vec![carried.clone()];
            ins.extend(inputs[1..].iter().cloned());
            self.enter_group(layers);
            let Some(out) = self.block(block, &sc, &ins, &node.loc) else {
                self.close_streams(&[]);
                return None;
            };
            self.leave_group(&out);
            if has_carried && out.shape != carried.shape {
                self.error(
                    code::SHAPE_CARRY,
                    format!("stack `{}`: block `{block_name}` returns {} but the carried stream `{carried_stream}` is {}", node.id, ops::show_shape(&out.shape), ops::show_shape(&carried.shape)),
                    &block.loc,
                    Some("a layer must return the residual stream in the shape it received".into()),
                );
            }
            if let Some(row) = self.out.streams[stream_start..]
                .iter_mut()
                .find(|r| r.carries)
            {
                row.producers.push(sc.id.clone());
                row.readers.push(sc.id.clone());
            }
            produced.extend(out.from.iter().copied());
            last = Some(out);
        }
        self.close_streams(&produced);
        if !has_carried {
            // Independent layers: what they compute leaves through streams only.
            return Some(carried);
        }
        // The carried stream leaves the stack through whichever layer is last, and each layer
        // reads the one before it: the stack's value depends on every group's output.
        last.map(|mut f| {
            f.window = None;
            f.from = produced.into();
            f
        })
    }

    fn block(
        &mut self,
        block: &'a BlockIr,
        scope: &Scope<'a>,
        inputs: &[Flow],
        loc: &Location,
    ) -> Option<Flow> {
        let ir = self.ir;
        let template = ir.component(&block.template).cloned()?;
        let mut env = (*scope.env).clone();
        for (k, e) in &block.bind {
            let v = self.block_bind(k, e, scope, loc)?;
            env.insert(k.clone(), v);
        }
        let env = Rc::new(env);
        let sc = Scope {
            env: env.clone(),
            block_env: env,
            block: Some(block),
            ..scope.clone()
        };
        self.component(&template, &sc, inputs, &[], loc)
            .map(|mut v| v.remove(0))
    }

    /// A block's `bind:` value. One that reads the layer index (`config.compress_ratios[i]`)
    /// is read at every layer the schedule gave the block and must be the same at each: a
    /// block is one kind of layer, so layers that differ need blocks of their own.
    fn block_bind(&mut self, k: &str, e: &Expr, scope: &Scope<'a>, loc: &Location) -> Option<Q> {
        let what = format!("block bind `{k}`");
        let layers = scope
            .indices
            .iter()
            .rev()
            .find(|(n, _)| n == "i")
            .map(|(_, l)| l.clone());
        let reads_i = matches!(
            expr::eval_int(e, &self.env_of(&scope.env)),
            Err(expr::EvalError::UnknownName(ref n)) if n == "i"
        );
        let Some(layers) = layers.filter(|l| reads_i && !l.is_empty()) else {
            return self.eval_int(e, &scope.env, loc, &what);
        };
        let mut first: Option<(i128, Q)> = None;
        for l in layers {
            let mut env = (*scope.env).clone();
            env.insert("i".into(), Q::lit(l));
            let v = self.eval_int(e, &env, loc, &format!("{what} at layer {l}"))?;
            match &first {
                None => first = Some((l, v)),
                Some((l0, v0)) if v0.v != v.v => {
                    let msg = format!(
                        "{what} is {} at layer {l0} but {} at layer {l}, and both layers are block `{}`",
                        v0.v,
                        v.v,
                        scope.group.as_deref().unwrap_or("?")
                    );
                    self.error(
                        code::EVAL,
                        msg,
                        loc,
                        Some(
                            "give each value its own block, picked by the schedule's `where:`"
                                .into(),
                        ),
                    );
                    return None;
                }
                Some(_) => {}
            }
        }
        first.map(|(_, v)| v)
    }

    /// Instantiate a component: bind its dims, walk its graph, record its caches and axioms.
    fn component(
        &mut self,
        comp: &Rc<ComponentIr>,
        scope: &Scope<'a>,
        inputs: &[Flow],
        bind: &[(String, Expr)],
        loc: &Location,
    ) -> Option<Vec<Flow>> {
        if comp.inputs.len() != inputs.len() {
            self.error(
                code::SHAPE_ARITY,
                format!(
                    "component `{}` takes {} inputs ({}) but gets {}",
                    comp.name,
                    comp.inputs.len(),
                    comp.inputs.join(", "),
                    inputs.len()
                ),
                loc,
                None,
            );
            return None;
        }
        if scope.id.matches('.').count() > 64 {
            self.error(
                code::EVAL,
                format!("component `{}` nests too deeply (recursive?)", comp.name),
                loc,
                None,
            );
            return None;
        }
        let mut env: HashMap<String, Q> = HashMap::new();
        for d in &comp.dims {
            if let Some(q) = scope.env.get(d) {
                env.insert(d.clone(), q.clone());
            }
        }
        for (k, e) in bind {
            let v = self.eval_int(e, &scope.env, loc, &format!("bind `{k}`"))?;
            env.insert(k.clone(), v);
        }
        for (k, e) in &comp.defaults {
            if !env.contains_key(k) {
                let v =
                    self.eval_int(e, &env, loc, &format!("default `{k}` of `{}`", comp.name))?;
                env.insert(k.clone(), v);
            }
        }
        for d in &comp.dims {
            if !env.contains_key(d) {
                self.error(code::UNBOUND, format!("component `{}` needs dim `{d}`, which is not bound", comp.name), loc, Some(format!("bind `{d}` in the model's `dims:` or with `bind: {{ {d}: <expr> }}` on the node")));
                return None;
            }
        }
        let sc = Scope {
            env: Rc::new(env),
            role: comp.role.clone(),
            component: comp.name.clone(),
            ..scope.clone()
        };
        let phase_main = if comp.decode_variant.is_some() && scope.phase == Phase::Both {
            Phase::Prefill
        } else {
            scope.phase
        };
        // Streams the component reads are inputs of its graph; those it publishes, outputs.
        let read = self.read_streams(comp, &sc, loc)?;
        let names: Vec<String> = comp.inputs.iter().chain(&comp.reads).cloned().collect();
        let ins: Vec<Flow> = inputs.iter().chain(&read).cloned().collect();
        let mut wanted = comp.outputs.clone();
        wanted.extend(comp.stream_out.iter().map(|(_, n)| n.clone()));
        let main_first = self.out.nodes.len();
        let (mut outs, node_idx) = self.graph(
            &comp.nodes,
            &names,
            &wanted,
            &ins,
            &Scope {
                phase: phase_main,
                ..sc.clone()
            },
        )?;
        let published = outs.split_off(comp.outputs.len());
        self.write_streams(comp, &sc, &published, loc);
        let variant_first = self.out.nodes.len();
        if let Some(v) = &comp.decode_variant
            && scope.phase == Phase::Both
            && let Some(var) = self.ir.component(v).cloned()
        {
            let vs = Scope {
                phase: Phase::Decode,
                emit_storage: false,
                id: join_id(&sc.id, crate::rows::DECODE_SCOPE),
                ..sc.clone()
            };
            let vread: Vec<Flow> = var
                .reads
                .iter()
                .filter_map(|r| {
                    comp.reads
                        .iter()
                        .position(|c| c == r)
                        .map(|k| read[k].clone())
                })
                .collect();
            let vnames: Vec<String> = var.inputs.iter().chain(&var.reads).cloned().collect();
            let vins: Vec<Flow> = inputs.iter().chain(&vread).cloned().collect();
            if vread.len() != var.reads.len() {
                self.error(
                    code::BAD_STREAM,
                    format!(
                        "decode variant `{v}` reads streams `{}` does not",
                        var.reads.join(", ")
                    ),
                    loc,
                    Some("a decode variant reads the streams its component reads".into()),
                );
            } else if let Some((vouts, vidx)) = self.graph(
                &var.nodes,
                &vnames,
                &var.outputs,
                &vins,
                &Scope {
                    role: var.role.clone(),
                    component: var.name.clone(),
                    ..vs
                },
            ) {
                self.pair_twins(&vidx, &node_idx);
                self.pair_nested_twins(&sc.id, main_first..variant_first);
                for f in &vouts {
                    self.out.sinks.extend(f.from.iter().copied());
                }
                for (a, b) in vouts.iter().zip(&outs) {
                    if a.shape != b.shape {
                        self.error(
                            code::SHAPE_AXIS,
                            format!(
                                "decode variant `{v}` returns {} but `{}` returns {}",
                                ops::show_shape(&a.shape),
                                comp.name,
                                ops::show_shape(&b.shape)
                            ),
                            loc,
                            None,
                        );
                    }
                }
            }
        }
        if scope.emit_storage {
            self.caches(comp, &sc, &node_idx);
            self.axioms(comp, &sc, &node_idx);
        }
        // A multi-token prediction module's further outputs (its logits) leave the model.
        if scope.top_role.as_deref() == Some("mtp") {
            for f in outs.iter().skip(1) {
                self.out.sinks.extend(f.from.iter().copied());
            }
        }
        Some(outs)
    }

    /// A decode variant recomputes some of its component's nodes under the same ids: pair each
    /// such row with the main-graph row whose per-token output it equals, so that what decode
    /// reads can be named by the node a cache entry declares.
    fn pair_twins(&mut self, variant: &HashMap<String, usize>, main: &HashMap<String, usize>) {
        for (id, &v) in variant {
            if let Some(&m) = main.get(id)
                && self.out.nodes[m].op == self.out.nodes[v].op
                && self.out.nodes[m].shape == self.out.nodes[v].shape
            {
                self.out.nodes[v].twin = Some(m);
            }
        }
    }

    /// Components nested in a decode variant (an indexer inside the attention) recompute their
    /// nodes too: pair each of their rows with the main-graph row of the same path under the
    /// component instance `inst` (walked as rows `main`).
    fn pair_nested_twins(&mut self, inst: &str, main: std::ops::Range<usize>) {
        let prefix = join_id(inst, crate::rows::DECODE_SCOPE);
        let by_id: HashMap<String, usize> = main
            .clone()
            .map(|m| (self.out.nodes[m].id.clone(), m))
            .collect();
        for v in main.end..self.out.nodes.len() {
            let n = &self.out.nodes[v];
            if n.twin.is_some() {
                continue;
            }
            let Some(rest) = n.id.strip_prefix(&prefix) else {
                continue;
            };
            let Some(rest) = rest.strip_prefix('.').filter(|r| r.contains('.')) else {
                continue;
            };
            if let Some(&m) = by_id.get(&join_id(inst, rest))
                && self.out.nodes[m].op == n.op
                && self.out.nodes[m].shape == n.shape
            {
                self.out.nodes[v].twin = Some(m);
            }
        }
    }

    /// Walk a graph in order; returns the outputs and the row index of every node.
    fn graph(
        &mut self,
        nodes: &[NodeIr],
        input_names: &[String],
        outputs: &[String],
        inputs: &[Flow],
        scope: &Scope<'a>,
    ) -> Option<(Vec<Flow>, HashMap<String, usize>)> {
        let mut flows: HashMap<String, Flow> = input_names
            .iter()
            .cloned()
            .zip(inputs.iter().cloned())
            .collect();
        let mut idx = HashMap::new();
        let mut removed = Removed::default();
        for node in nodes {
            let ins: Option<Vec<Flow>> =
                node.inputs.iter().map(|i| flows.get(i).cloned()).collect();
            let Some(ins) = ins else {
                self.removed_read(&mut removed, node);
                continue;
            };
            if let Some(w) = &node.when {
                let on = match expr::eval_bool(w, &self.env_of(&scope.env)) {
                    Ok(b) => b,
                    Err(e) => {
                        self.error(
                            code::EVAL,
                            format!("`when` of `{}`: {e}", node.id),
                            &node.loc,
                            None,
                        );
                        continue;
                    }
                };
                if !on {
                    // A disabled node passes its first input through.
                    if let Some(first) = ins.first() {
                        flows.insert(node.id.clone(), first.clone());
                        if let Some(&r) = first.from.last() {
                            idx.insert(node.id.clone(), r);
                        }
                    } else {
                        removed.by_when(node);
                    }
                    continue;
                }
            }
            let before = self.out.nodes.len();
            if let Some(f) = self.node(node, scope, &ins) {
                flows.insert(node.id.clone(), f);
            }
            if self.out.nodes.len() > before {
                idx.insert(node.id.clone(), self.out.nodes.len() - 1);
            }
        }
        let outs: Option<Vec<Flow>> = outputs.iter().map(|o| flows.get(o).cloned()).collect();
        outs.map(|o| (o, idx))
    }

    fn node(&mut self, node: &NodeIr, scope: &Scope<'a>, inputs: &[Flow]) -> Option<Flow> {
        let window_in = inputs.iter().find_map(|f| f.window.clone());
        let id = join_id(&scope.id, &node.id);
        let loc = node.loc.clone().with_node(id.clone());
        let image = self.image_of(node, &id, inputs, &loc)?;
        let before = self.out.nodes.len();
        let out = self.node_kind(node, scope, inputs, window_in, id, loc);
        // A component's own row runs where its inputs do (its inner rows say for themselves).
        if let Some(p) = &image
            && let Some(r) = self.out.nodes.get_mut(before)
            && r.op.starts_with("component:")
        {
            r.per_image = Some((**p).clone());
        }
        out
    }

    fn node_kind(
        &mut self,
        node: &NodeIr,
        scope: &Scope<'a>,
        inputs: &[Flow],
        window_in: Option<Q>,
        id: String,
        loc: Location,
    ) -> Option<Flow> {
        let ir = self.ir;
        match &node.kind {
            NodeKind::Op(spec) => self.op(node, spec, scope, inputs, window_in, id, loc),
            NodeKind::Component { name, bind } => {
                let comp = ir.component(name)?.clone();
                let (sc, loc) = self.instance_scope(node, scope, &id, loc)?;
                let row = self.push_row(
                    node,
                    &sc,
                    format!("component:{name}"),
                    id,
                    vec![],
                    loc.clone(),
                );
                let outs = self.component(&comp, &sc, inputs, bind, &loc)?;
                let mut out = outs.into_iter().next()?;
                self.out.nodes[row].shape = out.shape.clone();
                // A selection caps the attention that took it, not what reads its result.
                out.selected = None;
                out.stride = None;
                out.joint.clear();
                Some(out)
            }
            NodeKind::Slot(slot) => {
                let block = scope.block?;
                let fill = block.fills.get(slot)?;
                let (mut sc, loc) = self.instance_scope(node, scope, &id, loc)?;
                sc.env = scope.block_env.clone();
                if let Some(p) = &fill.path {
                    sc.path = join_path(&scope.path, p);
                }
                if !fill.rename.is_empty() {
                    let mut r = (*scope.rename).clone();
                    r.extend(fill.rename.iter().cloned());
                    sc.rename = Rc::new(r);
                }
                if let Some(b) = ir.blocks.get(&fill.name) {
                    let sc = Scope {
                        block: Some(b),
                        ..sc
                    };
                    return self.block(b, &sc, inputs, &loc);
                }
                let comp = ir.component(&fill.name)?.clone();
                let row = self.push_row(
                    node,
                    &sc,
                    format!("component:{}", fill.name),
                    id,
                    vec![],
                    loc.clone(),
                );
                let outs = self.component(&comp, &sc, inputs, &fill.bind, &loc)?;
                let mut out = outs.into_iter().next()?;
                self.out.nodes[row].shape = out.shape.clone();
                out.selected = None;
                out.stride = None;
                out.joint.clear();
                Some(out)
            }
            NodeKind::Stack(st) => self.stack(node, st, scope, inputs),
        }
    }

    /// Scope of a nested instance: its path, and expert-style instances when declared.
    fn instance_scope(
        &mut self,
        node: &NodeIr,
        scope: &Scope<'a>,
        id: &str,
        loc: Location,
    ) -> Option<(Scope<'a>, Location)> {
        let mut sc = Scope {
            path: join_path(
                &scope.path,
                &scope.renamed(node.path.as_deref().unwrap_or(&node.id)),
            ),
            id: id.to_string(),
            ..scope.clone()
        };
        if let Some(r) = &node.role {
            sc.role = r.clone();
        }
        if let Some(inst) = &node.instances {
            let count = self.eval_int(&inst.count, &scope.env, &loc, "instances.count")?;
            let active = match &inst.active {
                Some(a) => self.eval_int(a, &scope.env, &loc, "instances.active")?,
                None => count.clone(),
            };
            if count.v <= 0 || count.v > MAX_INSTANCES || active.v > count.v || active.v < 0 {
                self.error(
                    code::EVAL,
                    format!(
                        "instances: count {} and active {} are out of range (count 1 to {MAX_INSTANCES}, active 0 to count)",
                        count.v, active.v
                    ),
                    &loc,
                    None,
                );
                return None;
            }
            let ph = format!("{{{}}}", inst.index);
            if !sc.path.contains(&ph) {
                self.error(
                    code::BAD_NODE,
                    format!(
                        "instances index `{}` does not appear in the path `{}`",
                        inst.index, sc.path
                    ),
                    &loc,
                    Some(format!("e.g. `path: experts.{ph}`")),
                );
                return None;
            }
            sc.indices
                .push((inst.index.clone(), (0..count.v).collect()));
            sc.count = &sc.count * &count;
            sc.active = &sc.active * &active;
        }
        Some((sc, loc))
    }

    fn push_row(
        &mut self,
        node: &NodeIr,
        scope: &Scope<'a>,
        op: String,
        id: String,
        shape: Shape,
        loc: Location,
    ) -> usize {
        let _ = node;
        self.out.nodes.push(NodeRow {
            id,
            op,
            role: scope.role.clone(),
            top_role: scope.top_role.clone(),
            component: scope.component.clone(),
            stack_group: scope.group.clone(),
            shape,
            count: scope.count.clone(),
            active: scope.active.clone(),
            params: Q::zero(),
            params_active: Q::zero(),
            flops_fixed: Q::zero(),
            flops_per_ctx: Q::zero(),
            window: None,
            selected: None,
            compressed: None,
            stride: None,
            joint: vec![],
            phase: scope.phase,
            args: IndexMap::new(),
            inputs: vec![],
            twin: None,
            per_image: None,
            loc,
        });
        self.out.nodes.len() - 1
    }

    #[allow(clippy::too_many_arguments)]
    fn op(
        &mut self,
        node: &NodeIr,
        spec: &'static ops::OpSpec,
        scope: &Scope<'a>,
        inputs: &[Flow],
        window_in: Option<Q>,
        id: String,
        loc: Location,
    ) -> Option<Flow> {
        if let Some(n) = spec.arity
            && inputs.len() != n
        {
            self.error(
                code::SHAPE_ARITY,
                format!(
                    "op `{}` takes {n} input(s) but `in:` gives {}",
                    spec.name,
                    inputs.len()
                ),
                &loc,
                Some(format!("shape rule: {}", spec.shape)),
            );
            return None;
        }
        // Probabilities over several key sets take a value input per set, in the same order.
        if spec.name == "attention_apply"
            && let Some(p) = inputs.first()
            && inputs.len() != p.joint.len() + 2
        {
            self.error(
                code::SHAPE_ARITY,
                format!(
                    "{id}: its probabilities span {} key set(s) but `in:` gives {} value input(s)",
                    p.joint.len() + 1,
                    inputs.len() - 1
                ),
                &loc,
                Some("give attention_apply one value input per input of the scores' concat, in the same order".into()),
            );
            return None;
        }
        let shapes: Vec<Shape> = inputs.iter().map(|f| f.shape.clone()).collect();
        let attrs = std::mem::take(&mut self.out.attrs);
        let args = NodeArgs {
            node,
            env: self.env_of(&scope.env),
            attrs: &attrs,
        };
        let res = ops::apply(spec.name, &shapes, &args);
        let mut bound = IndexMap::new();
        for k in node.args.keys() {
            let int = args.opt_int(k).ok().flatten().map(|q| q.v);
            let text = args.text(k).ok().flatten().unwrap_or_default();
            bound.insert(k.clone(), ArgValue { int, text });
        }
        // `window: 0` is a full attention (the default of an optional window dim).
        let window = if spec.name == "attention_score" {
            args.opt_int("window").ok().flatten().filter(|w| w.v > 0)
        } else {
            None
        };
        self.out.attrs = attrs;
        let out = match res {
            Ok(o) => o,
            Err(e) => {
                let hint = e
                    .hint
                    .or_else(|| Some(format!("`{}` shape rule: {}", spec.name, spec.shape)));
                self.error(e.code, format!("{}: {}", id, e.message), &loc, hint);
                return None;
            }
        };
        if let Some((c, msg)) = bad_size(&out, &scope.count) {
            self.error(
                c,
                format!("{id}: {msg}"),
                &loc,
                Some("check the dims this node's args and input shape are built from".into()),
            );
            return None;
        }
        let mut window = window.or(window_in);
        // An attention given a selection attends at most the selected positions.
        let selected_in = inputs.iter().find_map(|f| f.selected.clone());
        let selected = if spec.name == "attention_score" && inputs.len() == 3 {
            match &inputs[2].selection {
                Some(k) => Some(k.clone()),
                None => {
                    self.error(
                        code::SHAPE_AXIS,
                        format!(
                            "{id}: the third input of attention_score must be a selection (a topk_select's output), got {}",
                            ops::show_shape(&inputs[2].shape)
                        ),
                        &loc,
                        Some("select with topk_select over the indexer's scores and pass that node itself, not a copy or a view of it".into()),
                    );
                    return None;
                }
            }
        } else {
            selected_in
        };
        // Values computed from compressed entries token by token stay one per r tokens; an
        // attention reads them at past positions and produces a per-token value again.
        let attends = matches!(spec.name, "attention_score" | "attention_apply");
        let compressed = out.compressed.clone().or_else(|| {
            (!attends)
                .then(|| inputs.iter().find_map(|f| f.compressed.clone()))
                .flatten()
        });
        // An attention whose keys are compressed attends floor(t / r) entries at position t;
        // what follows it in the component (softmax, apply) spans the same entries.
        let mut stride = if spec.name == "attention_score" {
            inputs.get(1).and_then(|k| k.compressed.clone())
        } else {
            inputs.iter().find_map(|f| f.stride.clone())
        };
        let mut selected = selected;
        // Scores concatenated along the context axis span every input's key sets: the first
        // input's law is the row's own, the others' ride along; what reads them (the softmax,
        // attention_apply) spans the same sets.
        let joint = if spec.name == "concat" && out.shape.contains(&ops::Axis::Ctx) {
            let mut joint = inputs[0].joint.clone();
            for f in &inputs[1..] {
                joint.push(f.own_span());
                joint.extend(f.joint.iter().cloned());
            }
            (window, selected, stride) = inputs[0].own_span().into_parts();
            joint
        } else if spec.name == "attention_score" {
            Vec::new()
        } else if let Some(f) = inputs.iter().find(|f| !f.joint.is_empty()) {
            (window, selected, stride) = f.own_span().into_parts();
            f.joint.clone()
        } else {
            Vec::new()
        };
        // Buffers are stored but are not parameters.
        let params = Q::sum(
            &out.leaves
                .iter()
                .filter(|l| l.kind != ops::LeafKind::Buffer)
                .map(|l| Q::product(&l.shape))
                .collect::<Vec<_>>(),
        );
        let params_active = out.params_active.clone().unwrap_or_else(|| params.clone());
        let row = self.push_row(
            node,
            scope,
            spec.name.to_string(),
            id,
            out.shape.clone(),
            loc.clone(),
        );
        {
            let r = &mut self.out.nodes[row];
            r.params = if scope.emit_storage {
                params
            } else {
                Q::zero()
            };
            r.params_active = if scope.emit_storage {
                params_active
            } else {
                Q::zero()
            };
            r.flops_fixed = out.flops_fixed.clone();
            r.flops_per_ctx = out.flops_per_ctx.clone();
            r.window = window.clone();
            r.selected = selected.clone();
            r.compressed = compressed.clone();
            r.stride = stride.clone();
            r.joint = joint.clone();
            r.args = bound;
            r.inputs = inputs.iter().map(|f| f.from.to_vec()).collect();
        }
        let image = self.image_after(spec.name, row, inputs, &loc)?;
        // The join runs in the token stream; every other op where its inputs run.
        if spec.name != ops::JOIN_OP && spec.name != ops::ADD_OP {
            self.out.nodes[row].per_image = inputs.iter().find_map(|f| f.image.as_deref().cloned());
        }
        if scope.emit_storage {
            let path = join_path(
                &scope.path,
                &scope.renamed(node.path.as_deref().unwrap_or(&node.id)),
            );
            for leaf in &out.leaves {
                let leaf_name = node
                    .leaves
                    .get(leaf.role)
                    .cloned()
                    .unwrap_or_else(|| leaf.name.to_string());
                let name = join_path(&path, &scope.renamed(&leaf_name));
                self.weight(row, leaf, name, scope, &loc);
            }
        }
        // Decode variants carry state too: what a cache must hold is derived from them.
        if let Some(state) = out.state {
            self.out.nodes[row].args.insert(
                "__state_elements".into(),
                ArgValue {
                    int: Some(Q::product(&state).v),
                    text: String::new(),
                },
            );
        }
        Some(Flow {
            shape: out.shape,
            window,
            selection: out.selection,
            selected,
            compressed,
            stride,
            // The weighted sum has no context axis left: the key sets end with it.
            joint: if spec.name == "attention_apply" {
                Vec::new()
            } else {
                joint
            },
            from: Rc::from([row]),
            image,
        })
    }

    /// Storage of one weight leaf through the quant context.
    fn weight(
        &mut self,
        row: usize,
        leaf: &ops::Leaf,
        name: String,
        scope: &Scope<'a>,
        loc: &Location,
    ) {
        let ir = self.ir;
        let q = &ir.quant;
        let applies = |fmt: &str| -> bool {
            ir.schemes.get(fmt).is_some_and(|s| {
                s.applies_to
                    .iter()
                    .any(|k| k == "any" || k == leaf.kind.as_str())
            })
        };
        let mut chosen: Option<(String, Option<usize>)> = None;
        for (i, o) in q.overrides.iter().enumerate() {
            if glob_match(&o.leaf, &name) {
                chosen = Some((o.format.clone(), Some(i)));
                self.out.override_hits.insert(i);
                break;
            }
        }
        if chosen.is_none()
            && let Some(f) = q.per_role.get(&scope.role)
            && applies(f)
        {
            chosen = Some((f.clone(), None));
        }
        let (format, override_index) = chosen.unwrap_or_else(|| (q.default.clone(), None));
        let Some(scheme) = ir.schemes.get(&format) else {
            return;
        };
        if override_index.is_none() && !applies(&format) {
            self.error(
                code::EVAL,
                format!(
                    "storage format `{format}` does not pack {} leaves (`{name}`)",
                    leaf.kind.as_str()
                ),
                loc,
                Some("set a default format that applies to every leaf kind (e.g. bf16)".into()),
            );
            return;
        }
        let logical = &leaf.shape;
        let mut stored = Vec::new();
        for s in &scheme.stored {
            let Some(dtype_bytes) = dtype_bytes(&s.dtype) else {
                self.error(
                    code::EVAL,
                    format!("quant scheme `{format}` names unknown dtype `{}`", s.dtype),
                    loc,
                    None,
                );
                return;
            };
            let shape = match &s.shape {
                None => logical.clone(),
                Some(axes) => {
                    let n = logical.len();
                    let mut env: HashMap<String, Q> = HashMap::new();
                    if n >= 1 {
                        env.insert("in".into(), logical[n - 1].clone());
                    }
                    if n >= 2 {
                        env.insert("out".into(), logical[n - 2].clone());
                    }
                    let lead = logical[..n.saturating_sub(2)].to_vec();
                    let mut shape = Vec::new();
                    for a in axes {
                        let text = a.as_expr_text();
                        if text == "..." {
                            shape.extend(lead.iter().cloned());
                            continue;
                        }
                        let parsed = match expr::parse(&text) {
                            Ok(e) => e,
                            Err(e) => {
                                self.error(
                                    code::EVAL,
                                    format!("quant scheme `{format}`: axis `{text}`: {e}"),
                                    loc,
                                    None,
                                );
                                return;
                            }
                        };
                        match expr::eval_int(&parsed, &self.env_of(&env)) {
                            Ok(q) => shape.push(q),
                            Err(e) => {
                                self.error(code::EVAL, format!("quant scheme `{format}` cannot store `{name}` (logical shape {}): axis `{text}`: {e}", show_q(logical)), loc, Some("the scheme's block size must divide the weight's axes".into()));
                                return;
                            }
                        }
                    }
                    shape
                }
            };
            stored.push(StoredTensor {
                name: crate::quant::stored_name(&name, s),
                dtype: s.dtype.clone(),
                dtype_bytes,
                shape,
                scale: s.scale,
            });
        }
        self.out.weights.push(WeightRow {
            node: row,
            leaf: leaf.role.to_string(),
            kind: leaf.kind,
            name,
            indices: scope.indices.clone(),
            logical: logical.clone(),
            format,
            stored,
            count: scope.count.clone(),
            override_index,
        });
    }

    fn caches(&mut self, comp: &ComponentIr, scope: &Scope<'a>, idx: &HashMap<String, usize>) {
        let ir = self.ir;
        for c in &comp.cache {
            if let Some(w) = &c.when {
                match expr::eval_bool(w, &self.env_of(&scope.env)) {
                    Ok(true) => {}
                    Ok(false) => continue,
                    Err(e) => {
                        self.error(code::EVAL, format!("cache `when`: {e}"), &c.loc, None);
                        continue;
                    }
                }
            }
            let Some(&row) = idx.get(&c.node) else {
                continue;
            };
            if let Some(p) = &self.out.nodes[row].per_image {
                let msg = format!(
                    "cache `{}` of `{}` is kept by an encoder: `{}` runs on the patches of image input `{}`, and a vision tower runs once per image, attending over all of that image's patches at once, so it keeps nothing across decode steps",
                    c.node, comp.name, self.out.nodes[row].id, p.input
                );
                self.error(code::BAD_CACHE, msg, &c.loc, Some("declare no cache on an encoder's attention (its cost is counted per image, as a prefill of the image's patches)".into()));
                continue;
            }
            let shape = self.out.nodes[row].shape.clone();
            let dims: Option<Vec<Q>> = shape.iter().map(|a| a.dim().cloned()).collect();
            let Some(dims) = dims else {
                self.error(code::BAD_CACHE, format!("cache node `{}` has a context axis; cache what is written per token (k, v, latent)", c.node), &c.loc, None);
                continue;
            };
            let mut elements = Q::product(&dims);
            if c.growth == Growth::Constant {
                if let Some(s) = self.out.nodes[row]
                    .args
                    .get("__state_elements")
                    .and_then(|a| a.int)
                {
                    // Named by the row, not the cache's local node name: blocks that share a
                    // node name (a compressor's `pooled` in two ratios) keep different states.
                    let name = format!("state({})", self.out.nodes[row].id);
                    elements = Q::atom(&name, s, self.symbolic);
                }
                if let Some(st) = &c.steps {
                    let Some(steps) = self.eval_int(st, &scope.env, &c.loc, "cache steps") else {
                        continue;
                    };
                    elements = &elements * &steps;
                }
            }
            let window = match &c.window {
                Some(w) => match self.eval_int(w, &scope.env, &c.loc, "cache window") {
                    Some(q) => Some(q),
                    None => continue,
                },
                None => None,
            };
            let ratio = self.out.nodes[row].compressed.clone();
            if let Some(r) = &ratio
                && c.growth != Growth::PerToken
                && c.growth != Growth::Constant
            {
                let msg = format!(
                    "cache `{}` of `{}` keeps `{}`, a compressor's output (one entry per {} tokens), as growth `{}`: compressed entries are all kept, one per {} tokens, and the window belongs to the uncompressed keys beside them",
                    c.node,
                    comp.name,
                    self.out.nodes[row].id,
                    r.v,
                    c.growth.as_str(),
                    r.v
                );
                self.error(code::BAD_CACHE, msg, &c.loc, Some("declare `growth: per_token` on the compressed entries (the engine counts one per ratio tokens) and put the window on the sliding keys' cache".into()));
                continue;
            }
            let (fmt, origin, dtype_src) = match (&c.dtype, &ir.quant.cache) {
                (Some(f), _) => (f.clone(), DtypeOrigin::Entry(f.clone()), c.src.clone()),
                (None, Some(f)) => (
                    f.clone(),
                    DtypeOrigin::Context(f.clone()),
                    ir.quant.cache_src.clone(),
                ),
                (None, None) => match crate::dataflow::config_cache_dtype(self.config) {
                    Some(d) => (d.dtype.to_string(), DtypeOrigin::Config(d.key), None),
                    None => ("BF16".to_string(), DtypeOrigin::Fallback, None),
                },
            };
            let dtype = ir
                .schemes
                .get(&fmt)
                .and_then(|s| s.stored.first())
                .map(|s| s.dtype.clone())
                .unwrap_or_else(|| fmt.to_uppercase());
            let Some(bytes) = dtype_bytes(&dtype) else {
                self.error(
                    code::BAD_CACHE,
                    format!("cache dtype `{fmt}` is unknown"),
                    &c.loc,
                    Some("use a storage format of specs/quant/ (bf16, f32, ...)".into()),
                );
                continue;
            };
            self.out.caches.push(CacheRow {
                node: row,
                kind: c.kind.clone(),
                growth: c.growth,
                window,
                window_src: c.window_src.clone(),
                ratio: ratio.filter(|_| c.growth == Growth::PerToken),
                elements,
                read_cap: None,
                dtype,
                dtype_bytes: bytes,
                dtype_origin: origin,
                dtype_src,
                count: scope.count.clone(),
                loc: c.loc.clone().with_node(self.out.nodes[row].id.clone()),
            });
        }
    }

    /// Check the component author's declared invariants against this instance.
    fn axioms(&mut self, comp: &ComponentIr, scope: &Scope<'a>, idx: &HashMap<String, usize>) {
        let mine: Vec<CacheRow> = self
            .out
            .caches
            .iter()
            .filter(|c| idx.values().any(|&r| r == c.node))
            .cloned()
            .collect();
        for a in &comp.axioms {
            let fail = |w: &mut Self, msg: String| {
                w.out.axiom_failures.push(AxiomResult {
                    component: comp.name.clone(),
                    node: scope.id.clone(),
                    message: msg,
                    loc: a.loc.clone().with_node(scope.id.clone()),
                });
            };
            if let Some(e) = &a.kv_elements_per_token {
                let Some(want) =
                    self.eval_int(e, &scope.env, &a.loc, "axiom kv_elements_per_token")
                else {
                    continue;
                };
                let got: Num = mine
                    .iter()
                    .filter(|c| c.growth != Growth::Constant)
                    .map(|c| c.elements.v)
                    .fold(0, Num::saturating_add);
                if got != want.v {
                    fail(
                        self,
                        format!(
                            "component `{}` declares {} cache elements per token, but its caches hold {got}",
                            comp.name, want.v
                        ),
                    );
                }
            }
            if let Some(e) = &a.state_elements {
                let Some(want) = self.eval_int(e, &scope.env, &a.loc, "axiom state_elements")
                else {
                    continue;
                };
                let got: Num = mine
                    .iter()
                    .filter(|c| c.growth == Growth::Constant)
                    .map(|c| c.elements.v)
                    .fold(0, Num::saturating_add);
                if got != want.v {
                    fail(
                        self,
                        format!(
                            "component `{}` declares {} state elements per sequence, but its caches hold {got}",
                            comp.name, want.v
                        ),
                    );
                }
            }
            if let Some(e) = &a.window {
                let Some(want) = self.eval_int(e, &scope.env, &a.loc, "axiom window") else {
                    continue;
                };
                let windowed: Vec<&CacheRow> =
                    mine.iter().filter(|c| c.growth == Growth::Window).collect();
                if windowed.is_empty() {
                    fail(
                        self,
                        format!(
                            "component `{}` declares a window of {} but none of its caches is window-capped",
                            comp.name, want.v
                        ),
                    );
                }
                for c in windowed {
                    if c.window.as_ref().map(|w| w.v) != Some(want.v) {
                        fail(
                            self,
                            format!(
                                "cache `{}` is capped at {:?} tokens, but the component declares a window of {}",
                                self.out.nodes[c.node].id,
                                c.window.as_ref().map(|w| w.v),
                                want.v
                            ),
                        );
                    }
                }
                let attn: Vec<usize> = idx
                    .values()
                    .copied()
                    .filter(|&r| self.out.nodes[r].op == "attention_score")
                    .collect();
                for r in attn {
                    if self.out.nodes[r].window.as_ref().map(|w| w.v) != Some(want.v) {
                        fail(
                            self,
                            format!(
                                "attention `{}` attends {:?} positions, but the component declares a window of {}",
                                self.out.nodes[r].id,
                                self.out.nodes[r].window.as_ref().map(|w| w.v),
                                want.v
                            ),
                        );
                    }
                }
            }
            if a.caches_read_by_attention {
                for c in comp.cache.iter().filter(|c| c.growth != Growth::Constant) {
                    if !reaches_attention(comp, &c.node) {
                        fail(
                            self,
                            format!(
                                "cached node `{}` is not read by any attention op of `{}`",
                                c.node, comp.name
                            ),
                        );
                    }
                }
            }
        }
    }
}

/// Sizes an op produced that cannot be real: negative, or beyond 128-bit arithmetic once
/// multiplied by the node's copies. Later totals add such sizes, so they are stopped here.
fn bad_size(out: &ops::OpOut, count: &Q) -> Option<(&'static str, String)> {
    let mut sizes: Vec<Q> = out.shape.iter().filter_map(|a| a.dim().cloned()).collect();
    for l in &out.leaves {
        sizes.extend(l.shape.iter().cloned());
        sizes.push(&Q::product(&l.shape) * count);
    }
    if let Some(s) = &out.state {
        sizes.push(&Q::product(s) * count);
    }
    sizes.push(&out.flops_fixed * count);
    sizes.push(&out.flops_per_ctx * count);
    if sizes.iter().any(Q::overflowed) {
        return Some((
            code::OVERFLOW,
            "its shape, weights or FLOPs exceed 128-bit integers".into(),
        ));
    }
    sizes.iter().find(|q| q.v < 0).map(|q| {
        (
            code::EVAL,
            format!("a size evaluates to {}, below zero", q.v),
        )
    })
}

/// Whether a node's value flows (through any chain of nodes) into an attention op.
fn reaches_attention(comp: &ComponentIr, start: &str) -> bool {
    let mut frontier = vec![start.to_string()];
    let mut seen = BTreeSet::new();
    while let Some(n) = frontier.pop() {
        if !seen.insert(n.clone()) {
            continue;
        }
        for node in &comp.nodes {
            if node.inputs.contains(&n) {
                if let NodeKind::Op(s) = &node.kind
                    && (s.name == "attention_score" || s.name == "attention_apply")
                {
                    return true;
                }
                frontier.push(node.id.clone());
            }
        }
    }
    false
}

pub fn dtype_bytes(d: &str) -> Option<u32> {
    Some(match d {
        "BOOL" | "U8" | "I8" | "F8_E4M3" | "F8_E5M2" | "F8_E8M0" => 1,
        "I16" | "U16" | "F16" | "BF16" => 2,
        "I32" | "U32" | "F32" => 4,
        "I64" | "U64" | "F64" => 8,
        _ => return None,
    })
}

fn show_q(s: &[Q]) -> String {
    format!(
        "[{}]",
        s.iter()
            .map(|q| q.v.to_string())
            .collect::<Vec<_>>()
            .join(", ")
    )
}

#[cfg(test)]
mod tests {
    use super::glob_match;

    #[test]
    fn globs() {
        assert!(glob_match(
            "*.e_score_correction_bias",
            "model.layers.{i}.mlp.gate.e_score_correction_bias"
        ));
        assert!(glob_match("lm_head.*", "lm_head.weight"));
        assert!(!glob_match("lm_head.*", "model.lm_head"));
        assert!(glob_match("*", ""));
    }
}

/// Values a `when:` removed in one graph: each removed id → (the node whose `when:` removed it,
/// its location), and the origins already reported.
#[derive(Default)]
struct Removed {
    origin: HashMap<String, (String, Location)>,
    reported: BTreeSet<String>,
}

impl Removed {
    fn by_when(&mut self, node: &NodeIr) {
        self.origin
            .insert(node.id.clone(), (node.id.clone(), node.loc.clone()));
    }
}
