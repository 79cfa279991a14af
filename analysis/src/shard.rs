//! The model as deployment analysis sees it: each row of the engine's evaluation with the part
//! of the model it belongs to, the shardable dims each of its axes carries, and (under a
//! layout) the share of it one GPU holds or computes. Dims and their `shardable_by` come from
//! the spec repository's dim table; dim lengths stay global, a layout only hands out shares.

use std::collections::HashMap;
use std::rc::Rc;

use harch_engine::analysis::{Analysis, Phase};
use harch_engine::ir::ModelIr;
use harch_engine::ops::{Axis, LeafKind};
use harch_engine::q::Q;

use crate::layout::{Layout, LayoutError, Part};

/// Parallelism kinds a dim may be split by (`shardable_by` in the dim table), as bits.
pub const ATTENTION: u8 = 1;
pub const TENSOR: u8 = 2;
pub const EXPERT: u8 = 4;

fn kind_bits(names: &[String]) -> u8 {
    names.iter().fold(0, |b, n| {
        b | match n.as_str() {
            "attention" => ATTENTION,
            "tensor" => TENSOR,
            "expert" => EXPERT,
            _ => 0,
        }
    })
}

/// A shardable dim an axis carries.
#[derive(Clone, Debug)]
pub struct ShardDim {
    pub name: Rc<str>,
    pub value: i128,
    pub kinds: u8,
}

/// The shardable dims of each additive term of an axis (an axis splits only when every term
/// carries a dim the parallelism may split).
#[derive(Clone, Debug, Default)]
pub struct AxisDims {
    pub terms: Vec<Vec<ShardDim>>,
}

/// An exact fraction `num / den`: the share of a tensor one GPU holds.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Share {
    pub num: i128,
    pub den: i128,
}

impl Share {
    pub const ONE: Share = Share { num: 1, den: 1 };
    pub fn new(num: i128, den: i128) -> Share {
        let g = gcd(num, den).max(1);
        Share {
            num: num / g,
            den: den / g,
        }
    }
    pub fn f(self) -> f64 {
        self.num as f64 / self.den as f64
    }
    pub fn max(self, o: Share) -> Share {
        if self.num * o.den >= o.num * self.den {
            self
        } else {
            o
        }
    }
    pub fn min(self, o: Share) -> Share {
        if self.num * o.den <= o.num * self.den {
            self
        } else {
            o
        }
    }
    /// `bytes × share`, rounded up (a GPU holds whole elements).
    pub fn of(self, bytes: i128) -> i128 {
        (bytes * self.num + self.den - 1).div_euclid(self.den)
    }
    /// Ways the tensor is split (1 / share), at least 1.
    pub fn ways(self) -> u32 {
        (self.den / self.num.max(1)).max(1) as u32
    }
}

impl std::ops::Mul for Share {
    type Output = Share;
    fn mul(self, o: Share) -> Share {
        Share::new(self.num * o.num, self.den * o.den)
    }
}

fn gcd(a: i128, b: i128) -> i128 {
    if b == 0 { a.abs() } else { gcd(b, a % b) }
}

/// Where a row sits along the pipeline.
#[derive(Clone, Debug)]
pub enum Place {
    /// Layers of the main stack (positions in the main stack's order).
    Layers(Vec<i128>),
    /// A top-level op before the main stack (embedding).
    Before,
    /// A top-level op after the main stack (final norm, head).
    After,
    /// Multi-token prediction (loaded with `--mtp`, on the last stage).
    Mtp,
}

