//! The YAML shapes of the spec repository, as deserialized. Nothing here is checked beyond
//! syntax; `load` resolves references and reports located errors.

use indexmap::IndexMap;
use serde::Deserialize;
use serde_saphyr::Spanned;

/// A scalar argument: an expression string, an integer or a boolean.
#[derive(Clone, Debug, Deserialize, PartialEq)]
#[serde(untagged)]
pub enum Scalar {
    Bool(bool),
    Int(i64),
    Real(f64),
    Text(String),
}

impl Scalar {
    pub fn as_expr_text(&self) -> String {
        match self {
            Scalar::Bool(b) => b.to_string(),
            Scalar::Int(i) => i.to_string(),
            Scalar::Real(r) => r.to_string(),
            Scalar::Text(s) => match s.as_str() {
                // Bare words such as `causal` are names, not dims; keep them quoted.
                "true" | "false" => s.clone(),
                _ => s.clone(),
            },
        }
    }
}

#[derive(Clone, Debug, Deserialize)]
#[serde(untagged)]
pub enum OneOrMany {
    One(String),
    Many(Vec<String>),
}

impl OneOrMany {
    pub fn to_vec(&self) -> Vec<String> {
        match self {
            OneOrMany::One(s) => vec![s.clone()],
            OneOrMany::Many(v) => v.clone(),
        }
    }
}

/// Expert-style replication of a node: `count` copies in the checkpoint, `active` used per token.
#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Instances {
    pub count: Scalar,
    #[serde(default)]
    pub active: Option<Scalar>,
    /// Placeholder in `path` replaced by the instance index, e.g. `e` for `experts.{e}`.
    pub index: String,
}

/// A node of a component graph or of a model's top-level graph.
#[derive(Clone, Debug, Deserialize, Default)]
#[serde(deny_unknown_fields)]
pub struct NodeDef {
    pub op: Option<String>,
    pub component: Option<String>,
    pub slot: Option<String>,
    pub stack: Option<StackDef>,
    #[serde(rename = "in")]
    pub inputs: Option<OneOrMany>,
    #[serde(default)]
    pub args: IndexMap<String, Scalar>,
    /// Checkpoint module path relative to the enclosing component (`.` = the component itself).
    pub path: Option<String>,
    /// Leaf-name overrides, e.g. `{ weight: gate_up_proj, bias: gate_up_proj_bias }`.
    #[serde(default)]
    pub leaves: IndexMap<String, String>,
    /// Dim rebinding for a nested component: `{ d_ffn: d_moe_ffn }`.
    #[serde(default)]
    pub bind: IndexMap<String, Scalar>,
    pub instances: Option<Instances>,
    /// Role of a top-level node (e.g. `mtp`), or an override for a nested component.
    pub role: Option<String>,
    /// Condition over dims; when false the node passes its first input through unchanged.
    #[serde(rename = "when")]
    pub when: Option<Scalar>,
    pub summary: Option<String>,
    /// Explicit shape of a `parameter` or `buffer` node: expressions over the component's dims.
    pub shape: Option<Vec<Scalar>>,
    /// Source anchor of a `buffer` node: a quote (in backticks) of where the forward source
    /// registers it (`register_buffer("inv_freq"`); on a stack, the quote that says why it runs
    /// layers past `num_hidden_layers` without `role: mtp`.
    pub src: Option<String>,
}

#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ScheduleEntry {
    pub block: String,
    /// Predicate over the layer index `i`; absent = every layer.
    #[serde(rename = "where")]
    pub when: Option<Scalar>,
}

#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct StreamDef {
    #[serde(default)]
    pub carries: bool,
    /// An append stream's value: the carried stream, taken at the entry (`before`) or the exit
    /// (`after`) of each layer whose index satisfies the condition.
    pub from: Option<String>,
    pub after: Option<Scalar>,
    pub before: Option<Scalar>,
    /// How a layer reads an append stream: `each` (the j-th reading layer reads element j),
    /// `all` (the elements before it, stacked on a new leading axis), `concat` (joined along
    /// `axis`). Without `from`, `read:` names an append stream of an earlier stack.
    pub read: Option<String>,
    pub axis: Option<Scalar>,
    /// Where the value comes from in the forward source; the text in backticks (or the whole
    /// string) must occur in the source.
    pub src: Option<String>,
    pub summary: Option<String>,
}

#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct StackDef {
    pub repeat: Scalar,
    /// Module path of layer `i`, e.g. `model.layers.{i}`.
    pub path: String,
    /// Added to `i` when naming layers, e.g. MTP layers numbered after the main stack.
    #[serde(default)]
    pub index_offset: Option<Scalar>,
    pub schedule: Vec<Spanned<ScheduleEntry>>,
    #[serde(default)]
    pub streams: IndexMap<String, StreamDef>,
}

