//! Communication derived from the layout: each tensor's placement (how its tokens and features
//! are split over GPUs, and whether it still owes a sum) propagates along the engine's dataflow
//! edges; where a consumer needs another placement than its producer left, the difference is
//! one collective (all-reduce, reduce-scatter, all-gather, all-to-all dispatch and combine),
//! and pipeline stages exchange the carried stream point to point. Nothing here is written per
//! model or per op name beyond which ops are linear in a pending sum.

use std::collections::{HashMap, HashSet};

use serde::Serialize;

use crate::hardware::{Gpu, Missing};
use crate::layout::{Dispatch, Mesh, Part};
use crate::shard::{Plan, Share};
use crate::traffic::{Activations, Step};

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum CommKind {
    AllReduce,
    ReduceScatter,
    AllGather,
    AllToAll,
    SendRecv,
}

impl CommKind {
    pub fn name(self) -> &'static str {
        match self {
            CommKind::AllReduce => "all-reduce",
            CommKind::ReduceScatter => "reduce-scatter",
            CommKind::AllGather => "all-gather",
            CommKind::AllToAll => "all-to-all",
            CommKind::SendRecv => "send/recv",
        }
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Link {
    /// Within a node (NVLink, Infinity Fabric).
    Intra,
    /// Between nodes (the NIC).
    Inter,
    /// An all-to-all whose peers are partly in other nodes.
    Both,
}

/// One derived collective on one GPU.
#[derive(Clone, Debug, Serialize)]
pub struct CommRow {
    pub stage: usize,
    /// The op that needs the data, and the op that produced it.
    pub at: String,
    pub from: String,
    pub kind: CommKind,
    /// What changed between producer and consumer: `partial sums`, `features`, `tokens`,
    /// `dispatch`, `combine`, `pipeline`.
    pub why: &'static str,
    /// GPUs in the group.
    pub group: u32,
    pub link: Link,
    /// Bytes one GPU sends (for all layers of the step).
    #[serde(serialize_with = "crate::json::count")]
    pub bytes: f64,
    #[serde(serialize_with = "crate::json::count")]
    pub intra_bytes: f64,
    #[serde(serialize_with = "crate::json::count")]
    pub inter_bytes: f64,
    /// Distance between consecutive members of the group in GPU numbers.
    #[serde(skip)]
    pub stride: u32,
}

/// How a tensor lies over the GPUs of a stage.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
struct Placement {
    /// Ways its tokens are split; `AT_EXPERTS` when token copies sit at their experts.
    tok: u32,
    /// Ways its features are split (TP of `part`).
    feat: u32,
    part: Part,
    /// A pending sum over the TP group of a part, with its ways.
    partial: Option<(u32, Part)>,
}

const AT_EXPERTS: u32 = 0;

#[derive(Clone, Copy)]
enum Group {
    Tp,
    Ep,
    /// `k` token shards of a tensor split `from` ways.
    Tokens {
        from: u32,
    },
}

impl<'m, 'a> Plan<'m, 'a> {
    /// GPUs in a group and the distance between consecutive members.
    fn group_geometry(&self, g: Group, size: u32) -> (u32, u32) {
        let n = self.layout.stage_gpus();
        let stride = match (g, self.layout.mesh) {
            (Group::Tp, Mesh::TpInner) => 1,
            (Group::Tp, Mesh::TpOuter) => n / size.max(1),
            (Group::Ep, Mesh::TpInner) => self.layout.moe.tp,
            (Group::Ep, Mesh::TpOuter) => 1,
            (Group::Tokens { from }, Mesh::TpInner) => n / from.max(1),
            (Group::Tokens { .. }, Mesh::TpOuter) => 1,
        };
        (size, stride.max(1))
    }

