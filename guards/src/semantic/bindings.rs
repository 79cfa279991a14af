//! Config bindings (codes M001–M009): a quantity config.json fixes is the spec's value exactly.
//!
//! Reading a key is not enough (the schedule guard's C001 is satisfied by
//! `top_k: config.num_experts_per_tok / 2`): the router's top_k, `instances.active` and a
//! grouped op's `active` equal the configured experts per token, MTP stacks hold the configured
//! number of layers and the main stacks no more than `num_hidden_layers`, the dim that binds a
//! quantity (`top_k`, `n_heads`, …) has the configured value, a `??` fallback never stands in for a
//! spelling the config does have, and a count is a non-negative integer. The quantities and
//! their spellings are `quantities:` in specs/arch/config_keys.yaml.

use std::collections::BTreeSet;

use harch_engine::Analysis;
use harch_engine::analysis::NodeRow;
use harch_engine::diag::Location;
use harch_engine::expr::{BinOp, Expr, PathSeg};
use harch_engine::ir::{ModelIr, NodeKind};
use harch_engine::load::ConfigKeys;

use super::count_anchor::{Count, CountSource};
use crate::report::Diagnostic;
use crate::source::{AnchorSource, anchor_snippets};
use crate::truth::Truth;

pub mod code {
    /// A router or expert combine selects another number of experts than config's experts per
    /// token.
    pub const TOP_K: &str = "M001";
    /// Routed experts (`instances.active`, a grouped op's `active`) run another number per
    /// token than config's experts per token.
    pub const ACTIVE: &str = "M002";
    /// The dim that binds a configured quantity (`top_k`, `n_heads`) has another value.
    pub const ALTERED: &str = "M003";
    /// A `??` fallback for a spelling config lacks while config sets another spelling.
    pub const HIDDEN_KEY: &str = "M004";
    /// A configured count that is not a non-negative integer (`true`, `8.0`, `-1`).
    pub const NOT_A_COUNT: &str = "M005";
    /// MTP stacks hold another number of layers than config's MTP layer count.
    pub const MTP_COUNT: &str = "M006";
    /// The main (non-MTP) stacks hold more layers than config's `num_hidden_layers`.
    pub const MTP_ROLE: &str = "M007";
    /// The source anchor of an exception to M003 or M007 is not in the forward source, or
    /// names none of the quantity's config keys.
    pub const EXCEPTION_ANCHOR: &str = "M008";
    /// The spec serves other architectures than the truth's config names (and, from
    /// `validate`, a model id that is not the truth's).
    pub const IDENTITY: &str = "M010";
}

pub fn check(ir: &ModelIr, a: &Analysis, truth: &Truth, keys: &ConfigKeys) -> Vec<Diagnostic> {
    let text_config = crate::config_view::text(&truth.config);
    let config = &*text_config;
    let mut out = identity(ir, truth);
    if !out.is_empty() {
        // Every other comparison would hold one model's spec to another model's facts.
        return out;
    }
    out.extend(counts(a, config, keys));
    if out.iter().any(|d| d.code == code::NOT_A_COUNT) {
        // The values below would be compared with a number config does not state.
        return out;
    }
    // The source is normalized only when the spec states an exception to check against it.
    let any_anchor = ir.dims.iter().any(|d| d.src.is_some())
        || ir
            .graph
            .iter()
            .any(|n| matches!(n.kind, NodeKind::Stack(_)) && n.src.is_some());
    let anchors = if any_anchor {
        let files = crate::source::forward_sources(ir, &truth.sources);
        Anchors {
            text: AnchorSource::new(&files),
            statements: Some(CountSource::read(&files)),
            config,
        }
    } else {
        Anchors {
            text: AnchorSource::default(),
            statements: None,
            config,
        }
    };
    // The MTP layers the checkpoint stores are the fact where config states another number.
    let stored_mtp = keys
        .configured("layers", config)
        .and_then(|(_, v)| count_of(v))
        .and_then(|trunk| checkpoint_mtp_layers(truth, trunk));
    out.extend(dims(ir, a, config, keys, &anchors, stored_mtp));
    out.extend(experts(ir, a, config, keys, &anchors));
    out.extend(stacks(ir, a, truth, keys, &anchors));
    out
}