#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CacheDef {
    pub node: String,
    pub kind: String,
    /// `per_token`, `window` or `constant`.
    pub growth: String,
    pub window: Option<Scalar>,
    /// Where the forward source keeps a window other than the attention's: a quote (in
    /// backticks) of the statement that computes what the cache keeps (the slice
    /// `full[:, :, -self.sliding_window + 1 :, :]` for `window: "attn_window - 1"`). The
    /// guards hold the quote to that statement (M055) and then accept the declared window.
    pub window_src: Option<String>,
    /// For constant state kept as several steps of a node's output (conv state): the step count.
    pub steps: Option<Scalar>,
    pub dtype: Option<String>,
    /// Where the forward source keeps this state in `dtype` when that is not the config's dtype:
    /// a quote (in backticks) that must occur in the source and name the dtype.
    pub src: Option<String>,
    /// Condition over dims; the entry applies only when it holds.
    #[serde(rename = "when")]
    pub when: Option<Scalar>,
}

#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct AxiomDef {
    /// Cache elements written per token per instance (per_token and window caches together).
    pub kv_elements_per_token: Option<Scalar>,
    /// Elements of constant per-sequence state.
    pub state_elements: Option<Scalar>,
    /// Every window-capped cache is capped at this many tokens.
    pub window: Option<Scalar>,
    /// Every cached node is read by an attention op of this component.
    #[serde(default)]
    pub caches_read_by_attention: bool,
    pub summary: Option<String>,
}

#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ComponentDef {
    pub component: String,
    pub role: String,
    pub summary: String,
    #[serde(default)]
    pub dims: Vec<String>,
    /// Values for dims the caller does not bind (optional features default off).
    #[serde(default)]
    pub defaults: IndexMap<String, Scalar>,
    #[serde(default)]
    pub slots: Vec<String>,
    pub inputs: Vec<String>,
    pub graph: IndexMap<String, Spanned<NodeDef>>,
    pub outputs: Vec<String>,
    #[serde(default)]
    pub cache: Vec<Spanned<CacheDef>>,
    #[serde(default)]
    pub axioms: Vec<Spanned<AxiomDef>>,
    pub decode_variant: Option<String>,
    /// The forward-source class this component renders (for review and prompts).
    pub source: Option<String>,
    /// Streams of the enclosing stack this component publishes: stream name -> node id.
    #[serde(default)]
    pub stream_out: IndexMap<String, String>,
    /// Streams of the enclosing stack this component reads; each name is an input of its graph.
    #[serde(default)]
    pub reads: Vec<String>,
    /// One-off dims a draft registers for itself (kind and summary, as in dims.yaml); visible
    /// to a model that lists the draft. Library components register theirs in dims.yaml.
    #[serde(default)]
    pub declare_dims: IndexMap<String, DimDef>,
}

#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct BlockDef {
    pub template: String,
    #[serde(default)]
    pub fill: IndexMap<String, FillDef>,
    #[serde(default)]
    pub bind: IndexMap<String, Scalar>,
}

#[derive(Clone, Debug, Deserialize)]
#[serde(untagged)]
pub enum FillDef {
    Name(String),
    Full {
        component: String,
        #[serde(default)]
        bind: IndexMap<String, Scalar>,
        /// Module path of the filled component, replacing the slot's.
        path: Option<String>,
        /// Checkpoint names of the filled component's modules where they differ from its node
        /// paths: `{ gate_proj: w1, up_proj: w3, down_proj: w2 }` (a path segment, anywhere below).
        #[serde(default)]
        rename: IndexMap<String, String>,
    },
}

impl FillDef {
    /// The component this fill names.
    pub fn component(&self) -> &str {
        match self {
            FillDef::Name(n) => n,
            FillDef::Full { component, .. } => component,
        }
    }

    /// The same fill with another component: its binds, path and renames are kept, since they
    /// say where the slot sits in the checkpoint, not what fills it.
    pub fn set_component(&mut self, name: &str) {
        match self {
            FillDef::Name(n) => *n = name.to_string(),
            FillDef::Full { component, .. } => *component = name.to_string(),
        }
    }
}

#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct OverrideDef {
    /// Glob over the leaf's checkpoint name (`*` matches within and across dots).
    pub leaf: String,
    pub format: String,
}

#[derive(Clone, Debug, Deserialize, Default)]
#[serde(deny_unknown_fields)]
pub struct QuantContextDef {
    pub default: Option<String>,
    #[serde(default)]
    pub per_role: IndexMap<String, String>,
    #[serde(default)]
    pub overrides: Vec<Spanned<OverrideDef>>,
    /// Storage of caches (KV) unless an entry says otherwise; default: the config's KV-cache
    /// quantization, else its `torch_dtype`/`dtype`.
    pub cache: Option<String>,
    /// Source anchor for a `cache` format other than the config's (a quote naming the dtype).
    pub cache_src: Option<String>,
}

#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ModelCard {
    pub params_total: Option<f64>,
    pub params_active: Option<f64>,
}

