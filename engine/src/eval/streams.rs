//! Cross-layer streams in the walk (chapter 2.2 of the write-up): a value one layer publishes
//! (`stream_out`) and later layers read (`reads`), and append streams that save the carried
//! stream at the layers an `after:`/`before:` condition picks, for later layers of the stack,
//! or a later stack, to read `each` (element j to the j-th reader), `all` (the elements so far
//! on a new leading axis) or `concat` (joined along an axis).
//!
//! A stack is walked group by group, so what a group reads must be the same at each of its
//! layers. Which layer reads what, and which elements it sees, follows from the schedule and
//! the conditions alone; it is settled before the walk, and a block whose layers see histories
//! of different lengths is walked as one group per length (`block@n`).

use std::collections::{BTreeMap, HashMap};

use indexmap::IndexMap;

use super::{Flow, Scope, Walker};
use crate::analysis::StreamRow;
use crate::diag::{Location, code};
use crate::expr;
use crate::ir::{ComponentIr, NodeIr, ReadMode, StackIr, StreamIr, StreamKind};
use crate::ops::{self, Axis};
use crate::q::Q;

/// The streams of a stack while its layers are walked.
pub(super) struct Frame {
    stack: String,
    loc: Location,
    /// Index of the stack's first row in `Analysis::streams`.
    rows: usize,
    streams: Vec<StreamIr>,
    /// The layers of the group being walked.
    layers: Vec<i128>,
    /// An internal stream's value and the layers that have written it so far.
    written: HashMap<String, (Vec<i128>, Flow)>,
    /// An append stream's elements: the layer each is taken at, in order.
    elements: HashMap<String, Vec<i128>>,
    /// The carried stream as the stack received it: every element has its shape.
    carried: Flow,
    /// Rows an element depends on: the stack's input and each group walked so far.
    live: Vec<usize>,
}

/// An append stream of a stack already walked, for a later stack's `read:`.
pub(super) struct Saved {
    elements: usize,
    flow: Flow,
}

/// Whether an element taken at layer `j` is visible to layer `l`: one taken at a layer's entry
/// is visible inside it, one taken at its exit from the next layer on.
fn visible(j: i128, l: i128, entry: bool) -> bool {
    if entry { j <= l } else { j < l }
}

