//! The previous attempt's validate errors, as the retry prompt shows them: every diagnostic with
//! its stable code, guard, location and hint, exactly as `validate --json` reports them.

use harch_guards::Diagnostic;
use serde::Serialize;

/// Errors shown beyond this many are counted, not listed: the first ones usually cause the rest,
/// and the agent runs `validate` itself for the full list.
pub const MAX_LISTED_ERRORS: usize = 40;

#[derive(Clone, Debug, Default, PartialEq, Serialize)]
pub struct PriorErrors {
    /// 1-based number of the attempt that produced them.
    pub attempt: u32,
    /// One line each: `E123 [guard] file:line:col (node n): message — hint: …`.
    pub lines: Vec<String>,
    /// Errors not listed.
    pub more: usize,
    /// Why the attempt failed when there was no report (nothing written, the agent crashed).
    pub note: Option<String>,
}

impl PriorErrors {
    pub fn from_diagnostics(attempt: u32, errors: &[Diagnostic]) -> PriorErrors {
        PriorErrors {
            attempt,
            lines: errors
                .iter()
                .take(MAX_LISTED_ERRORS)
                .map(Diagnostic::one_line)
                .collect(),
            more: errors.len().saturating_sub(MAX_LISTED_ERRORS),
            note: None,
        }
    }

    /// An attempt that produced no report: the note says what happened instead.
    pub fn note(attempt: u32, note: impl Into<String>) -> PriorErrors {
        PriorErrors {
            attempt,
            note: Some(note.into()),
            ..PriorErrors::default()
        }
    }
}
