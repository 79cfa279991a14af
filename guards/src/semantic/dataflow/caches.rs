//! Caches derived, not declared (M050–M054). What a layer must keep across decode steps is what
//! its decode step reads from earlier positions ([`Analysis::decode_reads`]: keys and values at
//! the attention core, MLA's latent and shared rope key, a window of them for sliding layers, the
//! recurrent and convolution state of linear attention). Every declared cache is held to that;
//! a component's own axioms stay extra checks, never this one.

use std::collections::BTreeMap;

use harch_engine::Analysis;
use harch_engine::dataflow::DecodeRead;
use harch_engine::diag::Location;
use harch_engine::ir::Growth;
use harch_engine::ops::{self, History};

use super::dtypes::{Expected, expected};
use super::{Findings, code, instance_of, local_id, thousands};
use crate::report::Diagnostic;
use crate::truth::Truth;

pub fn check(
    a: &Analysis,
    truth: &Truth,
    anchored: &crate::window_anchor::Anchored,
) -> Vec<Diagnostic> {
    let reads = a.decode_reads();
    let unit = expected(truth);
    let mut f = Findings::default();
    // The cache entries holding each row: an entry on a view holds what the view shows.
    let mut held: BTreeMap<usize, Vec<usize>> = BTreeMap::new();
    for (k, c) in a.caches.iter().enumerate() {
        for t in a.through_views(c.node) {
            held.entry(t).or_default().push(k);
        }
    }
    let read_of: BTreeMap<usize, &DecodeRead> = reads.iter().map(|r| (r.node, r)).collect();
    let mut by_instance: BTreeMap<&str, Vec<&DecodeRead>> = BTreeMap::new();
    for r in &reads {
        by_instance
            .entry(instance_of(&a.nodes[r.reader].id))
            .or_default()
            .push(r);
    }
    for (inst, rs) in &by_instance {
        let comp = component_name(a, inst, rs[0]);
        let need = need_text(a, inst, rs, unit.as_ref());
        let own: Vec<usize> = (0..a.caches.len())
            .filter(|&k| encloses(instance_of(&a.nodes[a.caches[k].node].id), inst))
            .collect();
        if own.is_empty() && rs.iter().all(|r| !held.contains_key(&r.node)) {
            let readers: Vec<String> = rs
                .iter()
                .map(|r| format!("`{}`", local_id(&a.nodes[r.reader].id, inst)))
                .collect::<std::collections::BTreeSet<_>>()
                .into_iter()
                .collect();
            f.push(
                code::NO_CACHE,
                inst,
                &a.nodes[rs[0].reader].loc,
                format!(
                    "`{comp}` reads earlier positions at decode ({}) but declares no cache; its dataflow needs {need}",
                    readers.join(", ")
                ),
                format!(
                    "declare under `cache:` of component `{comp}` what the decode step reads: {}",
                    rs.iter()
                        .map(|r| entry_text(a, inst, r))
                        .collect::<Vec<_>>()
                        .join(", ")
                ),
            );
            continue;
        }
        let loc = own
            .first()
            .map(|&k| a.caches[k].loc.clone())
            .unwrap_or_else(|| a.nodes[rs[0].reader].loc.clone());
        for r in rs {
            match held.get(&r.node) {
                None => missing(&mut f, a, inst, &comp, r, &need, &loc),
                Some(ks) => {
                    for &k in ks {
                        growth(&mut f, a, inst, k, r, anchored);
                    }
                }
            }
        }
    }
    for (k, c) in a.caches.iter().enumerate() {
        let inst = instance_of(&a.nodes[c.node].id);
        let name = local_id(&a.nodes[c.node].id, inst).to_string();
        let parts = a.through_views(c.node);
        let unread: Vec<usize> = parts
            .iter()
            .copied()
            .filter(|t| !read_of.contains_key(t))
            .collect();
        if !unread.is_empty() {
            let what = if unread == [c.node] {
                String::new()
            } else {
                format!(
                    " (through `{}`)",
                    unread
                        .iter()
                        .map(|&t| local_id(&a.nodes[t].id, inst))
                        .collect::<Vec<_>>()
                        .join("`, `")
                )
            };
            let reads_here: Vec<&str> = reads
                .iter()
                .filter(|r| instance_of(&a.nodes[r.reader].id) == inst)
                .map(|r| local_id(&a.nodes[r.node].id, inst))
                .collect();
            f.push(
                code::CACHE_EXTRA,
                inst,
                &c.loc,
                format!(
                    "cache entry `{name}` ({} elements {}) holds values{what} that no decode step reads from earlier positions{}",
                    thousands(c.elements.v),
                    per(c.growth),
                    if reads_here.is_empty() {
                        String::new()
                    } else {
                        format!("; what is read is `{}`", reads_here.join("`, `"))
                    }
                ),
                "cache exactly what attention (or the recurrent op) reads from earlier positions; drop this entry or point it at the node that is read".into(),
            );
            continue;
        }
        if let Some(&t) = parts.iter().find(|t| held[t].first() != Some(&k)) {
            f.push(
                code::CACHE_EXTRA,
                inst,
                &c.loc,
                format!(
                    "cache entry `{name}` holds `{}` a second time (another entry holds it already): the cache counts it twice",
                    local_id(&a.nodes[t].id, inst)
                ),
                "keep one cache entry per tensor that is read".into(),
            );
            continue;
        }
        if parts.iter().any(|t| read_of[t].growth != c.growth) {
            continue; // reported as a growth mismatch
        }
        let want: i128 = parts.iter().map(|t| read_of[t].elements.v).sum();
        if c.elements.v != want {
            let how = if c.growth == Growth::Constant {
                "per sequence"
            } else {
                "per token"
            };
            f.push(
                code::CACHE_SIZE,
                inst,
                &c.loc,
                format!(
                    "cache entry `{name}` holds {} elements {how}, but the decode step reads {} from it ({})",
                    thousands(c.elements.v),
                    thousands(want),
                    parts
                        .iter()
                        .map(|t| format!(
                            "`{}` {}",
                            local_id(&a.nodes[*t].id, inst),
                            size_note(a, read_of[t])
                        ))
                        .collect::<Vec<_>>()
                        .join(" + ")
                ),
                "a cache of a broadcast holds the value before the broadcast; a convolution keeps `kernel - 1` steps of its input (`steps: conv_kernel - 1`); a recurrent op keeps the state it declares".into(),
            );
        }
    }
    f.finish()
}