impl<'a> Walker<'a> {
    /// Opens the stack's streams: evaluates which layers save each append stream, checks that
    /// `each` readers and elements pair up, and splits the schedule's groups by the history
    /// length each layer sees. Returns the groups to walk as (group, block, layers).
    pub(super) fn open_streams(
        &mut self,
        node: &NodeIr,
        st: &StackIr,
        scope: &Scope<'a>,
        repeat: i128,
        carried: &Flow,
        groups: &IndexMap<String, Vec<i128>>,
    ) -> Option<Vec<(String, String, Vec<i128>)>> {
        let rows = self.out.streams.len();
        for s in &st.streams {
            self.out.streams.push(StreamRow {
                stack: node.id.clone(),
                name: s.name.clone(),
                carries: s.carries,
                src: s.src.clone(),
                producers: vec![],
                readers: vec![],
                loc: node.loc.clone(),
            });
        }
        let mut elements: HashMap<String, Vec<i128>> = HashMap::new();
        for s in &st.streams {
            let StreamKind::Append { at, .. } = &s.kind else {
                continue;
            };
            let mut taken = Vec::new();
            for i in 0..repeat {
                let mut env = (*scope.env).clone();
                env.insert("i".into(), Q::lit(i));
                match expr::eval_bool(at, &self.env_of(&env)) {
                    Ok(true) => taken.push(i),
                    Ok(false) => {}
                    Err(e) => {
                        self.error(
                            code::EVAL,
                            format!("stream `{}` at layer {i}: {e}", s.name),
                            &node.loc,
                            None,
                        );
                        return None;
                    }
                }
            }
            elements.insert(s.name.clone(), taken);
        }
        let reads: BTreeMap<&String, std::collections::BTreeSet<String>> = groups
            .keys()
            .map(|b| (b, self.ir.block_streams(b).read))
            .collect();
        let decl = |name: &str| st.streams.iter().find(|s| s.name == name);
        // Layers reading each `each` stream, and each layer's history signature.
        let mut each_readers: HashMap<String, Vec<i128>> = HashMap::new();
        let mut plan: Vec<(String, String, Vec<i128>)> = Vec::new();
        for (block, layers) in groups {
            let mut by_sig: IndexMap<Vec<usize>, Vec<i128>> = IndexMap::new();
            for &l in layers {
                let mut sig = Vec::new();
                for r in &reads[block] {
                    let (entry, read) = match decl(r).map(|s| &s.kind) {
                        Some(StreamKind::Append { entry, read, .. }) => (*entry, read),
                        Some(StreamKind::Earlier {
                            read: ReadMode::Each,
                        }) => {
                            each_readers.entry(r.clone()).or_default().push(l);
                            continue;
                        }
                        _ => continue,
                    };
                    let seen = elements[r]
                        .iter()
                        .filter(|&&j| visible(j, l, entry))
                        .count();
                    match read {
                        ReadMode::Each => each_readers.entry(r.clone()).or_default().push(l),
                        ReadMode::All | ReadMode::Concat(_) => {
                            if seen == 0 {
                                self.error(code::STREAM_ORDER, format!("stack `{}`: layer {l} (block `{block}`) reads stream `{r}`, which holds no element yet", node.id), &node.loc, Some(format!("an element taken {} layer j is visible to layer {}; give the layers before the first element a block that does not read `{r}`", if entry { "at the entry of" } else { "after" }, if entry { "j and later" } else { "j + 1 and later" })));
                                return None;
                            }
                            sig.push(seen);
                        }
                    }
                }
                by_sig.entry(sig).or_default().push(l);
            }
            let split = by_sig.len() > 1;
            for (sig, ls) in by_sig {
                let key = if split {
                    let n: Vec<String> = sig.iter().map(|n| n.to_string()).collect();
                    format!("{block}@{}", n.join("-"))
                } else {
                    block.clone()
                };
                plan.push((key, block.clone(), ls));
            }
        }
        plan.sort_by_key(|(_, _, ls)| ls.first().copied());
        for (name, readers) in &mut each_readers {
            readers.sort_unstable();
            let earlier;
            let (els, entry) = match decl(name).map(|s| &s.kind) {
                Some(StreamKind::Append { entry, .. }) => (&elements[name], *entry),
                // An earlier stack's elements are all there before this stack's first layer.
                _ => {
                    let Some(saved) = self.saved.get(name) else {
                        self.error(code::STREAM_ORDER, format!("stack `{}` reads stream `{name}`, which no earlier stack saves", node.id), &node.loc, Some(format!("an earlier stack declares `{name}: {{ from: <its carried stream>, after: <condition over i>, read: ... }}`")));
                        return None;
                    };
                    earlier = vec![-1; saved.elements];
                    (&earlier, false)
                }
            };
            if readers.len() != els.len() {
                self.error(code::STREAM_ORDER, format!("stack `{}`: stream `{name}` is read `each` by {} layers ({}) but holds {} elements", node.id, readers.len(), show(readers), els.len()), &node.loc, Some("the j-th reading layer reads element j: as many layers must read it as it saves elements".into()));
                return None;
            }
            if let Some((l, j)) = readers
                .iter()
                .zip(els)
                .find(|&(&l, &j)| !visible(j, l, entry))
            {
                self.error(code::STREAM_ORDER, format!("stack `{}`: layer {l} reads element of stream `{name}` taken at layer {j}, which comes after it", node.id), &node.loc, None);
                return None;
            }
        }
        self.frames.push(Frame {
            stack: node.id.clone(),
            loc: node.loc.clone(),
            rows,
            streams: st.streams.clone(),
            layers: vec![],
            written: HashMap::new(),
            elements,
            carried: carried.clone(),
            live: carried.from.to_vec(),
        });
        Some(plan)
    }

    /// Before a group is walked: the layers whose streams it reads and writes.
    pub(super) fn enter_group(&mut self, layers: &[i128]) {
        if let Some(f) = self.frames.last_mut() {
            f.layers = layers.to_vec();
        }
    }

    /// After a group is walked: its output is part of every later element's history.
    pub(super) fn leave_group(&mut self, out: &Flow) {
        if let Some(f) = self.frames.last_mut() {
            f.live.extend(out.from.iter().copied());
            f.live.sort_unstable();
            f.live.dedup();
        }
    }

