//! `harch-worker evidence`: the review checker alone, on a report written by hand or kept from a
//! job. Exit 0 when the review would be recorded PASS, 1 otherwise (a malformed report
//! included), 2 on usage errors.

use std::io::Read;
use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::{Context, bail};
use harch_guards::Diagnostic;
use harch_review::{Checked, Decision, Facts, SpecNodes, Standing};
use harch_worker::{source, specs, subject, truth_dir};
use serde::Serialize;

#[derive(clap::Args)]
pub struct Args {
    /// The review report (review.yaml).
    pub report: PathBuf,
    /// The job's truth directory (config.json, headers or inventory.txt, source/).
    #[arg(long)]
    pub truth: PathBuf,
    /// The reviewed spec (a file or a library model name), whose node paths mapping rows must
    /// name. Default: the library spec serving the truth's architectures.
    #[arg(long)]
    pub spec: Option<String>,
    /// Print the checked report as JSON (verdict, rows, findings); errors are JSON too.
    #[arg(long)]
    pub json: bool,
}

#[derive(Serialize)]
struct Output<'a> {
    recorded: Decision,
    /// Whether mapping rows' node paths were checked against a spec.
    nodes_checked: bool,
    /// The report's own errors (a malformed report); empty when it was checked.
    errors: &'a [Diagnostic],
    #[serde(flatten)]
    checked: Option<&'a Checked>,
}

pub fn run(args: Args) -> anyhow::Result<ExitCode> {
    let text = read_report(&args.report)?;
    let mut truth = truth_dir::load_truth_dir(&args.truth)
        .with_context(|| format!("reading truth directory {}", args.truth.display()))?;
    // The staged source is what the review agent could cite: the truth dir's own source, else the
    // native transformers files the job would have staged.
    if truth.sources.is_empty()
        && let Some(set) = source::resolve_native(&truth.config)
    {
        truth.sources = set.files;
    }
    let nodes = spec_nodes(args.spec.as_deref(), &truth.config)?;
    if !nodes.is_checked() {
        eprintln!(
            "note: no library spec serves this truth's architectures; node paths are not checked (pass --spec)"
        );
    }
    let file = args.report.display().to_string();
    let facts = Facts::from_truth(&truth);
    let result = harch_review::review(&file, &text, &nodes, &facts);
    let (checked, errors) = match &result {
        Ok(c) => (Some(c), &[][..]),
        Err(e) => (None, &e[..]),
    };
    let recorded = checked.map_or(Decision::NoPass, |c| c.recorded);
    if args.json {
        let out = Output {
            recorded,
            nodes_checked: nodes.is_checked(),
            errors,
            checked,
        };
        crate::cli::out::print_json(&out)?;
    } else {
        match checked {
            Some(c) => out!("{}", render(c)),
            None => out!("{}", render_errors(&file, errors)),
        }
    }
    Ok(if recorded == Decision::Pass {
        ExitCode::SUCCESS
    } else {
        ExitCode::from(1)
    })
}

fn read_report(path: &std::path::Path) -> anyhow::Result<String> {
    let f = std::fs::File::open(path).with_context(|| format!("reading {}", path.display()))?;
    let mut bytes = Vec::new();
    // One byte past the limit is enough for the parser to refuse it, whatever the file's size.
    f.take(harch_review::MAX_REPORT_BYTES as u64 + 1)
        .read_to_end(&mut bytes)
        .with_context(|| format!("reading {}", path.display()))?;
    Ok(String::from_utf8_lossy(&bytes).into_owned())
}

/// The node paths of the reviewed spec, from one evaluation against the truth's config.
fn spec_nodes(spec: Option<&str>, config: &serde_json::Value) -> anyhow::Result<SpecNodes> {
    let root = specs::root();
    let target = match spec {
        Some(s) => specs::resolve_spec(&root, s)?,
        None => {
            let repo = specs::read_repo(&root, &[])?;
            let model = subject::library_model(&repo, config).map(str::to_string);
            match model {
                Some(model) => specs::Target::library(repo, model),
                None => return Ok(SpecNodes::unchecked()),
            }
        }
    };
    let ir = match specs::load(&target) {
        Ok(ir) => ir,
        Err(errs) => bail!(
            "the spec `{}` does not load:\n{}",
            target.model,
            subject::render_errors(&errs)
        ),
    };
    let analysis = harch_engine::evaluate(&ir, config, harch_engine::EvalOptions::default());
    Ok(SpecNodes::from_analysis(&analysis))
}

fn plural(n: usize, what: &str) -> String {
    if n == 1 {
        format!("1 {what}")
    } else {
        format!("{n} {what}s")
    }
}

fn mark(holds: bool) -> &'static str {
    if holds { "holds" } else { "FALSE" }
}

/// Every conclusion with its standing, every claim with whether it holds (and the facts when it
/// does not), then the recorded verdict and its reasons.
pub fn render(c: &Checked) -> String {
    let mut out = String::new();
    let item = |out: &mut String, head: String, j: &harch_review::Judgement| {
        out.push_str(&head);
        out.push('\n');
        for cl in &j.claims {
            out.push_str(&format!(
                "      {:<5}  line {:<4} {}\n",
                mark(cl.holds),
                cl.line,
                cl.text
            ));
            if let Some(t) = &cl.truth {
                out.push_str(&format!("                        facts: {t}\n"));
            }
        }
        if j.standing == Standing::Unverified {
            out.push_str(&format!("      why: {}\n", j.why));
        }
    };
    out.push_str(&format!("mapping ({})\n", plural(c.mapping.len(), "row")));
    for (i, r) in c.mapping.iter().enumerate() {
        let head = format!(
            "  #{:<3} {:<12} {:<12} {} -> {}",
            i + 1,
            r.judgement.standing,
            r.row.status,
            r.row.step,
            r.row.node.as_deref().unwrap_or("(no node)")
        );
        item(&mut out, head, &r.judgement);
    }
    out.push_str(&format!("defects ({})\n", c.defects.len()));
    for (i, d) in c.defects.iter().enumerate() {
        let head = format!(
            "  #{:<3} {:<12} {} (at {})",
            i + 1,
            d.judgement.standing,
            d.defect.title,
            d.defect.where_
        );
        item(&mut out, head, &d.judgement);
    }
    out.push_str(&format!(
        "claims: {} of {} hold; rows: {} verified, {} unverified, {} contradicted; defects: {} verified, {} unverified, {} contradicted\n",
        c.claims_holding,
        c.claims,
        c.rows.verified,
        c.rows.unverified,
        c.rows.contradicted,
        c.defect_tally.verified,
        c.defect_tally.unverified,
        c.defect_tally.contradicted
    ));
    out.push_str(&format!(
        "the review says {}; recorded {}\n",
        c.said, c.recorded
    ));
    for r in &c.reasons {
        out.push_str(&format!("  - {r}\n"));
    }
    out
}

fn render_errors(file: &str, errors: &[Diagnostic]) -> String {
    let mut out = format!(
        "{file}: the report is malformed ({})\n",
        plural(errors.len(), "error")
    );
    for d in errors {
        out.push_str(&format!("  {}\n", d.one_line()));
    }
    out.push_str("recorded NO_PASS\n");
    out
}
