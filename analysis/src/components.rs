//! Components compared at a fixed contract (the write-up's chapter 4.1): the component that
//! fills one slot of a model — its attention, say — with the model's own internal dims, read
//! per layer from the model's one evaluation: parameters, prefill FLOPs at a prompt length,
//! decode FLOPs and the cache one request holds at each context, every cache entry by its own
//! growth law. The contract (the same hidden size for all) is a what-if bind of `d_model`
//! made before the evaluation (crate::swap), never a rescaling here.

use harch_engine::analysis::{Analysis, NodeRow};
use harch_engine::q::Q;
use serde::Serialize;

/// A slot instance of the main token stream: `layers[moe].attention`, filled by `component`
/// in `layers` layers.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct SlotInstance {
    pub path: String,
    pub component: String,
    pub layers: i128,
}

/// One cache entry of the component, per layer.
#[derive(Clone, Debug, Serialize)]
pub struct CacheEntry {
    pub kind: String,
    /// `per_token`, `window` or `constant`.
    pub growth: String,
    pub dtype: String,
    /// Bytes per token (per_token, window) or per sequence (constant), one layer.
    pub unit_bytes: i128,
    pub window: Option<i128>,
}

/// Cache one request holds, and FLOPs of one decode step, at a context length, one layer.
#[derive(Clone, Debug, Serialize)]
pub struct AtContext {
    pub context: i128,
    pub cache_bytes: i128,
    pub decode_flops: i128,
}

#[derive(Clone, Debug, Serialize)]
pub struct SlotFigures {
    pub model: String,
    pub path: String,
    pub component: String,
    pub layers: i128,
    pub params_per_layer: i128,
    pub prefill_tokens: i128,
    pub prefill_flops_per_layer: i128,
    pub at: Vec<AtContext>,
    pub caches: Vec<CacheEntry>,
}

fn is_main(n: &NodeRow) -> bool {
    n.top_role.as_deref() != Some("mtp") && n.per_image.is_none()
}

/// Whether node `id` lies inside component path `path`.
fn within(id: &str, path: &str) -> bool {
    id.strip_prefix(path)
        .is_some_and(|rest| rest.starts_with('.') || rest.starts_with('['))
}

/// The instances of `slot` (`attention`, or `moe.attention` for one block) in the main token
/// stream, most layers first.
pub fn instances(a: &Analysis, slot: &str) -> Vec<SlotInstance> {
    let (block, name) = match slot.split_once('.') {
        Some((b, s)) => (Some(b), s),
        None => (None, slot),
    };
    let mut out: Vec<SlotInstance> = a
        .nodes
        .iter()
        .filter(|n| is_main(n) && !n.id.contains(".decode."))
        .filter_map(|n| {
            let component = n.op.strip_prefix("component:")?;
            let (parent, last) = n.id.rsplit_once('.')?;
            if last != name {
                return None;
            }
            if let Some(b) = block
                && !parent.ends_with(&format!("[{b}]"))
            {
                return None;
            }
            Some(SlotInstance {
                path: n.id.clone(),
                component: component.to_string(),
                layers: n.count.v,
            })
        })
        .collect();
    out.sort_by(|x, y| y.layers.cmp(&x.layers).then(x.path.cmp(&y.path)));
    out.dedup_by(|x, y| x.path == y.path);
    out
}

/// The slots of the main token stream's components, for a refusal that lists them.
pub fn slot_names(a: &Analysis) -> Vec<String> {
    let mut v: Vec<String> = a
        .nodes
        .iter()
        .filter(|n| is_main(n) && n.op.starts_with("component:"))
        .filter_map(|n| n.id.rsplit_once('.').map(|(_, s)| s.to_string()))
        .collect();
    v.sort();
    v.dedup();
    v
}

/// The per-layer figures of one slot instance.
pub fn figures(a: &Analysis, inst: &SlotInstance, prefill: i128, contexts: &[i128]) -> SlotFigures {
    let layers = inst.layers.max(1);
    let inside: Vec<&NodeRow> = a
        .nodes
        .iter()
        .filter(|n| within(&n.id, &inst.path))
        .collect();
    let params: i128 = inside.iter().map(|n| (&n.params * &n.count).v).sum();
    let seq = Q::lit(prefill);
    let prefill_flops: i128 = inside
        .iter()
        .filter(|n| n.phase != harch_engine::analysis::Phase::Decode)
        .map(|n| a.node_prefill_flops(n, &seq).v)
        .sum();
    let caches: Vec<_> = a
        .caches
        .iter()
        .filter(|c| within(&a.nodes[c.node].id, &inst.path) || a.nodes[c.node].id == inst.path)
        .collect();
    let at = contexts
        .iter()
        .map(|&ctx| {
            let c = Q::lit(ctx);
            let cache: i128 = caches.iter().map(|r| a.cache_row_bytes_at(r, &c).v).sum();
            let flops: i128 = inside
                .iter()
                .filter(|n| n.phase != harch_engine::analysis::Phase::Prefill)
                .map(|n| a.node_decode_flops(n, &c).v)
                .sum();
            AtContext {
                context: ctx,
                cache_bytes: cache / layers,
                decode_flops: flops / layers,
            }
        })
        .collect();
    SlotFigures {
        model: a.model.clone(),
        path: inst.path.clone(),
        component: inst.component.clone(),
        layers: inst.layers,
        params_per_layer: params / layers,
        prefill_tokens: prefill,
        prefill_flops_per_layer: prefill_flops / layers,
        at,
        caches: caches
            .iter()
            .map(|c| CacheEntry {
                kind: c.kind.clone(),
                growth: c.growth.as_str().to_string(),
                dtype: c.dtype.clone(),
                unit_bytes: a.cache_row_unit_bytes(c).v / layers,
                window: c.window.as_ref().map(|w| w.v),
            })
            .collect(),
    }
}
