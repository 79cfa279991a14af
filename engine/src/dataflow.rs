//! Decode-time dataflow over one evaluation: what each decode step reads from earlier positions
//! (so what a layer must cache, and how much), which nodes reach the model's outputs, and the
//! cache dtype the config implies.
//!
//! Everything here follows the dataflow edges the walk records (`NodeRow::inputs`) and the op
//! registry ([`ops::history`], [`ops::is_view`]); nothing reads what a spec *declares* about its
//! caches, so the semantic guard can hold the declaration to it.

use std::collections::HashMap;

use crate::analysis::{Analysis, NodeRow, Phase};
use crate::ir::Growth;
use crate::ops::{self, History};
use crate::q::Q;

/// A per-token tensor (or a per-sequence state) that a decode step reads from earlier positions.
#[derive(Clone, Debug)]
pub struct DecodeRead {
    /// The op that reads it: `attention_score`, `attention_apply`, `conv1d`, `gated_delta_rule`.
    pub reader: usize,
    /// What the reader takes in directly: `node` itself or a view of it (a head split, a
    /// broadcast, a concat of several such nodes).
    pub via: usize,
    /// The row whose values are read, looked through views and, for a decode variant, mapped to
    /// the main-graph row of the same node (where cache entries point).
    pub node: usize,
    pub growth: Growth,
    /// The attention window, for `Growth::Window`.
    pub window: Option<Q>,
    /// Elements per token (`per_token`, `window`) or per sequence (`constant`), per copy.
    pub elements: Q,
    /// The positions a selection lets the reader attend, at most (`NodeRow::selected`).
    pub selected: Option<Q>,
}

impl DecodeRead {
    /// How much `other` asks for compared with `self`: keep the larger demand on one node.
    fn weaker_than(&self, other: &DecodeRead) -> bool {
        let rank = |r: &DecodeRead| match r.growth {
            Growth::PerToken => (2, 0),
            Growth::Window => (1, r.window.as_ref().map_or(0, |w| w.v)),
            Growth::Constant => (0, r.elements.v),
        };
        rank(self) < rank(other)
    }
}

impl Analysis {
    /// Every tensor the decode step reads from earlier positions, one entry per node (the
    /// largest demand when several readers share it). Rows of a graph that a decode variant
    /// replaces are left out: the variant is what runs at decode.
    pub fn decode_reads(&self) -> Vec<DecodeRead> {
        let mut out: Vec<DecodeRead> = Vec::new();
        let mut at: HashMap<usize, usize> = HashMap::new();
        for read in self.reads() {
            match at.get(&read.node) {
                Some(&k) if out[k].weaker_than(&read) => out[k] = read,
                Some(_) => {}
                None => {
                    at.insert(read.node, out.len());
                    out.push(read);
                }
            }
        }
        out
    }

    /// Every read of an earlier position's value by every decode-time reader, unmerged.
    fn reads(&self) -> Vec<DecodeRead> {
        let mut out: Vec<DecodeRead> = Vec::new();
        for (r, n) in self.nodes.iter().enumerate() {
            // An encoder runs once per image over all of its positions: nothing it reads
            // comes from an earlier decode step.
            if n.phase == Phase::Prefill || n.per_image.is_some() {
                continue;
            }
            let mut found = Vec::new();
            match ops::history(&n.op) {
                History::None => continue,
                History::Input(i) => {
                    // Values of several key sets (probabilities over scores concatenated
                    // along the context) follow the history input, one per set.
                    let values = if n.op == "attention_apply" {
                        n.inputs.len().saturating_sub(i)
                    } else {
                        1
                    };
                    for (input, span) in n.inputs.iter().skip(i).zip(n.spans()).take(values) {
                        let window = span.window.clone().filter(|w| w.v > 0);
                        let growth = if window.is_some() {
                            Growth::Window
                        } else {
                            Growth::PerToken
                        };
                        for &via in input {
                            for t in self.through_views(via) {
                                if let Some(e) = per_token(&self.nodes[t]) {
                                    found.push((
                                        via,
                                        t,
                                        growth,
                                        window.clone(),
                                        e,
                                        span.selected.clone(),
                                    ));
                                }
                            }
                        }
                    }
                }
                History::KernelSteps(i) => {
                    let Some(kernel) = n.args.get("kernel").and_then(|a| a.int) else {
                        continue;
                    };
                    let steps = Q::lit((kernel - 1).max(0));
                    for &via in n.inputs.get(i).into_iter().flatten() {
                        for t in self.through_views(via) {
                            if let Some(e) = per_token(&self.nodes[t]) {
                                found.push((
                                    via,
                                    t,
                                    Growth::Constant,
                                    None,
                                    &e * &steps,
                                    n.selected.clone(),
                                ));
                            }
                        }
                    }
                }
                History::State => {
                    if let Some(s) = n.args.get("__state_elements").and_then(|a| a.int) {
                        found.push((r, r, Growth::Constant, None, Q::lit(s), n.selected.clone()));
                    }
                }
            }
            for (via, t, growth, window, elements, selected) in found {
                let read = DecodeRead {
                    reader: r,
                    via,
                    node: self.nodes[t].twin.unwrap_or(t),
                    growth,
                    window,
                    elements,
                    selected,
                };
                out.push(read);
            }
        }
        out
    }

