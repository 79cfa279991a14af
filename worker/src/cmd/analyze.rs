//! `harch-worker analyze`: what a model costs to serve on given GPUs under a layout — memory per
//! GPU, derived communication, and a bound and an estimate per phase (harch-analysis), from the
//! spec's single evaluation. `explain` reaches the same figures through [`DeploymentArgs`].

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::ExitCode;

use anyhow::{Context, bail};
use harch_analysis::explain::seconds;
use harch_analysis::report::INSUFFICIENT_EVIDENCE;
use harch_analysis::sweep::{self, SweepSpec};
use harch_analysis::{
    Activations, ComputePrecision, HardwareTable, LayoutSpec, Model, Report, Request, analyze,
};
use harch_engine::EvalOptions;
use harch_worker::specs;

/// The deployment a figure is computed for (shared by `analyze` and `explain`).
#[derive(clap::Args, Clone, Debug)]
pub struct DeploymentArgs {
    /// GPU of the hardware table (`specs/hardware/*.yaml`): B200, H100 SXM, H200, GB200, MI300X.
    #[arg(long)]
    pub gpu: Option<String>,
    /// GPU count (default: what the layout covers).
    #[arg(long)]
    pub gpus: Option<u32>,
    /// Layout: `attn=dp8,moe=ep8[,ffn=tp8][,vocab=tp8][,pp=2][,dispatch=allgather]
    /// [,mesh=tp-outer]`, or a YAML file with the same fields [default: attn=tp1 on one GPU;
    /// more GPUs need a layout].
    #[arg(long)]
    pub layout: Option<String>,
    /// Prompt tokens per request (`32K` is 32,768, `32k` 32,000, `1M` 1,048,576).
    #[arg(long, default_value = "1024", value_parser = super::friendly::count)]
    pub input: u64,
    /// Generated tokens per request.
    #[arg(long, default_value = "1024", value_parser = super::friendly::count)]
    pub output: u64,
    /// Context per request, when not input + output (sizes the KV cache and the decode step).
    #[arg(long, value_parser = super::friendly::count)]
    pub context: Option<u64>,
    /// Decode requests per attention replica (default: as many as the KV budget holds).
    #[arg(long, value_parser = super::friendly::count)]
    pub batch: Option<u64>,
    /// Prefill requests per attention replica (TTFT).
    #[arg(long, default_value = "1", value_parser = super::friendly::count)]
    pub prefill_batch: u64,
    /// Where prefill computes logits: `last` (the last prompt position, as servers do) or
    /// `all` (every prompt position, the engine's `prefill_flops` convention).
    #[arg(long, default_value = "last", value_parser = ["last", "all"])]
    pub logits: String,
    /// Fraction of HBM usable for weights and caches.
    #[arg(long, default_value_t = 0.9)]
    pub usable: f64,
    /// Load the multi-token-prediction layers (their weights and caches count).
    #[arg(long)]
    pub mtp: bool,
    /// Cost prefill and decode even where the deployment does not fit: a what-if that leaves
    /// memory unchecked (one request's compute and cache reads on one GPU, as comparisons are
    /// often stated). The verdict still says what overflows; every figure is labelled what-if.
    #[arg(long)]
    pub ignore_memory: bool,
    /// Precision matmuls run at: `weights` (their stored precision) or one of fp4, fp8, bf16,
    /// fp16, tf32, fp32 for every op.
    #[arg(long, default_value = "weights")]
    pub compute_precision: String,
}