    /// Closes the stack's streams; its append streams stay readable by later stacks.
    pub(super) fn close_streams(&mut self, produced: &[usize]) {
        let Some(f) = self.frames.pop() else { return };
        for s in &f.streams {
            if let StreamKind::Append { from, .. } = &s.kind {
                let flow = match from {
                    None => {
                        let mut flow = f.carried.clone();
                        flow.from = produced.into();
                        flow
                    }
                    // An element of an internal stream is what the layer it is taken at wrote.
                    Some(from) => {
                        let Some((writers, flow)) = f.written.get(from) else {
                            continue;
                        };
                        if let Some(j) = f.elements[&s.name].iter().find(|j| !writers.contains(j)) {
                            let msg = format!(
                                "stack `{}`: stream `{}` takes `{from}` after layer {j}, which does not write it (layers {} do)",
                                f.stack,
                                s.name,
                                show(writers)
                            );
                            self.error(code::STREAM_ORDER, msg, &f.loc, Some(format!("the `after:` condition picks layers whose components publish `{from}` with `stream_out`")));
                            continue;
                        }
                        flow.clone()
                    }
                };
                self.saved.insert(
                    s.name.clone(),
                    Saved {
                        elements: f.elements[&s.name].len(),
                        flow,
                    },
                );
            }
        }
    }

    /// The values of the streams a component reads, in the order of its `reads`.
    pub(super) fn read_streams(
        &mut self,
        comp: &ComponentIr,
        scope: &Scope<'a>,
        loc: &Location,
    ) -> Option<Vec<Flow>> {
        comp.reads
            .iter()
            .map(|name| self.read_stream(name, comp, scope, loc))
            .collect()
    }

    fn read_stream(
        &mut self,
        name: &str,
        comp: &ComponentIr,
        scope: &Scope<'a>,
        loc: &Location,
    ) -> Option<Flow> {
        let Some(fi) = self
            .frames
            .iter()
            .rposition(|f| f.streams.iter().any(|s| s.name == name))
        else {
            self.error(
                code::BAD_STREAM,
                format!(
                    "component `{}` reads stream `{name}`, which no enclosing stack declares",
                    comp.name
                ),
                loc,
                Some(format!(
                    "declare it under the stack's `streams:`: `{name}: {{ src: \"...\" }}`"
                )),
            );
            return None;
        };
        let frame = &self.frames[fi];
        let si = frame.streams.iter().position(|s| s.name == name)?;
        let row = frame.rows + si;
        let kind = frame.streams[si].kind.clone();
        let layers = frame.layers.clone();
        let stack = frame.stack.clone();
        let flow = match kind {
            StreamKind::Carried => {
                self.error(
                    code::BAD_STREAM,
                    format!(
                        "component `{}` reads the carried stream `{name}` as a stream",
                        comp.name
                    ),
                    loc,
                    Some("a layer receives the carried stream as its first input".into()),
                );
                return None;
            }
            StreamKind::Internal => {
                let Some((writers, flow)) = frame.written.get(name) else {
                    self.error(code::STREAM_ORDER, format!("stack `{stack}`: layer {} reads stream `{name}` before any layer writes it", show(&layers)), loc, Some(format!("a component of an earlier layer publishes it with `stream_out: {{ {name}: <node> }}`")));
                    return None;
                };
                if let Some(l) = layers.iter().find(|&&l| !writers.iter().any(|&w| w < l)) {
                    self.error(code::STREAM_ORDER, format!("stack `{stack}`: layer {l} reads stream `{name}`, but only layers {} write it", show(writers)), loc, Some("a layer reads the value an earlier layer wrote".into()));
                    return None;
                }
                flow.clone()
            }
            StreamKind::Append { read, ref from, .. } => {
                let els = &frame.elements[name];
                let n = match read {
                    ReadMode::Each => 1,
                    _ => els
                        .iter()
                        .filter(|&&j| {
                            layers.first().is_some_and(|&l| {
                                let StreamKind::Append { entry, .. } = frame.streams[si].kind
                                else {
                                    return false;
                                };
                                visible(j, l, entry)
                            })
                        })
                        .count(),
                };
                let flow = match from {
                    None => {
                        let mut flow = frame.carried.clone();
                        flow.from = frame.live.clone().into();
                        flow
                    }
                    Some(f) => match frame.written.get(f) {
                        Some((_, flow)) => flow.clone(),
                        None => {
                            self.error(code::STREAM_ORDER, format!("stack `{stack}`: layer {} reads stream `{name}`, taken from `{f}`, before any layer writes `{f}`", show(&layers)), loc, None);
                            return None;
                        }
                    },
                };
                self.history(flow, read, n, name, loc)?
            }
            StreamKind::Earlier { read } => {
                let Some(saved) = self.saved.get(name) else {
                    self.error(code::STREAM_ORDER, format!("stack `{stack}` reads stream `{name}`, which no earlier stack saves"), loc, Some(format!("an earlier stack declares `{name}: {{ from: <its carried stream>, after: <condition over i>, read: ... }}`")));
                    return None;
                };
                let (n, flow) = (saved.elements, saved.flow.clone());
                self.history(
                    flow,
                    read,
                    if read == ReadMode::Each { 1 } else { n },
                    name,
                    loc,
                )?
            }
        };
        self.out.streams[row].readers.push(scope.id.clone());
        Some(flow)
    }

