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
}

impl LeafKind {
    pub fn as_str(self) -> &'static str {
        match self {
            LeafKind::Matrix => "matrix",
            LeafKind::Vector => "vector",
            LeafKind::Table => "table",
        }
    }
}

#[derive(Clone, Debug)]
pub struct Leaf {
    /// Leaf role within the op (`weight`, `bias`, ...); the default checkpoint name too.
    pub role: &'static str,
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

pub static OPS: &[OpSpec] = &[
    op!(
        "embedding",
        Source,
        Some(1),
        ["vocab", "dim"],
        "Look up one row of a table per token id.",
        "[] -> [dim]",
        "weight [vocab, dim] (table)",
        "vocab*dim",
        "0 (a gather)"
    ),
    op!(
        "linear",
        AxisReplace,
        Some(1),
        ["in", "out", "bias?", "tied?"],
        "y = x W^T (+ b). `tied: true` reuses another node's table and owns no weight.",
        "[..., in] -> [..., out]",
        "weight [out, in] (matrix); bias [out] when bias",
        "in*out (+out)",
        "2*in*out per leading element"
    ),
    op!(
        "grouped_linear",
        AxisReplace,
        Some(1),
        ["experts", "active", "in", "out", "bias?"],
        "All experts' weights in one tensor [experts, out, in]; `active` of them run per token.",
        "[..., in] -> [..., out]",
        "weight [experts, out, in] (matrix); bias [experts, out] when bias",
        "experts*in*out (active: active*in*out)",
        "2*active*in*out"
    ),
    op!(
        "rmsnorm",
        Preserve,
        Some(1),
        ["dim", "weight?"],
        "RMS normalization over the last axis with a learned scale (weight: false for none).",
        "[..., dim] -> same",
        "weight [dim] (vector)",
        "dim",
        "4*numel"
    ),
    op!(
        "layernorm",
        Preserve,
        Some(1),
        ["dim", "bias?"],
        "Layer normalization over the last axis.",
        "[..., dim] -> same",
        "weight [dim]; bias [dim] when bias (default true)",
        "dim (+dim)",
        "5*numel"
    ),
    op!(
        "l2norm",
        Preserve,
        Some(1),
        ["dim"],
        "L2 normalization over the last axis, no weight.",
        "[..., dim] -> same",
        "none",
        "0",
        "3*numel"
    ),
    op!(
        "rope",
        Preserve,
        Some(1),
        ["dim", "rotary_dim?", "scaling?", "interleaved?"],
        "Rotary position embedding on the first `rotary_dim` channels of the last axis. `scaling` names the rope type (default, linear, dynamic, yarn, llama3, longrope).",
        "[..., dim] -> same",
        "none",
        "0",
        "3*rotary_dim per leading element"
    ),
    op!(
        "head_split",
        Reshape,
        Some(1),
        ["heads", "head_dim"],
        "View the last axis as [heads, head_dim].",
        "[heads*head_dim] -> [heads, head_dim]",
        "none",
        "0",
        "0"
    ),
    op!(
        "head_merge",
        Reshape,
        Some(1),
        [],
        "Flatten [heads, head_dim] into one axis.",
        "[heads, head_dim] -> [heads*head_dim]",
        "none",
        "0",
        "0"
    ),
    op!(
        "broadcast_heads",
        Broadcast,
        Some(1),
        ["heads"],
        "Share one vector with every head (MLA's rope key).",
        "[d] or [1, d] -> [heads, d]",
        "none",
        "0",
        "0"
    ),
    op!(
        "attention_score",
        Contract,
        Some(2),
        ["mask?", "window?", "chunk?"],
        "Scores q.k for every attended position. Inputs [q, k]; q heads must be a multiple of k heads (GQA). mask: causal (default) or bidirectional; window: sliding-window length.",
        "[h, d], [hk, d] -> [h, ctx]",
        "none",
        "0",
        "2*h*d*L"
    ),
    op!(
        "softmax",
        Preserve,
        Some(1),
        ["sinks?"],
        "Softmax over the context axis; `sinks: <heads>` adds a learned per-head sink logit.",
        "[h, ctx] -> same",
        "sinks [heads] (vector) when sinks",
        "heads when sinks",
        "5*h*L"
    ),
    op!(
        "attention_apply",
        Contract,
        Some(2),
        [],
        "Weighted sum of values. Inputs [probs, v]; probs heads a multiple of v heads.",
        "[h, ctx], [hk, dv] -> [h, dv]",
        "none",
        "0",
        "2*h*dv*L"
    ),
    op!(
        "slice",
        AxisSelect,
        Some(1),
        ["out", "start?"],
        "Take `out` channels of the last axis starting at `start` (default 0).",
        "[..., n] -> [..., out]",
        "none",
        "0",
        "0"
    ),
    op!(
        "concat",
        AxisConcat,
        None,
        ["axis?"],
        "Concatenate along an axis (default the last); other axes must agree.",
        "[..., a], [..., b] -> [..., a+b]",
        "none",
        "0",
        "0"
    ),
    op!(
        "add",
        Broadcast,
        None,
        [],
        "Elementwise sum of two or more inputs of the same shape (a residual add).",
        "[s], [s] -> [s]",
        "none",
        "0",
        "numel per extra input"
    ),
    op!(
        "mul",
        Broadcast,
        None,
        [],
        "Elementwise product; trailing axes broadcast (a gate [h, 1] times [h, d]).",
        "[s], [s] -> [s]",
        "none",
        "0",
        "numel per extra input"
    ),
    op!(
        "silu",
        Preserve,
        Some(1),
        [],
        "x*sigmoid(x).",
        "same",
        "none",
        "0",
        "4*numel"
    ),
    op!(
        "gelu",
        Preserve,
        Some(1),
        [],
        "GELU.",
        "same",
        "none",
        "0",
        "8*numel"
    ),
    op!(
        "relu",
        Preserve,
        Some(1),
        [],
        "max(x, 0).",
        "same",
        "none",
        "0",
        "numel"
    ),
    op!(
        "sigmoid",
        Preserve,
        Some(1),
        [],
        "Logistic sigmoid.",
        "same",
        "none",
        "0",
        "4*numel"
    ),
    op!(
        "softplus",
        Preserve,
        Some(1),
        [],
        "log(1+exp(x)).",
        "same",
        "none",
        "0",
        "4*numel"
    ),
    op!(
        "tanh",
        Preserve,
        Some(1),
        [],
        "tanh.",
        "same",
        "none",
        "0",
        "4*numel"
    ),
    op!(
        "exp",
        Preserve,
        Some(1),
        [],
        "exp.",
        "same",
        "none",
        "0",
        "numel"
    ),
    op!(
        "glu",
        AxisReplace,
        Some(1),
        ["act", "interleaved?"],
        "Gated linear unit on a fused [gate|up] axis: act(gate) * up. act: silu or clamped_swiglu (gpt-oss).",
        "[..., 2n] -> [..., n]",
        "none",
        "0",
        "6*n"
    ),
    op!(
        "router",
        Explicit,
        Some(1),
        ["in", "experts", "top_k", "bias?", "score_bias?"],
        "Expert router: logits = x W^T, then top-k. bias: a linear bias [experts]; score_bias: a selection-only bias `e_score_correction_bias` [experts].",
        "[in] -> [top_k]",
        "weight [experts, in] (matrix); bias [experts]; e_score_correction_bias [experts]",
        "experts*in (+experts)",
        "2*in*experts"
    ),
    op!(
        "moe_combine",
        Explicit,
        Some(2),
        ["top_k"],
        "Weighted sum of the active experts' outputs. Inputs [experts, router].",
        "[d], [top_k] -> [d]",
        "none",
        "0",
        "2*top_k*d"
    ),
    op!(
        "conv1d",
        Preserve,
        Some(1),
        ["channels", "kernel", "bias?"],
        "Causal depthwise 1-D convolution over time.",
        "[channels] -> same",
        "weight [channels, 1, kernel] (matrix); bias [channels]",
        "channels*kernel",
        "2*channels*kernel"
    ),
    op!(
        "delta_gate",
        Preserve,
        Some(1),
        ["heads"],
        "Gated DeltaNet decay g = -exp(A_log) * softplus(a + dt_bias), per value head.",
        "[heads] -> same",
        "A_log [heads] (vector); dt_bias [heads] (vector)",
        "2*heads",
        "8*heads"
    ),
    op!(
        "gated_delta_rule",
        Explicit,
        Some(5),
        [],
        "Recurrent update of linear attention (Gated DeltaNet). Inputs [q, k, v, g, beta] with q,k [hk, dk], v [hv, dv], g and beta [hv]; keeps state [hv, dk, dv] per sequence.",
        "-> [hv, dv]; state [hv, dk, dv]",
        "none",
        "0",
        "8*hv*dk*dv"
    ),
];

pub fn lookup(name: &str) -> Option<&'static OpSpec> {
    OPS.iter().find(|o| o.name == name)
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
        "gated_delta_rule" => History::State,
        _ => History::None,
    }
}