impl DeploymentArgs {
    pub fn request(&self, table: &HardwareTable) -> anyhow::Result<Request> {
        let gpu = self.gpu(table)?;
        let text = match (&self.layout, self.gpus) {
            (Some(l), _) => l.clone(),
            (None, None | Some(1)) => "attn=tp1".to_string(),
            (None, Some(n)) => bail!("{}", super::verdict::layout_needed(n)),
        };
        let looks_like_file = text.ends_with(".yaml") || text.ends_with(".yml");
        if looks_like_file && !Path::new(&text).is_file() {
            bail!("layout file {text} does not exist");
        }
        let spec = if Path::new(&text).is_file() {
            let body =
                std::fs::read_to_string(&text).with_context(|| format!("reading layout {text}"))?;
            LayoutSpec::from_yaml(&body)
        } else {
            LayoutSpec::parse(&text)
        };
        let layout = spec
            .and_then(|s| s.resolve(self.gpus))
            .map_err(|e| anyhow::anyhow!("{e}{}", hint(&e.hint)))?;
        self.workload(gpu, layout)
    }

    /// The GPU asked for (`--gpu`, by name, alias, or with a did-you-mean).
    pub fn gpu<'t>(&self, table: &'t HardwareTable) -> anyhow::Result<&'t harch_analysis::Gpu> {
        let Some(name) = &self.gpu else {
            bail!("give --gpu (one of: {})", table.names().join(", "));
        };
        super::friendly::gpu(table, name)
    }

    /// The request for one layout: the GPU, the workload and the assumptions asked for.
    pub fn workload(
        &self,
        gpu: &harch_analysis::Gpu,
        layout: harch_analysis::Layout,
    ) -> anyhow::Result<Request> {
        let compute = match self.compute_precision.as_str() {
            "weights" => ComputePrecision::Weights,
            p if harch_analysis::hardware::PRECISIONS.contains(&p) => {
                ComputePrecision::Fixed(p.to_string())
            }
            p => bail!(
                "--compute-precision `{p}`: weights or one of {}",
                harch_analysis::hardware::PRECISIONS.join(", ")
            ),
        };
        let mut req = Request::new(gpu.clone(), layout, self.input as i128, self.output as i128);
        req.context = self.context.map(|c| c as i128);
        req.decode_batch = self.batch.map(|b| b as i128);
        req.prefill_batch = self.prefill_batch as i128;
        req.usable_fraction = self.usable;
        req.mtp = self.mtp;
        req.ignore_memory = self.ignore_memory;
        req.compute = compute;
        req.activations = Activations {
            bytes: 2,
            precision: "bf16",
        };
        req.logits = match self.logits.as_str() {
            "all" => harch_analysis::Logits::All,
            _ => harch_analysis::Logits::Last,
        };
        req.check()
            .map_err(|e| anyhow::anyhow!("{}", e.message.trim_start_matches("layout: ")))?;
        Ok(req)
    }
}

fn hint(h: &Option<String>) -> String {
    h.as_ref()
        .map(|h| format!(" (hint: {h})"))
        .unwrap_or_default()
}

/// The hardware table from `specs/hardware/` of the repository root.
pub fn hardware_table() -> anyhow::Result<HardwareTable> {
    let files: BTreeMap<String, String> = specs::read_spec_files(&specs::root())?
        .into_iter()
        .filter(|(k, _)| k.starts_with("specs/hardware/"))
        .collect();
    if files.is_empty() {
        bail!(
            "no hardware table: specs/hardware/*.yaml not found under {}",
            specs::root().display()
        );
    }
    Ok(HardwareTable::from_files(&files)?)
}

