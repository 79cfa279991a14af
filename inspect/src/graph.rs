//! The architecture graph as scopes the page opens one at a time: the top level (embedding,
//! layer groups, norm, head, MTP, encoders), a layer group's block, a component's ops. A scope's
//! nodes are the next path segment of the evaluation's node ids; its edges are the walk's
//! dataflow edges (`NodeRow::inputs`) between them, labelled with the producing row's shape.
//! Positions come from [`crate::layout::layered`].

use harch_engine::Analysis;
use harch_engine::analysis::REPORT_CONTEXT;
use harch_engine::ops::Axis;
use indexmap::IndexMap;
use serde::Serialize;

use crate::formula::text_of as formula_of;
use crate::layout;

pub const NODE_W: f64 = 210.0;
pub const NODE_H: f64 = 60.0;

#[derive(Clone, Debug, Serialize)]
pub struct Scope {
    /// The node path this scope opens (`""` the top level, `layers[moe]`, `layers[moe].attention`).
    pub id: String,
    pub nodes: Vec<Node>,
    pub edges: Vec<Edge>,
    pub width: f64,
    pub height: f64,
}

#[derive(Clone, Debug, Serialize)]
pub struct Node {
    /// The full node path (the `params:`/`flops:` path of `explain`).
    pub id: String,
    pub label: String,
    /// `group`, `component`, `op`, `scope` (a decode variant), or `io` (where the scope's
    /// values come from or go to).
    pub kind: String,
    pub op: String,
    pub role: String,
    /// Layers of a group.
    pub layers: Option<usize>,
    /// Copies in the checkpoint and per token (experts).
    pub count: i128,
    pub active: i128,
    pub params: i128,
    pub params_formula: String,
    /// FLOPs per decoded token at the report context.
    pub flops: i128,
    pub flops_formula: String,
    pub shape: String,
    pub bytes_by_dtype: IndexMap<String, i128>,
    pub caches: Vec<CacheInfo>,
    /// A scope opens below this node.
    pub opens: bool,
    pub x: f64,
    pub y: f64,
}

#[derive(Clone, Debug, Serialize)]
pub struct CacheInfo {
    pub kind: String,
    pub growth: String,
    pub dtype: String,
    /// Bytes per token (per_token, window) or per sequence (constant), over all layers.
    pub bytes: i128,
    pub formula: String,
    pub window: Option<i128>,
}

#[derive(Clone, Debug, Serialize)]
pub struct Edge {
    pub from: String,
    pub to: String,
    pub label: String,
    /// SVG path data, and where the label sits.
    pub path: String,
    pub lx: f64,
    pub ly: f64,
}

/// Whether node `id` is `path` or lies inside it (`layers[moe].ffn` holds
/// `layers[moe].ffn.experts`, not `layers[moe].ffn_norm`).
pub fn under(id: &str, path: &str) -> bool {
    path.is_empty()
        || id == path
        || id
            .strip_prefix(path)
            .is_some_and(|rest| rest.starts_with('.') || rest.starts_with('['))
}

/// The child of scope `scope` that node `id` lies in, if it lies strictly inside the scope.
fn child_of(scope: &str, id: &str) -> Option<String> {
    let rest = if scope.is_empty() {
        id
    } else {
        id.strip_prefix(scope)?.strip_prefix('.')?
    };
    let seg = rest.split('.').next()?;
    Some(if scope.is_empty() {
        seg.to_string()
    } else {
        format!("{scope}.{seg}")
    })
}

/// A shape as `[d_model=7168]`: each axis's formula beside its value.
fn shape_label(shape: &[Axis]) -> String {
    let parts: Vec<String> = shape
        .iter()
        .map(|a| match a {
            Axis::Ctx => "ctx".to_string(),
            Axis::Dim(q) => {
                let f = formula_of(q);
                if f == q.v.to_string() {
                    f
                } else {
                    format!("{f}={}", q.v)
                }
            }
        })
        .collect();
    format!("[{}]", parts.join(", "))
}

/// Every scope of the graph: the top level and each node that has nodes inside it.
pub fn scopes(a: &Analysis) -> Vec<Scope> {
    let mut ids = vec![String::new()];
    for n in &a.nodes {
        let segs: Vec<&str> = n.id.split('.').collect();
        for k in 1..segs.len() {
            let p = segs[..k].join(".");
            if !ids.contains(&p) {
                ids.push(p);
            }
        }
    }
    ids.iter().map(|s| scope(a, s)).collect()
}

const IN: &str = "·in";
const OUT: &str = "·out";