#[derive(Clone, Debug)]
pub struct RowInfo {
    pub part: Part,
    /// A routed expert's op: its copies are split by expert parallelism.
    pub expert: bool,
    /// An op row (not a component instance).
    pub is_op: bool,
    pub main: bool,
    pub phase: Phase,
    pub out: Vec<AxisDims>,
    /// The output has the attended-context axis (scores: kept on chip by fused attention).
    pub out_ctx: bool,
    /// Output elements per token (context axis left out).
    pub out_elements: i128,
    pub place: Place,
    /// The layer group (index into the engine's groups) the row was walked in.
    pub group: Option<usize>,
    /// Layers of the row's group (1 at top level): copies per layer are `active / layers`.
    pub group_layers: i128,
    /// Fraction of the row's weight copies one token uses (top_k / experts for experts).
    pub usage: f64,
    /// Weight rows this op reads: its own, its main-graph twin's for a decode variant, the
    /// embedding table for a tied head.
    pub weights: Vec<usize>,
    /// Precision of the op's matmul weights (`fp8`, `bf16`, ...), if it multiplies by them.
    pub weight_precision: Option<&'static str>,
    /// For an embedding op: rows of its table (a gather reads one per token).
    pub gather_rows: Option<i128>,
    /// Moves data without arithmetic or weights (reshape, slice, broadcast, concat): taken as
    /// a view or fused into its consumer, so it moves no bytes of its own; its consumers still
    /// read its output.
    pub view: bool,
    /// Computes logits: a vocab op after the main stack (the output head and what follows
    /// it). At prefill a server computes them at the last position only (`Logits::Last`).
    pub logits: bool,
}

#[derive(Clone, Debug)]
pub struct WeightInfo {
    pub node: usize,
    pub part: Part,
    /// Copy axes, which expert parallelism splits: the row's count and the leaf's leading
    /// axes (the experts of a grouped tensor; not a router's `[experts, in]`).
    pub copies: Vec<AxisDims>,
    /// Every axis of the leaf, which tensor parallelism splits by the dims they carry.
    pub inner: Vec<AxisDims>,
    pub place: Place,
    pub bytes: i128,
}

#[derive(Clone, Debug)]
pub struct CacheInfo {
    pub cache: usize,
    pub node: usize,
    pub main: bool,
    pub place: Place,
    /// Cache nodes' axes (what splits it under attention TP).
    pub axes: Vec<AxisDims>,
    /// The op that reads (and writes) this cache in each phase: `[prefill, decode]`.
    pub reader: [Option<usize>; 2],
}

/// The model's rows, prepared once and read under any number of layouts.
pub struct Model<'a> {
    pub ir: &'a ModelIr,
    pub a: &'a Analysis,
    pub rows: Vec<RowInfo>,
    pub weights: Vec<WeightInfo>,
    pub caches: Vec<CacheInfo>,
    /// Layers of the main stack(s).
    pub main_layers: i128,
    /// Elements per token of the stream carried from layer to layer.
    pub carried_elements: i128,
    /// For each decode-variant component instance: weights its variant reads that no variant
    /// op owns (MLA's kv_b_proj, absorbed into the query and output), with their part.
    pub decode_orphans: Vec<(String, Vec<usize>)>,
    /// The published context limit (`max_position_embeddings` in config.json).
    pub context_limit: Option<i128>,
}

#[derive(Clone, Debug, thiserror::Error)]
pub enum ModelError {
    #[error("the evaluation has errors; validate the spec first")]
    NotEvaluated,
    #[error(
        "deployment analysis reads which dims each axis carries from formulas: evaluate with `symbolic: true`"
    )]
    NeedsFormulas,
}

