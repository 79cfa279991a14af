//! What-if flags of the commands that evaluate (`show`, `analyze`, `plan`, `compare`): the
//! same spec with a slot filled by another component and dims bound to values
//! (harch_analysis::swap, edited before the evaluation), or with its KV cache or matmul
//! weights stored otherwise (harch_analysis::whatif, edits of the evaluation). Every answer
//! they give is labelled what-if: it is not the checkpoint as published, whatever `verified`
//! says of the spec.

use harch_analysis::swap;
use harch_analysis::whatif::{self, Edit};
use harch_engine::{Analysis, EvalOptions, ImageSize, ModelIr};
use harch_worker::subject::{self, Subject};

#[derive(clap::Args, Clone, Debug, Default)]
pub struct WhatIfArgs {
    /// What if a slot held another component: `attention=mla_sparse_attention` fills the slot
    /// in every block that has it, `moe.attention=…` in one block. Dims the new component
    /// needs that the model does not bind are asked for (--bind), never defaulted.
    #[arg(long, value_name = "[BLOCK.]SLOT=COMPONENT")]
    pub swap: Vec<String>,
    /// A dim bound to a value for the what-if: one a swapped component needs
    /// (`n_index_topk=2048`) or one of the model's own (`d_model=7168`); an integer or an
    /// expression over config and dims.
    #[arg(long, value_name = "DIM=VALUE")]
    pub bind: Vec<String>,
    /// What if the KV cache were stored at this dtype (fp8, bf16, fp16, fp32), as vLLM's
    /// `--kv-cache-dtype`: caches that grow with the context; recurrent state keeps its dtype.
    #[arg(long)]
    pub kv_dtype: Option<String>,
    /// What if the matmul weights were re-stored at this precision (bf16; fp8 with 128×128
    /// block scales; fp4 as MXFP4): embedding, output head, routers and norms stay as stored.
    #[arg(long)]
    pub weights: Option<String>,
}

/// One evaluation, what-if edits applied: the IR and analysis every figure is computed from.
pub struct Evaluated {
    pub ir: ModelIr,
    pub a: Analysis,
    pub edits: Vec<Edit>,
}

impl WhatIfArgs {
    /// Evaluate the subject, its spec edited first when a slot is swapped or a dim bound. A
    /// spec that does not evaluate fails the command (exit 1); a malformed flag is a usage
    /// error (exit 2).
    pub fn evaluate(
        &self,
        s: &Subject,
        opts: EvalOptions,
        image: Option<ImageSize>,
    ) -> anyhow::Result<Evaluated> {
        let (ir, a, mut edits) = if self.swap.is_empty() && self.bind.is_empty() {
            let (ir, a) = subject::evaluated_at(s, opts, image).map_err(crate::cli::failed)?;
            (ir, a, Vec::new())
        } else {
            let usage = |e: String| crate::cli::usage(anyhow::Error::msg(e));
            let swaps = self
                .swap
                .iter()
                .map(|t| swap::parse_swap(t))
                .collect::<Result<Vec<_>, _>>()
                .map_err(usage)?;
            let binds = self
                .bind
                .iter()
                .map(|t| swap::parse_bind(t))
                .collect::<Result<Vec<_>, _>>()
                .map_err(usage)?;
            let mut target = s.target.clone();
            let edits =
                swap::edit(&mut target.repo, &target.model, &swaps, &binds).map_err(usage)?;
            let (ir, a) = subject::evaluated_target(&target, &s.truth.config, opts, image)
                .map_err(crate::cli::failed)?;
            (ir, a, edits)
        };
        let (edited, more) = self.apply(&ir, &a)?;
        edits.extend(more);
        Ok(Evaluated {
            a: edited.unwrap_or(a),
            ir,
            edits,
        })
    }

    /// The evaluation edited for the stored-precision what-ifs, and the edits made to it
    /// (none: the evaluation itself).
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
        .map(|e| match e.rows {
            0 => format!("{} ({})", e.what, e.note),
            n => format!("{} ({n} rows: {})", e.what, e.note),
        })
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
