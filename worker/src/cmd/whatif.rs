//! What-if flags of the commands that evaluate (`analyze`, `plan`): the same spec with its KV
//! cache or its matmul weights stored otherwise (harch_analysis::whatif). Every answer they
//! give is labelled what-if: it is not the checkpoint as published, whatever `verified` says
//! of the spec.

use harch_analysis::whatif::{self, Edit};
use harch_engine::{Analysis, ModelIr};

#[derive(clap::Args, Clone, Debug, Default)]
pub struct WhatIfArgs {
    /// What if the KV cache were stored at this dtype (fp8, bf16, fp16, fp32), as vLLM's
    /// `--kv-cache-dtype`: caches that grow with the context; recurrent state keeps its dtype.
    #[arg(long)]
    pub kv_dtype: Option<String>,
    /// What if the matmul weights were re-stored at this precision (bf16; fp8 with 128×128
    /// block scales; fp4 as MXFP4): embedding, output head, routers and norms stay as stored.
    #[arg(long)]
    pub weights: Option<String>,
}

impl WhatIfArgs {
    /// The evaluation the answer is computed from, and the edits made to it (none: the
    /// evaluation itself).
    pub fn apply(
        &self,
        ir: &ModelIr,
        a: &Analysis,
    ) -> anyhow::Result<(Option<Analysis>, Vec<Edit>)> {
        let mut cur: Option<Analysis> = None;
        let mut edits = Vec::new();
        if let Some(p) = &self.weights {
            let (b, e) =
                whatif::weights(ir, cur.as_ref().unwrap_or(a), p).map_err(anyhow::Error::msg)?;
            cur = Some(b);
            edits.push(e);
        }
        if let Some(d) = &self.kv_dtype {
            let (b, e) =
                whatif::kv_dtype(cur.as_ref().unwrap_or(a), d).map_err(anyhow::Error::msg)?;
            cur = Some(b);
            edits.push(e);
        }
        Ok((cur, edits))
    }
}

/// The what-if banner, printed first.
pub fn print(edits: &[Edit]) {
    if edits.is_empty() {
        return;
    }
    let list: Vec<String> = edits
        .iter()
        .map(|e| format!("{} ({} rows: {})", e.what, e.rows, e.note))
        .collect();
    outln!(
        "WHAT-IF: {} — figures of an edited model, not of the checkpoint as published",
        list.join("; ")
    );
}

/// `what_if` in the JSON document (an array, empty for the checkpoint as published), and
/// every label marked `what-if`.
pub fn annotate(doc: &mut serde_json::Value, edits: &[Edit]) {
    doc["what_if"] = serde_json::json!(edits);
    if edits.is_empty() {
        return;
    }
    if let Some(labels) = doc.get_mut("labels").and_then(|l| l.as_object_mut()) {
        for l in labels.values_mut() {
            if let Some(s) = l.as_str() {
                *l = serde_json::json!(format!("{s}, what-if"));
            }
        }
    }
}
