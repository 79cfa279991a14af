use std::path::PathBuf;
use std::process::ExitCode;

use harch_guards::{Diagnostic, GuardSet, Report};
use harch_worker::{specs, subject};

#[derive(clap::Args)]
// An agent repeating `--json` (the workspace's `validate` already passes it) is not an error.
#[command(args_override_self = true)]
pub struct Args {
    /// A spec file, a library model spec name, or a Hugging Face model id. Inside an agent's
    /// workspace it defaults to the job's spec.
    #[arg(env = "HARCH_VALIDATE_SPEC")]
    pub spec: String,
    /// Truth directory (config.json, index, shard headers, source/) to validate against.
    #[arg(long)]
    pub truth: Option<PathBuf>,
    /// Comma-separated guards to run (weight, packing, shape, analysis, schedule, structural,
    /// axiom, source).
    #[arg(long, conflicts_with = "tier")]
    pub guards: Option<String>,
    /// A guard tier for ablations: 0-8 or off, weight, packing, shape, analysis, schedule,
    /// structural, axiom, all.
    #[arg(long)]
    pub tier: Option<String>,
    /// Print the report as JSON (valid, guards, errors and warnings with their locations,
    /// summary); errors of the command itself are JSON too.
    #[arg(long)]
    pub json: bool,
    /// Print the wall time of each phase (reading the truth and the specs, load, evaluate, each
    /// guard, the report) on stderr.
    #[arg(long)]
    pub timings: bool,
}

pub fn run(args: Args) -> anyhow::Result<ExitCode> {
    let guards = match (&args.guards, &args.tier) {
        (Some(l), _) => GuardSet::list(l),
        (None, Some(t)) => GuardSet::tier(t),
        (None, None) => Ok(GuardSet::all()),
    };
    let guards = guards
        .and_then(|g| capped(g, std::env::var("HARCH_VALIDATE_GUARDS").ok()))
        .map_err(|e| crate::cli::usage(anyhow::anyhow!(e)))?;
    let started = std::time::Instant::now();
    let s = subject::resolve(&args.spec, args.truth.as_deref())?;
    let read = started.elapsed();
    if let Some(dir) = &args.truth
        && let Some(why) = subject::identity_mismatch(&args.spec, &s.truth)?
    {
        return Err(crate::cli::usage(anyhow::anyhow!(
            "M010: `{}` is not the model in {}: {why}; pass the truth directory fetched for it (`harch-worker fetch {} --out DIR`)",
            args.spec,
            dir.display(),
            args.spec
        )));
    }
    let identity = started.elapsed() - read;
    let (mut report, _) =
        harch_guards::validate(&s.target.repo, &s.target.model, &s.truth, &guards);
    // The gap report is read whether or not the spec validates, and checked here, so an agent
    // learns from `validate` what the worker will decide.
    let gap = harch_worker::declared_gap::validate_with_gap(
        &s.target.repo,
        &s.target.model,
        &s.truth,
        &mut report,
    );
    report.phases.splice(
        0..0,
        [("read truth + specs", read), ("truth identity", identity)],
    );
    let mut clock = std::time::Instant::now();
    // Locations in a spec from outside `specs/` point at the path the user gave.
    for d in report.errors.iter_mut().chain(report.warnings.iter_mut()) {
        s.target.relocate(&mut d.location);
    }
    if let Some(f) = report.spec.as_mut() {
        *f = s.target.user_path(f).to_string();
    }
    report.truth = Some(match report.truth.take() {
        Some(id) if !s.truth_origin.contains(&id) => format!("{} ({id})", s.truth_origin),
        _ => s.truth_origin.clone(),
    });
    if args.json {
        let mut v = serde_json::to_value(&report)?;
        v["stands_in_for"] = serde_json::json!(s.target.stands_in_for);
        v["declared_gap"] = serde_json::to_value(&gap)?;
        crate::cli::out::print_json(&v)?;
    } else {
        let mut text = render(&report, &s.truth_origin, s.target.note().as_deref());
        if let Some(g) = gap.as_ref().filter(|_| report.valid) {
            text.push_str(&format!("{}\n", harch_worker::declared_gap::line(g)));
        }
        out!("{text}");
    }
    if args.timings {
        report.lap("report", &mut clock);
        let list: Vec<String> = report
            .phases
            .iter()
            .map(|(name, d)| format!("{name} {:.1} ms", d.as_secs_f64() * 1e3))
            .collect();
        eprintln!(
            "timings: {}; total {:.1} ms",
            list.join(", "),
            started.elapsed().as_secs_f64() * 1e3
        );
    }
    let valid = report.valid;
    // The process ends here: freeing a large checkpoint's inventory (92k names and shapes for
    // DeepSeek-V3) one allocation at a time would take longer than some of the checks did.
    std::mem::forget(s);
    Ok(if valid {
        ExitCode::SUCCESS
    } else {
        ExitCode::from(1)
    })
}