#[derive(clap::Args)]
pub struct Args {
    /// A spec file, a library model spec name, or a Hugging Face model id.
    pub spec: String,
    /// Truth directory (config.json, index, shard headers) to evaluate against [default: the
    /// bundled snapshot of the spec's model].
    #[arg(long)]
    pub truth: Option<PathBuf>,
    #[command(flatten)]
    pub deployment: DeploymentArgs,
    /// Sweep an axis or two: `ep=4,8,...,256` or `batch=1,8,64,context=1024,...,131072`.
    #[arg(long)]
    pub sweep: Option<String>,
    /// Write the sweep as CSV here (`-` for stdout).
    #[arg(long, requires = "sweep")]
    pub csv: Option<PathBuf>,
    /// Write the sweep as an SVG plot here.
    #[arg(long, requires = "sweep")]
    pub svg: Option<PathBuf>,
    /// Print every op's row of the cost tables (with --json: include them).
    #[arg(long)]
    pub ops: bool,
    /// Print the figures as JSON (with --ops: every op's row); errors are JSON too.
    #[arg(long)]
    pub json: bool,
    /// Exact integers instead of human units (GiB) in the text output.
    #[arg(long)]
    pub bytes: bool,
    /// Images per request: their tokens join the prompt (the prefill context) and their
    /// encoding runs before the prefill (its time is part of the TTFT).
    #[arg(long, default_value_t = 0)]
    pub images: u32,
    /// Count image inputs at this resolution (HEIGHTxWIDTH pixels); default each input's own.
    #[arg(long, value_name = "HxW")]
    pub image: Option<harch_engine::ImageSize>,
    /// Count a video of FRAMES frames at HEIGHTxWIDTH pixels (e.g. 16x448x448) on the image
    /// inputs that take videos (`video: true`): with `--images N`, N such videos per request.
    #[arg(long, value_name = "FRAMESxHxW", value_parser = harch_engine::ImageSize::parse_video, conflicts_with = "image")]
    pub video: Option<harch_engine::ImageSize>,
    /// Answer (exit 0) even when the spec does not validate against its truth; the figures
    /// stay labelled NOT VERIFIED.
    #[arg(long)]
    pub unverified: bool,
    #[command(flatten)]
    pub what_if: super::whatif::WhatIfArgs,
}

pub fn run(args: Args) -> anyhow::Result<ExitCode> {
    super::units::set_exact(args.bytes);
    let table = hardware_table()?;
    let mut req = args.deployment.request(&table)?;
    let s = super::friendly::resolve(&args.spec, args.truth.as_deref())?;
    // Formulas on: which dims each axis carries is read from them.
    let super::whatif::Evaluated { ir, a, mut edits } = args.what_if.evaluate(
        &s,
        EvalOptions { symbolic: true },
        args.video.or(args.image),
    )?;
    // Images fill token positions of the prompt; encoding them runs once per image.
    let (image_tokens, encode_flops) = a.images_in_context(i128::from(args.images));
    if args.images > 0 && a.images.is_empty() {
        bail!(
            "--images {}: spec `{}` has no image input",
            args.images,
            ir.name
        );
    }
    req.input += image_tokens;
    if let Some(c) = req.context.as_mut() {
        *c += image_tokens;
    }
    req.images = i128::from(args.images);
    if args.images > 0 && !args.json {
        outln!(
            "{} image(s): {} prompt tokens, encoding {} FLOPs per request (each encoder once per image; in the TTFT beside the prefill)",
            args.images,
            image_tokens,
            harch_worker::text::group_digits(encode_flops.v)
        );
    }
    if args.deployment.ignore_memory {
        edits.push(harch_analysis::whatif::Edit {
            what: "ignore_memory".into(),
            rows: 0,
            note: "phases costed as if the deployment fit: memory unchecked".into(),
        });
    }
    let model = Model::new(&ir, &a, &s.truth.config)?;
    if let Some(spec) = &args.sweep {
        super::whatif::print(&edits);
        return run_sweep(&model, &req, spec, &args);
    }
    let verification = super::verdict::verify(&s);
    let (_, report) = analyze(&model, &req).map_err(|e| anyhow::anyhow!("{e}{}", hint(&e.hint)))?;
    let gap = harch_worker::declared_gap::for_figures(&s.target.repo, &s.target.model, &s.truth);
    let unverified = gap
        .as_ref()
        .ok()
        .and_then(Option::as_ref)
        .map(unverified_sections)
        .unwrap_or_default();
    let code = super::verdict::exit_code(&report, &verification, args.unverified);
    if args.json {
        let mut v = serde_json::to_value(&report)?;
        if args.images > 0 {
            // Encoding is per image, outside the phase costs: reported beside them.
            v["images"] = serde_json::json!({
                "per_request": args.images,
                "prompt_tokens": image_tokens,
                "encode_flops_per_request": encode_flops.v,
                "encoders": a.encoder_summaries(),
            });
        }
        v["unverified"] = serde_json::to_value(&unverified)?;
        if let Err(why) = &gap {
            v["gap_report_error"] = serde_json::json!(why);
        }
        if args.ops {
            for (phase, res) in [("prefill", &report.prefill), ("decode", &report.decode)] {
                if let Some(c) = &res.cost {
                    v[phase]["ops"] = serde_json::to_value(&c.rows)?;
                }
            }
        }
        super::verdict::annotate(&mut v, &verification);
        super::whatif::annotate(&mut v, &edits);
        crate::cli::out::print_json(&v)?;
    } else {
        match &gap {
            Ok(Some(g)) => outln!("{}", harch_worker::declared_gap::line(g)),
            Ok(None) => {}
            Err(why) => outln!("note: {why}"),
        }
        for (section, label) in &unverified {
            outln!("{section}: {label}");
        }
        super::whatif::print(&edits);
        super::verdict::print(&report, &verification, &args.spec);
        print_report(&report, &args.spec, args.ops);
    }
    Ok(code)
}