impl<'a> Model<'a> {
    pub fn new(
        ir: &'a ModelIr,
        a: &'a Analysis,
        config: &serde_json::Value,
    ) -> Result<Model<'a>, ModelError> {
        if !a.ok() {
            return Err(ModelError::NotEvaluated);
        }
        if !a.symbolic {
            return Err(ModelError::NeedsFormulas);
        }
        let dims = |q: &Q| -> AxisDims {
            AxisDims {
                terms: q
                    .term_atoms()
                    .into_iter()
                    .map(|t| {
                        t.into_iter()
                            .filter_map(|name| {
                                let def = ir.dim_table.get(&*name)?;
                                let kinds = kind_bits(&def.shardable_by);
                                let value = a.dims.get(&*name)?.v;
                                (kinds != 0).then_some(ShardDim { name, value, kinds })
                            })
                            .collect()
                    })
                    .collect(),
            }
        };
        let by_id: HashMap<&str, usize> = a
            .nodes
            .iter()
            .enumerate()
            .map(|(i, n)| (n.id.as_str(), i))
            .collect();
        // Main stacks, in walk order, with their layer offsets.
        let mut stack_offset: Vec<(String, i128)> = Vec::new();
        let mut main_layers = 0i128;
        for g in a
            .groups
            .iter()
            .filter(|g| g.top_role.as_deref() != Some("mtp"))
        {
            if !stack_offset.iter().any(|(s, _)| *s == g.stack) {
                let size = a
                    .groups
                    .iter()
                    .filter(|h| h.stack == g.stack)
                    .flat_map(|h| h.layers.iter().copied())
                    .max()
                    .map(|m| m + 1)
                    .unwrap_or(0);
                stack_offset.push((g.stack.clone(), main_layers));
                main_layers += size;
            }
        }
        let first_stack_row = (0..a.nodes.len())
            .find(|&r| {
                a.group_of(r)
                    .is_some_and(|g| g.top_role.as_deref() != Some("mtp"))
            })
            .unwrap_or(usize::MAX);
        let place_of = |row: usize| -> Place {
            let n = &a.nodes[row];
            if n.top_role.as_deref() == Some("mtp") {
                return Place::Mtp;
            }
            match a.group_of(row) {
                Some(g) => {
                    let off = stack_offset
                        .iter()
                        .find(|(s, _)| *s == g.stack)
                        .map(|(_, o)| *o)
                        .unwrap_or(0);
                    Place::Layers(g.layers.iter().map(|l| l + off).collect())
                }
                None if row < first_stack_row => Place::Before,
                None => Place::After,
            }
        };
        let mut weights_of: Vec<Vec<usize>> = vec![Vec::new(); a.nodes.len()];
        for (i, w) in a.weights.iter().enumerate() {
            weights_of[w.node].push(i);
        }
        let part_of = |row: usize| -> Part {
            let n = &a.nodes[row];
            let mut roles: Vec<&str> = vec![n.role.as_str()];
            let mut id = n.id.as_str();
            while let Some(at) = id.rfind('.') {
                id = &id[..at];
                if let Some(&r) = by_id.get(id)
                    && let Some(name) = a.nodes[r].op.strip_prefix("component:")
                    && let Some(c) = ir.component(name)
                {
                    roles.push(c.role.as_str());
                }
            }
            let carries_vocab = |q: &Q| {
                q.term_atoms().iter().flatten().any(|d| {
                    ir.dim_table
                        .get(&**d)
                        .is_some_and(|def| def.kind == "vocab")
                })
            };
            if roles.contains(&"ffn_moe") {
                Part::Moe
            } else if roles.contains(&"attention") || roles.contains(&"mixer") {
                Part::Attn
            } else if roles.contains(&"ffn_dense") {
                Part::Dense
            } else if n.shape.iter().filter_map(Axis::dim).any(carries_vocab)
                || weights_of[row]
                    .iter()
                    .any(|&w| a.weights[w].logical.iter().any(carries_vocab))
            {
                Part::Vocab
            } else {
                Part::Residual
            }
        };
        let has_expert_dim = |ds: &AxisDims| {
            !ds.terms.is_empty()
                && ds
                    .terms
                    .iter()
                    .all(|t| t.iter().any(|d| d.kinds & EXPERT != 0))
        };
        // Copy axes lead a leaf: all but `out, in` of a matrix, all but the last of a vector;
        // a table's rows are its vocabulary, not copies.
        let leading = |kind: LeafKind, rank: usize| -> usize {
            match kind {
                LeafKind::Matrix => rank.saturating_sub(2),
                LeafKind::Vector => rank.saturating_sub(1),
                LeafKind::Table | LeafKind::Buffer => 0,
            }
        };
        let weights: Vec<WeightInfo> = a
            .weights
            .iter()
            .map(|w| {
                let lead = leading(w.kind, w.logical.len());
                let mut copies = vec![dims(&w.count)];
                copies.extend(w.logical[..lead].iter().map(dims));
                WeightInfo {
                    node: w.node,
                    part: part_of(w.node),
                    copies,
                    inner: w.logical.iter().map(dims).collect(),
                    place: place_of(w.node),
                    bytes: a.weight_row_bytes(w).v,
                }
            })
            .collect();
        // The embedding tables a tied head reads.
        let tables: Vec<usize> = (0..a.nodes.len())
            .filter(|&r| a.nodes[r].op == "embedding" && a.is_main_row(r))
            .flat_map(|r| weights_of[r].clone())
            .collect();
        let mut rows = Vec::with_capacity(a.nodes.len());
        for (row, n) in a.nodes.iter().enumerate() {
            let part = part_of(row);
            let is_op = !n.op.starts_with("component:");
            let mut wsrc = weights_of[row].clone();
            if n.phase == Phase::Decode
                && let Some(twin) = a.decode_counterpart_id(row)
                && let Some(&t) = by_id.get(twin.as_str())
            {
                wsrc.extend(weights_of[t].iter().copied());
            }
            if n.op == "linear" && n.args.get("tied").and_then(|v| v.int) == Some(1) {
                let (o, i) = (
                    n.args.get("out").and_then(|v| v.int),
                    n.args.get("in").and_then(|v| v.int),
                );
                wsrc.extend(tables.iter().copied().filter(|&w| {
                    let l = &a.weights[w].logical;
                    l.len() == 2 && Some(l[0].v) == o && Some(l[1].v) == i
                }));
            }
            let expert = part == Part::Moe
                && (has_expert_dim(&dims(&n.count))
                    || weights_of[row].iter().any(|&w| {
                        let lw = &a.weights[w];
                        lw.logical[..leading(lw.kind, lw.logical.len())]
                            .iter()
                            .any(|q| has_expert_dim(&dims(q)))
                    }));
            let usage = if n.params.v > 0 && n.count.v > 0 {
                (n.params_active.v as f64 * n.active.v as f64)
                    / (n.params.v as f64 * n.count.v as f64)
            } else {
                1.0
            };
            let weight_precision =
                if matches!(n.op.as_str(), "linear" | "grouped_linear" | "router") {
                    wsrc.first().and_then(|&w| {
                        let w = &a.weights[w];
                        let main = w.stored.iter().find(|s| !s.scale)?;
                        precision_of(&w.format, &main.dtype)
                    })
                } else {
                    None
                };
            let gather_rows = (n.op == "embedding")
                .then(|| weights_of[row].first().map(|&w| a.weights[w].logical[0].v))
                .flatten();
            let (elems, out_ctx) = a.output_elements(row);
            let place = place_of(row);
            rows.push(RowInfo {
                logits: part == Part::Vocab && matches!(place, Place::After),
                part,
                expert,
                is_op,
                // An encoder's ops run once per image, not in a token's prefill or decode step.
                main: a.is_main_row(row) && n.per_image.is_none(),
                phase: n.phase,
                out: n.shape.iter().filter_map(Axis::dim).map(dims).collect(),
                out_ctx,
                out_elements: elems.v,
                place,
                group: a.group_of(row).and_then(|g| {
                    a.groups
                        .iter()
                        .position(|h| h.stack == g.stack && h.block == g.block)
                }),
                group_layers: a
                    .group_of(row)
                    .map(|g| g.layers.len() as i128)
                    .unwrap_or(1)
                    .max(1),
                usage,
                weights: wsrc,
                weight_precision,
                gather_rows,
                view: is_op
                    && n.flops_fixed.v == 0
                    && n.flops_per_ctx.v == 0
                    && weights_of[row].is_empty()
                    && n.op != "embedding",
            });
        }
        // Weights a decode variant reads though none of its ops owns them.
        let mut decode_orphans: Vec<(String, Vec<usize>)> = Vec::new();
        let variant_twins: std::collections::HashSet<String> = (0..a.nodes.len())
            .filter(|&r| a.nodes[r].phase == Phase::Decode)
            .filter_map(|r| a.decode_counterpart_id(r))
            .collect();
        for (row, n) in a.nodes.iter().enumerate() {
            // MTP's time is not modelled, so its weights are not read either.
            if n.phase == Phase::Prefill
                && a.is_main_row(row)
                && !weights_of[row].is_empty()
                && !variant_twins.contains(&n.id)
            {
                let inst =
                    n.id.rsplit_once('.')
                        .map(|(p, _)| p)
                        .unwrap_or("")
                        .to_string();
                match decode_orphans.iter_mut().find(|(i, _)| *i == inst) {
                    Some((_, ws)) => ws.extend(weights_of[row].iter().copied()),
                    None => decode_orphans.push((inst, weights_of[row].clone())),
                }
            }
        }
        let readers = |c: &harch_engine::analysis::CacheRow, phase: Phase| -> Option<usize> {
            let id = &a.nodes[c.node].id;
            let inst = id.rsplit_once('.').map(|(p, _)| p).unwrap_or("");
            let runs = |r: usize| {
                let p = a.nodes[r].phase;
                p == Phase::Both || p == phase
            };
            let in_inst = |r: usize| {
                a.nodes[r]
                    .id
                    .strip_prefix(inst)
                    .is_some_and(|rest| rest.starts_with('.'))
            };
            if c.growth != harch_engine::ir::Growth::Constant
                && let Some(r) = (0..a.nodes.len())
                    .find(|&r| runs(r) && in_inst(r) && a.nodes[r].op == "attention_score")
            {
                return Some(r);
            }
            if runs(c.node) {
                return Some(c.node);
            }
            let local = id.rsplit_once('.').map(|(_, l)| l).unwrap_or(id);
            let twin = format!("{inst}.{}.{local}", harch_engine::rows::DECODE_SCOPE);
            by_id.get(twin.as_str()).copied().filter(|&r| runs(r))
        };
        let caches = a
            .caches
            .iter()
            .enumerate()
            .map(|(i, c)| CacheInfo {
                cache: i,
                node: c.node,
                main: a.is_main_row(c.node),
                place: place_of(c.node),
                axes: a.nodes[c.node]
                    .shape
                    .iter()
                    .filter_map(Axis::dim)
                    .map(dims)
                    .collect(),
                reader: [readers(c, Phase::Prefill), readers(c, Phase::Decode)],
            })
            .collect();
        // The stream each layer receives: what the first main layer reads from outside it.
        let carried_elements = (0..a.nodes.len())
            .filter(|&r| matches!(rows[r].place, Place::Layers(_)) && rows[r].is_op)
            .flat_map(|r| a.op_inputs(r))
            .find(|&p| !matches!(rows[p].place, Place::Layers(_)))
            .map(|p| rows[p].out_elements)
            .unwrap_or(0);
        let context_limit = config
            .get("max_position_embeddings")
            .and_then(|v| v.as_i64())
            .map(i128::from);
        Ok(Model {
            ir,
            a,
            rows,
            weights,
            caches,
            main_layers,
            carried_elements,
            decode_orphans,
            context_limit,
        })
    }
}