/// The forward source an exception's `src:` anchor is checked against.
struct Anchors<'t> {
    text: AnchorSource<'t>,
    statements: Option<CountSource<'t>>,
    config: &'t serde_json::Value,
}

impl Anchors<'_> {
    /// Why `src` does not hold as the anchor of an exception about `keys`: a snippet that is
    /// not in the forward source, (with keys) no snippet naming any of them, or (with a
    /// declared count) no snippet that is a statement computing it from them. `None` when it
    /// holds (or no source is staged: the source guard reports that).
    fn fault(&self, src: &str, keys: &[&str], want: Option<(i128, Count)>) -> Option<String> {
        if self.text.is_empty() {
            return None;
        }
        let snippets = anchor_snippets(src);
        if let Some(why) = self.text.absent(&snippets) {
            return Some(why);
        }
        if !keys.is_empty() && !snippets.iter().any(|s| keys.iter().any(|k| s.contains(k))) {
            return Some(format!(
                "it quotes no line that reads {}",
                keys.iter()
                    .map(|k| format!("`{k}`"))
                    .collect::<Vec<_>>()
                    .join(" or ")
            ));
        }
        if let (Some(st), Some((want, count)), false) = (&self.statements, want, keys.is_empty()) {
            let look = |k: &str| self.config.get(k).cloned();
            return st.fault(&snippets, keys, want, count, &look);
        }
        None
    }
}

fn diag(code: &'static str, message: String, loc: Location, hint: String) -> Diagnostic {
    Diagnostic::new("semantic", code, message, loc).hint(hint)
}

/// M010: the spec serves the architecture the truth's config names.
fn identity(ir: &ModelIr, truth: &Truth) -> Vec<Diagnostic> {
    let theirs: Vec<&str> = truth
        .config
        .get("architectures")
        .and_then(|v| v.as_array())
        .map(|l| l.iter().filter_map(|v| v.as_str()).collect())
        .unwrap_or_default();
    if theirs.is_empty()
        || ir.architectures.is_empty()
        || theirs
            .iter()
            .any(|t| ir.architectures.iter().any(|a| a == t))
    {
        return Vec::new();
    }
    let of = truth
        .model_id
        .as_deref()
        .map(|m| format!(" of `{m}`"))
        .unwrap_or_default();
    vec![diag(
        code::IDENTITY,
        format!(
            "spec `{}` ({}) serves {:?}, but the truth{of} is {:?}: the spec was checked against another model",
            ir.name, ir.file, ir.architectures, theirs
        ),
        Location::in_file(&ir.file),
        "validate the spec against the checkpoint it describes, or list the truth's architecture in `architectures:` if the spec really serves it".into(),
    )]
}

/// A configured count as an integer, when it is one.
fn count_of(v: &serde_json::Value) -> Option<i128> {
    v.as_u64().map(i128::from)
}

use crate::config_view::reads_key;

/// M005: every spelling of a quantity the spec reads (and every key of its products) holds a
/// non-negative integer.
fn counts(a: &Analysis, config: &serde_json::Value, keys: &ConfigKeys) -> Vec<Diagnostic> {
    let mut out = Vec::new();
    let mut seen = BTreeSet::new();
    for q in keys.quantities.values() {
        for k in q.keys.iter().chain(q.products.iter().flatten()) {
            if !seen.insert(k.as_str()) {
                continue;
            }
            let Some(v) = config.get(k).filter(|v| !v.is_null()) else {
                continue;
            };
            if count_of(v).is_some() || !reads_key(a, k) {
                continue;
            }
            let what = match v {
                serde_json::Value::Bool(_) => "a boolean",
                serde_json::Value::Number(n) if n.is_f64() => "a fraction",
                serde_json::Value::Number(_) => "negative",
                serde_json::Value::String(_) => "a string",
                _ => "not a number",
            };
            out.push(diag(
                code::NOT_A_COUNT,
                format!("config `{k}` = {v} is {what}, not a count; the spec reads it as one"),
                Location::default(),
                format!("a count in config.json is a non-negative integer: fix the config (or the truth it came from) rather than reading `{k}` as 0 or 1"),
            ));
        }
    }
    out
}

