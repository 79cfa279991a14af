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
use harch_engine::ir::ModelIr;
use harch_engine::load::ConfigKeys;

use crate::report::Diagnostic;
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
    /// The spec serves other architectures than the truth's config names (and, from
    /// `validate`, a model id that is not the truth's).
    pub const IDENTITY: &str = "M010";
}

pub fn check(ir: &ModelIr, a: &Analysis, truth: &Truth, keys: &ConfigKeys) -> Vec<Diagnostic> {
    let config = &truth.config;
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
    out.extend(dims(ir, a, config, keys));
    out.extend(experts(a, config, keys));
    out.extend(stacks(ir, a, config, keys));
    out
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

fn reads_key(a: &Analysis, key: &str) -> bool {
    let p = format!("config.{key}");
    a.config_reads
        .iter()
        .any(|r| r == &p || r.starts_with(&format!("{p}.")) || r.starts_with(&format!("{p}[")))
}

/// M005: every spelling of a quantity the spec reads holds a non-negative integer.
fn counts(a: &Analysis, config: &serde_json::Value, keys: &ConfigKeys) -> Vec<Diagnostic> {
    let mut out = Vec::new();
    for q in keys.quantities.values() {
        for k in &q.keys {
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
                && let [PathSeg::Key(k)] = path.as_slice()
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

/// M003 and M004 over the model's dims.
fn dims(
    ir: &ModelIr,
    a: &Analysis,
    config: &serde_json::Value,
    keys: &ConfigKeys,
) -> Vec<Diagnostic> {
    let mut out = Vec::new();
    for d in &ir.dims {
        let mut hidden = Vec::new();
        fallbacks(&d.expr, &mut hidden);
        for k in &hidden {
            if crate::schedule::present(config, k) {
                continue;
            }
            let Some((q, _)) = keys.quantities.iter().find(|(_, q)| q.keys.contains(k)) else {
                continue;
            };
            if let Some((other, v)) = keys.configured(q, config) {
                out.push(diag(
                    code::HIDDEN_KEY,
                    format!("dim `{}` = `{}` falls back from `config.{k}`, which config lacks, while config sets the same quantity ({q}) as `{other}` = {v}", d.name, d.raw),
                    d.loc.clone(),
                    format!("read the spelling this config uses: `config.{other}`"),
                ));
            }
        }
    }
    for (q, quantity) in &keys.quantities {
        let Some(dim) = &quantity.dim else { continue };
        let (Some(got), Some((k, v))) = (a.dims.get(dim), keys.configured(q, config)) else {
            continue;
        };
        let Some(want) = count_of(v) else { continue };
        if got.v != want {
            let (loc, raw) = ir
                .dims
                .iter()
                .find(|d| &d.name == dim)
                .map(|d| (d.loc.clone(), format!(" = `{}`", d.raw)))
                .unwrap_or_else(|| (Location::in_file(&ir.file), String::new()));
            out.push(diag(
                code::ALTERED,
                format!("dim `{dim}`{raw} is {}, but config `{k}` = {want} ({q})", got.v),
                loc,
                format!("bind `{dim}: config.{k}` unchanged: the value config states is the one the model runs with"),
            ));
        }
    }
    out
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
fn experts(a: &Analysis, config: &serde_json::Value, keys: &ConfigKeys) -> Vec<Diagnostic> {
    let mut out = Vec::new();
    let Some((key, v)) = keys.configured("experts_per_token", config) else {
        return out;
    };
    let Some(want) = count_of(v) else {
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
                                    "`{}` ({}) selects top_k = {k} experts per token, but config `{key}` = {want}",
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
                                    "`{}` runs active = {k} of its {} experts per token, but config `{key}` = {want}",
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
                                format!("`{}`: {how}, but config `{key}` = {want}", n.id),
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

/// M006 and M007: MTP stacks hold config's MTP layers, the main stacks config's layers.
fn stacks(
    ir: &ModelIr,
    a: &Analysis,
    config: &serde_json::Value,
    keys: &ConfigKeys,
) -> Vec<Diagnostic> {
    let mut out = Vec::new();
    let (mut main, mut mtp) = (0i128, 0i128);
    let mut main_stacks = BTreeSet::new();
    let mut mtp_stacks = BTreeSet::new();
    for g in &a.groups {
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
    if let Some((key, v)) = keys.configured("layers", config)
        && let Some(want) = count_of(v)
        && main > want
    {
        let last = main_stacks.iter().last().copied().unwrap_or_default();
        out.push(diag(
            code::MTP_ROLE,
            format!("the main stacks ({}) hold {main} layers, but config `{key}` = {want}: {} layers past the trunk are counted as trunk", names(&main_stacks), main - want),
            loc_of(last),
            "give the stack that continues past num_hidden_layers (multi-token prediction) `role: mtp`, so its layers count as MTP, not as trunk".into(),
        ));
    }
    if let Some((key, v)) = keys.configured("mtp_layers", config)
        && let Some(want) = count_of(v)
        && mtp > 0
        && mtp != want
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