/// The sections of the deployment report whose figures derive from quantities a declared gap
/// affects, each with its label.
pub fn unverified_sections(g: &harch_review::gap::Gap) -> BTreeMap<&'static str, String> {
    let weights = ["weight_bytes", "params_total", "params_active"];
    let caches = [
        "kv_bytes_per_token",
        "kv_window_bytes_per_token",
        "kv_window_bytes_max",
        "state_bytes_per_sequence",
    ];
    let sections: [(&'static str, Vec<&str>); 3] = [
        ("memory", [&weights[..], &caches[..]].concat()),
        (
            "prefill",
            [&weights[..], &caches[..], &["prefill_flops"]].concat(),
        ),
        (
            "decode",
            [
                &weights[..],
                &caches[..],
                &["decode_flops_per_token", "kv_bytes_read_per_step"],
            ]
            .concat(),
        ),
    ];
    sections
        .into_iter()
        .filter_map(|(s, qs)| g.label(&qs).map(|l| (s, l)))
        .collect()
}

/// `explain <spec> <figure> --gpu … --layout …`: a deployment figure's formula and terms.
pub fn explain(
    dep: &DeploymentArgs,
    ir: &harch_engine::ModelIr,
    a: &harch_engine::Analysis,
    config: &serde_json::Value,
    name: &str,
    json: bool,
) -> anyhow::Result<ExitCode> {
    let table = hardware_table()?;
    let req = dep.request(&table)?;
    let model = Model::new(ir, a, config)?;
    let (plan, report) =
        analyze(&model, &req).map_err(|e| anyhow::anyhow!("{e}{}", hint(&e.hint)))?;
    let Some(e) = harch_analysis::explain::explain(&plan, &req, &report, name) else {
        let unfit = report.status == harch_analysis::report::DOES_NOT_FIT;
        if json {
            crate::cli::out::print_json(&serde_json::json!({
                "quantity": name,
                "status": report.status,
                "missing": report.missing,
                "overflows": report.overflows,
            }))?;
        } else if unfit {
            outln!("{name}: DOES NOT FIT, so no step runs:");
            for o in &report.overflows {
                outln!("  {}", super::verdict::describe(o, &report));
            }
        } else {
            outln!(
                "{name}: {INSUFFICIENT_EVIDENCE}: missing {}",
                report.missing.join(", ")
            );
        }
        return Ok(ExitCode::from(if unfit { 1 } else { 3 }));
    };
    if json {
        let terms: Vec<serde_json::Value> = e
            .terms
            .iter()
            .map(|(k, v)| serde_json::json!({ "term": k, "value": v }))
            .collect();
        crate::cli::out::print_json(&serde_json::json!({
            "quantity": e.name,
            "label": e.label,
            "formula": e.formula,
            "value": e.value,
            "terms": terms,
            "more_terms": e.more.as_ref().map(|(n, v)| serde_json::json!({ "count": n, "value": v })),
            "model": report.model,
            "gpu": report.gpu,
            "gpus": report.gpus,
            "layout": report.layout,
        }))?;
        return Ok(ExitCode::SUCCESS);
    }
    outln!("{} = {}   [{}]", e.name, e.formula, e.label);
    outln!("  = {}", e.value);
    if !e.terms.is_empty() {
        outln!("terms");
        for (k, v) in &e.terms {
            outln!("  {k}: {v}");
        }
        if let Some((n, v)) = &e.more {
            outln!("  … {n} more terms: {v}");
        }
    }
    outln!(
        "({} on {} × {}, layout {})",
        report.model,
        report.gpus,
        report.gpu,
        report.layout
    );
    Ok(ExitCode::SUCCESS)
}