/// Whether the instance `outer` is `inner` or encloses it.
fn encloses(outer: &str, inner: &str) -> bool {
    outer == inner || (inner.starts_with(outer) && inner[outer.len()..].starts_with('.'))
}

fn per(g: Growth) -> &'static str {
    if g == Growth::Constant {
        "per sequence"
    } else {
        "per token"
    }
}

fn component_name(a: &Analysis, inst: &str, r: &DecodeRead) -> String {
    a.node(inst)
        .and_then(|n| n.op.strip_prefix("component:"))
        .unwrap_or(&a.nodes[r.reader].component)
        .to_string()
}

/// What a reader takes from earlier positions, in words: `what` is the value, named.
fn how_read(a: &Analysis, r: &DecodeRead, what: &str) -> String {
    match (ops::history(&a.nodes[r.reader].op), r.growth) {
        (History::State, _) => format!("carries its state {what} from step to step"),
        (History::KernelSteps(_), _) => format!("reads the last kernel-1 steps of {what}"),
        (_, Growth::Window) => format!(
            "reads {what} at the last {} positions",
            r.window.as_ref().map_or(0, |w| w.v)
        ),
        _ => format!("reads {what} at every earlier position"),
    }
}

/// The node a cache entry for a read is best declared on: what the reader takes in when that
/// is a plain view of the read node (`v_heads` for `v_proj`) in the component's own graph.
fn declare_on(a: &Analysis, r: &DecodeRead) -> usize {
    let via = a.nodes[r.via].twin.unwrap_or(r.via);
    let plain = a.through_views(r.via) == [r.node] || a.through_views(via) == [r.node];
    if plain && a.nodes[via].phase != harch_engine::analysis::Phase::Decode {
        via
    } else {
        r.node
    }
}

fn size_note(a: &Analysis, r: &DecodeRead) -> String {
    let n = &a.nodes[r.node];
    match r.growth {
        Growth::Constant => format!("{} per sequence", thousands(r.elements.v)),
        _ => format!(
            "{} = {} per token",
            ops::show_shape(&n.shape),
            thousands(r.elements.v)
        ),
    }
}

/// The cache entry that holds a read, as YAML.
fn entry_text(a: &Analysis, inst: &str, r: &DecodeRead) -> String {
    let node = local_id(&a.nodes[declare_on(a, r)].id, inst);
    let reader = &a.nodes[r.reader].op;
    let kind = match ops::history(reader) {
        History::State => "recurrent_state",
        History::KernelSteps(_) => "conv_state",
        _ if reader == "attention_apply" => "value",
        _ => "key",
    };
    let growth = match r.growth {
        Growth::PerToken => "per_token".to_string(),
        Growth::Window => format!(
            "window, window: <dim bound to {}>",
            r.window.as_ref().map_or(0, |w| w.v)
        ),
        Growth::Constant if kind == "conv_state" => "constant, steps: \"<kernel> - 1\"".into(),
        Growth::Constant => "constant".into(),
    };
    format!("`- {{ node: {node}, kind: {kind}, growth: {growth} }}`")
}

