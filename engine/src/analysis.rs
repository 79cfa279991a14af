//! The result of one evaluation: tables keyed by node, and the quantities derived from them.
//!
//! Tables hold only what the walk must decide (shapes, per-instance params and FLOPs, instance
//! counts, weight storage, caches). Totals, KV bytes and the like are computed from the tables
//! when asked and never stored, so they cannot drift from the graph.

use std::collections::BTreeSet;

use indexmap::IndexMap;

use crate::diag::{Location, SpecError};
use crate::ir::Growth;
use crate::ops::{LeafKind, Shape};
use crate::q::Q;

/// A bound argument value, kept for the guards (masks, windows, rope settings).
#[derive(Clone, Debug)]
pub struct ArgValue {
    pub int: Option<i128>,
    pub text: String,
}

/// Whether a node's FLOPs count in prefill, decode or both (decode variants replace a graph
/// for decode only).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Phase {
    Both,
    Prefill,
    Decode,
}

/// Where an encoder row runs: the image input it encodes and the positions (patches, or merged
/// patches after a spatial merge) one image gives it. An encoder runs once per image over all
/// of them, bidirectionally, and keeps nothing across decode steps.
#[derive(Clone, Debug, PartialEq)]
pub struct PerImage {
    pub input: String,
    pub positions: Q,
}

/// How many of the earlier positions one key set spans for a query: all of them, the last
/// `window`, one entry per `stride` tokens, each capped by a selection of `selected`.
#[derive(Clone, Debug, Default)]
pub struct KeySpan {
    pub window: Option<Q>,
    pub selected: Option<Q>,
    pub stride: Option<Q>,
}

impl KeySpan {
    pub fn into_parts(self) -> (Option<Q>, Option<Q>, Option<Q>) {
        (self.window, self.selected, self.stride)
    }

    /// The most positions it lets a query attend: its window or its selection, whichever is
    /// smaller (each caps the sum over positions the same way: min(cap, t) for query t).
    pub fn cap(&self) -> Option<&Q> {
        match (&self.window, &self.selected) {
            (Some(w), Some(k)) => Some(if k.v < w.v { k } else { w }),
            (w, k) => w.as_ref().or(k.as_ref()),
        }
    }
}

#[derive(Clone, Debug)]
pub struct NodeRow {
    /// Path of node ids from the top, e.g. `layers[moe].attention.kv_b_proj`.
    pub id: String,
    /// The op name, or `component:<name>` for a component instance.
    pub op: String,
    /// Innermost enclosing component role.
    pub role: String,
    /// Role of the top-level node this sits under (`mtp` for multi-token prediction).
    pub top_role: Option<String>,
    /// Component this node belongs to (empty at top level).
    pub component: String,
    pub stack_group: Option<String>,
    pub shape: Shape,
    /// Copies in the checkpoint (layers × experts).
    pub count: Q,
    /// Copies used per token.
    pub active: Q,
    pub params: Q,
    pub params_active: Q,
    pub flops_fixed: Q,
    pub flops_per_ctx: Q,
    /// Attended-context cap that applies to this node's per-ctx FLOPs.
    pub window: Option<Q>,
    /// Positions a selection (`topk_select`) lets this node attend, at most: caps its per-ctx
    /// FLOPs like a window, but what is stored still grows per token.
    pub selected: Option<Q>,
    /// This node's values are one entry per so many tokens (a compressor's output).
    pub compressed: Option<Q>,
    /// This node attends compressed entries, one per so many positions: at position t it
    /// spans floor(t / stride) of them (then capped by a selection).
    pub stride: Option<Q>,
    /// Further key sets this node attends in the same softmax (scores concatenated along the
    /// context axis: DeepSeek-V4 attends its window and its compressed entries at once), each
    /// counted by its own law beside the node's own `window`, `selected` and `stride`.
    pub joint: Vec<KeySpan>,
    pub phase: Phase,
    pub args: IndexMap<String, ArgValue>,
    /// For an op: per `in:` edge, the rows that produce that input (the dataflow edges).
    pub inputs: Vec<Vec<usize>>,
    /// For a row of a decode variant: the main-graph row of the same node id and shape.
    pub twin: Option<usize>,
    /// For a row of an encoder (fed by an image input, not the token stream): the input and
    /// the positions each image gives it.
    pub per_image: Option<PerImage>,
    pub loc: Location,
}