impl Model<'_> {
    /// Copies of a row per layer (top_k for a routed expert's op, 1 for most).
    pub fn per_layer_copies(&self, r: usize) -> f64 {
        self.a.nodes[r].active.v.max(1) as f64 / self.rows[r].group_layers as f64
    }
}

/// The compute precision of weights stored in a format and dtype.
pub fn precision_of(format: &str, dtype: &str) -> Option<&'static str> {
    let f = format.to_ascii_lowercase();
    if f.contains("fp4") {
        return Some("fp4");
    }
    Some(match dtype {
        d if d.starts_with("F8") => "fp8",
        "BF16" => "bf16",
        "F16" => "fp16",
        "F32" => "fp32",
        _ => return None,
    })
}

/// A part's TP splits dims of these kinds.
pub fn tp_kinds(part: Part) -> u8 {
    match part {
        Part::Attn => ATTENTION | TENSOR,
        Part::Dense | Part::Moe | Part::Vocab => TENSOR,
        Part::Residual => 0,
    }
}

/// The share of an axis one GPU holds when `kinds` are split `degree` ways: 1 unless every
/// term of the axis carries such a dim. A degree larger than the dim replicates it (each GPU
/// holds one of `n`); one that neither divides nor is a multiple of the dim is an error.
pub fn axis_share(
    axis: &AxisDims,
    kinds: u8,
    degree: u32,
    part: Part,
    what: &str,
) -> Result<Share, LayoutError> {
    if degree <= 1 || kinds == 0 || axis.terms.is_empty() {
        return Ok(Share::ONE);
    }
    let t = degree as i128;
    let mut share: Option<Share> = None;
    for term in &axis.terms {
        let Some(d) = term.iter().find(|d| d.kinds & kinds != 0) else {
            return Ok(Share::ONE);
        };
        let s = if d.value > 0 && d.value % t == 0 {
            Share::new(1, t)
        } else if d.value > 0 && t % d.value == 0 {
            Share::new(1, d.value)
        } else {
            return Err(LayoutError {
                message: format!(
                    "{} degree {degree} neither divides nor is a multiple of {} = {} ({what})",
                    part.name(),
                    d.name,
                    d.value
                ),
                hint: Some(format!("choose a degree that divides {}", d.value)),
            });
        };
        share = Some(share.map_or(s, |x| x.max(s)));
    }
    Ok(share.unwrap_or(Share::ONE))
}