fn scope(a: &Analysis, sid: &str) -> Scope {
    let ctx = REPORT_CONTEXT;
    // Children in dataflow order (the order of their first row).
    let mut children: Vec<String> = Vec::new();
    for n in &a.nodes {
        if let Some(c) = child_of(sid, &n.id)
            && !children.contains(&c)
        {
            children.push(c);
        }
    }
    let child_index = |id: &str| child_of(sid, id);
    let mut edges: Vec<(String, String, String)> = Vec::new();
    let mut push = |from: String, to: String, label: String| {
        if from != to && !edges.iter().any(|(f, t, _)| *f == from && *t == to) {
            edges.push((from, to, label));
        }
    };
    for n in &a.nodes {
        let Some(to) = child_index(&n.id) else {
            continue;
        };
        for from_rows in &n.inputs {
            let Some(&p) = from_rows.last() else {
                continue;
            };
            let prow = &a.nodes[p];
            let label = shape_label(&prow.shape);
            match child_index(&prow.id) {
                Some(from) => push(from, to.clone(), label),
                None if !sid.is_empty() => push(IN.into(), to.clone(), label),
                None => {}
            }
        }
    }
    if !sid.is_empty() {
        // What leaves the scope: a row inside it read by a row outside it, or a sink.
        for n in &a.nodes {
            if under(&n.id, sid) {
                continue;
            }
            for &p in n.inputs.iter().filter_map(|f| f.last()) {
                if let Some(from) = child_index(&a.nodes[p].id) {
                    push(from, OUT.into(), shape_label(&a.nodes[p].shape));
                }
            }
        }
        for &p in &a.sinks {
            if let Some(from) = child_index(&a.nodes[p].id) {
                push(from, OUT.into(), shape_label(&a.nodes[p].shape));
            }
        }
    }
    let mut nodes: Vec<Node> = Vec::new();
    let has_in = edges.iter().any(|(f, _, _)| f == IN);
    let has_out = edges.iter().any(|(_, t, _)| t == OUT);
    if has_in {
        nodes.push(io(IN, "input"));
    }
    for c in &children {
        nodes.push(node(a, c, ctx));
    }
    if has_out {
        nodes.push(io(OUT, "output"));
    }
    let index = |id: &str| nodes.iter().position(|n| n.id == id);
    let pairs: Vec<(usize, usize)> = edges
        .iter()
        .filter_map(|(f, t, _)| Some((index(f)?, index(t)?)))
        .collect();
    let placed = layout::layered(nodes.len(), &pairs, NODE_W, NODE_H);
    for (n, p) in nodes.iter_mut().zip(&placed.nodes) {
        n.x = p.0;
        n.y = p.1;
    }
    let edges = edges
        .into_iter()
        .zip(&placed.edges)
        .map(|((from, to, label), r)| Edge {
            from,
            to,
            label,
            path: r.path.clone(),
            lx: r.label.0,
            ly: r.label.1,
        })
        .collect();
    Scope {
        id: sid.to_string(),
        nodes,
        edges,
        width: placed.width,
        height: placed.height,
    }
}

fn io(id: &str, label: &str) -> Node {
    Node {
        id: id.into(),
        label: label.into(),
        kind: "io".into(),
        op: String::new(),
        role: String::new(),
        layers: None,
        count: 0,
        active: 0,
        params: 0,
        params_formula: "0".into(),
        flops: 0,
        flops_formula: "0".into(),
        shape: String::new(),
        bytes_by_dtype: IndexMap::new(),
        caches: vec![],
        opens: false,
        x: 0.0,
        y: 0.0,
    }
}

fn node(a: &Analysis, id: &str, ctx: i128) -> Node {
    let own = a.nodes.iter().position(|n| n.id == id);
    let inside: Vec<usize> = (0..a.nodes.len())
        .filter(|&r| under(&a.nodes[r].id, id))
        .collect();
    let opens = inside.iter().any(|&r| a.nodes[r].id != id);
    let group = a
        .groups
        .iter()
        .find(|g| format!("{}[{}]", g.stack, g.block) == id);
    let last = own.or(inside.last().copied());
    let row = last.map(|r| &a.nodes[r]);
    let kind = if group.is_some() {
        "group"
    } else if own.is_some_and(|r| a.nodes[r].op.starts_with("component:")) {
        "component"
    } else if own.is_some() && !opens {
        "op"
    } else if opens {
        "scope"
    } else {
        "op"
    };
    let label = id.rsplit('.').next().unwrap_or(id).to_string();
    let params = a.quantity(&format!("params:{id}"), ctx);
    let flops = a.quantity(&format!("flops:{id}"), ctx);
    let caches = a
        .caches
        .iter()
        .filter(|c| under(&a.nodes[c.node].id, id))
        .map(|c| {
            let q = a.cache_row_unit_bytes(c);
            CacheInfo {
                kind: c.kind.clone(),
                growth: c.growth.as_str().into(),
                dtype: c.dtype.clone(),
                bytes: q.v,
                formula: formula_of(&q),
                window: c.window.as_ref().map(|w| w.v),
            }
        })
        .collect();
    Node {
        id: id.to_string(),
        label,
        kind: kind.into(),
        op: own.map(|r| a.nodes[r].op.clone()).unwrap_or_default(),
        role: row.map(|r| r.role.clone()).unwrap_or_default(),
        layers: group.map(|g| g.layers.len()),
        count: own.map(|r| a.nodes[r].count.v).unwrap_or(1),
        active: own.map(|r| a.nodes[r].active.v).unwrap_or(1),
        params: params.as_ref().map(|q| q.v).unwrap_or(0),
        params_formula: params
            .as_ref()
            .map(formula_of)
            .unwrap_or_else(|| "0".into()),
        flops: flops.as_ref().map(|q| q.v).unwrap_or(0),
        flops_formula: flops.as_ref().map(formula_of).unwrap_or_else(|| "0".into()),
        shape: row.map(|r| shape_label(&r.shape)).unwrap_or_default(),
        bytes_by_dtype: a.weight_bytes_by_dtype_where(|n| under(&n.id, id)),
        caches,
        opens,
        x: 0.0,
        y: 0.0,
    }
}