impl NodeRow {
    /// Every key set the node's per-position FLOPs run over: its own, then the joint ones.
    pub fn spans(&self) -> impl Iterator<Item = KeySpan> + '_ {
        let own = KeySpan {
            window: self.window.clone(),
            selected: self.selected.clone(),
            stride: self.stride.clone(),
        };
        std::iter::once(own).chain(self.joint.iter().cloned())
    }
}

#[derive(Clone, Debug)]
pub struct StoredTensor {
    pub name: String,
    pub dtype: String,
    pub dtype_bytes: u32,
    pub shape: Vec<Q>,
    pub scale: bool,
}

#[derive(Clone, Debug)]
pub struct WeightRow {
    pub node: usize,
    pub leaf: String,
    pub kind: LeafKind,
    /// Checkpoint name with placeholders, e.g. `model.layers.{i}.mlp.experts.{e}.up_proj.weight`.
    pub name: String,
    /// Values of each placeholder, in name order; the row stands for their cartesian product.
    pub indices: Vec<(String, Vec<i128>)>,
    pub logical: Vec<Q>,
    pub format: String,
    pub stored: Vec<StoredTensor>,
    pub count: Q,
    pub override_index: Option<usize>,
}

impl WeightRow {
    pub fn logical_numel(&self) -> Q {
        Q::product(&self.logical)
    }
}

#[derive(Clone, Debug)]
pub struct CacheRow {
    pub node: usize,
    pub kind: String,
    pub growth: Growth,
    pub window: Option<Q>,
    /// The entry's `window_src:`: the source statement said to compute `window` (M055).
    pub window_src: Option<String>,
    /// A per_token cache of a compressor's output holds one entry per `ratio` tokens.
    pub ratio: Option<Q>,
    /// Elements per token (per_token, window) or per sequence (constant), per layer.
    pub elements: Q,
    /// Positions a decode step reads when a selection caps every attention reading this
    /// cache (set after the walk from the dataflow); `None`: all it holds.
    pub read_cap: Option<Q>,
    pub dtype: String,
    pub dtype_bytes: u32,
    /// Where the dtype was decided.
    pub dtype_origin: DtypeOrigin,
    /// The source anchor (`src:`) given for the dtype: the entry's, or `quant_context`'s
    /// `cache_src` when the dtype is `quant_context.cache`.
    pub dtype_src: Option<String>,
    pub count: Q,
    pub loc: Location,
}

/// Where a cache's dtype comes from.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum DtypeOrigin {
    /// The cache entry's `dtype:`.
    Entry(String),
    /// `quant_context.cache`.
    Context(String),
    /// The config (KV-cache quantization, else `torch_dtype`/`dtype`), named by its key.
    Config(String),
    /// Nothing says: bf16.
    Fallback,
}

#[derive(Clone, Debug)]
pub struct GroupRow {
    pub stack: String,
    pub block: String,
    pub layers: Vec<i128>,
    pub top_role: Option<String>,
    /// The image input when the stack is an encoder's.
    pub encoder: Option<String>,
}

#[derive(Clone, Debug)]
pub struct StreamRow {
    pub stack: String,
    pub name: String,
    pub carries: bool,
    pub src: Option<String>,
    pub producers: Vec<String>,
    pub readers: Vec<String>,
    pub loc: Location,
}

#[derive(Clone, Debug)]
pub struct AxiomResult {
    pub component: String,
    pub node: String,
    pub message: String,
    pub loc: Location,
}

#[derive(Clone, Debug, Default)]
pub struct Analysis {
    pub model: String,
    pub symbolic: bool,
    pub dims: IndexMap<String, Q>,
    pub attrs: IndexMap<String, String>,
    pub config_reads: BTreeSet<String>,
    pub nodes: Vec<NodeRow>,
    pub weights: Vec<WeightRow>,
    pub caches: Vec<CacheRow>,
    pub groups: Vec<GroupRow>,
    pub streams: Vec<StreamRow>,
    /// Declared invariants that the evaluation contradicts.
    pub axiom_failures: Vec<AxiomResult>,
    /// Shape (S0xx) and evaluation (A0xx) errors.
    pub errors: Vec<SpecError>,
    /// Quant overrides that matched at least one leaf, by index.
    pub override_hits: BTreeSet<usize>,
    /// Rows whose values leave the evaluated graph: the model's outputs, what multi-token
    /// prediction modules and decode variants end in, values published on streams.
    pub sinks: Vec<usize>,
    /// Inputs beside `input_ids`, at the resolution evaluated.
    pub images: Vec<ImageRow>,
}