    /// A stream's value as a layer reads `n` of its elements.
    fn history(
        &mut self,
        mut flow: Flow,
        read: ReadMode,
        n: usize,
        name: &str,
        loc: &Location,
    ) -> Option<Flow> {
        let n = Q::lit(n as i128);
        match read {
            ReadMode::Each => {}
            ReadMode::All => flow.shape.insert(0, Axis::Dim(n)),
            ReadMode::Concat(axis) => {
                let rank = flow.shape.len() as i64;
                let k = if axis < 0 { rank + axis } else { axis };
                let Some(Axis::Dim(d)) = usize::try_from(k).ok().and_then(|k| flow.shape.get(k))
                else {
                    self.error(
                        code::BAD_STREAM,
                        format!(
                            "stream `{name}`: `axis: {axis}` is not an axis of {}",
                            ops::show_shape(&flow.shape)
                        ),
                        loc,
                        Some("axis: -1 joins along the last axis".into()),
                    );
                    return None;
                };
                let joined = d * &n;
                flow.shape[k as usize] = Axis::Dim(joined);
            }
        }
        Some(flow)
    }

    /// Publishes a component's `stream_out` values: every layer of the group writes them.
    pub(super) fn write_streams(
        &mut self,
        comp: &ComponentIr,
        scope: &Scope<'a>,
        values: &[Flow],
        loc: &Location,
    ) {
        for ((name, _), flow) in comp.stream_out.iter().zip(values) {
            let Some(fi) = self
                .frames
                .iter()
                .rposition(|f| f.streams.iter().any(|s| &s.name == name))
            else {
                self.error(code::BAD_STREAM, format!("component `{}` publishes stream `{name}`, which no enclosing stack declares", comp.name), loc, Some(format!("declare it under the stack's `streams:`: `{name}: {{ src: \"...\" }}`")));
                continue;
            };
            let frame = &mut self.frames[fi];
            let si = frame
                .streams
                .iter()
                .position(|s| &s.name == name)
                .unwrap_or(0);
            if !matches!(frame.streams[si].kind, StreamKind::Internal) {
                self.error(code::BAD_STREAM, format!("component `{}` publishes stream `{name}` with `stream_out`, but `{name}` is the stack's carried or append stream", comp.name), loc, Some("`stream_out` writes an internal stream (declared with `src:` alone); an append stream takes its value with `from:`".into()));
                continue;
            }
            let layers = frame.layers.clone();
            let row = frame.rows + si;
            let stack = frame.stack.clone();
            match frame.written.get_mut(name) {
                Some((writers, old)) if old.shape != flow.shape => {
                    let (was, now) = (ops::show_shape(&old.shape), ops::show_shape(&flow.shape));
                    let msg = format!(
                        "stack `{stack}`: stream `{name}` is written as {now} here but as {was} by layers {}",
                        show(writers)
                    );
                    self.error(
                        code::SHAPE_AXIS,
                        msg,
                        loc,
                        Some("every writer of a stream publishes the same shape".into()),
                    );
                    continue;
                }
                Some((writers, old)) => {
                    writers.extend(layers);
                    *old = flow.clone();
                }
                None => {
                    frame.written.insert(name.clone(), (layers, flow.clone()));
                }
            }
            self.out.streams[row].producers.push(scope.id.clone());
        }
    }
}

/// Layer indices as a short list: `0, 4, 8`.
fn show(layers: &[i128]) -> String {
    let shown: Vec<String> = layers.iter().take(8).map(|l| l.to_string()).collect();
    let more = if layers.len() > 8 { ", ..." } else { "" };
    format!("{}{more}", shown.join(", "))
}