/// The smallest share over several axes (the axis a parallelism actually splits).
pub fn min_share(
    axes: &[AxisDims],
    kinds: u8,
    degree: u32,
    part: Part,
    what: &str,
) -> Result<Share, LayoutError> {
    let mut s = Share::ONE;
    for ax in axes {
        s = s.min(axis_share(ax, kinds, degree, part, what)?);
    }
    Ok(s)
}

/// Layer ranges of the pipeline stages over the main stack: stage `s` holds
/// `[bounds[s], bounds[s+1])`.
pub fn stage_bounds(layers: i128, pp: u32) -> Vec<i128> {
    let p = pp as i128;
    (0..=p).map(|s| (s * layers + p / 2) / p).collect()
}

impl Place {
    /// The fraction of the row's copies stage `s` holds.
    pub fn stage_share(&self, s: usize, bounds: &[i128]) -> Share {
        let last = bounds.len() - 2;
        match self {
            Place::Layers(ls) => {
                if ls.is_empty() {
                    return Share::new(0, 1);
                }
                let (lo, hi) = (bounds[s], bounds[s + 1]);
                let k = ls.iter().filter(|&&l| l >= lo && l < hi).count() as i128;
                Share::new(k, ls.len() as i128)
            }
            Place::Before => Share::new((s == 0) as i128, 1),
            Place::After | Place::Mtp => Share::new((s == last) as i128, 1),
        }
    }
}

