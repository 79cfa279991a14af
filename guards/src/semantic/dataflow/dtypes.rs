//! Dtypes of caches and states (M060–M062). A cache is kept in the checkpoint's dtype
//! (config `torch_dtype`/`dtype`), or in the KV-cache quantization the config declares; another
//! dtype needs a `src:` anchor, a quote from the forward source that names it. A recurrent state
//! must also be kept in the dtype the forward source keeps it in, when the source shows one.

use std::collections::BTreeMap;

use harch_engine::analysis::{CacheRow, DtypeOrigin};
use harch_engine::dataflow::config_cache_dtype;
use harch_engine::ir::ModelIr;
use harch_engine::ops::{self, History};
use harch_engine::{Analysis, Location};

use super::dtype_anchor::Producers;
use super::state_source::{SourceDtype, recurrent_state_dtype};
use super::{Findings, code, instance_of, local_id, thousands};
use crate::pysrc::flow::CacheKind;
use crate::report::Diagnostic;
use crate::source::{AnchorSource, anchor_snippets, forward_sources};
use crate::truth::{Dtype, Truth};

/// The dtype caches default to, and the fact that says so.
pub struct Expected {
    pub dtype: String,
    pub because: String,
}

/// The config's KV-cache quantization or model dtype; without either, the floating dtype most
/// of the checkpoint's tensors are stored in.
pub fn expected(truth: &Truth) -> Option<Expected> {
    if let Some(d) = config_cache_dtype(&truth.config) {
        return Some(Expected {
            dtype: d.dtype.to_string(),
            because: format!("config.json `{}`", d.key),
        });
    }
    let mut n: BTreeMap<Dtype, usize> = BTreeMap::new();
    for t in truth.inventory.iter() {
        if matches!(t.dtype, Dtype::BF16 | Dtype::F16 | Dtype::F32) {
            *n.entry(t.dtype).or_default() += 1;
        }
    }
    let total: usize = n.values().sum();
    let (d, k) = n.into_iter().max_by_key(|(_, k)| *k)?;
    Some(Expected {
        dtype: d.as_str().to_string(),
        because: format!(
            "the checkpoint: {k} of its {total} floating-point tensors are {d}; config.json has no `torch_dtype`"
        ),
    })
}

/// Words that name a dtype in source text.
fn dtype_words(dtype: &str) -> &'static [&'static str] {
    match dtype {
        "F32" => &["float32", "fp32", ".float()"],
        "BF16" => &["bfloat16", "bf16"],
        "F16" => &["float16", "fp16", ".half()"],
        "F8_E4M3" => &["float8", "fp8", "e4m3"],
        "F8_E5M2" => &["e5m2"],
        "I8" => &["int8"],
        _ => &[],
    }
}

fn origin_text(c: &CacheRow) -> String {
    match &c.dtype_origin {
        DtypeOrigin::Entry(f) => format!("the entry's `dtype: {f}`"),
        DtypeOrigin::Context(f) => format!("`quant_context.cache: {f}`"),
        DtypeOrigin::Config(k) => format!("the config default, `{k}`"),
        DtypeOrigin::Fallback => "the fallback bf16".into(),
    }
}

/// Which kind of cache write the source makes for this cache.
fn cache_kind(c: &CacheRow, a: &Analysis) -> CacheKind {
    match ops::history(&a.nodes[c.node].op) {
        History::State => CacheKind::State,
        History::KernelSteps(_) => CacheKind::Conv,
        History::Input(_) | History::None => CacheKind::Kv,
    }
}

/// Where the dtype is written: the cache entry, or the model's `quant_context`.
fn dtype_loc(ir: &ModelIr, c: &CacheRow) -> Location {
    match c.dtype_origin {
        DtypeOrigin::Context(_) => ir.quant.loc.clone(),
        _ => c.loc.clone(),
    }
}

/// How to anchor a dtype where it is written.
fn anchor_field(c: &CacheRow) -> &'static str {
    match c.dtype_origin {
        DtypeOrigin::Context(_) => "`cache_src:` under `quant_context`",
        _ => "`src:` on the cache entry",
    }
}

