//! The structural guard: rotary settings, attention masks and sliding windows agree with config.

use harch_engine::Analysis;
use harch_engine::analysis::NodeRow;
use harch_engine::ir::{Growth, ModelIr};

use crate::report::Diagnostic;

pub mod code {
    pub const ROPE_TYPE: &str = "R001";
    pub const ROTARY_DIM: &str = "R002";
    pub const MASK: &str = "R003";
    pub const WINDOW: &str = "R004";
    pub const UNCAPPED_CACHE: &str = "R005";
    pub const ROUTER_SCORING: &str = "R006";
    pub const ROUTER_BIAS: &str = "R007";
    pub const ROUTER_GROUPS: &str = "R008";
    pub const ROUTER_WEIGHTS: &str = "R009";
    pub const ROTARY_ON: &str = "R010";
}

/// The rope type config declares, in any of its spellings; `default` when there is no scaling.
pub fn config_rope_type(config: &serde_json::Value) -> String {
    for (outer, inner) in [
        ("rope_scaling", "rope_type"),
        ("rope_scaling", "type"),
        ("rope_parameters", "rope_type"),
        ("rope_parameters", "type"),
    ] {
        if let Some(s) = config
            .get(outer)
            .and_then(|o| o.get(inner))
            .and_then(|v| v.as_str())
        {
            return s.to_string();
        }
    }
    "default".into()
}

fn sliding_window(config: &serde_json::Value) -> Option<i128> {
    if config.get("use_sliding_window").and_then(|v| v.as_bool()) == Some(false) {
        return None;
    }
    config
        .get("sliding_window")
        .and_then(|v| v.as_i64())
        .map(|w| w as i128)
}

/// Whether config makes layer `i` a sliding-window layer.
fn layer_is_sliding(config: &serde_json::Value, i: i128) -> bool {
    if sliding_window(config).is_none() {
        return false;
    }
    match config.get("layer_types").and_then(|v| v.as_array()) {
        Some(list) => list
            .get(i as usize)
            .and_then(|v| v.as_str())
            .is_some_and(|s| s.contains("sliding")),
        None => true,
    }
}

fn in_group<'a>(a: &'a Analysis, stack: &str, block: &str) -> impl Iterator<Item = &'a NodeRow> {
    let prefix = format!("{stack}[{block}].");
    a.nodes.iter().filter(move |n| n.id.starts_with(&prefix))
}

