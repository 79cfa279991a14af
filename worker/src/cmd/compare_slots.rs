//! `harch-worker compare --slot attention A B …`: the component filling one slot of each model
//! compared at a fixed contract (the write-up's chapter 4.1) — each with its model's own
//! internal dims, all at the same hidden size (`--hidden`, a what-if bind of `d_model` where a
//! model's differs), prompt length and GPU — per layer: parameters, prefill FLOPs and their
//! time at the GPU's peak, and the cache one request holds at each context by each entry's own
//! growth law. `MODEL@SLOT` names another slot for one model.

use std::process::ExitCode;

use anyhow::bail;
use harch_analysis::components::{self, SlotFigures};
use harch_analysis::swap;
use harch_engine::EvalOptions;
use harch_engine::schema::Scalar;
use harch_worker::subject;

use super::verdict::human_bytes;

/// What `compare --slot` measures besides the models.
pub struct Contract<'a> {
    pub slot: &'a str,
    pub hidden: Option<u64>,
    pub prefill: u64,
    pub contexts: &'a [u64],
    pub gpu: Option<&'a harch_analysis::hardware::Gpu>,
    pub precision: &'a str,
}

/// One model's row: the figures and what the contract changed in it.
struct Row {
    model: String,
    figures: SlotFigures,
    contract_edits: Vec<String>,
    prefill_s: Option<f64>,
}