pub fn check(ir: &ModelIr, a: &Analysis, truth: &Truth) -> Vec<Diagnostic> {
    let want = expected(truth);
    let files = forward_sources(ir, &truth.sources);
    let texts = AnchorSource::new(&files);
    let state: Option<SourceDtype> = recurrent_state_dtype(&files);
    let mut producers: Option<Producers> = None;
    let mut f = Findings::default();
    for c in &a.caches {
        let inst = instance_of(&a.nodes[c.node].id);
        let name = local_id(&a.nodes[c.node].id, inst);
        let loc = dtype_loc(ir, c);
        // A dtype set by `quant_context` is one finding for every cache it covers.
        let subject = match c.dtype_origin {
            DtypeOrigin::Context(_) => "`quant_context.cache`".to_string(),
            _ => format!("cache `{name}`"),
        };
        let anchored = match &c.dtype_src {
            None => false,
            Some(_) if texts.is_empty() => true, // no source staged: the source guard says so
            Some(src) => {
                let snippets = anchor_snippets(src);
                let absent = texts.absent(&snippets);
                let names = snippets.iter().any(|s| {
                    let s = s.to_ascii_lowercase();
                    dtype_words(&c.dtype).iter().any(|w| s.contains(w))
                });
                // A quote that occurs and names the dtype must also be a statement that
                // produces what this cache holds.
                let not_a_producer = (absent.is_none() && names)
                    .then(|| {
                        let p = producers.get_or_insert_with(|| Producers::read(&files));
                        p.fault(cache_kind(c, a), &snippets, dtype_words(&c.dtype))
                    })
                    .flatten();
                let holds = absent.is_none() && names && not_a_producer.is_none();
                if !holds {
                    let why = absent.or(not_a_producer).unwrap_or_else(|| {
                        format!(
                            "it does not name {} ({})",
                            c.dtype,
                            dtype_words(&c.dtype).join(", ")
                        )
                    });
                    f.push(
                        code::DTYPE_ANCHOR,
                        inst,
                        &loc,
                        format!("the source anchor for {subject} in {}: {why}", c.dtype),
                        format!(
                            "{} quotes, in backticks, a line copied from the forward source that keeps this value in {}",
                            anchor_field(c),
                            c.dtype
                        ),
                    );
                }
                holds
            }
        };
        let is_state = ops::history(&a.nodes[c.node].op) == History::State;
        if is_state
            && let Some(s) = &state
            && s.dtype != c.dtype
            && !anchored
        {
            f.push(
                code::STATE_DTYPE,
                inst,
                &c.loc,
                format!(
                    "recurrent state `{name}` ({} elements per sequence) is kept in {} ({}), but the forward source keeps it in {}: {}",
                    thousands(c.elements.v),
                    c.dtype,
                    origin_text(c),
                    s.dtype,
                    s.evidence
                ),
                format!(
                    "set `dtype: {}` on the cache entry with `src: \"`{}`\"`",
                    s.dtype.to_ascii_lowercase(),
                    s.snippet
                ),
            );
            continue;
        }
        let Some(w) = &want else { continue };
        if c.dtype == w.dtype || c.dtype_src.is_some() {
            continue;
        }
        let from_source = state
            .as_ref()
            .filter(|s| is_state && s.dtype == c.dtype)
            .map(|s| {
                format!(
                    "; the forward source does keep it in {}: {} (quote `{}`)",
                    s.dtype, s.evidence, s.snippet
                )
            })
            .unwrap_or_default();
        let ratio = match harch_engine::eval::dtype_bytes(&w.dtype) {
            Some(b) if b == c.dtype_bytes => "as many bytes as ".to_string(),
            Some(b) if 2 * c.dtype_bytes == b => "half the bytes of ".to_string(),
            Some(b) => format!("{}x the bytes of ", c.dtype_bytes as f64 / b as f64),
            None => String::new(),
        };
        f.push(
            code::DTYPE_UNANCHORED,
            inst,
            &loc,
            format!(
                "{subject} keeps its values in {} ({}), {ratio}the {} that caches default to ({}), and no quote from the forward source says {}{from_source}",
                c.dtype,
                origin_text(c),
                w.dtype,
                w.because,
                c.dtype
            ),
            format!(
                "drop the dtype (caches default to the config's), or add {} quoting the forward-source line that keeps it in {}",
                anchor_field(c),
                c.dtype
            ),
        );
    }
    f.finish()
}
