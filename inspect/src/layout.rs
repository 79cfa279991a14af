//! A small Sugiyama pass: layers by longest path over the forward edges (nodes come in dataflow
//! order, so an edge to an earlier node is a back edge, e.g. between interleaved layer groups),
//! order within a layer by barycentres of the layer above (two sweeps), then coordinates, top
//! to bottom, each layer centred. Edges are cubic curves; a back edge or one that skips layers
//! bends out to the side so it does not run through the nodes between.

const GAP_X: f64 = 36.0;
const GAP_Y: f64 = 64.0;
const MARGIN: f64 = 24.0;

pub struct Routed {
    pub path: String,
    pub label: (f64, f64),
}

pub struct Placed {
    /// Top-left corner of each node.
    pub nodes: Vec<(f64, f64)>,
    /// One route per edge, in the edges' order.
    pub edges: Vec<Routed>,
    pub width: f64,
    pub height: f64,
}

/// Positions for `n` nodes of `w`×`h` joined by `edges` (indices into the nodes).
pub fn layered(n: usize, edges: &[(usize, usize)], w: f64, h: f64) -> Placed {
    let mut rank = vec![0usize; n];
    let mut forward: Vec<(usize, usize)> = edges.iter().copied().filter(|(a, b)| a < b).collect();
    forward.sort_by_key(|&(_, b)| b);
    // Nodes come in dataflow order: one pass in that order settles every longest path.
    for b in 0..n {
        for &(a, _) in forward.iter().filter(|(_, t)| *t == b) {
            rank[b] = rank[b].max(rank[a] + 1);
        }
    }
    let layers = rank.iter().copied().max().map_or(0, |m| m + 1);
    let mut order: Vec<Vec<usize>> = vec![Vec::new(); layers];
    for (i, &r) in rank.iter().enumerate() {
        order[r].push(i);
    }
    // Barycentre sweeps: each node moves towards the mean position of its predecessors.
    for _ in 0..2 {
        for r in 1..layers {
            let pos = |v: usize| -> f64 {
                let l = &order[rank[v]];
                let i = l.iter().position(|&x| x == v).unwrap_or(0);
                (i as f64 + 0.5) / l.len() as f64
            };
            let mut keyed: Vec<(f64, usize)> = order[r]
                .iter()
                .enumerate()
                .map(|(i, &v)| {
                    let preds: Vec<f64> = forward
                        .iter()
                        .filter(|(_, t)| *t == v)
                        .map(|&(f, _)| pos(f))
                        .collect();
                    let k = if preds.is_empty() {
                        (i as f64 + 0.5) / order[r].len() as f64
                    } else {
                        preds.iter().sum::<f64>() / preds.len() as f64
                    };
                    (k, v)
                })
                .collect();
            keyed.sort_by(|a, b| a.0.total_cmp(&b.0));
            order[r] = keyed.into_iter().map(|(_, v)| v).collect();
        }
    }
    let widest = order.iter().map(Vec::len).max().unwrap_or(0) as f64;
    let inner = widest * w + (widest - 1.0).max(0.0) * GAP_X;
    let width = inner + 2.0 * MARGIN + w; // room on the right for bent edges
    let mut nodes = vec![(0.0, 0.0); n];
    for (r, l) in order.iter().enumerate() {
        let span = l.len() as f64 * w + (l.len() as f64 - 1.0).max(0.0) * GAP_X;
        let x0 = MARGIN + (inner - span) / 2.0;
        for (i, &v) in l.iter().enumerate() {
            nodes[v] = (x0 + i as f64 * (w + GAP_X), MARGIN + r as f64 * (h + GAP_Y));
        }
    }
    let height = 2.0 * MARGIN + layers as f64 * h + (layers as f64 - 1.0).max(0.0) * GAP_Y;
    let side = MARGIN + inner + w / 2.0;
    let edges = edges
        .iter()
        .map(|&(a, b)| {
            let (ax, ay) = (nodes[a].0 + w / 2.0, nodes[a].1 + h);
            let (bx, by) = (nodes[b].0 + w / 2.0, nodes[b].1);
            let skips = rank[b] != rank[a] + 1;
            if !skips {
                let my = (ay + by) / 2.0;
                Routed {
                    path: format!(
                        "M{ax:.1},{ay:.1} C{ax:.1},{my:.1} {bx:.1},{my:.1} {bx:.1},{by:.1}"
                    ),
                    label: ((ax + bx) / 2.0, my),
                }
            } else {
                // Out to the right margin and back in: clear of the layers in between.
                let (sx, sy) = (nodes[a].0 + w, nodes[a].1 + h / 2.0);
                let (tx, ty) = (nodes[b].0 + w, nodes[b].1 + h / 2.0);
                Routed {
                    path: format!(
                        "M{sx:.1},{sy:.1} C{side:.1},{sy:.1} {side:.1},{ty:.1} {tx:.1},{ty:.1}"
                    ),
                    label: (side - w / 4.0, (sy + ty) / 2.0),
                }
            }
        })
        .collect();
    Placed {
        nodes,
        edges,
        width,
        height,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn edges_point_down_and_nodes_of_a_layer_do_not_overlap() {
        // a diamond with a skip edge and a back edge: 0 -> 1, 0 -> 2, 1 -> 3, 2 -> 3, 0 -> 3, 3 -> 1
        let e = [(0, 1), (0, 2), (1, 3), (2, 3), (0, 3), (3, 1)];
        let p = layered(4, &e, 100.0, 40.0);
        for &(a, b) in e.iter().filter(|(a, b)| a < b) {
            assert!(p.nodes[a].1 < p.nodes[b].1, "{a} above {b}");
        }
        assert_eq!(p.nodes[1].1, p.nodes[2].1);
        assert!((p.nodes[1].0 - p.nodes[2].0).abs() >= 100.0);
        for &(x, y) in &p.nodes {
            assert!(x >= 0.0 && x + 100.0 <= p.width && y + 40.0 <= p.height);
        }
        assert_eq!(p.edges.len(), e.len());
    }
}