/// An image input as evaluated: its resolution, how it is cut into patches, and the tokens its
/// features take in the token stream where they join it (`masked_scatter`).
#[derive(Clone, Debug, serde::Serialize)]
pub struct ImageRow {
    pub input: String,
    pub kind: String,
    pub height: i128,
    pub width: i128,
    pub frames: i128,
    pub patch: i128,
    pub temporal_patch: i128,
    pub merge: i128,
    /// Patches of one image (positions the encoder's first rows run over).
    pub patches: i128,
    /// Token positions one image's features fill in the token stream; 0 until they join it.
    pub tokens: i128,
}

/// A row of the token stream's per-token forward pass: not multi-token prediction, not an
/// encoder (which runs once per image).
fn is_main(n: &NodeRow) -> bool {
    n.top_role.as_deref() != Some("mtp") && n.per_image.is_none()
}

impl Analysis {
    /// For an op row, one producing row per `in:` edge, in `in:` order (`input_ids` is no row
    /// and is left out). A value that merges several producers (a stack's output) counts as
    /// its last one, the row a layout change is crossed after: what deployment analysis derives
    /// communication from.
    pub fn op_inputs(&self, r: usize) -> Vec<usize> {
        self.nodes[r]
            .inputs
            .iter()
            .filter_map(|from| from.last().copied())
            .collect()
    }

    pub fn ok(&self) -> bool {
        self.errors.is_empty()
    }

    pub fn params_total(&self) -> Q {
        Q::sum(
            &self
                .nodes
                .iter()
                .map(|n| &n.params * &n.count)
                .collect::<Vec<_>>(),
        )
    }

    /// Parameters used per token by the main model. Embedding lookups are gathers, not matmuls,
    /// so they are left out (the DeepSeek and OpenAI convention); MTP heads are not part of the
    /// per-token forward pass.
    pub fn params_active(&self) -> Q {
        self.active_sum(|n| is_main(n) && n.op != "embedding")
    }

    /// Active parameters counting the embedding table too (the Qwen convention).
    pub fn params_active_with_embedding(&self) -> Q {
        self.active_sum(is_main)
    }

    fn active_sum(&self, keep: impl Fn(&NodeRow) -> bool) -> Q {
        let terms: Vec<Q> = self
            .nodes
            .iter()
            .filter(|n| keep(n))
            .map(|n| &n.params_active * &n.active)
            .collect();
        Q::sum(&terms)
    }

    pub fn params_mtp(&self) -> Q {
        Q::sum(
            &self
                .nodes
                .iter()
                .filter(|n| n.top_role.as_deref() == Some("mtp"))
                .map(|n| &n.params * &n.count)
                .collect::<Vec<_>>(),
        )
    }

    pub fn weight_bytes(&self) -> Q {
        Q::sum(
            &self
                .weights
                .iter()
                .map(|w| self.weight_row_bytes(w))
                .collect::<Vec<_>>(),
        )
    }

    pub fn weight_tensors(&self) -> Q {
        Q::sum(
            &self
                .weights
                .iter()
                .map(|w| &w.count * &Q::lit(w.stored.len() as i128))
                .collect::<Vec<_>>(),
        )
    }

    /// Bytes by stored dtype.
    pub fn weight_bytes_by_dtype(&self) -> IndexMap<String, i128> {
        self.weight_bytes_by_dtype_where(|_| true)
    }

    /// Bytes by stored dtype of the weight rows of the node rows `keep` admits (a layer
    /// group's, a component's).
    pub fn weight_bytes_by_dtype_where(
        &self,
        keep: impl Fn(&NodeRow) -> bool,
    ) -> IndexMap<String, i128> {
        let mut m: IndexMap<String, i128> = IndexMap::new();
        for w in self.weights.iter().filter(|w| keep(&self.nodes[w.node])) {
            for s in &w.stored {
                let e = m.entry(s.dtype.clone()).or_default();
                *e = e.saturating_add(
                    Q::product(&s.shape)
                        .v
                        .saturating_mul(s.dtype_bytes as i128)
                        .saturating_mul(w.count.v),
                );
            }
        }
        m.sort_keys();
        m
    }