/// What config says about the rotary width: an absolute `rotary_dim`, or a
/// `partial_rotary_factor` (top level, or under `rope_parameters` / `rope_scaling`), with the
/// key it was read from.
enum RotaryWidth {
    Channels(i128, &'static str),
    Fraction(f64, &'static str),
    Whole,
}

fn config_rotary_width(config: &serde_json::Value) -> RotaryWidth {
    if let Some(d) = config.get("rotary_dim").and_then(|v| v.as_i64()) {
        return RotaryWidth::Channels(d as i128, "rotary_dim");
    }
    // DeepSeek's rope slice (MLA's own rope part; DeepSeek-V4 rotates that many channels of
    // each 512-channel head).
    if let Some(d) = config.get("qk_rope_head_dim").and_then(|v| v.as_i64()) {
        return RotaryWidth::Channels(d as i128, "qk_rope_head_dim");
    }
    for (outer, key) in [
        (None, "partial_rotary_factor"),
        (
            Some("rope_parameters"),
            "rope_parameters.partial_rotary_factor",
        ),
        (Some("rope_scaling"), "rope_scaling.partial_rotary_factor"),
    ] {
        let at = match outer {
            Some(o) => config.get(o),
            None => Some(config),
        };
        if let Some(f) = at
            .and_then(|c| c.get("partial_rotary_factor"))
            .and_then(|v| v.as_f64())
        {
            return RotaryWidth::Fraction(f, key);
        }
    }
    RotaryWidth::Whole
}

/// The rope settings config gives the layers a rope op runs in. transformers 5 keys
/// `rope_parameters` by layer type (`full_attention`, `sliding_attention`: Gemma 3 and 4) when
/// the types rotate differently; then each type among the op's layers (`layer_types`) is a view
/// of config whose `rope_parameters` is that type's entry. Otherwise config as it is.
fn rope_views(
    a: &Analysis,
    n: &NodeRow,
    config: &serde_json::Value,
) -> Vec<(Option<String>, serde_json::Value)> {
    let by_type = config
        .get("rope_parameters")
        .and_then(|v| v.as_object())
        .filter(|o| !o.is_empty() && o.values().all(|v| v.is_object()));
    let types = config.get("layer_types").and_then(|v| v.as_array());
    let group = a
        .groups
        .iter()
        .find(|g| n.id.starts_with(&format!("{}[{}].", g.stack, g.block)));
    let (Some(by_type), Some(types), Some(g)) = (by_type, types, group) else {
        return vec![(None, config.clone())];
    };
    let mut seen: Vec<&str> = Vec::new();
    for &i in &g.layers {
        if let Some(t) = types.get(i as usize).and_then(|v| v.as_str())
            && by_type.contains_key(t)
            && !seen.contains(&t)
        {
            seen.push(t);
        }
    }
    if seen.is_empty() {
        return vec![(None, config.clone())];
    }
    seen.into_iter()
        .map(|t| {
            let mut view = config.clone();
            view["rope_parameters"] = by_type[t].clone();
            (Some(t.to_string()), view)
        })
        .collect()
}

fn last_dim(n: &NodeRow) -> Option<i128> {
    n.shape.last().and_then(|a| a.dim()).map(|q| q.v)
}

/// R002 for one rope op: the channels it rotates against config. A rope applied to a slice of
/// the head (`slice` → `rope` → `concat`) rotates the slice; the head it is a fraction of is the
/// slice's input.
fn rotary_width(a: &Analysis, n: &NodeRow, config: &serde_json::Value) -> Option<Diagnostic> {
    let dim = n.args.get("dim").and_then(|v| v.int)?;
    let rotated = n.args.get("rotary_dim").and_then(|v| v.int).unwrap_or(dim);
    let producer = n
        .inputs
        .first()
        .and_then(|p| p.last())
        .map(|&p| &a.nodes[p]);
    let sliced_from = producer
        .filter(|p| p.op == "slice")
        .and_then(|p| p.inputs.first().and_then(|i| i.last()))
        .and_then(|&q| last_dim(&a.nodes[q]));
    let head = match sliced_from {
        Some(h) if rotated == dim => h,
        _ => dim,
    };
    let (want, said) = match config_rotary_width(config) {
        RotaryWidth::Channels(c, key) => (c, format!("config `{key}` = {c}")),
        RotaryWidth::Fraction(f, key) => (
            (head as f64 * f).round() as i128,
            format!("config `{key}` = {f} of the {head}-channel head"),
        ),
        // No key: the op rotates all it is given (MLA's rope part is its own slice).
        RotaryWidth::Whole => (dim, "config names no rotary width: the whole input".into()),
    };
    if rotated == want {
        return None;
    }
    Some(
        Diagnostic::new(
            "structural",
            code::ROTARY_DIM,
            format!(
                "rope `{}` rotates {rotated} channels but {said} gives {want}",
                n.id
            ),
            n.loc.clone(),
        )
        .hint("rotate the configured channels: `rotary_dim:` on the rope op (or a rope over a `slice` of that width), from config.rotary_dim, else head_dim * partial_rotary_factor (top level, rope_parameters or rope_scaling)"),
    )
}

/// R003 for an encoder's attention: a vision tower attends over all of an image's patches at
/// once (the source's vision attention passes `is_causal=False`), whatever the text model's
/// config says about its own mask. The text model's rope settings do not apply to it.
fn encoder_mask(
    n: &NodeRow,
    p: &harch_engine::analysis::PerImage,
    seen: &mut std::collections::BTreeSet<(&'static str, String)>,
) -> Option<Diagnostic> {
    if n.op != "attention_score" {
        return None;
    }
    let got = n
        .args
        .get("mask")
        .map(|v| v.text.as_str())
        .unwrap_or("causal");
    if got == "bidirectional" || !seen.insert((code::MASK, n.component.clone())) {
        return None;
    }
    Some(
        Diagnostic::new(
            "structural",
            code::MASK,
            format!(
                "attention `{}` uses a {got} mask, but it runs in the encoder of image input `{}`: a vision tower encodes an image once, every patch attending to every other patch of that image (bidirectional), before any token is decoded",
                n.id, p.input
            ),
            n.loc.clone(),
        )
        .hint("mask: bidirectional on an encoder's attention, and no cache"),
    )
}

pub fn check(
    _ir: &ModelIr,
    a: &Analysis,
    config: &serde_json::Value,
    anchored: &crate::window_anchor::Anchored,
) -> Vec<Diagnostic> {
    let mut out = Vec::new();
    let want_rope = config_rope_type(config);
    let bidirectional = config.get("is_causal").and_then(|v| v.as_bool()) == Some(false)
        || config
            .get("use_bidirectional_attention")
            .and_then(|v| v.as_bool())
            == Some(true);
    let want_mask = if bidirectional {
        "bidirectional"
    } else {
        "causal"
    };
    let mut seen = std::collections::BTreeSet::new();
    for n in &a.nodes {
        if let Some(p) = &n.per_image {
            out.extend(encoder_mask(n, p, &mut seen));
            continue;
        }
        match n.op.as_str() {
            "rope" => {
                let got = n
                    .args
                    .get("scaling")
                    .map(|v| v.text.as_str())
                    .unwrap_or("default");
                let got = if got == "none" { "default" } else { got };
                for (layer_type, view) in rope_views(a, n, config) {
                    let want_rope = match &layer_type {
                        Some(_) => config_rope_type(&view),
                        None => want_rope.clone(),
                    };
                    let of = layer_type
                        .as_ref()
                        .map(|t| format!(" for its `{t}` layers (`rope_parameters.{t}`)"))
                        .unwrap_or_default();
                    if got != want_rope && seen.insert((code::ROPE_TYPE, n.component.clone())) {
                        out.push(
                            Diagnostic::new("structural", code::ROPE_TYPE, format!("rope `{}` uses scaling `{got}` but config declares `{want_rope}`{of}", n.id), n.loc.clone())
                                .hint("bind the rope type from config, e.g. attrs: `rope_type: \"config.rope_scaling.rope_type ?? config.rope_scaling.type ?? 'default'\"` (per layer type: `config.rope_parameters.<layer type>.rope_type`, a block per layer type)"),
                        );
                    }
                    if let Some(d) = rotary_width(a, n, &view)
                        && seen.insert((code::ROTARY_DIM, n.component.clone()))
                    {
                        let d = match &layer_type {
                            Some(_) => Diagnostic {
                                message: format!("{}{of}", d.message),
                                ..d
                            },
                            None => d,
                        };
                        out.push(d);
                    }
                }
            }
            "attention_score" => {
                let got = n
                    .args
                    .get("mask")
                    .map(|v| v.text.as_str())
                    .unwrap_or("causal");
                if got != want_mask && seen.insert((code::MASK, n.component.clone())) {
                    out.push(
                        Diagnostic::new(
                            "structural",
                            code::MASK,
                            format!(
                                "attention `{}` uses a {got} mask but config implies {want_mask}",
                                n.id
                            ),
                            n.loc.clone(),
                        )
                        .hint(
                            "mask: causal for decoder LMs; bidirectional only when config says so",
                        ),
                    );
                }
            }
            _ => {}
        }
    }
    out.extend(routers(a, config));
    out.extend(rotary_by_layer(a, config));
    let window = sliding_window(config);
    for g in a
        .groups
        .iter()
        .filter(|g| g.top_role.as_deref() != Some("mtp") && g.encoder.is_none())
    {
        let Some(&first) = g.layers.first() else {
            continue;
        };
        let sliding = layer_is_sliding(config, first);
        // An attention over compressed entries (one per r tokens, DeepSeek-V4's CSA and HCA)
        // reads the history beside the window: the sliding window is the uncompressed keys'.
        let attn: Vec<&NodeRow> = in_group(a, &g.stack, &g.block)
            .filter(|n| n.op == "attention_score" && n.stride.is_none())
            .collect();
        if attn.is_empty() {
            continue;
        }
        let layers = crate::report::index_ranges(&g.layers);
        let want = if sliding { window } else { None };
        for n in &attn {
            let got = n.window.as_ref().map(|w| w.v).filter(|w| *w > 0);
            if got != want {
                let say = |w: Option<i128>| {
                    w.map(|w| format!("a window of {w}"))
                        .unwrap_or_else(|| "full attention".into())
                };
                out.push(
                    Diagnostic::new("structural", code::WINDOW, format!("layers {layers} (block `{}`): attention `{}` has {} but config gives {}", g.block, n.id, say(got), say(want)), n.loc.clone())
                        .hint("bind the attention window from config.sliding_window in the blocks whose layers config marks sliding"),
                );
                break;
            }
        }
        if let Some(w) = want {
            let caches: Vec<(usize, &harch_engine::analysis::CacheRow)> = a
                .caches
                .iter()
                .enumerate()
                .filter(|(_, c)| {
                    a.nodes[c.node]
                        .id
                        .starts_with(&format!("{}[{}].", g.stack, g.block))
                })
                .collect();
            // A cache whose anchor says the source keeps another window for this one (M055).
            let capped = caches.iter().any(|(k, c)| {
                c.growth == Growth::Window
                    && (c.window.as_ref().map(|x| x.v) == Some(w) || anchored.serves(*k, Some(w)))
            });
            let uncapped = caches
                .iter()
                .map(|(_, c)| c)
                .find(|c| c.growth == Growth::PerToken && c.ratio.is_none());
            if !capped || uncapped.is_some() {
                let loc = uncapped
                    .map(|c| c.loc.clone())
                    .unwrap_or_else(|| attn[0].loc.clone());
                out.push(
                    Diagnostic::new("structural", code::UNCAPPED_CACHE, format!("layers {layers} (block `{}`): config sliding_window = {w}, but the block's KV cache is not capped at {w} tokens", g.block), loc)
                        .hint("declare the cache with `growth: window` and `window:` bound to config.sliding_window"),
                );
            }
        }
    }
    out
}

/// Router attributes against config: scoring function, selection bias, grouped top-k, and what
/// happens to the k kept weights. A key config does not set is not checked; a key it sets must
/// be what the router states (an unstated attribute is its default: softmax, no bias, one
/// group, no renormalization, a factor of 1).
fn routers(a: &Analysis, config: &serde_json::Value) -> Vec<Diagnostic> {
    let mut out = Vec::new();
    let mut seen = std::collections::BTreeSet::new();
    let method = config.get("topk_method").and_then(|v| v.as_str());
    for n in a.nodes.iter().filter(|n| n.op == "router") {
        let text = |k: &str| n.args.get(k).map(|v| v.text.clone());
        let int = |k: &str| n.args.get(k).and_then(|v| v.int);
        let mut push = |code: &'static str, msg: String, hint: &str| {
            if seen.insert((code, n.component.clone())) {
                out.push(
                    Diagnostic::new(
                        "structural",
                        code,
                        format!("router `{}`: {msg}", n.id),
                        n.loc.clone(),
                    )
                    .hint(hint.to_string()),
                );
            }
        };
        if let Some(want) = config.get("scoring_func").and_then(|v| v.as_str()) {
            let got = text("scoring").unwrap_or_else(|| "softmax".into());
            if got != want {
                push(
                    code::ROUTER_SCORING,
                    format!("scores experts with {got} but config `scoring_func` is {want}"),
                    "bind `scoring:` from config through an attr: `router_scoring: \"config.scoring_func ?? 'softmax'\"`",
                );
            }
        }
        if let Some(m) = method {
            let want = m == "noaux_tc";
            let got = int("score_bias").unwrap_or(0) != 0;
            // Hash-routed layers select experts by token id: no score, so no selection bias,
            // whatever topk_method says for the scored layers.
            let hashed = only_hash_layers(a, n.stack_group.as_deref(), config);
            if hashed && got {
                push(
                    code::ROUTER_BIAS,
                    format!(
                        "has a selection bias on hash-routed layers (config `num_hash_layers` / `mlp_layer_types`): they select experts by token id, with no score to bias (topk_method {m} is the scored layers')"
                    ),
                    "route the hash layers with `hash_router` (the stored tid2eid table), which has no `score_bias`",
                );
            } else if got != want && !hashed {
                push(
                    code::ROUTER_BIAS,
                    format!(
                        "{} a selection bias but config `topk_method` is {m}",
                        if got { "has" } else { "has no" }
                    ),
                    "`score_bias:` is on exactly when config.topk_method == 'noaux_tc' (e_score_correction_bias)",
                );
            }
        }
        if let Some(groups) = config.get("n_group").and_then(|v| v.as_i64()) {
            // Greedy selection ignores the groups config may still list.
            let grouped = !matches!(method, Some("greedy"));
            let kept = config
                .get("topk_group")
                .and_then(|v| v.as_i64())
                .unwrap_or(groups);
            let want = if grouped {
                (groups as i128, kept as i128)
            } else {
                (1, 1)
            };
            let got_groups = int("n_group").unwrap_or(1);
            let got = (got_groups, int("topk_group").unwrap_or(got_groups));
            if got != want {
                push(
                    code::ROUTER_GROUPS,
                    format!(
                        "selects in {} groups keeping {} but config gives n_group {groups}, topk_group {kept}{}",
                        got.0,
                        got.1,
                        method.map(|m| format!(" ({m})")).unwrap_or_default()
                    ),
                    "bind `n_group:`/`topk_group:` from config.n_group/config.topk_group (1 and 1 for greedy selection)",
                );
            }
        }
        if let Some(want) = config.get("norm_topk_prob").and_then(|v| v.as_bool()) {
            let got = int("norm_topk_prob").unwrap_or(0) != 0;
            if got != want {
                push(
                    code::ROUTER_WEIGHTS,
                    format!("norm_topk_prob is {got} but config says {want}"),
                    "bind `norm_topk_prob:` from config.norm_topk_prob",
                );
            }
        }
        if let Some(want) = config.get("routed_scaling_factor").and_then(|v| v.as_f64()) {
            let got = text("routed_scaling_factor")
                .and_then(|t| t.parse::<f64>().ok())
                .unwrap_or(1.0);
            if (got - want).abs() > 1e-9 {
                push(
                    code::ROUTER_WEIGHTS,
                    format!(
                        "scales the kept weights by {got} but config `routed_scaling_factor` is {want}"
                    ),
                    "bind `routed_scaling_factor:` from config through an attr: `router_scale: \"config.routed_scaling_factor ?? 1\"`",
                );
            }
        }
    }
    out
}

/// Whether every layer of the block `group` routes by hash (config `mlp_layer_types[i] ==
/// "hash_moe"`, or `i < num_hash_layers`), so that no selection bias applies there.
fn only_hash_layers(a: &Analysis, group: Option<&str>, config: &serde_json::Value) -> bool {
    let Some(group) = group else { return false };
    let hashed = |i: i128| -> bool {
        if let Some(list) = config.get("mlp_layer_types").and_then(|v| v.as_array()) {
            return usize::try_from(i)
                .ok()
                .and_then(|i| list.get(i))
                .and_then(|v| v.as_str())
                == Some("hash_moe");
        }
        config
            .get("num_hash_layers")
            .and_then(|v| v.as_i64())
            .is_some_and(|n| i < n as i128)
    };
    let mut layers = a
        .groups
        .iter()
        // MTP layers count from 0 in their own stack, not as trunk layers `i`.
        .filter(|g| g.block == group && g.top_role.as_deref() != Some("mtp"))
        .flat_map(|g| g.layers.iter().copied())
        .peekable();
    layers.peek().is_some() && layers.all(hashed)
}

/// Whether config applies rotary embedding at layer `i`: `no_rope_layers` (1 = rope),
/// `nope_layer_interval` (every n-th layer has none), `mla_use_nope` (no layer has any).
/// `None` when config does not say.
fn layer_uses_rope(config: &serde_json::Value, i: i128) -> Option<bool> {
    if let Some(list) = config.get("no_rope_layers").and_then(|v| v.as_array())
        && !list.is_empty()
    {
        return list
            .get(i as usize)
            .and_then(|v| v.as_i64())
            .map(|v| v != 0);
    }
    if let Some(n) = config.get("nope_layer_interval").and_then(|v| v.as_i64())
        && n > 0
    {
        return Some((i + 1) % n as i128 != 0);
    }
    if config.get("mla_use_nope").and_then(|v| v.as_bool()) == Some(true) {
        return Some(false);
    }
    None
}

/// Each layer group's attention applies rotary embedding exactly where config says it does.
fn rotary_by_layer(a: &Analysis, config: &serde_json::Value) -> Vec<Diagnostic> {
    let mut out = Vec::new();
    for g in a
        .groups
        .iter()
        .filter(|g| g.top_role.as_deref() != Some("mtp") && g.encoder.is_none())
    {
        let nodes: Vec<&NodeRow> = in_group(a, &g.stack, &g.block).collect();
        let Some(attn) = nodes.iter().find(|n| n.op == "attention_score") else {
            continue;
        };
        let has_rope = nodes.iter().any(|n| n.op == "rope");
        let wrong: Vec<i128> = g
            .layers
            .iter()
            .copied()
            .filter(|&i| layer_uses_rope(config, i).is_some_and(|want| want != has_rope))
            .collect();
        if wrong.is_empty() {
            continue;
        }
        let layers = harch_engine::analysis::ranges(&wrong);
        out.push(
            Diagnostic::new("structural", code::ROTARY_ON, format!("layers {layers} (block `{}`): attention `{}` {} rotary embedding but config says {}", g.block, attn.id, if has_rope { "applies" } else { "applies no" }, if has_rope { "these layers have none (NoPE)" } else { "they use it" }), attn.loc.clone())
                .hint("switch rope per block by binding its flag (`bind: { use_rope: 0 }` for NoPE layers), with the schedule's `where:` reading config (no_rope_layers, nope_layer_interval, mla_use_nope)"),
        );
    }
    out
}