/// Ops whose output only rearranges or shares their inputs' values (no new values per token):
/// a cache of their output is a cache of their inputs.
pub fn is_view(op: &str) -> bool {
    matches!(
        op,
        "head_split" | "head_merge" | "broadcast_heads" | "concat"
    )
}

/// The registry as text, for `harch-worker ops` and agent prompts.
pub fn registry_text() -> String {
    let mut s = String::from(
        "Primitive ops (shapes are per token; `ctx` is the attended-context axis; L = attended positions)\n\n",
    );
    for o in OPS {
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
        }
    }
    fn flops(mut self, fixed: Q) -> OpOut {
        self.flops_fixed = fixed;
        self
    }
    fn leaf(mut self, role: &'static str, kind: LeafKind, shape: Vec<Q>) -> OpOut {
        self.leaves.push(Leaf { role, kind, shape });
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
    let x = inputs.first();
    let x0 = || x.cloned().unwrap_or_default();
    match op {
        "embedding" => {
            if !x0().is_empty() {
                return err(
                    code::SHAPE_RANK,
                    format!(
                        "embedding takes token ids (shape []), got {}",
                        show_shape(&x0())
                    ),
                );
            }
            let (v, d) = (a.int("vocab")?, a.int("dim")?);
            Ok(
                OpOut::shape(vec![Axis::Dim(d.clone())]).leaf(
                    "weight",
                    LeafKind::Table,
                    vec![v, d],
                ),
            )
        }
        "linear" => {
            let (i, o) = (a.int("in")?, a.int("out")?);
            let s = x0();
            expect_last(&s, &i, "linear")?;
            let mut shape = s.clone();
            *shape.last_mut().expect("checked non-empty") = Axis::Dim(o.clone());
            let mut out = OpOut::shape(shape).flops(&(&(&lit(2) * &i) * &o) * &lead(&s));
            if !a.flag("tied")? {
                out = out.leaf("weight", LeafKind::Matrix, vec![o.clone(), i]);
                if a.flag("bias")? {
                    out = out.leaf("bias", LeafKind::Vector, vec![o]);
                }
            }
            Ok(out)
        }
        "grouped_linear" => {
            let (e, k, i, o) = (
                a.int("experts")?,
                a.int("active")?,
                a.int("in")?,
                a.int("out")?,
            );
            let s = x0();
            expect_last(&s, &i, "grouped_linear")?;
            let mut shape = s.clone();
            *shape.last_mut().expect("checked non-empty") = Axis::Dim(o.clone());
            let per = &i * &o;
            let mut out = OpOut::shape(shape)
                .flops(&(&(&lit(2) * &k) * &per) * &lead(&s))
                .leaf("weight", LeafKind::Matrix, vec![e.clone(), o.clone(), i]);
            let mut active = &k * &per;
            if a.flag("bias")? {
                out = out.leaf("bias", LeafKind::Vector, vec![e, o.clone()]);
                active = &active + &(&k * &o);
            }
            out.params_active = Some(active);
            Ok(out)
        }
        "rmsnorm" | "layernorm" | "l2norm" => {
            let d = a.int("dim")?;
            let s = x0();
            expect_last(&s, &d, op)?;
            let k = match op {
                "rmsnorm" => 4,
                "layernorm" => 5,
                _ => 3,
            };
            let mut out = elementwise(OpOut::shape(s.clone()), &s, k);
            let has_weight = match op {
                "rmsnorm" => a.text("weight")?.is_none() || a.flag("weight")?,
                "layernorm" => true,
                _ => false,
            };
            if has_weight {
                out = out.leaf("weight", LeafKind::Vector, vec![d.clone()]);
            }
            if op == "layernorm" && (a.text("bias")?.is_none() || a.flag("bias")?) {
                out = out.leaf("bias", LeafKind::Vector, vec![d]);
            }
            Ok(out)
        }
        "rope" => {
            let d = a.int("dim")?;
            let s = x0();
            expect_last(&s, &d, "rope")?;
            let r = a.opt_int("rotary_dim")?.unwrap_or(d.clone());
            if r.v > d.v || r.v <= 0 || r.v % 2 != 0 {
                return err(
                    code::SHAPE_AXIS,
                    format!(
                        "rope: rotary_dim {} must be even and within the head dim {}",
                        r.v, d.v
                    ),
                );
            }
            Ok(OpOut::shape(s.clone()).flops(&(&lit(3) * &r) * &lead(&s)))
        }
        "head_split" => {
            let (h, d) = (a.int("heads")?, a.int("head_dim")?);
            let s = x0();
            let n = last(&s, "head_split")?;
            let hd = &h * &d;
            if hd.overflowed() {
                return err(
                    code::OVERFLOW,
                    format!("head_split: heads*head_dim = {}*{} overflows", h.v, d.v),
                );
            }
            if n.v != hd.v {
                return Err(OpError {
                    code: code::SHAPE_HEADS,
                    message: format!(
                        "head_split: last axis {} is not heads*head_dim = {}*{} = {}",
                        n.v, h.v, d.v, hd.v
                    ),
                    hint: Some("split a flat axis only when it really is heads*head_dim".into()),
                });
            }
            let mut shape = s[..s.len() - 1].to_vec();
            shape.push(Axis::Dim(h));
            shape.push(Axis::Dim(d));
            Ok(OpOut::shape(shape))
        }
        "head_merge" => {
            let s = x0();
            if s.len() < 2 {
                return err(
                    code::SHAPE_RANK,
                    format!("head_merge needs [heads, head_dim], got {}", show_shape(&s)),
                );
            }
            let (h, d) = (s[s.len() - 2].clone(), s[s.len() - 1].clone());
            let (Some(h), Some(d)) = (h.dim(), d.dim()) else {
                return err(
                    code::SHAPE_AXIS,
                    "head_merge: cannot merge the context axis".into(),
                );
            };
            let mut shape = s[..s.len() - 2].to_vec();
            shape.push(Axis::Dim(h * d));
            Ok(OpOut::shape(shape))
        }
        "broadcast_heads" => {
            let h = a.int("heads")?;
            let s = x0();
            let d = last(&s, "broadcast_heads")?.clone();
            let ok = s.len() == 1 || (s.len() == 2 && s[0].dim().map(|q| q.v) == Some(1));
            if !ok {
                return err(
                    code::SHAPE_RANK,
                    format!(
                        "broadcast_heads takes [d] or [1, d], got {}",
                        show_shape(&s)
                    ),
                );
            }
            Ok(OpOut::shape(vec![Axis::Dim(h), Axis::Dim(d)]))
        }
        "attention_score" | "attention_apply" => {
            if inputs.len() != 2 {
                return err(
                    code::SHAPE_ARITY,
                    format!("{op} takes 2 inputs, got {}", inputs.len()),
                );
            }
            let (q, k) = (&inputs[0], &inputs[1]);
            if q.len() != 2 || k.len() != 2 {
                return Err(OpError {
                    code: code::SHAPE_RANK,
                    message: format!("{op}: inputs must be [heads, dim]; got {} and {}", show_shape(q), show_shape(k)),
                    hint: Some("split heads first (head_split), and broadcast a shared key (broadcast_heads)".into()),
                });
            }
            let hq = q[0]
                .dim()
                .ok_or_else(|| OpError {
                    code: code::SHAPE_AXIS,
                    message: format!("{op}: first input's heads axis is ctx"),
                    hint: None,
                })?
                .clone();
            let hk = k[0]
                .dim()
                .ok_or_else(|| OpError {
                    code: code::SHAPE_AXIS,
                    message: format!("{op}: second input's heads axis is ctx"),
                    hint: None,
                })?
                .clone();
            if hk.v <= 0 || hq.v.checked_rem(hk.v) != Some(0) {
                return Err(OpError {
                    code: code::SHAPE_HEADS,
                    message: format!(
                        "{op}: {} query heads are not a multiple of {} key/value heads",
                        hq.v, hk.v
                    ),
                    hint: Some("GQA needs n_heads % n_kv_heads == 0".into()),
                });
            }
            if op == "attention_score" {
                let (dq, dk) = (last(q, op)?, last(k, op)?);
                if dq.v != dk.v {
                    return Err(OpError {
                        code: code::SHAPE_HEADS,
                        message: format!("attention_score: query head dim {} differs from key head dim {}", dq.v, dk.v),
                        hint: Some("q and k must have the same head dim (MLA: concat nope and rope parts on both)".into()),
                    });
                }
                let mut out = OpOut::shape(vec![Axis::Dim(hq.clone()), Axis::Ctx]);
                out.flops_per_ctx = &(&lit(2) * &hq) * dq;
                Ok(out)
            } else {
                if q[1] != Axis::Ctx {
                    return err(
                        code::SHAPE_AXIS,
                        format!(
                            "attention_apply: first input must be probabilities [h, ctx], got {}",
                            show_shape(q)
                        ),
                    );
                }
                let dv = last(k, op)?.clone();
                let mut out = OpOut::shape(vec![Axis::Dim(hq.clone()), Axis::Dim(dv.clone())]);
                out.flops_per_ctx = &(&lit(2) * &hq) * &dv;
                Ok(out)
            }
        }
        "softmax" => {
            let s = x0();
            let mut out = elementwise(OpOut::shape(s.clone()), &s, 5);
            if let Some(h) = a.opt_int("sinks")? {
                out = out.leaf("sinks", LeafKind::Vector, vec![h]);
            }
            Ok(out)
        }
        "slice" => {
            let s = x0();
            let n = last(&s, "slice")?.clone();
            let o = a.int("out")?;
            let start = a.opt_int("start")?.map(|q| q.v).unwrap_or(0);
            let end = start.saturating_add(o.v);
            if start < 0 || o.v <= 0 || end > n.v {
                return err(
                    code::SHAPE_AXIS,
                    format!("slice: [{start}, {end}) is outside an axis of {}", n.v),
                );
            }
            let mut shape = s;
            *shape.last_mut().expect("checked non-empty") = Axis::Dim(o);
            Ok(OpOut::shape(shape))
        }
        "concat" => {
            if inputs.len() < 2 {
                return err(
                    code::SHAPE_ARITY,
                    format!("concat takes 2 or more inputs, got {}", inputs.len()),
                );
            }
            let rank = inputs[0].len();
            let axis = a.opt_int("axis")?.map(|q| q.v).unwrap_or(-1);
            let ax = if axis < 0 { rank as i128 + axis } else { axis };
            if ax < 0 || ax >= rank as i128 {
                return err(
                    code::SHAPE_RANK,
                    format!("concat: axis {axis} is outside rank {rank}"),
                );
            }
            let ax = ax as usize;
            let mut total = Q::zero();
            for (n, s) in inputs.iter().enumerate() {
                if s.len() != rank {
                    return err(
                        code::SHAPE_RANK,
                        format!(
                            "concat: input {} has rank {} but input 1 has rank {rank}",
                            n + 1,
                            s.len()
                        ),
                    );
                }
                for (j, (p, q)) in s.iter().zip(&inputs[0]).enumerate() {
                    if j != ax && p != q {
                        return Err(OpError {
                            code: code::SHAPE_AXIS,
                            message: format!(
                                "concat: input {} is {} but input 1 is {}; only axis {ax} may differ",
                                n + 1,
                                show_shape(s),
                                show_shape(&inputs[0])
                            ),
                            hint: Some(
                                "broadcast or split heads so that every other axis agrees".into(),
                            ),
                        });
                    }
                }
                match s[ax].dim() {
                    Some(q) => total = &total + q,
                    None => return err(code::SHAPE_AXIS, "concat along the context axis".into()),
                }
            }
            let mut shape = inputs[0].clone();
            shape[ax] = Axis::Dim(total);
            Ok(OpOut::shape(shape))
        }
        "add" | "mul" => {
            if inputs.len() < 2 {
                return err(
                    code::SHAPE_ARITY,
                    format!("{op} takes 2 or more inputs, got {}", inputs.len()),
                );
            }
            let mut shape = inputs[0].clone();
            for (n, s) in inputs.iter().enumerate().skip(1) {
                shape = broadcast(&shape, s).ok_or_else(|| OpError {
                    code: code::SHAPE_AXIS,
                    message: format!(
                        "{op}: input {} is {} and cannot combine with {}",
                        n + 1,
                        show_shape(s),
                        show_shape(&shape)
                    ),
                    hint: Some(
                        "elementwise inputs must have equal shapes (or size-1 axes that broadcast)"
                            .into(),
                    ),
                })?;
            }
            let k = inputs.len() as i128 - 1;
            Ok(elementwise(OpOut::shape(shape.clone()), &shape, k))
        }
        "glu" => {
            let s = x0();
            let n = last(&s, "glu")?.clone();
            let half = n.div_exact(&lit(2)).ok_or_else(|| OpError {
                code: code::SHAPE_AXIS,
                message: format!("glu: axis {} is odd", n.v),
                hint: None,
            })?;
            match a.text("act")?.as_deref() {
                Some("silu") | Some("clamped_swiglu") | Some("gelu") => {}
                other => {
                    return err(
                        code::SHAPE_AXIS,
                        format!("glu: act must be silu, gelu or clamped_swiglu, got {other:?}"),
                    );
                }
            }
            let mut shape = s.clone();
            *shape.last_mut().expect("checked") = Axis::Dim(half.clone());
            Ok(OpOut::shape(shape).flops(&(&lit(6) * &half) * &lead(&s)))
        }
        "router" => {
            let (i, e, k) = (a.int("in")?, a.int("experts")?, a.int("top_k")?);
            let s = x0();
            expect_last(&s, &i, "router")?;
            if k.v > e.v || k.v <= 0 {
                return err(
                    code::SHAPE_AXIS,
                    format!("router: top_k {} must be in 1..={}", k.v, e.v),
                );
            }
            let mut out = OpOut::shape(vec![Axis::Dim(k)])
                .flops(&(&lit(2) * &i) * &e)
                .leaf("weight", LeafKind::Matrix, vec![e.clone(), i]);
            if a.flag("bias")? {
                out = out.leaf("bias", LeafKind::Vector, vec![e.clone()]);
            }
            if a.flag("score_bias")? {
                out = out.leaf("e_score_correction_bias", LeafKind::Vector, vec![e]);
            }
            Ok(out)
        }
        "moe_combine" => {
            if inputs.len() != 2 {
                return err(
                    code::SHAPE_ARITY,
                    format!(
                        "moe_combine takes [experts, router], got {} inputs",
                        inputs.len()
                    ),
                );
            }
            let k = a.int("top_k")?;
            let r = last(&inputs[1], "moe_combine")?;
            if r.v != k.v {
                return err(
                    code::SHAPE_AXIS,
                    format!(
                        "moe_combine: router gives {} weights but top_k is {}",
                        r.v, k.v
                    ),
                );
            }
            let (n, _) = numel(&inputs[0]);
            Ok(OpOut::shape(inputs[0].clone()).flops(&(&lit(2) * &k) * &n))
        }
        "conv1d" => {
            let (c, k) = (a.int("channels")?, a.int("kernel")?);
            let s = x0();
            expect_last(&s, &c, "conv1d")?;
            let mut out = OpOut::shape(s).flops(&(&lit(2) * &c) * &k).leaf(
                "weight",
                LeafKind::Matrix,
                vec![c.clone(), lit(1), k],
            );
            if a.flag("bias")? {
                out = out.leaf("bias", LeafKind::Vector, vec![c]);
            }
            Ok(out)
        }
        "delta_gate" => {
            let h = a.int("heads")?;
            let s = x0();
            expect_last(&s, &h, "delta_gate")?;
            Ok(OpOut::shape(s)
                .flops(&lit(8) * &h)
                .leaf("A_log", LeafKind::Vector, vec![h.clone()])
                .leaf("dt_bias", LeafKind::Vector, vec![h]))
        }
        "gated_delta_rule" => {
            if inputs.len() != 5 {
                return err(
                    code::SHAPE_ARITY,
                    format!(
                        "gated_delta_rule takes [q, k, v, g, beta], got {} inputs",
                        inputs.len()
                    ),
                );
            }
            let dims = |s: &Shape, what: &str| -> Result<Vec<Q>, OpError> {
                s.iter()
                    .map(|a| {
                        a.dim().cloned().ok_or_else(|| OpError {
                            code: code::SHAPE_AXIS,
                            message: format!("gated_delta_rule: {what} has a context axis"),
                            hint: None,
                        })
                    })
                    .collect()
            };
            let (q, k, v, g, b) = (
                dims(&inputs[0], "q")?,
                dims(&inputs[1], "k")?,
                dims(&inputs[2], "v")?,
                dims(&inputs[3], "g")?,
                dims(&inputs[4], "beta")?,
            );
            if q.len() != 2 || k.len() != 2 || v.len() != 2 || g.len() != 1 || b.len() != 1 {
                return err(
                    code::SHAPE_RANK,
                    "gated_delta_rule: q, k, v must be [heads, dim]; g and beta [heads]".into(),
                );
            }
            if q[0].v != k[0].v || q[1].v != k[1].v {
                return err(
                    code::SHAPE_HEADS,
                    format!(
                        "gated_delta_rule: q [{}, {}] and k [{}, {}] differ",
                        q[0].v, q[1].v, k[0].v, k[1].v
                    ),
                );
            }
            let (hv, dk, dv) = (v[0].clone(), k[1].clone(), v[1].clone());
            if hv.v % k[0].v != 0 || g[0].v != hv.v || b[0].v != hv.v {
                return err(
                    code::SHAPE_HEADS,
                    format!(
                        "gated_delta_rule: {} value heads must be a multiple of {} key heads and match g ({}) and beta ({})",
                        hv.v, k[0].v, g[0].v, b[0].v
                    ),
                );
            }
            let mut out = OpOut::shape(vec![Axis::Dim(hv.clone()), Axis::Dim(dv.clone())])
                .flops(&(&(&lit(8) * &hv) * &dk) * &dv);
            out.state = Some(vec![hv, dk, dv]);
            Ok(out)
        }
        act if ACTIVATIONS.iter().any(|(n, _)| *n == act) => {
            let k = ACTIVATIONS
                .iter()
                .find(|(n, _)| *n == act)
                .map(|(_, k)| *k)
                .unwrap_or(1);
            let s = x0();
            Ok(elementwise(OpOut::shape(s.clone()), &s, k))
        }
        other => err(code::SHAPE_ARITY, format!("no such op `{other}`")),
    }
}

/// Numpy-style trailing broadcast of two shapes.
fn broadcast(a: &Shape, b: &Shape) -> Option<Shape> {
    let n = a.len().max(b.len());
    let mut out = Vec::with_capacity(n);
    for i in 0..n {
        let x = (i + a.len()).checked_sub(n).map(|j| &a[j]);
        let y = (i + b.len()).checked_sub(n).map(|j| &b[j]);
        out.push(match (x, y) {
            (Some(x), None) => x.clone(),
            (None, Some(y)) => y.clone(),
            (Some(x), Some(y)) if x == y => x.clone(),
            (Some(Axis::Dim(q)), Some(y)) if q.v == 1 => y.clone(),
            (Some(x), Some(Axis::Dim(q))) if q.v == 1 => x.clone(),
            _ => return None,
        });
    }
    Some(out)
}