    /// Derived collectives of one phase, per stage, in dataflow order (links not yet chosen:
    /// see [`Plan::route`]).
    pub fn communication(&self, step: &Step, act: &Activations) -> Vec<CommRow> {
        let m = self.model;
        let a = m.a;
        let mut rows = Vec::new();
        let tokens = self.stage_tokens(step);
        let b = act.bytes as f64;
        let ep = self.layout.moe.ep;
        let fe = ep as f64;
        let tok_div = |t: u32| -> f64 {
            if t == AT_EXPERTS {
                (self.layout.moe.ep * self.layout.moe.dp) as f64
            } else {
                t as f64
            }
        };
        for s in 0..self.stages() {
            let mut out: HashMap<usize, Placement> = HashMap::new();
            let mut paid: HashSet<(usize, Placement)> = HashSet::new();
            for (r, info) in m.rows.iter().enumerate() {
                if !info.is_op || !info.main || !step.phase.runs(info.phase) {
                    continue;
                }
                let share = self.row_stage_share(r, s);
                if share.num == 0 {
                    continue;
                }
                // Layers of this op on the stage: each carries the edge once.
                let layers_here = info.group_layers as f64 * share.f();
                let ins = a.op_inputs(r);
                let placed: Vec<Option<Placement>> =
                    ins.iter().map(|p| out.get(p).copied()).collect();
                let pending: Vec<(u32, Part)> =
                    placed.iter().flatten().filter_map(|p| p.partial).collect();
                // Ops linear in a pending sum pass it on instead of reducing it first.
                let accepts = match a.nodes[r].op.as_str() {
                    "moe_combine" => true,
                    "add" => pending.len() == ins.len() && pending.windows(2).all(|w| w[0] == w[1]),
                    "mul" => pending.len() == 1,
                    _ => false,
                };
                let my_tok = if info.expert {
                    AT_EXPERTS
                } else {
                    self.token_split(r)
                };
                let mut carried_partial = None;
                for (i, (&p, pl)) in ins.iter().zip(&placed).enumerate() {
                    // A producer on an earlier stage arrives by the pipeline hand-off.
                    let Some(mut cur) = *pl else { continue };
                    let pinfo = &m.rows[p];
                    if pinfo.out_ctx {
                        continue;
                    }
                    // An edge into a layer group from outside it (the carried stream entering a
                    // stack) is crossed by the group's first layer only; later layers read their
                    // predecessor, placed alike.
                    let crossings = if pinfo.group == info.group {
                        layers_here
                    } else {
                        1.0
                    };
                    // A logits row at the last position only moves that position's values.
                    let tokens = tokens.min(self.row_tokens(r, step));
                    let prow = m.per_layer_copies(p) * crossings * tokens;
                    let elems = pinfo.out_elements as f64;
                    let bytes_of =
                        |pl: &Placement| prow / tok_div(pl.tok) * elems / pl.feat as f64 * b;
                    let want_feat = self.in_share[r][i].ways();
                    let want = Placement {
                        tok: my_tok,
                        feat: want_feat,
                        part: info.part,
                        partial: if accepts { cur.partial } else { None },
                    };
                    if accepts && cur.partial.is_some() {
                        carried_partial = cur.partial;
                    }
                    if cur == want || !paid.insert((p, want)) {
                        continue;
                    }
                    let mut emit = |kind, why, g: Group, size: u32, bytes: f64| {
                        if size > 1 && bytes > 0.0 {
                            let (group, stride) = self.group_geometry(g, size);
                            rows.push(CommRow {
                                stage: s,
                                at: a.nodes[r].id.clone(),
                                from: a.nodes[p].id.clone(),
                                kind,
                                why,
                                group,
                                link: Link::Intra,
                                bytes,
                                intra_bytes: bytes,
                                inter_bytes: 0.0,
                                stride,
                            });
                        }
                    };
                    // 1. A pending sum: reduce it, scattering tokens when the consumer splits
                    //    them across exactly the group that holds the partial sums.
                    if let Some((w, _)) = cur.partial
                        && !accepts
                    {
                        let fw = w as f64;
                        if cur.tok != AT_EXPERTS && my_tok != AT_EXPERTS && my_tok == cur.tok * w {
                            let bytes = (fw - 1.0) / fw * bytes_of(&cur);
                            emit(CommKind::ReduceScatter, "partial sums", Group::Tp, w, bytes);
                            cur.tok = my_tok;
                        } else {
                            let bytes = 2.0 * (fw - 1.0) / fw * bytes_of(&cur);
                            emit(CommKind::AllReduce, "partial sums", Group::Tp, w, bytes);
                        }
                        cur.partial = None;
                    }
                    // 2. Features split where the consumer needs them whole.
                    if cur.feat > want_feat {
                        let k = cur.feat / want_feat.max(1);
                        let after = Placement {
                            feat: want_feat,
                            ..cur
                        };
                        let fk = k as f64;
                        let bytes = (fk - 1.0) / fk * bytes_of(&after);
                        emit(CommKind::AllGather, "features", Group::Tp, k, bytes);
                        cur = after;
                    }
                    // 3. Tokens: to and from experts, or to a coarser split.
                    match (cur.tok, my_tok) {
                        (x, y) if x == y => {}
                        (_, AT_EXPERTS) => {
                            let assignments = a.nodes[r].active.v as f64 * share.f() * tokens
                                / tok_div(AT_EXPERTS);
                            let (kind, bytes) = match self.layout.dispatch {
                                Dispatch::AllToAll => (
                                    CommKind::AllToAll,
                                    assignments * elems * b * (fe - 1.0) / fe,
                                ),
                                Dispatch::AllGather => {
                                    (CommKind::AllGather, (fe - 1.0) * bytes_of(&cur))
                                }
                            };
                            emit(kind, "dispatch", Group::Ep, ep, bytes);
                        }
                        (AT_EXPERTS, to) => {
                            let (kind, bytes) = match self.layout.dispatch {
                                Dispatch::AllToAll => {
                                    (CommKind::AllToAll, bytes_of(&cur) * (fe - 1.0) / fe)
                                }
                                Dispatch::AllGather => {
                                    // The combined output of every gathered token, scattered back.
                                    let combined = a.nodes[r].active.v as f64 * share.f() * tokens
                                        / to as f64
                                        * elems
                                        * b
                                        / cur.feat as f64;
                                    (CommKind::ReduceScatter, (fe - 1.0) * combined)
                                }
                            };
                            emit(kind, "combine", Group::Ep, ep, bytes);
                        }
                        (from, to) if to > from && to % from == 0 => {} // a local slice
                        (from, to) => {
                            let (k, gathered) = if from % to == 0 {
                                (from / to, bytes_of(&Placement { tok: to, ..cur }))
                            } else {
                                (from, bytes_of(&Placement { tok: 1, ..cur }))
                            };
                            let fk = k as f64;
                            let bytes = (fk - 1.0) / fk * gathered;
                            emit(
                                CommKind::AllGather,
                                "tokens",
                                Group::Tokens { from },
                                k,
                                bytes,
                            );
                        }
                    }
                }
                // A matmul whose weights are split along what it contracts (row parallel, a
                // vocab-split table) leaves a sum pending over its TP group.
                let partial = carried_partial.or_else(|| {
                    (!info.weights.is_empty()
                        && self.tp_share[r] != Share::ONE
                        && self.out_share[r] == Share::ONE)
                        .then(|| (self.tp_share[r].ways(), info.part))
                });
                out.insert(
                    r,
                    Placement {
                        tok: my_tok,
                        feat: self.out_share[r].ways(),
                        part: info.part,
                        partial,
                    },
                );
            }
        }
        // Pipeline stages hand the carried stream on: each GPU sends its share.
        for s in 1..self.stages() {
            let bytes = tokens * m.carried_elements as f64 * b / self.layout.stage_gpus() as f64;
            rows.push(CommRow {
                stage: s,
                at: format!("stage {s}"),
                from: format!("stage {}", s - 1),
                kind: CommKind::SendRecv,
                why: "pipeline",
                group: 2,
                link: Link::Intra,
                bytes,
                intra_bytes: bytes,
                inter_bytes: 0.0,
                stride: self.layout.stage_gpus(),
            });
        }
        rows
    }