    fn cache_bytes(&self, keep: impl Fn(&CacheRow) -> bool) -> Q {
        let terms: Vec<Q> = self
            .caches
            .iter()
            .filter(|c| keep(c) && is_main(&self.nodes[c.node]))
            .map(|c| self.cache_row_token_bytes(c))
            .collect();
        Q::sum(&terms)
    }

    /// Cache bytes that every new token adds for the whole context (uncapped layers).
    pub fn kv_bytes_per_token(&self) -> Q {
        self.cache_bytes(|c| c.growth == Growth::PerToken)
    }

    /// Cache bytes per token of window-capped layers (they stop growing at the window).
    pub fn kv_window_bytes_per_token(&self) -> Q {
        self.cache_bytes(|c| c.growth == Growth::Window)
    }

    /// The most a sequence's window-capped caches hold.
    pub fn kv_window_bytes_max(&self) -> Q {
        let terms: Vec<Q> = self
            .caches
            .iter()
            .filter(|c| c.growth == Growth::Window && is_main(&self.nodes[c.node]))
            .map(|c| {
                &(&(&c.elements * &Q::lit(c.dtype_bytes as i128)) * &c.count)
                    * c.window.as_ref().unwrap_or(&Q::zero())
            })
            .collect();
        Q::sum(&terms)
    }

    /// Constant per-sequence state (recurrent and convolution state of linear attention).
    pub fn state_bytes_per_sequence(&self) -> Q {
        self.cache_bytes(|c| c.growth == Growth::Constant)
    }

    /// Cache bytes of one sequence at a context length (all growth laws together).
    pub fn cache_bytes_at(&self, ctx: i128) -> i128 {
        let c = Q::lit(ctx);
        self.caches
            .iter()
            .filter(|r| is_main(&self.nodes[r.node]))
            .map(|r| self.cache_row_bytes_at(r, &c).v)
            .fold(0, i128::saturating_add)
    }

    /// FLOPs of one decode step at a context length.
    pub fn decode_flops(&self, ctx: &Q) -> Q {
        let terms: Vec<Q> = self
            .nodes
            .iter()
            .filter(|n| is_main(n) && n.phase != Phase::Prefill)
            .map(|n| self.node_decode_flops(n, ctx))
            .collect();
        Q::sum(&terms)
    }

    /// FLOPs of a causal prefill of `seq` tokens (whole prompt).
    pub fn prefill_flops(&self, seq: &Q) -> Q {
        let terms: Vec<Q> = self
            .nodes
            .iter()
            .filter(|n| is_main(n) && n.phase != Phase::Decode)
            .map(|n| self.node_prefill_flops(n, seq))
            .collect();
        Q::sum(&terms)
    }

    pub fn node(&self, id: &str) -> Option<&NodeRow> {
        self.nodes.iter().find(|n| n.id == id)
    }
}

/// Sum over query positions t = 1..S of the positions each attends to: S(S+1)/2 causal, capped
/// at the window.
pub fn attended_positions(seq: &Q, window: Option<&Q>) -> Q {
    let s = seq.v;
    match window {
        Some(w) if w.v < s => {
            let v = (w.v.saturating_mul(w.v.saturating_add(1)) / 2)
                .saturating_add((s - w.v).saturating_mul(w.v));
            Q::call("windowed_positions", &[seq.clone(), w.clone()], v)
        }
        _ => Q::call(
            "causal_positions",
            std::slice::from_ref(seq),
            s.saturating_mul(s.saturating_add(1)) / 2,
        ),
    }
}

