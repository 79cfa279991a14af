//! The honesty path: a spec's gap report (`<model>.gap.yaml` beside its spec) read whether or
//! not the spec validates, and checked against the truth like any claim. A spec that validates
//! with a report that holds is "valid with a declared gap": every figure derived from a
//! quantity the report names in `affects` is labelled unverified wherever it appears
//! (validate, show, explain, analyze, the pull request, revalidate).

use harch_engine::Repo;
use harch_guards::truth::Truth;
use harch_guards::{Diagnostic, Report};
use harch_review::gap::{self, Gap};

/// The gap report next to `model` checked against `truth`, given the codes its validation
/// raised; `None` when the spec has no gap report.
pub fn check(
    repo: &Repo,
    model: &str,
    truth: &Truth,
    raised: &[&str],
) -> Option<Result<Gap, Vec<Diagnostic>>> {
    let (file, text) = repo.gap_report(model)?;
    let facts = harch_review::Facts::from_truth(truth);
    Some(gap::check_declared(file, text, &facts, raised))
}

/// Validation with the gap report: a report that does not hold is one more set of validate
/// errors (the spec is then invalid); one that holds is returned beside the report.
pub fn validate_with_gap(
    repo: &Repo,
    model: &str,
    truth: &Truth,
    report: &mut Report,
) -> Option<Gap> {
    let raised: Vec<&'static str> = report.errors.iter().map(|d| d.code).collect();
    match check(repo, model, truth, &raised)? {
        Ok(g) => Some(g),
        Err(diags) => {
            report.errors.extend(diags);
            report.valid = false;
            None
        }
    }
}

/// For commands that show numbers without validating (show, explain, analyze): the gap report
/// checked as a spec that validates would need it. `Err` says why a report there does not hold.
pub fn for_figures(repo: &Repo, model: &str, truth: &Truth) -> Result<Option<Gap>, String> {
    match check(repo, model, truth, &[]) {
        None => Ok(None),
        Some(Ok(g)) => Ok(Some(g)),
        Some(Err(d)) => Err(format!(
            "the gap report beside the spec does not hold ({}); run `harch-worker validate` for where",
            d.iter()
                .map(|d| format!("{}: {}", d.code, d.message))
                .collect::<Vec<_>>()
                .join("; ")
        )),
    }
}

/// `text` cut to at most `max` characters at the end of a sentence (or a word), marked `…`
/// when cut.
fn short(text: &str, max: usize) -> String {
    let Some((cut, _)) = text.char_indices().nth(max) else {
        return text.to_string();
    };
    let head = &text[..cut];
    let end = head
        .rfind(". ")
        .map(|i| i + 1)
        .or_else(|| head.rfind(' '))
        .unwrap_or(cut);
    format!("{}…", head[..end].trim_end())
}

/// One line saying what a declared gap leaves unverified.
pub fn line(g: &Gap) -> String {
    format!(
        "valid with a declared gap: {}; unverified: {}",
        short(&g.summary, 300),
        if g.affects.is_empty() {
            "(none named)".to_string()
        } else {
            g.affects.join(", ")
        }
    )
}

#[cfg(test)]
mod tests {
    use super::short;

    #[test]
    fn a_long_summary_is_cut_at_a_sentence() {
        assert_eq!(short("One. Two three.", 100), "One. Two three.");
        assert_eq!(short("One. Two three four.", 12), "One.…");
        assert_eq!(short("One two three four", 12), "One two…");
        assert_eq!(short("Ünïcödé wörds", 4), "Ünïc…");
    }
}