/// The text model's key a config path names: `config.k`, or `config.text_config.k`.
fn text_key(path: &[PathSeg]) -> Option<&str> {
    match path {
        [PathSeg::Key(k)] => Some(k),
        [PathSeg::Key(scope), PathSeg::Key(k)]
            if crate::config_view::TEXT_SCOPES.contains(&scope.as_ref()) =>
        {
            Some(k)
        }
        _ => None,
    }
}

/// The config keys `??` falls back for in an expression (`config.moe_topk ?? 8`).
fn fallbacks(e: &Expr, out: &mut Vec<String>) {
    match e {
        Expr::Config(path) => {
            for seg in path {
                if let PathSeg::Index(i) = seg {
                    fallbacks(i, out);
                }
            }
        }
        Expr::Unary(_, x) => fallbacks(x, out),
        Expr::Binary(op, l, r) => {
            if *op == BinOp::Coalesce
                && let Expr::Config(path) = &**l
                && let Some(k) = text_key(path)
            {
                out.push(k.to_string());
            }
            fallbacks(l, out);
            fallbacks(r, out);
        }
        Expr::Call(_, args) => {
            for x in args {
                fallbacks(x, out);
            }
        }
        _ => {}
    }
}

/// M003, M004 and M008 over the model's dims.
fn dims(
    ir: &ModelIr,
    a: &Analysis,
    config: &serde_json::Value,
    keys: &ConfigKeys,
    anchors: &Anchors,
    stored_mtp: Option<i128>,
) -> Vec<Diagnostic> {
    let mut out = Vec::new();
    for d in &ir.dims {
        let mut hidden = Vec::new();
        fallbacks(&d.expr, &mut hidden);
        // A chain that goes on to name the spelling config sets reads the configured value.
        let chain = crate::schedule::chain_keys(&d.expr);
        for k in &hidden {
            if crate::schedule::present(config, k) {
                continue;
            }
            let Some((q, _)) = keys.quantities.iter().find(|(_, q)| q.keys.contains(k)) else {
                continue;
            };
            if let Some((other, v)) = keys.configured(q, config)
                && !chain.contains(&other)
            {
                out.push(diag(
                    code::HIDDEN_KEY,
                    format!("dim `{}` = `{}` falls back from `config.{k}`, which config lacks, while config sets the same quantity ({q}) as `{other}` = {v}", d.name, d.raw),
                    d.loc.clone(),
                    format!("read the spelling this config uses: `config.{other}`"),
                ));
            }
        }
    }
    // Every anchored dim: its quote is in the source and, for a dim that binds a configured
    // quantity, reads one of the quantity's keys.
    let named_for = |dim: &str| -> Vec<&str> {
        keys.quantities
            .values()
            .filter(|q| q.dim.as_deref() == Some(dim))
            .flat_map(|q| q.keys.iter().chain(q.products.iter().flatten()))
            .map(String::as_str)
            .collect()
    };
    let mut anchored = BTreeSet::new();
    for d in &ir.dims {
        let Some(src) = &d.src else { continue };
        let declared = a.dims.get(&d.name).map(|q| (q.v, Count::Value));
        match anchors.fault(src, &named_for(&d.name), declared) {
            None => {
                anchored.insert(d.name.as_str());
            }
            Some(why) => out.push(diag(
                code::EXCEPTION_ANCHOR,
                format!("the source anchor of dim `{}` = `{}`: {why}", d.name, d.raw),
                d.loc.clone(),
                format!("quote, in backticks and verbatim, the forward-source line that computes `{}` this way; or bind it to the config key unchanged", d.name),
            )),
        }
    }
    for (q, quantity) in &keys.quantities {
        let Some(dim) = &quantity.dim else { continue };
        let (Some(got), Some(stated)) = (a.dims.get(dim), keys.stated(q, config)) else {
            continue;
        };
        let Some(want) = stated.count() else { continue };
        let binding = ir.dims.iter().find(|d| &d.name == dim);
        let (loc, raw) = binding
            .map(|d| (d.loc.clone(), format!(" = `{}`", d.raw)))
            .unwrap_or_else(|| (Location::in_file(&ir.file), String::new()));
        let read = if stated.keys.len() == 1 {
            format!("config.{}", stated.keys[0])
        } else {
            stated
                .keys
                .iter()
                .map(|k| format!("config.{k}"))
                .collect::<Vec<_>>()
                .join(" * ")
        };
        // An exception the spec states with a source anchor that holds is trusted; so is an
        // MTP count the checkpoint stores (three layers beside a config that says 1, as M006).
        let stored = q == "mtp_layers" && stored_mtp == Some(got.v);
        if got.v != want && !anchored.contains(dim.as_str()) && !stored {
            out.push(diag(
                code::ALTERED,
                format!("dim `{dim}`{raw} is {}, but config states {want}: {} ({q})", got.v, stated.describe()),
                loc,
                format!("bind `{dim}: {read}` unchanged: the value config states is the one the model runs with (or, where the forward source really computes it otherwise, `{dim}: {{ value: ..., src: \"`<the source line>`\" }}`)"),
            ));
        }
    }
    out
}

