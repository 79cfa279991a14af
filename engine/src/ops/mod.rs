//! The primitive op registry. Each op declares its arguments, shape rule, the weight leaves it
//! owns, and its parameter and FLOP formulas; `apply` is the one implementation of all of them.
//!
//! Shapes are per token (no batch or sequence axis). The attention context is the `ctx` axis;
//! FLOPs are `fixed + per_ctx * L`, where L is the number of attended positions, so the same
//! numbers serve decode (L = context) and prefill (L summed over the prompt).

use crate::q::Q;

/// One axis of a per-token activation shape.
#[derive(Clone, Debug, PartialEq)]
pub enum Axis {
    Dim(Q),
    /// The attended positions of an attention op.
    Ctx,
}

impl Axis {
    pub fn dim(&self) -> Option<&Q> {
        match self {
            Axis::Dim(q) => Some(q),
            Axis::Ctx => None,
        }
    }
}

pub type Shape = Vec<Axis>;

pub fn show_shape(s: &Shape) -> String {
    let parts: Vec<String> = s
        .iter()
        .map(|a| match a {
            Axis::Dim(q) => q.v.to_string(),
            Axis::Ctx => "ctx".into(),
        })
        .collect();
    format!("[{}]", parts.join(", "))
}

/// What kind of weight a leaf is; quant schemes say which kinds they pack.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "snake_case")]
pub enum LeafKind {
    Matrix,
    Vector,
    Table,
    /// A stored tensor that is not a parameter (`register_buffer`).
    Buffer,
}

impl LeafKind {
    pub fn as_str(self) -> &'static str {
        match self {
            LeafKind::Matrix => "matrix",
            LeafKind::Vector => "vector",
            LeafKind::Table => "table",
            LeafKind::Buffer => "buffer",
        }
    }
}

#[derive(Clone, Debug)]
pub struct Leaf {
    /// Leaf role within the op (`weight`, `bias`, ...): the key of a node's `leaves:` override.
    pub role: &'static str,
    /// Default checkpoint name under the node's path; empty: the node's path names the tensor.
    pub name: &'static str,
    pub kind: LeafKind,
    pub shape: Vec<Q>,
}

/// Shape-rule families (documentation and prompts; `apply` implements each op).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ShapeKind {
    Preserve,
    Broadcast,
    AxisReplace,
    AxisSelect,
    AxisConcat,
    Contract,
    Reshape,
    Source,
    Explicit,
}

impl ShapeKind {
    pub fn as_str(self) -> &'static str {
        match self {
            ShapeKind::Preserve => "preserve",
            ShapeKind::Broadcast => "broadcast",
            ShapeKind::AxisReplace => "axis_replace",
            ShapeKind::AxisSelect => "axis_select",
            ShapeKind::AxisConcat => "axis_concat",
            ShapeKind::Contract => "contract",
            ShapeKind::Reshape => "reshape",
            ShapeKind::Source => "source",
            ShapeKind::Explicit => "explicit",
        }
    }
}

#[derive(Debug)]
pub struct OpSpec {
    pub name: &'static str,
    pub summary: &'static str,
    pub shape_kind: ShapeKind,
    /// Number of inputs (`None` = two or more).
    pub arity: Option<usize>,
    /// `name` required, `name?` optional.
    pub args: &'static [&'static str],
    pub shape: &'static str,
    pub weights: &'static str,
    pub params: &'static str,
    pub flops: &'static str,
}

macro_rules! op {
    ($name:expr, $kind:ident, $arity:expr, [$($arg:expr),*], $summary:expr, $shape:expr, $weights:expr, $params:expr, $flops:expr) => {
        OpSpec { name: $name, summary: $summary, shape_kind: ShapeKind::$kind, arity: $arity,
                 args: &[$($arg),*], shape: $shape, weights: $weights, params: $params, flops: $flops }
    };
}

pub const ACTIVATIONS: &[(&str, i128)] = &[
    ("silu", 4),
    ("gelu", 8),
    ("relu", 1),
    ("sigmoid", 4),
    ("softplus", 4),
    ("tanh", 4),
    ("exp", 1),
];

mod attention;
mod compression;
mod elementwise;
mod linear;
mod linear_attention;
mod mixing;
mod moe;
mod norms;
mod selection;
mod stored;
#[cfg(test)]
mod test_args;
mod vision;

pub use vision::{ADD_OP, JOIN_OP, MERGE_OP, PATCH_OP};