fn run_sweep(model: &Model, req: &Request, text: &str, args: &Args) -> anyhow::Result<ExitCode> {
    let spec = SweepSpec::parse(text)?;
    let rows = sweep::run(model, req, &spec);
    let csv = sweep::csv(&spec, &rows);
    match &args.csv {
        Some(p) if p.as_os_str() == "-" => out!("{csv}"),
        Some(p) => harch_files::write_atomic(p, csv.as_bytes())
            .with_context(|| format!("writing {}", p.display()))?,
        None => {}
    }
    if let Some(p) = &args.svg {
        let title = format!("{} on {}", model.a.model, req.gpu.gpu);
        let svg = harch_analysis::plot::svg(&spec, &rows, &title).map_err(anyhow::Error::msg)?;
        harch_files::write_atomic(p, svg.as_bytes())
            .with_context(|| format!("writing {}", p.display()))?;
    }
    if args.csv.as_ref().is_none_or(|p| p.as_os_str() != "-") {
        let keys: Vec<&str> = spec.axes.iter().map(|(k, _)| k.name()).collect();
        outln!(
            "{:<20} {:>6} {:>10} {:>12} {:>12} {:>12} {:>14}",
            keys.join(" "),
            "gpus",
            "max req",
            "decode est",
            "decode bound",
            "TTFT est",
            "tok/s/GPU est"
        );
        for r in &rows {
            let point: Vec<String> = r.point.iter().map(|(_, v)| v.to_string()).collect();
            let mut p = point.join(" ");
            match &r.report {
                Ok(rep) => {
                    if rep.extrapolated {
                        p.push_str(" *");
                    }
                    let f = |v: Option<f64>| v.map(seconds).unwrap_or_else(|| "—".into());
                    outln!(
                        "{:<20} {:>6} {:>10} {:>12} {:>12} {:>12} {:>14}",
                        p,
                        rep.gpus,
                        rep.memory
                            .as_ref()
                            .map(|m| digits(m.max_decode_requests))
                            .unwrap_or_default(),
                        f(rep.tpot_estimate_s),
                        f(rep.tpot_bound_s),
                        f(rep.ttft_estimate_s),
                        rep.tokens_per_s_per_gpu_estimate
                            .map(|t| digits(t.round() as i128))
                            .unwrap_or_else(|| if rep.missing.is_empty() {
                                "does not fit".to_string()
                            } else {
                                rep.missing.join("; ")
                            }),
                    );
                }
                Err(e) => outln!("{p:<20} error: {e}"),
            }
        }
        if rows
            .iter()
            .any(|r| r.report.as_ref().is_ok_and(|r| r.extrapolated))
        {
            outln!(
                "* past the published context limit ({}): an extrapolation",
                model.context_limit.map(digits).unwrap_or_default()
            );
        }
    }
    Ok(ExitCode::SUCCESS)
}