/// The experts per token the spec is held to: config's, unless the dim that binds them states
/// an exception with an anchor that holds (then its value, which M003 and M008 answer for).
fn experts_per_token(
    ir: &ModelIr,
    a: &Analysis,
    config: &serde_json::Value,
    keys: &ConfigKeys,
    anchors: &Anchors,
) -> Option<(String, String, i128)> {
    let q = "experts_per_token";
    let (key, v) = keys.configured(q, config)?;
    let want = count_of(v)?;
    let quantity = keys.quantities.get(q)?;
    let anchored = quantity.dim.as_ref().and_then(|dim| {
        let d = ir.dims.iter().find(|d| &d.name == dim)?;
        let src = d.src.as_deref()?;
        let named: Vec<&str> = quantity.keys.iter().map(String::as_str).collect();
        let declared = a.dims.get(dim).map(|q| (q.v, Count::Value));
        if anchors.fault(src, &named, declared).is_some() {
            return None;
        }
        Some((
            format!("dim `{dim}` (anchored in the source)"),
            a.dims.get(dim)?.v,
        ))
    });
    let (from, want) = anchored.unwrap_or((format!("config `{key}`"), want));
    Some((from, key.to_string(), want))
}

/// Rows directly inside instance `parent` (`layers[moe].ffn` holds `layers[moe].ffn.gate`).
fn children<'a>(a: &'a Analysis, parent: &'a str) -> impl Iterator<Item = &'a NodeRow> + 'a {
    a.nodes.iter().filter(move |n| {
        n.id.strip_prefix(parent)
            .and_then(|s| s.strip_prefix('.'))
            .is_some_and(|rest| !rest.contains('.'))
    })
}

fn parent_id(id: &str) -> &str {
    id.rsplit_once('.').map(|(p, _)| p).unwrap_or("")
}

/// M001 and M002: the experts a router selects, a combine sums and the expert instances run
/// per token are config's experts per token.
fn experts(
    ir: &ModelIr,
    a: &Analysis,
    config: &serde_json::Value,
    keys: &ConfigKeys,
    anchors: &Anchors,
) -> Vec<Diagnostic> {
    let mut out = Vec::new();
    let Some((from, key, want)) = experts_per_token(ir, a, config, keys, anchors) else {
        return out;
    };
    let mut seen = BTreeSet::new();
    let mut once = |d: Diagnostic, out: &mut Vec<Diagnostic>| {
        let l = &d.location;
        if seen.insert((d.code, l.file.clone(), l.line, l.column)) {
            out.push(d);
        }
    };
    let by_id: std::collections::HashMap<&str, &NodeRow> =
        a.nodes.iter().map(|n| (n.id.as_str(), n)).collect();
    for r in a.nodes.iter().filter(|n| n.op == "router") {
        let moe = parent_id(&r.id);
        for n in std::iter::once(r).chain(children(a, moe)) {
            let arg = |k: &str| n.args.get(k).and_then(|v| v.int);
            match n.op.as_str() {
                "router" | "moe_combine" => {
                    if let Some(k) = arg("top_k")
                        && k != want
                    {
                        once(
                            diag(
                                code::TOP_K,
                                format!(
                                    "`{}` ({}) selects top_k = {k} experts per token, but {from} = {want}",
                                    n.id, n.op
                                ),
                                n.loc.clone(),
                                format!(
                                    "bind top_k to `config.{key}` unchanged (a shared expert is its own node, not an extra routed one)"
                                ),
                            ),
                            &mut out,
                        );
                    }
                }
                "grouped_linear" => {
                    if let Some(k) = arg("active")
                        && k != want
                    {
                        once(
                            diag(
                                code::ACTIVE,
                                format!(
                                    "`{}` runs active = {k} of its {} experts per token, but {from} = {want}",
                                    n.id,
                                    arg("experts")
                                        .map(|e| e.to_string())
                                        .unwrap_or_else(|| "?".into())
                                ),
                                n.loc.clone(),
                                format!("set `active:` to the experts per token, `config.{key}`"),
                            ),
                            &mut out,
                        );
                    }
                }
                op if op.starts_with("component:") => {
                    let Some(p) = by_id.get(moe) else { continue };
                    if p.count.v <= 0 || p.active.v <= 0 || n.count.v <= p.count.v {
                        continue;
                    }
                    let copies = n.count.v / p.count.v;
                    let active = n.active.v / p.active.v;
                    if active != want {
                        let how = if active == copies {
                            "every one of its {copies} experts is counted active"
                                .replace("{copies}", &copies.to_string())
                        } else {
                            format!("{active} of its {copies} experts run per token")
                        };
                        once(
                            diag(
                                code::ACTIVE,
                                format!("`{}`: {how}, but {from} = {want}", n.id),
                                n.loc.clone(),
                                format!(
                                    "declare `instances: {{ count: …, active: <experts per token> }}` with active bound to `config.{key}`"
                                ),
                            ),
                            &mut out,
                        );
                    }
                }
                _ => {}
            }
        }
    }
    out
}