    /// Sets each cache row's `read_cap`: the positions a decode step reads from it when every
    /// attention reading it attends a selection (the largest selection among them); a cache
    /// that any reader reads whole keeps `None`. Called once, after the walk.
    pub(crate) fn set_read_caps(&mut self) {
        // Per read node: Some(cap) while every reader so far is capped, None once one is not.
        let mut caps: HashMap<usize, Option<Q>> = HashMap::new();
        for read in self.reads() {
            let cap = match (caps.get(&read.node), &read.selected) {
                (None, s) => s.clone(),
                (Some(Some(a)), Some(b)) => Some(if b.v > a.v { b.clone() } else { a.clone() }),
                _ => None,
            };
            caps.insert(read.node, cap);
        }
        let found: Vec<Option<Q>> = self
            .caches
            .iter()
            .map(|c| {
                let read: Vec<&Option<Q>> = self
                    .through_views(c.node)
                    .into_iter()
                    .filter_map(|p| caps.get(&self.nodes[p].twin.unwrap_or(p)))
                    .collect();
                if read.is_empty() || read.iter().any(|k| k.is_none()) {
                    return None;
                }
                read.into_iter().flatten().max_by_key(|k| k.v).cloned()
            })
            .collect();
        for (c, cap) in self.caches.iter_mut().zip(found) {
            c.read_cap = cap;
        }
    }

    /// The rows whose values `row` carries: itself, or, through views, what the views read.
    pub fn through_views(&self, row: usize) -> Vec<usize> {
        let mut out = Vec::new();
        let mut seen = std::collections::BTreeSet::new();
        let mut todo = vec![row];
        while let Some(r) = todo.pop() {
            if !seen.insert(r) {
                continue;
            }
            let n = &self.nodes[r];
            if ops::is_view(&n.op) {
                // Inputs in order, so that a concat's parts come out in order.
                for i in n.inputs.iter().rev() {
                    todo.extend(i.iter().rev().copied());
                }
            } else {
                out.push(r);
            }
        }
        out
    }

    /// Op rows whose value reaches no sink (model output, the end of a multi-token prediction
    /// module, a decode variant's output, a stream): computed, perhaps stored, never used.
    /// A buffer computes nothing and is claimed for the checkpoint only: never dead.
    pub fn dead_nodes(&self) -> Vec<usize> {
        let live = self.live_rows();
        (0..self.nodes.len())
            .filter(|&r| {
                let op = &self.nodes[r].op;
                !live[r] && !op.starts_with("component:") && op != "buffer"
            })
            .collect()
    }

    fn live_rows(&self) -> Vec<bool> {
        let mut live = vec![false; self.nodes.len()];
        let mut todo = self.sinks.clone();
        while let Some(r) = todo.pop() {
            if r >= live.len() || live[r] {
                continue;
            }
            live[r] = true;
            for i in &self.nodes[r].inputs {
                todo.extend(i.iter().copied());
            }
        }
        live
    }
}

/// Elements of one position of a row's value; `None` when it has the context axis.
fn per_token(n: &NodeRow) -> Option<Q> {
    let dims: Option<Vec<Q>> = n.shape.iter().map(|a| a.dim().cloned()).collect();
    dims.map(|d| Q::product(&d))
}