#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ModelDef {
    pub model: String,
    pub summary: String,
    pub architectures: Vec<String>,
    #[serde(default)]
    pub sources: Vec<String>,
    #[serde(default)]
    pub drafts: Vec<String>,
    pub dims: IndexMap<String, Spanned<DimValue>>,
    /// Text settings components read by name (e.g. `rope_type: config.rope_scaling.rope_type`).
    #[serde(default)]
    pub attrs: IndexMap<String, Spanned<Scalar>>,
    #[serde(default)]
    pub blocks: IndexMap<String, Spanned<BlockDef>>,
    #[serde(default)]
    pub quant_context: QuantContextDef,
    /// Inputs beside `input_ids`: images (or videos) a tower encodes.
    #[serde(default)]
    pub inputs: IndexMap<String, Spanned<InputDef>>,
    pub graph: IndexMap<String, Spanned<NodeDef>>,
    pub outputs: Vec<String>,
    pub model_card: Option<ModelCard>,
    /// Structural config keys this architecture does not use, each with the reason (the schedule
    /// guard otherwise reports them as bound to nothing).
    #[serde(default)]
    pub unused_config: IndexMap<String, String>,
}

/// An image or video input: the resolution it is counted at (unless a run states another) and
/// the sizes that cut it into patches. Each value is an expression over dims and config.
#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct InputDef {
    /// `image` or `video`.
    pub kind: String,
    /// Default height and width in pixels.
    pub height: Scalar,
    pub width: Scalar,
    pub channels: Scalar,
    /// Pixels on a side of one patch.
    pub patch: Scalar,
    /// Frames one patch spans (a 3-D patch embedding); default 1.
    #[serde(default)]
    pub temporal_patch: Option<Scalar>,
    /// Frames of one input; default `temporal_patch` (an image is one temporal patch).
    #[serde(default)]
    pub frames: Option<Scalar>,
    /// Side of the square of patches a spatial merge joins; default 1.
    #[serde(default)]
    pub merge: Option<Scalar>,
    /// The input also takes videos, each encoded as one sequence: the tower attends across
    /// all of a video's temporal patches at once (MiniMax-M3's `self.merge_temporal = True`).
    /// A run may then count a video (`--video FRAMESxHxW`); without it, it may not.
    #[serde(default)]
    pub video: bool,
}

/// A model dim's binding: an expression, or an expression with the source anchor that says why
/// it does not pass a configured quantity through unchanged.
#[derive(Clone, Debug, Deserialize)]
#[serde(untagged)]
pub enum DimValue {
    Expr(Scalar),
    Anchored(AnchoredDim),
}

/// `{ value: "config.num_experts_per_tok * 2", src: "`self.top_k = ...`" }`.
#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct AnchoredDim {
    pub value: Scalar,
    /// A quote (in backticks) of the forward-source line that computes the value this way; it
    /// must occur in the source and name the config key.
    pub src: String,
}

impl DimValue {
    pub fn value(&self) -> &Scalar {
        match self {
            DimValue::Expr(s) => s,
            DimValue::Anchored(a) => &a.value,
        }
    }

    pub fn src(&self) -> Option<&str> {
        match self {
            DimValue::Expr(_) => None,
            DimValue::Anchored(a) => Some(&a.src),
        }
    }
}

#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct DimDef {
    pub kind: String,
    pub summary: String,
    #[serde(default)]
    pub shardable_by: Vec<String>,
}

#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct StoredDef {
    /// Appended to the leaf's name (`_scale_inv`, `_blocks`); empty for the main tensor.
    #[serde(default)]
    pub suffix: String,
    /// Replaces the leaf's own name (the last dotted segment) before `suffix` is appended:
    /// DeepSeek-V4 stores the scale of `w1.weight` as `w1.scale` (`leaf: scale`).
    #[serde(default)]
    pub leaf: Option<String>,
    pub dtype: String,
    /// Axes as expressions over `out`, `in` (the last two logical axes); `...` stands for the
    /// leading logical axes. Absent = the logical shape.
    pub shape: Option<Vec<Scalar>>,
    /// Quantization metadata (scales): stored, but not parameters.
    #[serde(default)]
    pub scale: bool,
}

#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct QuantSchemeDef {
    pub name: String,
    pub summary: String,
    /// Which leaf kinds the scheme packs (`matrix`, `vector`, `table`, `any`); others fall back
    /// to the context default.
    pub applies_to: Vec<String>,
    /// Logical parameters per stored element of the main tensor (2 for MXFP4 nibbles in U8).
    #[serde(default)]
    pub params_per_element: Option<i64>,
    pub stored: Vec<StoredDef>,
    /// What a checkpoint's `quantization_config` states for weights stored this way
    /// (`quant_method`, and for compressed-tensors `format`, `type`, `num_bits`, `strategy`,
    /// `group_size`; for fp8 `weight_block_size`): the packing guard holds each tensor the
    /// config quantizes to a scheme whose every key here equals the config's.
    #[serde(default)]
    pub implements: IndexMap<String, serde_json::Value>,
}