/// M006 and M007: MTP stacks hold config's MTP layers, the main stacks config's layers (unless
/// a main stack states why it runs past them with a `src:` anchor that holds; M008 if not).
fn stacks(
    ir: &ModelIr,
    a: &Analysis,
    truth: &Truth,
    keys: &ConfigKeys,
    anchors: &Anchors,
) -> Vec<Diagnostic> {
    let config = &truth.config;
    let mut out = Vec::new();
    let (mut main, mut mtp) = (0i128, 0i128);
    let mut main_stacks = BTreeSet::new();
    let mut mtp_stacks = BTreeSet::new();
    // An encoder's blocks are the tower's (vision_config's depth), not the text model's layers.
    for g in a.groups.iter().filter(|g| g.encoder.is_none()) {
        if g.top_role.as_deref() == Some("mtp") {
            mtp += g.layers.len() as i128;
            mtp_stacks.insert(g.stack.as_str());
        } else {
            main += g.layers.len() as i128;
            main_stacks.insert(g.stack.as_str());
        }
    }
    let loc_of = |stack: &str| {
        ir.graph
            .iter()
            .find(|n| n.id == stack)
            .map(|n| n.loc.clone())
            .unwrap_or_else(|| Location::in_file(&ir.file))
    };
    let names = |s: &BTreeSet<&str>| {
        s.iter()
            .map(|x| format!("`{x}`"))
            .collect::<Vec<_>>()
            .join(", ")
    };
    // A stack's `src:` must hold wherever it is; a main stack's that holds states why it runs
    // past the configured layers as trunk.
    let named: Vec<&str> = ["layers", "mtp_layers"]
        .iter()
        .filter_map(|q| keys.quantities.get(*q))
        .flat_map(|q| q.keys.iter().map(String::as_str))
        .collect();
    let mut excused = false;
    for node in &ir.graph {
        let (NodeKind::Stack(_), Some(src)) = (&node.kind, node.src.as_deref()) else {
            continue;
        };
        // A main stack's anchor is the statement that runs every layer the main stacks hold.
        let is_main = main_stacks.contains(node.id.as_str());
        let declared = is_main.then_some((main, Count::Iterations));
        match anchors.fault(src, &named, declared) {
            None => excused |= is_main,
            Some(why) => out.push(diag(
                code::EXCEPTION_ANCHOR,
                format!("the source anchor of stack `{}`: {why}", node.id),
                node.loc.clone(),
                "quote, in backticks and verbatim, the forward-source line that runs these layers as part of the trunk; or drop `src:` and give a stack past num_hidden_layers `role: mtp`".into(),
            )),
        }
    }
    if let Some((key, v)) = keys.configured("layers", config)
        && let Some(want) = count_of(v)
        && main > want
        && !excused
    {
        let last = main_stacks.iter().last().copied().unwrap_or_default();
        out.push(diag(
            code::MTP_ROLE,
            format!("the main stacks ({}) hold {main} layers, but config `{key}` = {want}: {} past the trunk {} counted as trunk", names(&main_stacks), if main - want == 1 { "1 layer".to_string() } else { format!("{} layers", main - want) }, if main - want == 1 { "is" } else { "are" }),
            loc_of(last),
            "give the stack that continues past num_hidden_layers (multi-token prediction) `role: mtp`, so its layers count as MTP, not as trunk (or, where the source runs them as trunk, quote the line that does as the stack's `src:`)".into(),
        ));
    }
    if let Some((key, v)) = keys.configured("mtp_layers", config)
        && let Some(want) = count_of(v)
        && mtp > 0
        && mtp != want
        // The checkpoint's MTP layers are the fact where it holds another number than config
        // states (a config that says 1 beside three stored MTP layers).
        && keys
            .configured("layers", config)
            .and_then(|(_, v)| count_of(v))
            .and_then(|trunk| checkpoint_mtp_layers(truth, trunk))
            .is_none_or(|stored| stored != mtp)
    {
        let loc = mtp_stacks
            .iter()
            .next()
            .map(|s| loc_of(s))
            .unwrap_or_else(|| Location::in_file(&ir.file));
        out.push(diag(
            code::MTP_COUNT,
            format!(
                "the MTP stacks ({}) hold {mtp} layers, but config `{key}` = {want}",
                names(&mtp_stacks)
            ),
            loc,
            format!("repeat the MTP stack `config.{key}` times, under `role: mtp`"),
        ));
    }
    out
}