/// The cache dtype a config implies, and the key that says so.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ConfigDtype {
    /// A safetensors dtype name (`BF16`, `F8_E4M3`, ...).
    pub dtype: &'static str,
    /// The config key it was read from, with its value (`torch_dtype = bfloat16`).
    pub key: String,
}

/// The dtype caches default to: the config's KV-cache quantization where it declares one,
/// else the checkpoint's `torch_dtype` (`dtype` in newer configs, or under `text_config`).
pub fn config_cache_dtype(config: &serde_json::Value) -> Option<ConfigDtype> {
    let q = config.get("quantization_config");
    if let Some(s) = q
        .and_then(|q| q.get("kv_cache_scheme"))
        .filter(|s| s.is_object())
    {
        let bits = s.get("num_bits").and_then(|b| b.as_i64());
        let kind = s.get("type").and_then(|t| t.as_str()).unwrap_or("float");
        let dtype = match (bits, kind) {
            (Some(8), "int") => Some("I8"),
            (Some(8), _) => Some("F8_E4M3"),
            (Some(16), "int") => None,
            (Some(16), _) => Some("BF16"),
            _ => None,
        };
        if let Some(d) = dtype {
            return Some(ConfigDtype {
                dtype: d,
                key: format!("quantization_config.kv_cache_scheme = {s}"),
            });
        }
    }
    let kv_keys = [
        ("kv_cache_dtype", config.get("kv_cache_dtype")),
        (
            "quantization_config.kv_cache_dtype",
            q.and_then(|q| q.get("kv_cache_dtype")),
        ),
        (
            "quantization_config.kv_cache_quant_algo",
            q.and_then(|q| q.get("kv_cache_quant_algo")),
        ),
    ];
    let text = config.get("text_config");
    let model_keys = [
        ("torch_dtype", config.get("torch_dtype")),
        ("dtype", config.get("dtype")),
        (
            "text_config.torch_dtype",
            text.and_then(|t| t.get("torch_dtype")),
        ),
        ("text_config.dtype", text.and_then(|t| t.get("dtype"))),
    ];
    kv_keys.into_iter().chain(model_keys).find_map(|(key, v)| {
        let s = v?.as_str()?;
        Some(ConfigDtype {
            dtype: dtype_named(s)?,
            key: format!("{key} = {s}"),
        })
    })
}

/// The safetensors dtype a torch or config spelling names (`bfloat16`, `torch.float16`, `fp8`).
pub fn dtype_named(s: &str) -> Option<&'static str> {
    let s = s.trim().to_ascii_lowercase();
    let s = s.strip_prefix("torch.").unwrap_or(&s);
    Some(match s {
        "bfloat16" | "bf16" => "BF16",
        "float16" | "fp16" | "f16" | "half" => "F16",
        "float32" | "fp32" | "f32" | "float" => "F32",
        "fp8" | "fp8_e4m3" | "float8_e4m3fn" | "float8_e4m3" | "e4m3" => "F8_E4M3",
        "fp8_e5m2" | "float8_e5m2" | "e5m2" => "F8_E5M2",
        "int8" | "i8" => "I8",
        _ => return None,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn kv_quantization_comes_before_the_model_dtype() {
        let c = json!({"torch_dtype": "bfloat16",
            "quantization_config": {"kv_cache_scheme": {"num_bits": 8, "type": "float"}}});
        assert_eq!(config_cache_dtype(&c).unwrap().dtype, "F8_E4M3");
        let c = json!({"torch_dtype": "bfloat16", "kv_cache_dtype": "int8"});
        assert_eq!(config_cache_dtype(&c).unwrap().dtype, "I8");
        let c = json!({"dtype": "float16", "quantization_config": {"kv_cache_scheme": null}});
        let d = config_cache_dtype(&c).unwrap();
        assert_eq!((d.dtype, d.key.as_str()), ("F16", "dtype = float16"));
        let c = json!({"text_config": {"torch_dtype": "float32"}});
        assert_eq!(config_cache_dtype(&c).unwrap().dtype, "F32");
        assert_eq!(config_cache_dtype(&json!({"torch_dtype": "auto"})), None);
        assert_eq!(config_cache_dtype(&json!({})), None);
    }
}