/// Per-layout shares of every row, weight and cache.
pub struct Plan<'m, 'a> {
    pub model: &'m Model<'a>,
    pub layout: Layout,
    /// Share of each op's work one GPU does within its part's token shard (TP).
    pub tp_share: Vec<Share>,
    /// Share of each input (in `op_inputs` order) one GPU reads.
    pub in_share: Vec<Vec<Share>>,
    /// Share of each row's output one GPU holds (TP on its axes).
    pub out_share: Vec<Share>,
    /// Share of each weight row one GPU of its stage holds (EP on copies × TP on inner axes).
    pub weight_share: Vec<Share>,
    /// Share of each cache row one GPU of an attention replica holds.
    pub cache_share: Vec<Share>,
    pub bounds: Vec<i128>,
}

impl<'m, 'a> Plan<'m, 'a> {
    pub fn new(model: &'m Model<'a>, layout: &Layout) -> Result<Plan<'m, 'a>, LayoutError> {
        let a = model.a;
        let mut weight_share = Vec::with_capacity(model.weights.len());
        for (i, w) in model.weights.iter().enumerate() {
            let d = layout.degrees(w.part);
            let what = &a.weights[i].name;
            let mut s = Share::ONE;
            if w.part == Part::Moe {
                s = min_share(&w.copies, EXPERT, d.ep, w.part, what)?;
            }
            let k = tp_kinds(w.part);
            let tp = min_share(&w.inner, k, d.tp, w.part, what)?;
            weight_share.push(s * tp);
        }
        let mut out_share = Vec::with_capacity(model.rows.len());
        for (r, info) in model.rows.iter().enumerate() {
            let d = layout.degrees(info.part);
            out_share.push(min_share(
                &info.out,
                tp_kinds(info.part),
                d.tp,
                info.part,
                &a.nodes[r].id,
            )?);
        }
        let mut tp_share = Vec::with_capacity(model.rows.len());
        let mut in_share = Vec::with_capacity(model.rows.len());
        for (r, info) in model.rows.iter().enumerate() {
            let d = layout.degrees(info.part);
            let k = tp_kinds(info.part);
            let mut s = out_share[r];
            for &w in &info.weights {
                if model.weights[w].part == info.part {
                    let ws =
                        min_share(&model.weights[w].inner, k, d.tp, info.part, &a.nodes[r].id)?;
                    s = s.min(ws);
                }
            }
            let mut ins = Vec::new();
            for &p in &a.op_inputs(r) {
                let x = min_share(&model.rows[p].out, k, d.tp, info.part, &a.nodes[r].id)?;
                if !model.rows[p].out_ctx {
                    s = s.min(x);
                }
                ins.push(x);
            }
            tp_share.push(s);
            in_share.push(ins);
        }
        // An op that is not split reads its inputs whole.
        for (r, ins) in in_share.iter_mut().enumerate() {
            if tp_share[r] == Share::ONE {
                ins.iter_mut().for_each(|x| *x = Share::ONE);
            }
        }
        let mut cache_share = Vec::with_capacity(model.caches.len());
        for c in &model.caches {
            let part = model.rows[c.node].part;
            let d = layout.degrees(part);
            cache_share.push(min_share(
                &c.axes,
                tp_kinds(part),
                d.tp,
                part,
                &a.nodes[c.node].id,
            )?);
        }
        if model.main_layers > 0 && (layout.pp as i128) > model.main_layers {
            return Err(LayoutError {
                message: format!(
                    "pp = {} is more stages than the {} layers of the main stack",
                    layout.pp, model.main_layers
                ),
                hint: None,
            });
        }
        Ok(Plan {
            model,
            layout: layout.clone(),
            tp_share,
            in_share,
            out_share,
            weight_share,
            cache_share,
            bounds: stage_bounds(model.main_layers, layout.pp),
        })
    }

    pub fn stages(&self) -> usize {
        self.layout.pp as usize
    }

    /// How many ways a row's part splits the step's tokens.
    pub fn token_split(&self, row: usize) -> u32 {
        self.layout.token_split(self.model.rows[row].part)
    }

    /// GPUs of a stage holding each element of a weight row (its replicas).
    pub fn weight_replicas(&self, w: usize) -> i128 {
        let s = self.weight_share[w];
        self.layout.stage_gpus() as i128 * s.num / s.den
    }
}