/// How many MTP layers the checkpoint stores: distinct indices of `model.layers.{i}.` past the
/// trunk's `trunk` layers, else of `mtp.{i}.` / `mtp.layers.{i}.` (any prefix); `None` when it
/// stores none in either form.
fn checkpoint_mtp_layers(truth: &Truth, trunk: i128) -> Option<i128> {
    let index = |rest: &str| -> Option<i128> {
        let end = rest.find('.')?;
        rest[..end].parse::<i128>().ok()
    };
    let mut past = BTreeSet::new();
    let mut named = BTreeSet::new();
    for t in truth.inventory.iter() {
        let n = t.name;
        if let Some(rest) = n.strip_prefix("model.layers.")
            && let Some(i) = index(rest)
            && i >= trunk
        {
            past.insert(i);
        } else if let Some(at) = n.find("mtp.") {
            let rest = &n[at + 4..];
            let rest = rest.strip_prefix("layers.").unwrap_or(rest);
            if let Some(i) = index(rest) {
                named.insert(i);
            }
        }
    }
    let n = if past.is_empty() {
        named.len()
    } else {
        past.len()
    };
    (n > 0).then_some(n as i128)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::truth::{Dtype, Inventory, TensorInfo};

    fn truth(names: &[&str]) -> Truth {
        let tensors = names.iter().map(|n| TensorInfo {
            name: n.to_string(),
            dtype: Dtype::BF16,
            shape: Default::default(),
            shard: None,
        });
        Truth {
            inventory: Inventory::from_tensors(tensors, None),
            ..Truth::default()
        }
    }

    #[test]
    fn the_checkpoint_counts_its_mtp_layers() {
        // Layers past a trunk of 2 (DeepSeek's form): three MTP layers.
        let t = truth(&[
            "model.layers.0.mlp.weight",
            "model.layers.1.mlp.weight",
            "model.layers.2.eh_proj.weight",
            "model.layers.3.eh_proj.weight",
            "model.layers.3.enorm.weight",
            "model.layers.4.eh_proj.weight",
        ]);
        assert_eq!(checkpoint_mtp_layers(&t, 2), Some(3));
        // A separate `mtp.` module (Qwen3-Next's form).
        let t = truth(&[
            "model.layers.0.x",
            "mtp.layers.0.fc.weight",
            "mtp.layers.1.fc.weight",
            "mtp.fc.weight",
        ]);
        assert_eq!(checkpoint_mtp_layers(&t, 1), Some(2));
        assert_eq!(
            checkpoint_mtp_layers(&truth(&["model.layers.0.x"]), 1),
            None
        );
    }
}