/// One family of ops: its registry entries and the `apply` that implements them.
struct Family {
    ops: &'static [OpSpec],
    apply: fn(&str, &[Shape], &dyn Args) -> Result<OpOut, OpError>,
}

/// The families in registry order (the order `registry_text` prints).
static FAMILIES: &[Family] = &[
    Family {
        ops: linear::OPS,
        apply: linear::apply,
    },
    Family {
        ops: norms::OPS,
        apply: norms::apply,
    },
    Family {
        ops: attention::OPS,
        apply: attention::apply,
    },
    Family {
        ops: elementwise::OPS,
        apply: elementwise::apply,
    },
    Family {
        ops: moe::OPS,
        apply: moe::apply,
    },
    Family {
        ops: linear_attention::OPS,
        apply: linear_attention::apply,
    },
    Family {
        ops: stored::OPS,
        apply: stored::apply,
    },
    Family {
        ops: vision::OPS,
        apply: vision::apply,
    },
    Family {
        ops: selection::OPS,
        apply: selection::apply,
    },
    Family {
        ops: compression::OPS,
        apply: compression::apply,
    },
    Family {
        ops: mixing::OPS,
        apply: mixing::apply,
    },
];

/// Every registered op, in registry order.
pub fn all() -> impl Iterator<Item = &'static OpSpec> {
    FAMILIES.iter().flat_map(|f| f.ops.iter())
}

pub fn lookup(name: &str) -> Option<&'static OpSpec> {
    all().find(|o| o.name == name)
}

/// What an op needs from earlier positions at a decode step: what a cache must keep for it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum History {
    /// Nothing: the op sees only the current token.
    None,
    /// The value of this input at every attended past position (attention keys and values).
    Input(usize),
    /// The last `kernel - 1` values of this input (a causal convolution's window).
    KernelSteps(usize),
    /// The recurrent state the op declares (`OpOut::state`), carried from step to step.
    State,
}

impl History {
    pub fn describe(self) -> Option<&'static str> {
        Some(match self {
            History::None => return None,
            History::Input(1) => {
                "reads input 2 at every attended past position (cache it per token)"
            }
            History::Input(_) => {
                "reads an input at every attended past position (cache it per token)"
            }
            History::KernelSteps(_) => {
                "reads its input's last kernel-1 steps (constant conv state)"
            }
            History::State => "carries its recurrent state (constant per sequence)",
        })
    }
}

/// What `op` reads from earlier positions during decode. This, and the shapes flowing into the
/// op, decide what a layer must cache (`Analysis::decode_reads`).
pub fn history(op: &str) -> History {
    match op {
        "attention_score" | "attention_apply" => History::Input(1),
        "conv1d" => History::KernelSteps(0),
        "gated_delta_rule" | "linear_attention" | "compress" => History::State,
        _ => History::None,
    }
}

/// Ops whose output only rearranges or shares their inputs' values (no new values per token):
/// a cache of their output is a cache of their inputs.
pub fn is_view(op: &str) -> bool {
    matches!(
        op,
        "head_split"
            | "head_merge"
            | "broadcast_heads"
            | "concat"
            | "spatial_merge"
            | "expand"
            | "transpose"
    )
}

/// The registry as text, for `harch-worker ops` and agent prompts.
pub fn registry_text() -> String {
    let mut s = String::from(
        "Primitive ops (shapes are per token; `ctx` is the attended-context axis; L = attended positions)\n\n",
    );
    for o in all() {
        let arity = match o.arity {
            Some(n) => n.to_string(),
            None => "2+".into(),
        };
        s.push_str(&format!(
            "{name}  [{kind}; inputs: {arity}; args: {args}]\n  {summary}\n  shape:   {shape}\n  weights: {weights}\n  params:  {params}\n  flops:   {flops}\n\n",
            name = o.name,
            kind = o.shape_kind.as_str(),
            args = if o.args.is_empty() { "none".to_string() } else { o.args.join(", ") },
            summary = o.summary,
            shape = o.shape,
            weights = o.weights,
            params = o.params,
            flops = o.flops,
        ));
        if let Some(d) = history(o.name).describe() {
            s.insert_str(s.len() - 1, &format!("  decode:  {d}\n"));
        }
    }
    s
}