pub fn run(models: &[String], c: &Contract, json: bool, exact: bool) -> anyhow::Result<ExitCode> {
    let peak = match c.gpu {
        Some(g) => Some(g.peak_flops(c.precision).map_err(|m| {
            anyhow::anyhow!(
                "--gpu {}: no {} peak in the hardware table ({m:?}); pass --compute-precision",
                g.gpu,
                c.precision
            )
        })?),
        None => None,
    };
    let mut rows = Vec::new();
    for arg in models {
        let (m, slot) = match arg.rsplit_once('@') {
            Some((m, s)) => (m, s),
            None => (arg.as_str(), c.slot),
        };
        let s = super::friendly::resolve(m, None)?;
        let mut target = s.target.clone();
        let mut contract_edits = Vec::new();
        if let Some(h) = c.hidden {
            // Only where the model's own hidden size differs: an equal bind is no edit.
            let (_, a0) =
                subject::evaluated(&s, EvalOptions::default()).map_err(crate::cli::failed)?;
            if a0.dims.get("d_model").map(|q| q.v) != Some(h as i128) {
                let edits = swap::edit(
                    &mut target.repo,
                    &target.model,
                    &[],
                    &[("d_model".into(), Scalar::Int(h as i64))],
                )
                .map_err(|e| anyhow::anyhow!("{m}: {e}"))?;
                contract_edits.extend(edits.into_iter().map(|e| e.what));
            }
        }
        let (_, a) =
            subject::evaluated_target(&target, &s.truth.config, EvalOptions::default(), None)
                .map_err(crate::cli::failed)?;
        let found = components::instances(&a, slot);
        let Some(inst) = found.first() else {
            bail!(
                "{m}: no slot `{slot}` in the main token stream; slots: {} (name another with {m}@SLOT)",
                components::slot_names(&a).join(", ")
            );
        };
        let ctxs: Vec<i128> = c.contexts.iter().map(|&x| x as i128).collect();
        let figures = components::figures(&a, inst, c.prefill as i128, &ctxs);
        let prefill_s = peak.map(|p| figures.prefill_flops_per_layer as f64 / p);
        rows.push(Row {
            model: m.to_string(),
            figures,
            contract_edits,
            prefill_s,
        });
    }
    if json {
        let doc: Vec<serde_json::Value> = rows
            .iter()
            .map(|r| {
                let mut v = serde_json::to_value(&r.figures).unwrap_or_default();
                v["input"] = serde_json::json!(r.model);
                v["what_if"] = serde_json::json!(r.contract_edits);
                v["prefill_s"] = serde_json::json!(r.prefill_s);
                v
            })
            .collect();
        crate::cli::out::print_json(&serde_json::json!({
            "slot": c.slot,
            "hidden": c.hidden,
            "prefill_tokens": c.prefill,
            "contexts": c.contexts,
            "gpu": c.gpu.map(|g| g.gpu.clone()),
            "compute_precision": c.gpu.map(|_| c.precision),
            "components": doc,
        }))?;
        return Ok(ExitCode::SUCCESS);
    }
    let count = |v: i128| {
        if exact {
            harch_worker::text::group_digits(v)
        } else if v.abs() >= 1_000_000_000_000 {
            format!("{:.2} T", v as f64 / 1e12)
        } else if v.abs() >= 1_000_000_000 {
            format!("{:.2} G", v as f64 / 1e9)
        } else if v.abs() >= 1_000_000 {
            format!("{:.1} M", v as f64 / 1e6)
        } else {
            harch_worker::text::group_digits(v)
        }
    };
    let bytes = |v: i128| {
        if exact {
            harch_worker::text::group_digits(v)
        } else {
            human_bytes(v)
        }
    };
    outln!(
        "slot `{}` per layer{}; prefill of {} tokens{}",
        c.slot,
        c.hidden
            .map(|h| format!(" at hidden size {h}"))
            .unwrap_or_default(),
        c.prefill,
        c.gpu
            .map(|g| format!(
                ", time at {}'s dense {} peak (the floor)",
                g.gpu, c.precision
            ))
            .unwrap_or_default()
    );
    let mut head = format!(
        "{:<28} {:<24} {:>12} {:>14}",
        "model", "component", "params", "prefill FLOPs"
    );
    if c.gpu.is_some() {
        head.push_str(&format!(" {:>12}", "prefill"));
    }
    for ctx in c.contexts {
        head.push_str(&format!(" {:>14}", format!("KV @{}", short(*ctx))));
    }
    outln!("{head}");
    for r in &rows {
        let f = &r.figures;
        let mut line = format!(
            "{:<28} {:<24} {:>12} {:>14}",
            r.model,
            f.component,
            count(f.params_per_layer),
            count(f.prefill_flops_per_layer)
        );
        if let Some(t) = r.prefill_s {
            line.push_str(&format!(" {:>12}", harch_analysis::explain::seconds(t)));
        }
        for at in &f.at {
            line.push_str(&format!(" {:>14}", bytes(at.cache_bytes)));
        }
        outln!("{line}");
    }
    outln!();
    for r in &rows {
        let f = &r.figures;
        let entries: Vec<String> = f
            .caches
            .iter()
            .map(|e| {
                let unit = if e.growth == "constant" {
                    "seq"
                } else {
                    "token"
                };
                let window = e
                    .window
                    .map(|w| format!(", window {w}"))
                    .unwrap_or_default();
                format!(
                    "{} {} {} B/{unit} ({}{window})",
                    e.kind, e.dtype, e.unit_bytes, e.growth
                )
            })
            .collect();
        outln!(
            "{}: {} in {} ({} layers); caches: {}{}",
            r.model,
            f.component,
            f.path,
            f.layers,
            if entries.is_empty() {
                "none".to_string()
            } else {
                entries.join("; ")
            },
            if r.contract_edits.is_empty() {
                String::new()
            } else {
                format!("; what-if {}", r.contract_edits.join(", "))
            }
        );
    }
    Ok(ExitCode::SUCCESS)
}

/// `1K`, `32K`, `1M` for powers of two of those sizes, else the digits.
fn short(n: u64) -> String {
    if n >= 1 << 20 && n.is_multiple_of(1 << 20) {
        format!("{}M", n >> 20)
    } else if n >= 1024 && n.is_multiple_of(1024) {
        format!("{}K", n >> 10)
    } else {
        harch_worker::text::group_digits(n as i128)
    }
}