/// What an instance must cache, from its dataflow: elements, and bytes at the default dtype.
fn need_text(a: &Analysis, inst: &str, rs: &[&DecodeRead], unit: Option<&Expected>) -> String {
    let mut parts = Vec::new();
    let grows: Vec<&&DecodeRead> = rs.iter().filter(|r| r.growth != Growth::Constant).collect();
    if !grows.is_empty() {
        let total: i128 = grows.iter().map(|r| r.elements.v).sum();
        let items: Vec<String> = grows
            .iter()
            .map(|r| {
                format!(
                    "`{}` {}",
                    local_id(&a.nodes[r.node].id, inst),
                    thousands(r.elements.v)
                )
            })
            .collect();
        let bytes = unit
            .and_then(|u| harch_engine::eval::dtype_bytes(&u.dtype).map(|b| (u, b)))
            .map(|(u, b)| format!(", {} bytes at {}", thousands(total * b as i128), u.dtype))
            .unwrap_or_default();
        let window = grows
            .iter()
            .find_map(|r| r.window.as_ref())
            .map(|w| format!(", for the last {} tokens", w.v))
            .unwrap_or_default();
        parts.push(format!(
            "{} elements per token ({}){bytes}{window}",
            thousands(total),
            items.join(" + ")
        ));
    }
    let consts: Vec<&&DecodeRead> = rs.iter().filter(|r| r.growth == Growth::Constant).collect();
    if !consts.is_empty() {
        let total: i128 = consts.iter().map(|r| r.elements.v).sum();
        let items: Vec<String> = consts
            .iter()
            .map(|r| {
                format!(
                    "`{}` {}",
                    local_id(&a.nodes[r.node].id, inst),
                    thousands(r.elements.v)
                )
            })
            .collect();
        parts.push(format!(
            "{} state elements per sequence ({})",
            thousands(total),
            items.join(" + ")
        ));
    }
    let layers = a.nodes[rs[0].reader].count.v;
    let each = if layers > 1 {
        format!(" in each of its {layers} layers")
    } else {
        String::new()
    };
    format!("{}{each}", parts.join(" and "))
}

fn missing(
    f: &mut Findings,
    a: &Analysis,
    inst: &str,
    comp: &str,
    r: &DecodeRead,
    need: &str,
    loc: &Location,
) {
    let node = local_id(&a.nodes[r.node].id, inst);
    let via = local_id(&a.nodes[r.via].id, inst);
    let what = if r.via != r.node && r.via != r.reader {
        format!("`{node}` (through `{via}`)")
    } else {
        format!("`{node}`")
    };
    f.push(
        code::CACHE_MISSING,
        inst,
        loc,
        format!(
            "`{}` {} ({}), but no cache entry holds it; from its dataflow the layer must cache {need}",
            local_id(&a.nodes[r.reader].id, inst),
            how_read(a, r, &what),
            size_note(a, r),
        ),
        format!(
            "add {} to `cache:` of component `{comp}` (an axiom edited to agree with a shorter cache does not make it right)",
            entry_text(a, inst, r)
        ),
    );
}

fn growth(
    f: &mut Findings,
    a: &Analysis,
    inst: &str,
    k: usize,
    r: &DecodeRead,
    anchored: &crate::window_anchor::Anchored,
) {
    let c = &a.caches[k];
    let window = |w: Option<i128>| w.map_or(String::new(), |w| format!(" of {w} tokens"));
    let cw = c.window.as_ref().map(|w| w.v);
    let rw = r.window.as_ref().map(|w| w.v);
    if c.growth == r.growth && (c.growth != Growth::Window || cw == rw || anchored.serves(k, rw)) {
        return;
    }
    let name = local_id(&a.nodes[c.node].id, inst);
    f.push(
        code::CACHE_GROWTH,
        inst,
        &c.loc,
        format!(
            "cache entry `{name}` grows `{}`{} but `{}` {}: it must grow `{}`{}",
            c.growth.as_str(),
            window(cw.filter(|_| c.growth == Growth::Window)),
            local_id(&a.nodes[r.reader].id, inst),
            how_read(a, r, "it"),
            r.growth.as_str(),
            window(rw),
        ),
        match r.growth {
            Growth::PerToken => "a full attention keeps every position: `growth: per_token` (no window)".to_string(),
            Growth::Window => "a sliding-window attention keeps its window: `growth: window, window: <the attention's window dim>`".to_string(),
            Growth::Constant => "recurrent and convolution state is kept per sequence: `growth: constant`".to_string(),
        },
    );
}
