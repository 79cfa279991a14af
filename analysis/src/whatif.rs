//! What-if edits of an evaluation: the same model with its KV cache stored at another dtype
//! (as vLLM's `--kv-cache-dtype fp8`) or its matmul weights re-stored at another precision.
//! Each edit returns a changed copy of the engine's [`Analysis`] and what it changed; every
//! figure computed from the copy is a what-if, never the verified checkpoint's.

use harch_engine::analysis::{Analysis, StoredTensor};
use harch_engine::ir::{Growth, ModelIr};
use harch_engine::ops::LeafKind;
use harch_engine::q::Q;
use serde::Serialize;

/// One edit and what it touched.
#[derive(Clone, Debug, Serialize)]
pub struct Edit {
    /// `kv_dtype=fp8`, `weights=fp4`.
    pub what: String,
    /// Rows changed (cache rows or weight rows).
    pub rows: usize,
    pub note: String,
}

/// KV dtypes a cache can be stored at, with their bytes per element.
pub const KV_DTYPES: &[(&str, &str, u32)] = &[
    ("fp8", "F8_E4M3", 1),
    ("bf16", "BF16", 2),
    ("fp16", "F16", 2),
    ("fp32", "F32", 4),
];

/// The caches that grow with the context (attention K/V, latents, index keys) stored at
/// `dtype`; constant-size recurrent state (linear attention, SSM, convolution) keeps its
/// dtype, as serving engines keep it (vLLM's `--kv-cache-dtype` applies to attention caches).
pub fn kv_dtype(a: &Analysis, dtype: &str) -> Result<(Analysis, Edit), String> {
    let Some(&(_, name, bytes)) = KV_DTYPES.iter().find(|(k, _, _)| *k == dtype) else {
        return Err(format!(
            "--kv-dtype `{dtype}`: one of {}",
            KV_DTYPES.iter().map(|k| k.0).collect::<Vec<_>>().join(", ")
        ));
    };
    let mut b = a.clone();
    let mut rows = 0;
    for c in b.caches.iter_mut().filter(|c| c.growth != Growth::Constant) {
        c.dtype = name.to_string();
        c.dtype_bytes = bytes;
        rows += 1;
    }
    Ok((
        b,
        Edit {
            what: format!("kv_dtype={dtype}"),
            rows,
            note: "caches that grow with the context at this dtype; constant recurrent state unchanged".into(),
        },
    ))
}

/// Weight precisions a what-if can re-store matmul weights at.
pub const WEIGHT_PRECISIONS: &[&str] = &["bf16", "fp8", "fp4"];

/// Every matmul weight (a matrix of a `linear` or `grouped_linear` op, not the embedding,
/// output head or router) re-stored at `precision`, bytes per its quantization scheme:
///
/// - `bf16`: 2 bytes per element, no scales;
/// - `fp8`: 1 byte per element and one FP32 scale per 128 × 128 block (DeepSeek-V3's scheme);
/// - `fp4`: MXFP4, half a byte per element and one E8M0 scale byte per 32 elements along the
///   input (gpt-oss's scheme).
pub fn weights(ir: &ModelIr, a: &Analysis, precision: &str) -> Result<(Analysis, Edit), String> {
    if !WEIGHT_PRECISIONS.contains(&precision) {
        return Err(format!(
            "--weights `{precision}`: one of {}",
            WEIGHT_PRECISIONS.join(", ")
        ));
    }
    let mut b = a.clone();
    let mut rows = 0;
    for w in b.weights.iter_mut() {
        let op = a.nodes[w.node].op.as_str();
        if w.kind != LeafKind::Matrix || !matches!(op, "linear" | "grouped_linear") {
            continue;
        }
        let n = &a.nodes[w.node];
        if n.args.get("tied").and_then(|v| v.int) == Some(1) || carries_vocab(ir, w) {
            continue;
        }
        let Some((inner, rest)) = w.logical.split_last() else {
            continue;
        };
        let Some((outer, lead)) = rest.split_last() else {
            continue;
        };
        let lit = |v: i128| Q::lit(v);
        let shape: Vec<Q> = w.logical.iter().map(|q| lit(q.v)).collect();
        let lead: Vec<Q> = lead.iter().map(|q| lit(q.v)).collect();
        let with = |last: Vec<Q>| -> Vec<Q> { lead.iter().cloned().chain(last).collect() };
        let base = w.name.trim_end_matches(".weight").to_string();
        w.stored = match precision {
            "bf16" => vec![StoredTensor {
                name: w.name.clone(),
                dtype: "BF16".into(),
                dtype_bytes: 2,
                shape,
                scale: false,
            }],
            "fp8" => vec![
                StoredTensor {
                    name: w.name.clone(),
                    dtype: "F8_E4M3".into(),
                    dtype_bytes: 1,
                    shape,
                    scale: false,
                },
                StoredTensor {
                    name: format!("{base}.weight_scale_inv"),
                    dtype: "F32".into(),
                    dtype_bytes: 4,
                    shape: with(vec![lit((outer.v + 127) / 128), lit((inner.v + 127) / 128)]),
                    scale: true,
                },
            ],
            _ => vec![
                StoredTensor {
                    name: format!("{base}.blocks"),
                    dtype: "U8".into(),
                    dtype_bytes: 1,
                    shape: with(vec![lit(outer.v), lit((inner.v + 1) / 2)]),
                    scale: false,
                },
                StoredTensor {
                    name: format!("{base}.scales"),
                    dtype: "U8".into(),
                    dtype_bytes: 1,
                    shape: with(vec![lit(outer.v), lit((inner.v + 31) / 32)]),
                    scale: true,
                },
            ],
        };
        w.format = match precision {
            "bf16" => "bf16",
            "fp8" => "fp8_block",
            _ => "mxfp4",
        }
        .to_string();
        rows += 1;
    }
    Ok((
        b,
        Edit {
            what: format!("weights={precision}"),
            rows,
            note: "matmul weights re-stored (embedding, output head, routers, norms unchanged)"
                .into(),
        },
    ))
}

/// A weight with a dim of kind `vocab` (the output head): kept as stored.
fn carries_vocab(ir: &ModelIr, w: &harch_engine::analysis::WeightRow) -> bool {
    w.logical.iter().any(|q| {
        q.term_atoms().iter().flatten().any(|d| {
            ir.dim_table
                .get(&**d)
                .is_some_and(|def| def.kind == "vocab")
        })
    })
}
