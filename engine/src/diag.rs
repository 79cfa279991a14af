//! Located, coded errors. Every rejection names a stable code, the spec file, line, column and
//! node path, and a hint with the correct form, because an agent reads these to fix its spec.

use std::fmt;

#[derive(Clone, Debug, Default, PartialEq, Eq, serde::Serialize)]
pub struct Location {
    pub file: Option<String>,
    pub line: u32,
    pub column: u32,
    pub node: Option<String>,
}

impl Location {
    pub fn in_file(file: &str) -> Location {
        Location {
            file: Some(file.to_string()),
            ..Default::default()
        }
    }
    pub fn at(file: &str, line: u32, column: u32) -> Location {
        Location {
            file: Some(file.to_string()),
            line,
            column,
            node: None,
        }
    }
    pub fn with_node(mut self, node: impl Into<String>) -> Location {
        self.node = Some(node.into());
        self
    }
}

#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize)]
pub struct SpecError {
    /// Stable code, documented in docs/guards.md.
    pub code: &'static str,
    pub message: String,
    pub hint: Option<String>,
    pub location: Location,
}

impl SpecError {
    pub fn new(code: &'static str, message: impl Into<String>, location: Location) -> SpecError {
        SpecError {
            code,
            message: message.into(),
            hint: None,
            location,
        }
    }
    pub fn hint(mut self, hint: impl Into<String>) -> SpecError {
        self.hint = Some(hint.into());
        self
    }
}

impl fmt::Display for SpecError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: {}", self.code, self.message)?;
        let l = &self.location;
        if let Some(file) = &l.file {
            write!(f, "\n  --> {file}")?;
            if l.line > 0 {
                write!(f, ":{}:{}", l.line, l.column)?;
            }
        }
        if let Some(node) = &l.node {
            write!(f, " (node `{node}`)")?;
        }
        if let Some(h) = &self.hint {
            write!(f, "\n  help: {h}")?;
        }
        Ok(())
    }
}

/// Load-time error codes (schema, references, expressions).
pub mod code {
    pub const YAML: &str = "L001";
    pub const UNKNOWN_OP: &str = "L002";
    pub const UNKNOWN_ROLE: &str = "L003";
    pub const UNKNOWN_DIM: &str = "L004";
    pub const UNKNOWN_COMPONENT: &str = "L005";
    pub const BAD_EXPR: &str = "L006";
    pub const UNKNOWN_INPUT: &str = "L007";
    pub const CYCLE: &str = "L008";
    pub const BAD_NODE: &str = "L009";
    pub const UNKNOWN_QUANT: &str = "L010";
    pub const UNFILLED_SLOT: &str = "L011";
    pub const BAD_ARG: &str = "L012";
    pub const BAD_STREAM: &str = "L013";
    pub const DUPLICATE: &str = "L014";
    pub const BAD_CACHE: &str = "L015";
    pub const BAD_RENAME: &str = "L016";
    /// Evaluation: a dim or expression that cannot be bound to a value.
    pub const UNBOUND: &str = "A001";
    pub const EVAL: &str = "A002";
    pub const OVERFLOW: &str = "A003";
    pub const SCHEDULE_GAP: &str = "A004";
    pub const WHEN_REMOVES: &str = "A005";
    pub const STREAM_ORDER: &str = "A006";
    /// Shape propagation.
    pub const SHAPE_RANK: &str = "S001";
    pub const SHAPE_AXIS: &str = "S002";
    pub const SHAPE_HEADS: &str = "S003";
    pub const SHAPE_CARRY: &str = "S004";
    pub const SHAPE_ARITY: &str = "S005";
}

/// The closest candidate by edit distance, for "did you mean" hints.
pub fn closest<'a>(name: &str, candidates: impl IntoIterator<Item = &'a str>) -> Option<&'a str> {
    candidates
        .into_iter()
        .map(|c| (levenshtein(name, c), c))
        .filter(|(d, c)| *d <= (c.len().max(name.len()) / 3).max(2))
        .min_by_key(|(d, _)| *d)
        .map(|(_, c)| c)
}

fn levenshtein(a: &str, b: &str) -> usize {
    let b: Vec<char> = b.chars().collect();
    let mut prev: Vec<usize> = (0..=b.len()).collect();
    for (i, ca) in a.chars().enumerate() {
        let mut cur = vec![i + 1; b.len() + 1];
        for (j, cb) in b.iter().enumerate() {
            cur[j + 1] = (prev[j] + (ca != *cb) as usize)
                .min(prev[j + 1] + 1)
                .min(cur[j] + 1);
        }
        prev = cur;
    }
    prev[b.len()]
}
