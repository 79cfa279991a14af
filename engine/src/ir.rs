//! The IR: a spec after loading. Names are resolved, expressions parsed, components linked.
//! Built once per spec; every later stage (evaluation, guards, prompts, review) reads it.

use std::collections::BTreeMap;
use std::rc::Rc;

use indexmap::IndexMap;

use crate::diag::Location;
use crate::expr::Expr;
use crate::ops::OpSpec;
use crate::schema::{DimDef, QuantSchemeDef};

#[derive(Clone, Debug)]
pub struct Arg {
    pub raw: String,
    pub expr: Option<Expr>,
}

#[derive(Clone, Debug)]
pub struct InstancesIr {
    pub count: Expr,
    pub active: Option<Expr>,
    pub index: String,
}

#[derive(Clone, Debug)]
pub struct ScheduleIr {
    pub block: String,
    pub when: Option<Expr>,
    pub loc: Location,
}

#[derive(Clone, Debug)]
pub struct StreamIr {
    pub name: String,
    pub carries: bool,
    pub src: Option<String>,
    pub kind: StreamKind,
}

/// What a stack's stream is (chapter 2.2 of the write-up): every cross-layer value is one.
#[derive(Clone, Debug)]
pub enum StreamKind {
    /// The value passed from each layer to the next.
    Carried,
    /// Published by a component's `stream_out` in some layers, read (the latest value written
    /// before the reading layer) by a component's `reads` in later ones.
    Internal,
    /// The carried stream (`from: None`) saved at the entry or exit of the layers whose index
    /// satisfies `at`, or an internal stream (`from: Some(name)`) after the layers that write it.
    Append {
        at: Expr,
        entry: bool,
        read: ReadMode,
        from: Option<String>,
    },
    /// An append stream of an earlier stack of the same name, read whole by this one's layers.
    Earlier { read: ReadMode },
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ReadMode {
    /// The j-th reading layer reads element j.
    Each,
    /// The elements visible to the layer, on a new leading axis.
    All,
    /// The visible elements joined along an axis (an index, negative from the end).
    Concat(i64),
}

#[derive(Clone, Debug)]
pub struct StackIr {
    pub repeat: Expr,
    pub path: String,
    pub index_offset: Option<Expr>,
    pub schedule: Vec<ScheduleIr>,
    pub streams: Vec<StreamIr>,
}

#[derive(Clone, Debug)]
pub enum NodeKind {
    Op(&'static OpSpec),
    /// A nested component, with dim rebinding.
    Component {
        name: String,
        bind: Vec<(String, Expr)>,
    },
    /// A slot of a block template, filled by the model's block definition.
    Slot(String),
    Stack(StackIr),
}

#[derive(Clone, Debug)]
pub struct NodeIr {
    pub id: String,
    pub loc: Location,
    pub kind: NodeKind,
    pub inputs: Vec<String>,
    pub args: IndexMap<String, Arg>,
    pub path: Option<String>,
    pub leaves: IndexMap<String, String>,
    pub role: Option<String>,
    pub when: Option<Expr>,
    pub instances: Option<InstancesIr>,
    /// Explicit shape of a `parameter` or `buffer` node.
    pub shape: Option<Vec<Expr>>,
    /// Source anchor of a `buffer` node, or of a stack that runs layers past
    /// `num_hidden_layers` without `role: mtp`.
    pub src: Option<String>,
}

#[derive(Clone, Debug)]
pub struct CacheIr {
    pub node: String,
    pub kind: String,
    pub growth: Growth,
    pub window: Option<Expr>,
    /// Source anchor for a window other than the attention's (the statement that computes it).
    pub window_src: Option<String>,
    pub steps: Option<Expr>,
    pub dtype: Option<String>,
    /// Source anchor for a dtype other than the config's.
    pub src: Option<String>,
    pub when: Option<Expr>,
    pub loc: Location,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Growth {
    PerToken,
    Window,
    Constant,
}

impl Growth {
    pub fn as_str(self) -> &'static str {
        match self {
            Growth::PerToken => "per_token",
            Growth::Window => "window",
            Growth::Constant => "constant",
        }
    }
}

#[derive(Clone, Debug)]
pub struct AxiomIr {
    pub kv_elements_per_token: Option<Expr>,
    pub state_elements: Option<Expr>,
    pub window: Option<Expr>,
    pub caches_read_by_attention: bool,
    pub loc: Location,
}

#[derive(Clone, Debug)]
pub struct ComponentIr {
    pub name: String,
    pub role: String,
    pub summary: String,
    pub file: String,
    pub draft: bool,
    pub dims: Vec<String>,
    pub defaults: Vec<(String, Expr)>,
    pub slots: Vec<String>,
    pub inputs: Vec<String>,
    /// In dataflow order.
    pub nodes: Vec<NodeIr>,
    pub outputs: Vec<String>,
    pub cache: Vec<CacheIr>,
    pub axioms: Vec<AxiomIr>,
    pub decode_variant: Option<String>,
    pub source: Option<String>,
    /// Streams published: (stream, node id).
    pub stream_out: Vec<(String, String)>,
    /// Streams read, each an input name of the graph.
    pub reads: Vec<String>,
}

#[derive(Clone, Debug)]
pub struct FillIr {
    /// A component or another block of the same model.
    pub name: String,
    pub bind: Vec<(String, Expr)>,
    pub path: Option<String>,
    /// Path segments renamed in the filled component's checkpoint names.
    pub rename: Vec<(String, String)>,
}

#[derive(Clone, Debug)]
pub struct BlockIr {
    pub name: String,
    pub template: String,
    pub fills: IndexMap<String, FillIr>,
    pub bind: Vec<(String, Expr)>,
    pub loc: Location,
}

#[derive(Clone, Debug)]
pub struct OverrideIr {
    pub leaf: String,
    pub format: String,
    pub loc: Location,
}

#[derive(Clone, Debug, Default)]
pub struct QuantIr {
    pub default: String,
    pub per_role: IndexMap<String, String>,
    pub overrides: Vec<OverrideIr>,
    /// Storage of caches; `None`: the config's (KV-cache quantization, else `torch_dtype`).
    pub cache: Option<String>,
    /// Source anchor for a `cache` format other than the config's.
    pub cache_src: Option<String>,
    /// Where `quant_context:` is written.
    pub loc: Location,
}

#[derive(Clone, Debug)]
pub struct DimBinding {
    pub name: String,
    pub expr: Expr,
    pub raw: String,
    pub loc: Location,
    /// The source anchor of a model dim that does not pass a configured quantity through
    /// unchanged (`{ value: ..., src: ... }`).
    pub src: Option<String>,
}

/// An input beside `input_ids` (`inputs:`), its sizes parsed.
#[derive(Clone, Debug)]
pub struct InputIr {
    pub name: String,
    /// `image` or `video`.
    pub kind: String,
    pub height: Expr,
    pub width: Expr,
    pub channels: Expr,
    pub patch: Expr,
    pub temporal_patch: Option<Expr>,
    pub frames: Option<Expr>,
    pub merge: Option<Expr>,
    /// The input takes videos encoded as one sequence of all their temporal patches.
    pub video: bool,
    pub loc: Location,
}

/// A loaded model spec with everything it references.
#[derive(Clone, Debug)]
pub struct ModelIr {
    pub name: String,
    pub file: String,
    pub summary: String,
    pub architectures: Vec<String>,
    pub sources: Vec<String>,
    pub dims: Vec<DimBinding>,
    pub attrs: Vec<DimBinding>,
    pub blocks: IndexMap<String, BlockIr>,
    pub quant: QuantIr,
    /// Inputs beside `input_ids`, in declaration order.
    pub inputs: Vec<InputIr>,
    /// Top-level graph, in dataflow order.
    pub graph: Vec<NodeIr>,
    pub outputs: Vec<String>,
    pub components: BTreeMap<String, Rc<ComponentIr>>,
    pub schemes: BTreeMap<String, QuantSchemeDef>,
    pub dim_table: IndexMap<String, DimDef>,
    pub model_card: Option<crate::schema::ModelCard>,
    pub unused_config: IndexMap<String, String>,
    pub drafts: Vec<String>,
}

impl ModelIr {
    pub fn component(&self, name: &str) -> Option<&Rc<ComponentIr>> {
        self.components.get(name)
    }

    /// The streams that the components of a block (its template, fills, nested components and
    /// decode variants) publish (`stream_out`) and read (`reads`).
    pub fn block_streams(&self, block: &str) -> StreamUses {
        let mut uses = StreamUses::default();
        let mut todo = vec![block.to_string()];
        let mut seen = std::collections::BTreeSet::new();
        while let Some(name) = todo.pop() {
            if !seen.insert(name.clone()) {
                continue;
            }
            if let Some(b) = self.blocks.get(&name) {
                todo.push(b.template.clone());
                todo.extend(b.fills.values().map(|f| f.name.clone()));
                continue;
            }
            let Some(c) = self.component(&name) else {
                continue;
            };
            uses.written
                .extend(c.stream_out.iter().map(|(s, _)| s.clone()));
            uses.read.extend(c.reads.iter().cloned());
            todo.extend(c.decode_variant.iter().cloned());
            for n in &c.nodes {
                if let NodeKind::Component { name, .. } = &n.kind {
                    todo.push(name.clone());
                }
            }
        }
        uses
    }
}

#[derive(Clone, Debug, Default)]
pub struct StreamUses {
    pub written: std::collections::BTreeSet<String>,
    pub read: std::collections::BTreeSet<String>,
}
