//! The verdict every `analyze` answer opens with: FITS, DOES NOT FIT (what overflows, by how
//! much) or NOT VERIFIED (the spec does not validate against its truth, so every figure is
//! from an unverified spec), and the exit code that goes with it.

use std::process::ExitCode;

use harch_analysis::report::{DOES_NOT_FIT, INSUFFICIENT_EVIDENCE};
use harch_analysis::{Fit, Overflow, Report};
use harch_guards::GuardSet;
use harch_worker::subject::Subject;

/// The JSON `status` of an analysis of a spec that does not validate.
pub const NOT_VERIFIED: &str = "NOT_VERIFIED";

/// Whether the spec validates against the truth it is evaluated with (every guard).
pub struct Verification {
    pub valid: bool,
    /// `CODE: message` of each error.
    pub errors: Vec<String>,
    pub truth: String,
}

pub fn verify(s: &Subject) -> Verification {
    let (report, _) =
        harch_guards::validate(&s.target.repo, &s.target.model, &s.truth, &GuardSet::all());
    Verification {
        valid: report.valid,
        errors: report
            .errors
            .iter()
            .map(|d| format!("{}: {}", d.code, d.message))
            .collect(),
        truth: s.truth_origin.clone(),
    }
}

/// What `--gpus N` without `--layout` is told: the ways N GPUs can hold a model.
pub fn layout_needed(n: u32) -> String {
    format!(
        "--gpus {n} needs a --layout saying how the model is split over them: attn=tp{n} (one copy, tensor-parallel {n} ways), attn=dp{n} ({n} whole copies, each serving its own requests), attn=dp{n},moe=ep{n} (attention replicated, experts spread over {n} GPUs), or with pipeline stages, e.g. attn=tp{half},pp=2; `harch-worker plan <model> --gpu <GPU>` searches them",
        half = (n / 2).max(1)
    )
}

/// Bytes in binary units, two decimals (`93.92 GiB`, `137.25 MiB`).
pub fn human_bytes(b: i128) -> String {
    let units = ["B", "KiB", "MiB", "GiB", "TiB", "PiB"];
    let mut v = b as f64;
    let mut u = 0;
    while v.abs() >= 1024.0 && u + 1 < units.len() {
        v /= 1024.0;
        u += 1;
    }
    if u == 0 {
        format!("{b} B")
    } else {
        format!("{v:.2} {}", units[u])
    }
}

/// One overflow as a sentence.
pub fn describe(o: &Overflow, r: &Report) -> String {
    let amount = |v: i128| match o.unit {
        "bytes" => human_bytes(v),
        _ => harch_worker::text::group_digits(v),
    };
    match o.what {
        "weights" => format!(
            "weights need {} per GPU; the usable memory is {} ({:.0}% of {}): {} over",
            amount(o.needs),
            amount(o.available),
            r.assumptions.usable_fraction * 100.0,
            r.memory
                .as_ref()
                .map(|m| human_bytes(m.memory_bytes))
                .unwrap_or_default(),
            amount(o.over)
        ),
        "kv_per_request" => format!(
            "one request's cache at {} tokens needs {} per GPU; the weights leave {}: {} over",
            r.assumptions.decode_context,
            amount(o.needs),
            amount(o.available),
            amount(o.over)
        ),
        "decode_batch" => format!(
            "a decode batch of {} requests per replica; the KV budget holds {}: {} over",
            amount(o.needs),
            amount(o.available),
            amount(o.over)
        ),
        "prefill_batch" => format!(
            "a prefill batch of {} requests per replica; activations and the prompts' cache allow {}: {} over",
            amount(o.needs),
            amount(o.available),
            amount(o.over)
        ),
        other => format!(
            "{other}: needs {}, has {}",
            amount(o.needs),
            amount(o.available)
        ),
    }
}

/// The verdict's lines, printed before the figures.
pub fn print(r: &Report, v: &Verification, subject: &str) {
    if !v.valid {
        outln!(
            "NOT VERIFIED: the spec does not validate against {} ({} error{}); every figure below is from an unverified spec",
            v.truth,
            v.errors.len(),
            if v.errors.len() == 1 { "" } else { "s" }
        );
        for e in v.errors.iter().take(5) {
            outln!("  {e}");
        }
        if v.errors.len() > 5 {
            outln!("  … {} more (harch-worker validate)", v.errors.len() - 5);
        }
    }
    match r.verdict {
        Some(Fit::Fits) => outln!(
            "FITS: {subject} on {} × {} (layout {})",
            r.gpus,
            r.gpu,
            r.layout
        ),
        Some(Fit::DoesNotFit) => {
            outln!(
                "DOES NOT FIT: {subject} on {} × {} (layout {})",
                r.gpus,
                r.gpu,
                r.layout
            );
            for o in &r.overflows {
                outln!("  {}", describe(o, r));
            }
            if r.assumptions.memory_ignored {
                outln!(
                    "  --ignore-memory: the phases below are costed as if it fit (a what-if, not a deployment)"
                );
            } else {
                outln!(
                    "  no step time or throughput for a deployment that does not fit; more GPUs or another layout: `harch-worker plan {subject} --gpu {}`",
                    r.hardware.id
                );
            }
        }
        None => outln!(
            "{INSUFFICIENT_EVIDENCE}: whether it fits needs {}",
            r.missing.join(", ")
        ),
    }
    for (stored, runs) in &r.assumptions.precision_fallbacks {
        outln!(
            "note: {stored} weights run at {runs}: {} has no {stored} rate (dequantized on the fly; --compute-precision sets one precision for every op)",
            r.gpu
        );
    }
    outln!();
}

/// The verdict in the JSON document: `verified`, `validation_errors`, and `status`
/// `NOT_VERIFIED` over the others; every label says `unverified` too.
pub fn annotate(doc: &mut serde_json::Value, v: &Verification) {
    doc["verified"] = serde_json::json!(v.valid);
    doc["validation_errors"] = serde_json::json!(v.errors);
    if !v.valid {
        doc["status"] = serde_json::json!(NOT_VERIFIED);
        if let Some(labels) = doc.get_mut("labels").and_then(|l| l.as_object_mut()) {
            for l in labels.values_mut() {
                if let Some(s) = l.as_str() {
                    *l = serde_json::json!(format!("{s}, unverified"));
                }
            }
        }
    }
}

/// 1 for a spec that does not validate (unless `--unverified`) or a deployment that does not
/// fit; 3 for a missing hardware figure; 0 otherwise.
pub fn exit_code(r: &Report, v: &Verification, unverified_ok: bool) -> ExitCode {
    if !v.valid && !unverified_ok {
        return ExitCode::from(1);
    }
    match r.status {
        DOES_NOT_FIT => ExitCode::from(1),
        INSUFFICIENT_EVIDENCE => ExitCode::from(3),
        _ => ExitCode::SUCCESS,
    }
}
