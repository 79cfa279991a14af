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
    /// Guards asked for that did not run, because the check stopped early (`stopped_at`).
    pub not_run: Vec<&'static str>,
    /// Where the check stopped before running every guard asked for: `load` (the spec did
    /// not load: no guard ran) or `evaluation` (the spec loaded but did not evaluate: the
    /// guards that compare an evaluation with the truth did not run). None when it did not.
    pub stopped_at: Option<&'static str>,
    pub errors: Vec<Diagnostic>,
    pub warnings: Vec<Diagnostic>,
    /// What the guards could not compare with the source (a layer's wiring the reader cannot
    /// follow): the review checks it by hand.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub unverified: Vec<String>,
    pub summary: Summary,
    /// Wall time of each phase of the check, in order (`validate --timings`).
    #[serde(skip)]
    pub phases: Vec<(&'static str, std::time::Duration)>,
}

impl Report {
    /// Records the time since `since` as phase `name` and restarts the clock.
    pub fn lap(&mut self, name: &'static str, since: &mut std::time::Instant) {
        let now = std::time::Instant::now();
        self.phases.push((name, now - *since));
        *since = now;
    }

    pub fn finish(mut self) -> Report {
        self.valid = self.errors.is_empty();
        self
    }
}

/// A sorted set of indices as a message shows it: runs are ranges (`3-60`) and evenly spaced
/// runs keep their step (`0-22 step 2` for alternating layers), so that a message about 12 or
/// 100,000 layers stays one short line.
pub fn index_ranges(v: &[i128]) -> String {
    let mut parts = Vec::new();
    let mut i = 0;
    while i < v.len() {
        let step = v.get(i + 1).map(|n| n - v[i]).filter(|s| *s > 0);
        let mut j = i;
        if let Some(s) = step {
            while j + 1 < v.len() && v[j + 1] - v[j] == s {
                j += 1;
            }
        }
        let n = j - i + 1;
        match step {
            Some(1) if n > 1 => parts.push(format!("{}-{}", v[i], v[j])),
            Some(s) if n > 2 => parts.push(format!("{}-{} step {s}", v[i], v[j])),
            _ => {
                parts.push(v[i].to_string());
                j = i;
            }
        }
        i = j + 1;
    }
    parts.join(",")
}

#[cfg(test)]
mod tests {
    use super::index_ranges;

    #[test]
    fn ranges_keep_their_step() {
        assert_eq!(index_ranges(&[]), "");
        assert_eq!(index_ranges(&[5]), "5");
        assert_eq!(index_ranges(&[0, 1, 2, 3, 10]), "0-3,10");
        let even: Vec<i128> = (0..24).step_by(2).collect();
        assert_eq!(index_ranges(&even), "0-22 step 2");
        let every_fourth: Vec<i128> = (3..48).step_by(4).collect();
        assert_eq!(index_ranges(&every_fourth), "3-47 step 4");
        assert_eq!(index_ranges(&[1, 3, 4, 5]), "1,3-5");
        assert_eq!(index_ranges(&[1, 5]), "1,5");
        let many: Vec<i128> = (0..100_000).collect();
        assert_eq!(index_ranges(&many), "0-99999");
    }
}