/// What an op produces for one instance.
#[derive(Clone, Debug)]
pub struct OpOut {
    pub shape: Shape,
    pub leaves: Vec<Leaf>,
    /// Parameters touched per token when fewer than all are (grouped experts).
    pub params_active: Option<Q>,
    pub flops_fixed: Q,
    pub flops_per_ctx: Q,
    /// Recurrent state kept per sequence.
    pub state: Option<Vec<Q>>,
    /// For a selection (`topk_select`): how many positions it selects. An attention that takes
    /// it as its third input attends at most that many.
    pub selection: Option<Q>,
    /// For a compressor (`compress`): its output is one entry per so many tokens. A cache of
    /// it grows by one entry per that many tokens; an attention over it attends floor(t / r).
    pub compressed: Option<Q>,
}

impl OpOut {
    fn shape(shape: Shape) -> OpOut {
        OpOut {
            shape,
            leaves: vec![],
            params_active: None,
            flops_fixed: Q::zero(),
            flops_per_ctx: Q::zero(),
            state: None,
            selection: None,
            compressed: None,
        }
    }
    fn flops(mut self, fixed: Q) -> OpOut {
        self.flops_fixed = fixed;
        self
    }
    fn leaf(mut self, role: &'static str, kind: LeafKind, shape: Vec<Q>) -> OpOut {
        self.leaves.push(Leaf {
            role,
            name: role,
            kind,
            shape,
        });
        self
    }
}

/// A shape-rule violation; `code` is one of the S0xx codes.
#[derive(Clone, Debug)]
pub struct OpError {
    pub code: &'static str,
    pub message: String,
    pub hint: Option<String>,
}

fn err<T>(code: &'static str, message: String) -> Result<T, OpError> {
    Err(OpError {
        code,
        message,
        hint: None,
    })
}

/// Arguments of one node, already bound.
pub trait Args {
    fn int(&self, name: &str) -> Result<Q, OpError>;
    fn opt_int(&self, name: &str) -> Result<Option<Q>, OpError>;
    fn flag(&self, name: &str) -> Result<bool, OpError>;
    fn text(&self, name: &str) -> Result<Option<String>, OpError>;
    /// A list of integers (`sections: config.rope_parameters.mrope_section`); `None` when the
    /// node does not give the argument.
    fn int_list(&self, name: &str) -> Result<Option<Vec<i128>>, OpError>;
    /// The node's explicit `shape:` (parameter and buffer nodes), evaluated.
    fn shape(&self) -> Result<Option<Vec<Q>>, OpError>;
}

use crate::diag::code;

fn lit(v: i128) -> Q {
    Q::lit(v)
}

fn last<'a>(s: &'a Shape, what: &str) -> Result<&'a Q, OpError> {
    match s.last() {
        Some(Axis::Dim(q)) => Ok(q),
        Some(Axis::Ctx) => err(
            code::SHAPE_AXIS,
            format!("{what}: last axis is the context axis"),
        ),
        None => err(
            code::SHAPE_RANK,
            format!("{what}: input has no axes (a token id?)"),
        ),
    }
}

fn numel(s: &Shape) -> (Q, bool) {
    let mut q = Q::one();
    let mut ctx = false;
    for a in s {
        match a {
            Axis::Dim(d) => q = &q * d,
            Axis::Ctx => ctx = true,
        }
    }
    (q, ctx)
}

fn lead(s: &Shape) -> Q {
    numel(&s[..s.len().saturating_sub(1)].to_vec()).0
}

fn expect_last(s: &Shape, want: &Q, what: &str) -> Result<(), OpError> {
    let got = last(s, what)?;
    if got.v != want.v {
        return Err(OpError {
            code: code::SHAPE_AXIS,
            message: format!(
                "{what}: input's last axis is {} but the op expects {}",
                got.v, want.v
            ),
            hint: Some(format!(
                "input shape is {}; check the producing node or this op's args",
                show_shape(s)
            )),
        });
    }
    Ok(())
}

/// Elementwise flops: `k * numel`, with a context axis going to the per-ctx term.
fn elementwise(mut out: OpOut, s: &Shape, k: i128) -> OpOut {
    let (n, ctx) = numel(s);
    let f = &lit(k) * &n;
    if ctx {
        out.flops_per_ctx = f;
    } else {
        out.flops_fixed = f;
    }
    out
}

pub fn apply(op: &str, inputs: &[Shape], a: &dyn Args) -> Result<OpOut, OpError> {
    match FAMILIES.iter().find(|f| f.ops.iter().any(|o| o.name == op)) {
        Some(f) => (f.apply)(op, inputs, a),
        None => err(code::SHAPE_ARITY, format!("no such op `{op}`")),
    }
}