fn digits(v: i128) -> String {
    harch_worker::text::group_digits(v)
}

fn gib(b: i128) -> String {
    if super::units::exact() {
        return digits(b);
    }
    let g = b as f64 / (1u64 << 30) as f64;
    if g.abs() >= 1.0 {
        format!("{g:.2} GiB")
    } else {
        format!("{:.2} MiB", b as f64 / (1u64 << 20) as f64)
    }
}

fn print_report(r: &Report, subject: &str, ops: bool) {
    outln!(
        "{subject} (spec {}) on {} × {}, layout {}",
        r.model,
        r.gpus,
        r.gpu,
        r.layout
    );
    let a = &r.assumptions;
    outln!(
        "workload: context {} tokens; decode batch {} per attention replica ({} replicas); prefill batch {}",
        a.decode_context,
        a.decode_batch,
        r.degrees.attn.dp,
        a.prefill_batch
    );
    if r.extrapolated {
        outln!(
            "note: context {} is past the published limit {}: an extrapolation",
            a.decode_context,
            r.context_limit.unwrap_or_default()
        );
    }
    outln!();
    match &r.memory {
        Some(m) => {
            outln!("memory per GPU                                   [exact]");
            outln!("  HBM                      {:>14}", gib(m.memory_bytes));
            outln!(
                "  usable ({:>3.0}%)            {:>14}",
                m.usable_fraction * 100.0,
                gib(m.usable_bytes)
            );
            outln!(
                "  weights                  {:>14}   ({} B; MTP {})",
                gib(m.weights_bytes_per_gpu),
                digits(m.weights_bytes_per_gpu),
                if a.mtp_loaded { "loaded" } else { "not loaded" }
            );
            if m.weights_bytes_per_gpu_by_stage.len() > 1 {
                let st: Vec<String> = m
                    .weights_bytes_per_gpu_by_stage
                    .iter()
                    .map(|w| gib(*w))
                    .collect();
                outln!("    by pipeline stage      {}", st.join(", "));
            }
            outln!("  KV budget                {:>14}", gib(m.kv_budget_bytes));
            outln!(
                "  KV per request           {:>14}   ({} on one GPU) at {} tokens",
                gib(m.kv_bytes_per_request),
                gib(m.kv_bytes_per_request_per_gpu),
                m.context
            );
            outln!(
                "  max decode requests      {:>14}   per attention replica ({} in all), KV-bound{}",
                digits(m.max_decode_requests),
                digits(m.max_decode_requests_total),
                if m.fits {
                    ""
                } else {
                    " — the weights do not fit"
                }
            );
            outln!(
                "  prefill batch cap        {:>14}   per replica at {} prompt tokens [estimate: {} of activations per token]",
                digits(m.prefill_batch_cap),
                m.prefill_tokens,
                gib(m.prefill_activation_bytes_per_token)
            );
        }
        None => outln!("memory: {INSUFFICIENT_EVIDENCE} ({})", r.missing.join("; ")),
    }
    outln!();
    outln!(
        "{:<18} {:>12} {:>12}  {:<14} estimate: memory / comm / compute",
        "time",
        "bound",
        "estimate",
        "bound by"
    );
    // With images the TTFT is encode + prefill, printed below them.
    let prefill = if r.encode.is_some() {
        "prefill"
    } else {
        "prefill (TTFT)"
    };
    for (name, res) in [(prefill, &r.prefill), ("decode (TPOT)", &r.decode)] {
        match &res.cost {
            Some(c) => outln!(
                "{:<18} {:>12} {:>12}  {:<14} {:.0}% / {:.0}% / {:.0}%",
                name,
                seconds(c.bound_s),
                seconds(c.estimate_s),
                c.bound_by.name(),
                c.estimate_split.memory_fraction * 100.0,
                c.estimate_split.communication_fraction * 100.0,
                c.estimate_split.compute_fraction * 100.0
            ),
            None if res.status == harch_analysis::report::DOES_NOT_FIT => {
                outln!(
                    "{name:<18} {:>12} {:>12}  (does not fit: no step runs)",
                    "—",
                    "—"
                )
            }
            None => outln!(
                "{name:<18} {INSUFFICIENT_EVIDENCE}: missing {}",
                res.missing.join(", ")
            ),
        }
    }
    if let Some(e) = &r.encode {
        outln!(
            "{:<18} {:>12} {:>12}  ({} image(s) x {} request(s) on {} GPU(s): {} FLOPs per GPU)",
            "encode images",
            seconds(e.bound_s),
            seconds(e.estimate_s),
            e.images_per_request,
            e.requests,
            e.gpus,
            digits(e.flops_per_gpu.round() as i128)
        );
        if let (Some(b), Some(t)) = (r.ttft_bound_s, r.ttft_estimate_s) {
            outln!(
                "{:<18} {:>12} {:>12}  (encode + prefill)",
                "TTFT",
                seconds(b),
                seconds(t)
            );
        }
    }
    if let (Some(b), Some(e)) = (
        r.tokens_per_s_per_gpu_bound,
        r.tokens_per_s_per_gpu_estimate,
    ) {
        outln!(
            "{:<18} {:>12} {:>12}  (decode; the bound is a ceiling)",
            "tokens/s per GPU",
            digits(b.round() as i128),
            digits(e.round() as i128)
        );
    }
    if !r.communication.is_empty() {
        outln!();
        outln!("communication per GPU per step (derived from the layout)");
        for c in &r.communication {
            outln!(
                "  {:<8} {:<13} {:<15} {:>4} GPUs  {:<6} {:>14}  {:>10}  ({} edges)",
                c.phase,
                c.why,
                c.kind.name(),
                c.group,
                format!("{:?}", c.link).to_lowercase(),
                format!("{} B", digits(c.bytes_per_gpu.round() as i128)),
                seconds(c.seconds),
                c.edges
            );
        }
    }
    outln!();
    outln!("hardware ({}):", r.hardware.name);
    let fig = |n: &str, f: &Option<harch_analysis::hardware::Figure>| match f {
        Some(f) => outln!("  {n:<20} {} — {}", f.quoted, f.source),
        None => outln!("  {n:<20} not in the table"),
    };
    fig("memory", &r.hardware.memory);
    fig("HBM bandwidth", &r.hardware.hbm_bandwidth);
    for (p, f) in &r.hardware.peak_flops {
        outln!("  {:<20} {} — {}", format!("peak {p}"), f.quoted, f.source);
    }
    fig("link", &r.hardware.link_bandwidth);
    fig("node size", &r.hardware.node_size);
    fig("inter-node", &r.hardware.internode_bandwidth);
    outln!(
        "assumptions: {}% usable; activations {}; matmuls at {}; attention {}; routing {}; {}",
        a.usable_fraction * 100.0,
        a.activation_precision,
        match &a.compute_precision {
            ComputePrecision::Weights => "their weights' precision".to_string(),
            ComputePrecision::Fixed(p) => p.clone(),
        },
        a.attention,
        a.routing,
        a.composition
    );
    if ops {
        for (name, res) in [("prefill", &r.prefill), ("decode", &r.decode)] {
            let Some(c) = &res.cost else { continue };
            outln!();
            outln!(
                "{name} ops: {:<58} {:>11} {:>11} {:>11}  bound by",
                "",
                "compute",
                "memory",
                "comm"
            );
            for row in &c.rows {
                let (res, _) = row.seconds();
                outln!(
                    "  {:<72} {:>11} {:>11} {:>11}  {}",
                    if row.stage > 0 {
                        format!("{} [stage {}]", row.id, row.stage)
                    } else {
                        row.id.clone()
                    },
                    seconds(row.terms.compute_s),
                    seconds(row.terms.memory_s),
                    seconds(row.terms.communication_s),
                    res.name()
                );
            }
        }
    }
}