/// Sum over query positions t = 1..S of the compressed entries each attends: floor(t / r)
/// (the source lets query t see entry w when w < t / r), each capped at `cap` (a selection).
pub fn attended_entries(seq: &Q, cap: Option<&Q>, r: &Q) -> Q {
    let (s, r_) = (seq.v, r.v.max(1));
    // Sum_{t=1}^{n} floor(t/r) with q = floor(n/r): r*q*(q-1)/2 + q*(n - q*r + 1).
    let uncapped = |n: i128| -> i128 {
        let q = n / r_;
        r_.saturating_mul(q).saturating_mul(q - 1) / 2
            + q.saturating_mul(n - q.saturating_mul(r_) + 1)
    };
    match cap {
        // From t = cap*r on, every query attends `cap` entries.
        Some(c) if c.v.saturating_mul(r_) <= s => {
            let k = c.v;
            let v = r_.saturating_mul(k - 1).saturating_mul(k) / 2
                + k.saturating_mul(s - k.saturating_mul(r_) + 1);
            Q::call(
                "compressed_positions",
                &[seq.clone(), r.clone(), c.clone()],
                v,
            )
        }
        _ => Q::call(
            "compressed_positions",
            &[seq.clone(), r.clone()],
            uncapped(s),
        ),
    }
}

/// Context lengths at which `show` reports FLOPs.
pub const REPORT_CONTEXT: i128 = 4096;

#[derive(Clone, Debug, serde::Serialize)]
pub struct GroupSummary {
    pub stack: String,
    pub block: String,
    pub layers: String,
    pub count: usize,
    pub params: i128,
    pub kv_bytes_per_token: i128,
    pub state_bytes_per_sequence: i128,
}

/// Every number `show` prints, computed from the tables.
#[derive(Clone, Debug, serde::Serialize)]
pub struct Summary {
    pub model: String,
    pub params_total: i128,
    pub params_active: i128,
    pub params_active_with_embedding: i128,
    pub params_mtp: i128,
    pub weight_bytes: i128,
    pub weight_tensors: i128,
    pub weight_bytes_by_dtype: IndexMap<String, i128>,
    pub kv_bytes_per_token: i128,
    pub kv_window_bytes_per_token: i128,
    pub kv_window_bytes_max: i128,
    pub state_bytes_per_sequence: i128,
    pub context: i128,
    pub decode_flops_per_token: i128,
    pub prefill_flops: i128,
    pub groups: Vec<GroupSummary>,
    /// Parameters of the text model (everything but the encoders).
    pub params_text: i128,
    /// Each encoder (one per image input): parameters, bytes and FLOPs per image.
    pub encoders: Vec<crate::encoders::EncoderSummary>,
}

/// `0-2,5,7-9` for a sorted list of layer indices.
pub fn ranges(v: &[i128]) -> String {
    let mut parts = Vec::new();
    let mut i = 0;
    while i < v.len() {
        let mut j = i;
        while j + 1 < v.len() && v[j + 1] == v[j] + 1 {
            j += 1;
        }
        parts.push(if i == j {
            v[i].to_string()
        } else {
            format!("{}-{}", v[i], v[j])
        });
        i = j + 1;
    }
    parts.join(",")
}

impl Analysis {
    pub fn summary(&self) -> Summary {
        let ctx = Q::lit(REPORT_CONTEXT);
        let groups = self
            .groups
            .iter()
            .map(|g| {
                let in_group = |n: &NodeRow| n.id.starts_with(&format!("{}[{}]", g.stack, g.block));
                let params: i128 = self
                    .nodes
                    .iter()
                    .filter(|n| in_group(n))
                    .map(|n| n.params.v.saturating_mul(n.count.v))
                    .fold(0, i128::saturating_add);
                let cache = |growth: Growth| -> i128 {
                    self.caches
                        .iter()
                        .filter(|c| c.growth == growth && in_group(&self.nodes[c.node]))
                        .map(|c| self.cache_row_token_bytes(c).v)
                        .fold(0, i128::saturating_add)
                };
                GroupSummary {
                    stack: g.stack.clone(),
                    block: g.block.clone(),
                    layers: ranges(&g.layers),
                    count: g.layers.len(),
                    params,
                    kv_bytes_per_token: cache(Growth::PerToken)
                        .saturating_add(cache(Growth::Window)),
                    state_bytes_per_sequence: cache(Growth::Constant),
                }
            })
            .collect();
        Summary {
            model: self.model.clone(),
            params_total: self.params_total().v,
            params_active: self.params_active().v,
            params_active_with_embedding: self.params_active_with_embedding().v,
            params_mtp: self.params_mtp().v,
            weight_bytes: self.weight_bytes().v,
            weight_tensors: self.weight_tensors().v,
            weight_bytes_by_dtype: self.weight_bytes_by_dtype(),
            kv_bytes_per_token: self.kv_bytes_per_token().v,
            kv_window_bytes_per_token: self.kv_window_bytes_per_token().v,
            kv_window_bytes_max: self.kv_window_bytes_max().v,
            state_bytes_per_sequence: self.state_bytes_per_sequence().v,
            context: REPORT_CONTEXT,
            decode_flops_per_token: self.decode_flops(&ctx).v,
            prefill_flops: self.prefill_flops(&ctx).v,
            groups,
            params_text: self.params_text().v,
            encoders: self.encoder_summaries(),
        }
    }

