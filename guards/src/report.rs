//! The result of `validate()`: coded, located diagnostics and a byte summary.

use harch_engine::SpecError;
use harch_engine::diag::Location;

#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize)]
pub struct Diagnostic {
    /// Stable code, documented in docs/guards.md.
    pub code: &'static str,
    /// The guard that raised it (`load` for a spec that cannot be read).
    pub guard: &'static str,
    pub message: String,
    pub hint: Option<String>,
    pub location: Location,
}

impl Diagnostic {
    pub fn new(
        guard: &'static str,
        code: &'static str,
        message: impl Into<String>,
        location: Location,
    ) -> Diagnostic {
        Diagnostic {
            code,
            guard,
            message: message.into(),
            hint: None,
            location,
        }
    }
    pub fn hint(mut self, h: impl Into<String>) -> Diagnostic {
        self.hint = Some(h.into());
        self
    }
    /// One line: `E123 [guard] file:line:col (node n): message — hint: …`, as retry prompts and
    /// work orders show a diagnostic.
    pub fn one_line(&self) -> String {
        let l = &self.location;
        let mut s = format!("{} [{}]", self.code, self.guard);
        if let Some(f) = &l.file {
            s.push(' ');
            s.push_str(f);
            if l.line > 0 {
                s.push_str(&format!(":{}:{}", l.line, l.column));
            }
        }
        if let Some(n) = &l.node {
            s.push_str(&format!(" (node {n})"));
        }
        s.push_str(": ");
        s.push_str(&self.message);
        if let Some(h) = &self.hint {
            s.push_str(" — hint: ");
            s.push_str(h);
        }
        s
    }
    pub fn from_spec_error(guard: &'static str, e: &SpecError) -> Diagnostic {
        Diagnostic {
            code: e.code,
            guard,
            message: e.message.clone(),
            hint: e.hint.clone(),
            location: e.location.clone(),
        }
    }
}

#[derive(Clone, Debug, Default, PartialEq, Eq, serde::Serialize)]
pub struct Summary {
    pub checkpoint_bytes: i128,
    pub spec_bytes: i128,
    pub byte_diff: i128,
    pub checkpoint_tensors: usize,
    pub matched_tensors: usize,
}

#[derive(Clone, Debug, Default, serde::Serialize)]
pub struct Report {
    pub valid: bool,
    /// The spec file checked (`specs/models/qwen3.yaml`), once the model is found.
    pub spec: Option<String>,
    /// The truth checked against: the model id (and revision) it records, or where the caller
    /// read it from.
    pub truth: Option<String>,
    /// Guards that ran, in order.
    pub guards: Vec<&'static str>,
    pub errors: Vec<Diagnostic>,
    pub warnings: Vec<Diagnostic>,
    pub summary: Summary,
}

impl Report {
    pub fn finish(mut self) -> Report {
        self.valid = self.errors.is_empty();
        self
    }
}
