//! `harch-worker compare A B …`: models side by side — every `show` figure and the
//! architecture's dims, and with `--gpu` every `analyze` figure of the same deployment — each
//! model from its own single evaluation.

use std::process::ExitCode;

use anyhow::bail;
use harch_analysis::{Model, analyze};
use harch_engine::EvalOptions;

use super::analyze::{DeploymentArgs, hardware_table};

#[derive(clap::Args)]
pub struct Args {
    /// Two or more models: Hugging Face ids (or a bundled model's name alone,
    /// `Llama-3.1-8B`), library spec names or spec files.
    #[arg(required = true, num_args = 2..)]
    pub models: Vec<String>,
    /// With --gpu: the deployment figures too, for the same GPU, layout and workload.
    #[command(flatten)]
    pub deployment: DeploymentArgs,
    #[command(flatten)]
    pub what_if: super::whatif::WhatIfArgs,
    /// Compare the component filling this slot of each model (`attention`; `moe.attention`
    /// for one block; `MODEL@SLOT` for one model) per layer at a fixed contract, as the
    /// write-up's chapter 4.1: parameters, prefill FLOPs of --input tokens (and their time with
    /// --gpu), and the KV one request holds at each --at context.
    #[arg(long)]
    pub slot: Option<String>,
    /// With --slot: the contract's hidden size; a model whose own differs is evaluated with
    /// `d_model` bound to it (a what-if, labelled).
    #[arg(long, requires = "slot", value_parser = super::friendly::count)]
    pub hidden: Option<u64>,
    /// With --slot: the context lengths at which the KV one request holds is given.
    #[arg(long, requires = "slot", value_delimiter = ',', default_value = "1K,32K", value_parser = super::friendly::count)]
    pub at: Vec<u64>,
    /// Exact integers instead of human units (GiB, B for billions).
    #[arg(long)]
    pub bytes: bool,
    /// Print the comparison as JSON; errors are JSON too.
    #[arg(long)]
    pub json: bool,
}

/// A figure's unit, for human printing.
#[derive(Clone, Copy)]
enum Unit {
    Count,
    Bytes,
    Seconds,
    Text,
}

struct Column {
    name: String,
    figures: Vec<(String, Unit, serde_json::Value)>,
}

fn human(u: Unit, v: &serde_json::Value, exact: bool) -> String {
    match (u, v) {
        (_, serde_json::Value::Null) => "—".into(),
        (Unit::Text, v) => v
            .as_str()
            .map(str::to_string)
            .unwrap_or_else(|| v.to_string()),
        (Unit::Seconds, v) => v
            .as_f64()
            .map(harch_analysis::explain::seconds)
            .unwrap_or_default(),
        (Unit::Bytes, v) if !exact => v
            .as_f64()
            .map(|b| super::verdict::human_bytes(b as i128))
            .unwrap_or_default(),
        (Unit::Count, v) if !exact && v.as_f64().is_some_and(|x| x.abs() >= 1e9) => {
            let x = v.as_f64().unwrap_or_default();
            if x.abs() >= 1e12 {
                format!("{:.2} T", x / 1e12)
            } else {
                format!("{:.2} B", x / 1e9)
            }
        }
        (_, v) => match v.as_f64() {
            Some(x) if x.fract() == 0.0 => harch_worker::text::group_digits(x as i128),
            Some(x) => format!("{x:.1}"),
            None => v.to_string(),
        },
    }
}