    /// Places each row on its links from the group's geometry and the node size: a group
    /// inside one node uses the intra-node link; a ring collective that crosses nodes runs at
    /// the inter-node rate; an all-to-all sends to in-node peers over the intra-node link and
    /// to the rest over the NIC.
    pub fn route(&self, rows: &mut [CommRow], gpu: &Gpu) -> Result<(), Missing> {
        if rows.is_empty() {
            return Ok(());
        }
        let node = gpu.node_size()?;
        let n = self.layout.stage_gpus();
        for c in rows.iter_mut() {
            let (mut intra, mut inter) = (c.bytes, 0.0);
            if c.kind == CommKind::SendRecv {
                let s = c.stage as u32;
                if ((s - 1) * n) / node != ((s + 1) * n - 1) / node {
                    (intra, inter) = (0.0, c.bytes);
                }
            } else {
                let per_node = if c.stride >= node {
                    1
                } else {
                    (node / c.stride).min(c.group)
                };
                if per_node < c.group {
                    if c.kind == CommKind::AllToAll {
                        let g = (c.group - 1) as f64;
                        intra = c.bytes * (per_node - 1) as f64 / g;
                        inter = c.bytes * (c.group - per_node) as f64 / g;
                    } else {
                        (intra, inter) = (0.0, c.bytes);
                    }
                }
            }
            c.intra_bytes = intra;
            c.inter_bytes = inter;
            c.link = match (intra > 0.0, inter > 0.0) {
                (_, false) => Link::Intra,
                (false, true) => Link::Inter,
                (true, true) => Link::Both,
            };
        }
        Ok(())
    }

    /// Seconds a routed row takes: each link at its rated one-way bandwidth, the two links of
    /// an all-to-all in parallel.
    pub fn comm_seconds(&self, c: &CommRow, gpu: &Gpu) -> Result<f64, Missing> {
        let mut t: f64 = 0.0;
        if c.intra_bytes > 0.0 {
            t = t.max(c.intra_bytes / gpu.link_bytes_per_s()?);
        }
        if c.inter_bytes > 0.0 {
            t = t.max(c.inter_bytes / gpu.internode_bytes_per_s()?);
        }
        Ok(t)
    }
}