/// An ablation's workspace caps `validate` at its tier's guards (`HARCH_VALIDATE_GUARDS`, set
/// by the wrapper on the agent's PATH): flags can select fewer guards, never more.
fn capped(asked: GuardSet, cap: Option<String>) -> Result<GuardSet, String> {
    let Some(cap) = cap else {
        return Ok(asked);
    };
    let cap = GuardSet::list(&cap)?;
    let both: Vec<&str> = asked
        .names()
        .iter()
        .copied()
        .filter(|g| cap.has(g))
        .collect();
    GuardSet::list(&both.join(","))
}

/// Compiler-style text: code, message, the YAML line, and a help with the correct form; then
/// which guards ran (and which did not, when the check stopped early) and the result.
pub fn render(r: &Report, origin: &str, note: Option<&str>) -> String {
    let root = specs::root();
    let mut out = String::new();
    for (kind, list) in [("error", &r.errors), ("warning", &r.warnings)] {
        for d in list.iter() {
            out.push_str(&diagnostic(kind, d, &root));
        }
    }
    if let Some(n) = note {
        out.push_str(&format!("note: {n}\n"));
    }
    let s = &r.summary;
    let checked = r.spec.as_deref().unwrap_or("the spec");
    let list = |g: &[&str]| {
        if g.is_empty() {
            "none".to_string()
        } else {
            g.join(", ")
        }
    };
    match r.stopped_at {
        Some("load") => out.push_str(&format!(
            "the spec did not load: no guard ran (not run: {})\n",
            list(&r.not_run)
        )),
        Some(_) => {
            out.push_str(&format!("guards: {}\n", list(&r.guards)));
            out.push_str(&format!(
                "the spec did not evaluate against {origin}: not run: {}\n",
                list(&r.not_run)
            ));
        }
        None => out.push_str(&format!(
            "guards: {}\nchecked {checked} against {origin}: {} of {} checkpoint tensors matched; spec {} bytes, checkpoint {} bytes, diff {:+}\n",
            list(&r.guards),
            s.matched_tensors,
            s.checkpoint_tensors,
            s.spec_bytes,
            s.checkpoint_bytes,
            s.byte_diff
        )),
    }
    let n = |v: &Vec<Diagnostic>, noun| harch_worker::text::plural(v.len() as u64, noun);
    out.push_str(&if r.valid {
        format!("valid ({})\n", n(&r.warnings, "warning"))
    } else {
        format!(
            "invalid: {}, {}\n",
            n(&r.errors, "error"),
            n(&r.warnings, "warning")
        )
    });
    out
}

/// The text of the file a location names: a library file under the repository root, else a
/// path as the user gave it (relative to the working directory).
fn source_text(root: &std::path::Path, file: &str) -> std::io::Result<String> {
    std::fs::read_to_string(root.join(file)).or_else(|_| std::fs::read_to_string(file))
}

fn diagnostic(kind: &str, d: &Diagnostic, root: &std::path::Path) -> String {
    let mut s = format!("{kind}[{}]: {}\n", d.code, d.message);
    let l = &d.location;
    if let Some(file) = &l.file {
        s.push_str(&format!("  --> {file}"));
        if l.line > 0 {
            s.push_str(&format!(":{}:{}", l.line, l.column));
        }
        if let Some(n) = &l.node {
            s.push_str(&format!(" (node `{n}`)"));
        }
        s.push('\n');
        if let (Ok(text), true) = (source_text(root, file), l.line > 0)
            && let Some(line) = text.lines().nth(l.line as usize - 1)
        {
            let num = l.line.to_string();
            let pad = " ".repeat(num.len());
            let col = (l.column as usize).saturating_sub(1).min(line.len());
            s.push_str(&format!(
                "{pad} |\n{num} | {line}\n{pad} | {}^\n",
                " ".repeat(col)
            ));
        }
    }
    s.push_str(&format!("  = guard: {}\n", d.guard));
    if let Some(h) = &d.hint {
        s.push_str(&format!("  = help: {h}\n"));
    }
    s.push('\n');
    s
}