pub fn run(args: Args) -> anyhow::Result<ExitCode> {
    super::units::set_exact(args.bytes);
    if let Some(slot) = &args.slot {
        let table = hardware_table()?;
        let gpu = match &args.deployment.gpu {
            Some(_) => Some(args.deployment.gpu(&table)?),
            None => None,
        };
        let precision = match args.deployment.compute_precision.as_str() {
            "weights" => "bf16",
            p => p,
        };
        let contract = super::compare_slots::Contract {
            slot,
            hidden: args.hidden,
            prefill: args.deployment.input,
            contexts: &args.at,
            gpu,
            precision,
        };
        return super::compare_slots::run(&args.models, &contract, args.json, args.bytes);
    }
    let table = match &args.deployment.gpu {
        Some(_) => Some(hardware_table()?),
        None => None,
    };
    let req = match &table {
        Some(t) => Some(args.deployment.request(t)?),
        None => None,
    };
    if args.models.len() < 2 {
        bail!("compare takes two or more models");
    }
    let mut cols = Vec::new();
    let mut edits_all = Vec::new();
    for m in &args.models {
        let s = super::friendly::resolve(m, None)?;
        let super::whatif::Evaluated { ir, a, edits } =
            args.what_if
                .evaluate(&s, EvalOptions { symbolic: true }, None)?;
        edits_all = edits;
        let a = &a;
        let sum = a.summary();
        let verified = super::verdict::verify(&s).valid;
        let mut f: Vec<(String, Unit, serde_json::Value)> = vec![
            ("spec".into(), Unit::Text, ir.name.clone().into()),
            // A spec that does not validate against its truth: every figure of its column is
            // from an unverified spec.
            ("verified".into(), Unit::Text, verified.into()),
        ];
        for d in super::dims::dims(&ir, a) {
            f.push((d.symbol, Unit::Count, serde_json::json!(d.value)));
        }
        for (k, v) in super::dims::config_facts(&s.truth.config) {
            if k != "rope_scaling" {
                f.push((k.into(), Unit::Count, v));
            }
        }
        let n = |v: i128| serde_json::json!(v);
        for (k, u, v) in [
            ("params_total", Unit::Count, sum.params_total),
            ("params_active", Unit::Count, sum.params_active),
            (
                "params_active_with_embedding",
                Unit::Count,
                sum.params_active_with_embedding,
            ),
            ("params_mtp", Unit::Count, sum.params_mtp),
            ("weight_bytes", Unit::Bytes, sum.weight_bytes),
            ("weight_tensors", Unit::Count, sum.weight_tensors),
            ("kv_bytes_per_token", Unit::Bytes, sum.kv_bytes_per_token),
            (
                "kv_window_bytes_per_token",
                Unit::Bytes,
                sum.kv_window_bytes_per_token,
            ),
            (
                "state_bytes_per_sequence",
                Unit::Bytes,
                sum.state_bytes_per_sequence,
            ),
            (
                "decode_flops_per_token",
                Unit::Count,
                sum.decode_flops_per_token,
            ),
            ("prefill_flops", Unit::Count, sum.prefill_flops),
            ("flops_context", Unit::Count, sum.context),
        ] {
            f.push((k.into(), u, n(v)));
        }
        if let Some(req) = &req {
            let model = Model::new(&ir, a, &s.truth.config)?;
            let (_, r) = analyze(&model, req).map_err(|e| anyhow::anyhow!("{m}: {e}"))?;
            let v = serde_json::to_value(&r)?;
            f.push(("verdict".into(), Unit::Text, v["verdict"].clone()));
            for (k, u) in [
                ("weights_bytes_per_gpu", Unit::Bytes),
                ("kv_budget_bytes", Unit::Bytes),
                ("kv_bytes_per_request", Unit::Bytes),
                ("kv_bytes_per_request_per_gpu", Unit::Bytes),
                ("max_decode_requests", Unit::Count),
                ("prefill_batch_cap", Unit::Count),
                ("ttft_bound_s", Unit::Seconds),
                ("ttft_estimate_s", Unit::Seconds),
                ("tpot_bound_s", Unit::Seconds),
                ("tpot_estimate_s", Unit::Seconds),
                ("tokens_per_s_per_gpu_bound", Unit::Count),
                ("tokens_per_s_per_gpu_estimate", Unit::Count),
            ] {
                let x = &v[k];
                let x = match x.as_f64() {
                    Some(t) if matches!(u, Unit::Count) && t.fract() != 0.0 => {
                        serde_json::json!(t.round() as i64)
                    }
                    _ => x.clone(),
                };
                f.push((k.into(), u, x));
            }
        }
        cols.push(Column {
            name: m.clone(),
            figures: f,
        });
    }
    // Every figure any model has, in first-seen order; a model without it shows "—".
    let mut names: Vec<(String, Unit)> = Vec::new();
    for c in &cols {
        for (k, u, _) in &c.figures {
            if !names.iter().any(|(n, _)| n == k) {
                names.push((k.clone(), *u));
            }
        }
    }
    let value = |c: &Column, k: &str| {
        c.figures
            .iter()
            .find(|(n, _, _)| n == k)
            .map(|(_, _, v)| v.clone())
            .unwrap_or(serde_json::Value::Null)
    };
    if args.json {
        let figures: Vec<serde_json::Value> = names
            .iter()
            .map(|(k, _)| {
                serde_json::json!({
                    "name": k,
                    "values": cols.iter().map(|c| value(c, k)).collect::<Vec<_>>(),
                })
            })
            .collect();
        crate::cli::out::print_json(&serde_json::json!({
            "models": args.models,
            "gpu": req.as_ref().map(|r| r.gpu.gpu.clone()),
            "layout": req.as_ref().map(|r| r.layout.to_string()),
            "what_if": edits_all,
            "figures": figures,
        }))?;
        return Ok(ExitCode::SUCCESS);
    }
    super::whatif::print(&edits_all);
    if let Some(r) = &req {
        outln!(
            "deployment: {} × {}, layout {}, input {} / output {} tokens",
            r.layout.gpus,
            r.gpu.gpu,
            r.layout,
            r.input,
            r.output
        );
    }
    let width = 30usize;
    let mut head = format!("{:<width$}", "");
    for c in &cols {
        head.push_str(&format!(" {:>24}", c.name));
    }
    outln!("{}", head.trim_end());
    for (k, u) in &names {
        let mut line = format!("{k:<width$}");
        for c in &cols {
            line.push_str(&format!(" {:>24}", human(*u, &value(c, k), args.bytes)));
        }
        outln!("{line}");
    }
    outln!(
        "\n(a dim a model lacks is —; FLOPs at flops_context tokens; --bytes for exact integers)"
    );
    Ok(ExitCode::SUCCESS)
}