    /// A named quantity as a [`Q`]: totals, dims, or `params:<node>` / `flops:<node>`.
    /// Evaluate with `symbolic: true` for the formula.
    pub fn quantity(&self, name: &str, ctx: i128) -> Option<Q> {
        let c = Q::atom("ctx", ctx, self.symbolic);
        Some(match name {
            "params_total" => self.params_total(),
            "params_active" => self.params_active(),
            "params_active_with_embedding" => self.params_active_with_embedding(),
            "params_mtp" => self.params_mtp(),
            "weight_bytes" => self.weight_bytes(),
            "weight_tensors" => self.weight_tensors(),
            "kv_bytes_per_token" => self.kv_bytes_per_token(),
            "kv_window_bytes_per_token" => self.kv_window_bytes_per_token(),
            "kv_window_bytes_max" => self.kv_window_bytes_max(),
            "state_bytes_per_sequence" => self.state_bytes_per_sequence(),
            "decode_flops_per_token" => self.decode_flops(&c),
            "prefill_flops" => self.prefill_flops(&c),
            "kv_bytes_read_per_step" => self.kv_bytes_read_at(&c),
            other => {
                if let Some(q) = self.dims.get(other) {
                    return Some(q.clone());
                }
                let (kind, id) = other.split_once(':')?;
                let inside: Vec<&NodeRow> = self
                    .nodes
                    .iter()
                    .filter(|n| n.id == id || within(&n.id, id))
                    .collect();
                match (inside.as_slice(), kind) {
                    ([], _) => return None,
                    ([n], "params") => &n.params * &n.count,
                    ([n], "flops") => self.node_decode_flops(n, &c),
                    // A component path: the sum over the nodes inside it, as the totals count
                    // them (FLOPs per decoded token, as `decode_flops_per_token`).
                    (_, "params") => Q::sum(
                        inside
                            .iter()
                            .map(|n| &n.params * &n.count)
                            .filter(|q| q.v != 0)
                            .collect::<Vec<_>>()
                            .iter(),
                    ),
                    (_, "flops") => Q::sum(
                        inside
                            .iter()
                            .filter(|n| n.phase != Phase::Prefill)
                            .map(|n| self.node_decode_flops(n, &c))
                            .filter(|q| q.v != 0)
                            .collect::<Vec<_>>()
                            .iter(),
                    ),
                    _ => return None,
                }
            }
        })
    }
}

/// Whether node `id` lies inside component path `path` (`layers[moe].ffn` holds
/// `layers[moe].ffn.experts`, not `layers[moe].ffn_norm`).
fn within(id: &str, path: &str) -> bool {
    id.strip_prefix(path)
        .is_some_and(|rest| rest.starts_with('.') || rest.starts_with('['))
}

/// The node paths `params:` and `flops:` accept, down to `depth` levels (`layers[moe].ffn`
/// is two): every node's id and the components above it.
pub fn node_paths(a: &Analysis, depth: usize) -> Vec<String> {
    let mut out: Vec<String> = Vec::new();
    for n in &a.nodes {
        let parts: Vec<&str> = n.id.split('.').collect();
        for k in 1..=parts.len().min(depth) {
            let p = parts[..k].join(".");
            if !out.contains(&p) {
                out.push(p);
            }
        }
    }
    out
}

/// Quantity names `explain` accepts (besides dims and `params:<node>`, `flops:<node>`).
pub const QUANTITIES: &[&str] = &[
    "params_total",
    "params_active",
    "params_active_with_embedding",
    "params_mtp",
    "weight_bytes",
    "weight_tensors",
    "kv_bytes_per_token",
    "kv_window_bytes_per_token",
    "kv_window_bytes_max",
    "state_bytes_per_sequence",
    "decode_flops_per_token",
    "prefill_flops",
    "kv_bytes_read_per_step",
];
