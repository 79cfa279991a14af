//! The review report (`review.yaml`) the review agent writes, and its parser. A malformed
//! report is a list of located, coded diagnostics, the same shape `validate` returns, so the
//! agent gets it back to fix like any validate error.
//!
//! ```yaml
//! verdict: PASS            # or NO_PASS
//! mapping:                 # one row per forward step, in source order
//!   - step: "q/k L2 normalisation before the delta rule"
//!     node: "layers[linear_moe].attention.core"   # a spec node path, or null
//!     status: consistent   # or inconsistent | missing
//!     evidence:
//!       - 'src: modeling_qwen3_next.py:527-528 "query = l2norm(query, dim=-1, eps=1e-6)"'
//! defects:
//!   - title: "…"
//!     where: "…"
//!     fix: "…"
//!     evidence: [ … ]
//! ```

use std::collections::BTreeSet;
use std::fmt;

use harch_engine::Analysis;
use harch_engine::diag::Location;
use harch_guards::Diagnostic;
use serde::{Deserialize, Serialize};
use serde_saphyr::Spanned;

use crate::claim::{Claim, clip, parse_claim};

/// The guard name report diagnostics carry.
pub const GUARD: &str = "review";

/// Report error codes (documented in docs/review.md).
pub mod code {
    /// Not YAML, or not the report's shape (missing or unknown field, wrong type).
    pub const SHAPE: &str = "E001";
    pub const VERDICT: &str = "E002";
    pub const STATUS: &str = "E003";
    /// An evidence line that does not follow the grammar.
    pub const GRAMMAR: &str = "E004";
    /// A mapping row names a node the spec does not have.
    pub const NODE: &str = "E005";
    pub const EMPTY_MAPPING: &str = "E006";
    /// A `consistent` row with `node: null`.
    pub const NO_NODE: &str = "E007";
    pub const EMPTY_TEXT: &str = "E008";
    pub const TOO_LARGE: &str = "E009";
}

/// A report larger than this is refused before parsing (a review is a few hundred lines).
pub const MAX_REPORT_BYTES: usize = 1 << 20;
/// Mapping rows plus defects.
pub const MAX_ITEMS: usize = 2000;
pub const MAX_CLAIMS: usize = 10_000;

/// PASS or NO_PASS: what the agent said, and what the worker records.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum Decision {
    #[serde(rename = "PASS")]
    Pass,
    #[serde(rename = "NO_PASS")]
    NoPass,
}

impl fmt::Display for Decision {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.pad(match self {
            Decision::Pass => "PASS",
            Decision::NoPass => "NO_PASS",
        })
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Status {
    Consistent,
    Inconsistent,
    Missing,
}

impl fmt::Display for Status {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.pad(match self {
            Status::Consistent => "consistent",
            Status::Inconsistent => "inconsistent",
            Status::Missing => "missing",
        })
    }
}

/// One evidence line: its text as written, the claim it parses to, where it is.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Evidence {
    pub text: String,
    pub claim: Claim,
    pub line: u32,
    pub column: u32,
}

#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Row {
    pub step: String,
    pub node: Option<String>,
    pub status: Status,
    pub evidence: Vec<Evidence>,
    pub line: u32,
}

#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Defect {
    pub title: String,
    #[serde(rename = "where")]
    pub where_: String,
    pub fix: String,
    pub evidence: Vec<Evidence>,
    pub line: u32,
}

/// A parsed, well-formed report. Whether its claims hold is the checker's business.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Report {
    pub file: String,
    pub verdict: Decision,
    pub mapping: Vec<Row>,
    pub defects: Vec<Defect>,
}

/// The node paths of the reviewed spec, as the engine's evaluation names them
/// (`layers[linear_moe].attention.q_norm`). A mapping row may name a node or any path above one
/// (`layers[linear_moe].attention`).
#[derive(Clone, Debug, Default)]
pub struct SpecNodes {
    /// `None`: node paths are not checked (no spec at hand).
    ids: Option<BTreeSet<String>>,
    full: Vec<String>,
}

impl SpecNodes {
    pub fn new<I: IntoIterator<Item = S>, S: Into<String>>(ids: I) -> SpecNodes {
        let full: Vec<String> = ids.into_iter().map(Into::into).collect();
        let mut set = BTreeSet::new();
        for id in &full {
            set.insert(id.clone());
            for (i, c) in id.char_indices() {
                if (c == '.' || c == '[') && i > 0 {
                    set.insert(id[..i].to_string());
                }
            }
        }
        SpecNodes {
            ids: Some(set),
            full,
        }
    }

    pub fn from_analysis(a: &Analysis) -> SpecNodes {
        SpecNodes::new(a.nodes.iter().map(|n| n.id.clone()))
    }

    /// Accept any node path (the spec is not at hand).
    pub fn unchecked() -> SpecNodes {
        SpecNodes::default()
    }

    pub fn is_checked(&self) -> bool {
        self.ids.is_some()
    }

    pub fn contains(&self, path: &str) -> bool {
        self.ids.as_ref().is_none_or(|s| s.contains(path))
    }

    fn closest(&self, path: &str) -> Option<&str> {
        let ids = self.ids.as_ref()?;
        harch_engine::diag::closest(path, ids.iter().map(String::as_str))
    }

    /// A few node paths to show when a row names none of them.
    fn sample(&self, n: usize) -> Vec<&str> {
        self.full.iter().take(n).map(String::as_str).collect()
    }
}

// The report as YAML gives it, with locations; fields are checked after deserializing so each
// problem gets its own message and location.

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawReport {
    verdict: Spanned<String>,
    mapping: Vec<Spanned<RawRow>>,
    defects: Vec<Spanned<RawDefect>>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawRow {
    step: Spanned<String>,
    node: Spanned<Option<String>>,
    status: Spanned<String>,
    evidence: Vec<Spanned<EvidenceText>>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawDefect {
    title: Spanned<String>,
    #[serde(rename = "where")]
    where_: Spanned<String>,
    fix: Spanned<String>,
    evidence: Vec<Spanned<EvidenceText>>,
}

/// An evidence line: a string (`'cfg: a = 1'`), or the one-entry map YAML makes of an unquoted
/// `- cfg: a = 1`, read back as the same line.
struct EvidenceText(String);

impl<'de> Deserialize<'de> for EvidenceText {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl<'de> serde::de::Visitor<'de> for V {
            type Value = EvidenceText;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("an evidence line such as 'cfg: hidden_size = 2048'")
            }
            fn visit_str<E: serde::de::Error>(self, v: &str) -> Result<EvidenceText, E> {
                Ok(EvidenceText(v.to_string()))
            }
            fn visit_string<E: serde::de::Error>(self, v: String) -> Result<EvidenceText, E> {
                Ok(EvidenceText(v))
            }
            fn visit_map<A: serde::de::MapAccess<'de>>(
                self,
                mut map: A,
            ) -> Result<EvidenceText, A::Error> {
                let Some((k, v)) = map.next_entry::<String, String>()? else {
                    return Err(serde::de::Error::custom(
                        "an evidence line is a string such as 'cfg: hidden_size = 2048', not an empty map",
                    ));
                };
                if map.next_key::<String>()?.is_some() {
                    return Err(serde::de::Error::custom(
                        "one claim per evidence line: quote each line, e.g. - 'cfg: hidden_size = 2048'",
                    ));
                }
                Ok(EvidenceText(format!("{k}: {v}")))
            }
        }
        d.deserialize_any(V)
    }
}

fn line_col(s: &serde_saphyr::Location) -> (u32, u32) {
    (s.line() as u32, s.column() as u32)
}

struct Errors<'a> {
    file: &'a str,
    out: Vec<Diagnostic>,
}

impl Errors<'_> {
    fn push(
        &mut self,
        code: &'static str,
        at: &serde_saphyr::Location,
        item: &str,
        message: String,
        hint: &str,
    ) {
        let (line, column) = line_col(at);
        let mut loc = Location::at(self.file, line, column);
        if !item.is_empty() {
            loc = loc.with_node(item);
        }
        self.out
            .push(Diagnostic::new(GUARD, code, message, loc).hint(hint));
    }
}

/// Parses `text` (the report at `file`) and checks its form: fields, verdict, statuses, the
/// grammar of every evidence line, and that mapping rows name nodes of the spec. Every problem
/// found is returned, each located; none panics.
pub fn parse_report(file: &str, text: &str, nodes: &SpecNodes) -> Result<Report, Vec<Diagnostic>> {
    let mut errs = Errors {
        file,
        out: Vec::new(),
    };
    if text.len() > MAX_REPORT_BYTES {
        return Err(vec![
            Diagnostic::new(
                GUARD,
                code::TOO_LARGE,
                format!(
                    "the report is {} bytes; at most {MAX_REPORT_BYTES} are read",
                    text.len()
                ),
                Location::in_file(file),
            )
            .hint("one row per forward step and one line per claim is far smaller"),
        ]);
    }
    let raw: RawReport = match serde_saphyr::from_str_with_options(
        text,
        serde_saphyr::options! { strict_booleans: true },
    ) {
        Ok(r) => r,
        Err(e) => {
            let (line, column) = e.location().map(|l| line_col(&l)).unwrap_or((0, 0));
            let msg = e.without_snippet().to_string();
            let msg = msg.lines().next().unwrap_or("invalid YAML");
            // The location is the diagnostic's own; the message need not repeat it.
            let msg = match msg.rfind(" at line ") {
                Some(i) if line > 0 => &msg[..i],
                _ => msg,
            };
            return Err(vec![
                Diagnostic::new(
                    GUARD,
                    code::SHAPE,
                    format!("cannot read the report: {msg}"),
                    Location::at(file, line, column),
                )
                .hint("the report is YAML with exactly `verdict`, `mapping` (rows: step, node, status, evidence) and `defects` (title, where, fix, evidence); see docs/review.md"),
            ]);
        }
    };
    let items = raw.mapping.len() + raw.defects.len();
    let claims: usize = raw
        .mapping
        .iter()
        .map(|r| r.value.evidence.len())
        .chain(raw.defects.iter().map(|d| d.value.evidence.len()))
        .sum();
    if items > MAX_ITEMS || claims > MAX_CLAIMS {
        return Err(vec![
            Diagnostic::new(
                GUARD,
                code::TOO_LARGE,
                format!("the report has {items} rows and defects with {claims} claims; at most {MAX_ITEMS} and {MAX_CLAIMS} are checked"),
                Location::in_file(file),
            )
            .hint("one row per forward step"),
        ]);
    }

    let verdict = match raw.verdict.value.trim() {
        "PASS" => Some(Decision::Pass),
        "NO_PASS" => Some(Decision::NoPass),
        other => {
            errs.push(
                code::VERDICT,
                &raw.verdict.referenced,
                "verdict",
                format!("unknown verdict `{}`", clip(other, 40)),
                "write `verdict: PASS` or `verdict: NO_PASS`",
            );
            None
        }
    };

    if raw.mapping.is_empty() {
        errs.out.push(
            Diagnostic::new(
                GUARD,
                code::EMPTY_MAPPING,
                "the mapping is empty",
                Location::in_file(file).with_node("mapping"),
            )
            .hint("write one mapping row per step of the forward source, in source order"),
        );
    }

    let mut mapping = Vec::new();
    for (i, row) in raw.mapping.iter().enumerate() {
        let item = format!("mapping[{i}]");
        let r = &row.value;
        non_empty(&mut errs, &r.step, &format!("{item}.step"), "step");
        let status = match r.status.value.trim() {
            "consistent" => Some(Status::Consistent),
            "inconsistent" => Some(Status::Inconsistent),
            "missing" => Some(Status::Missing),
            other => {
                errs.push(
                    code::STATUS,
                    &r.status.referenced,
                    &format!("{item}.status"),
                    format!("unknown status `{}`", clip(other, 40)),
                    "write `status: consistent`, `inconsistent` or `missing`",
                );
                None
            }
        };
        let node = r.node.value.as_deref().map(str::trim).map(str::to_string);
        match &node {
            Some(n) if !nodes.contains(n) => {
                let mut hint = match nodes.closest(n) {
                    Some(c) => format!("did you mean `{c}`? "),
                    None => String::new(),
                };
                hint.push_str("name a node path as the evaluation does (e.g. ");
                hint.push_str(&nodes.sample(3).join(", "));
                hint.push_str(
                    "), or write `node: null` with `status: missing` for a step the spec lacks",
                );
                errs.push(
                    code::NODE,
                    &r.node.referenced,
                    &format!("{item}.node"),
                    format!("the spec has no node `{}`", clip(n, 120)),
                    &hint,
                );
            }
            None if status == Some(Status::Consistent) => errs.push(
                code::NO_NODE,
                &r.node.referenced,
                &format!("{item}.node"),
                "a consistent row must name the spec node that computes the step".into(),
                "name the node, or write `status: missing` when the spec lacks the step",
            ),
            _ => {}
        }
        let evidence = evidence(&mut errs, &r.evidence, &item);
        if let Some(status) = status {
            mapping.push(Row {
                step: r.step.value.trim().to_string(),
                node,
                status,
                evidence,
                line: row.referenced.line() as u32,
            });
        }
    }

    let mut defects = Vec::new();
    for (i, d) in raw.defects.iter().enumerate() {
        let item = format!("defects[{i}]");
        let v = &d.value;
        non_empty(&mut errs, &v.title, &format!("{item}.title"), "title");
        non_empty(&mut errs, &v.where_, &format!("{item}.where"), "where");
        non_empty(&mut errs, &v.fix, &format!("{item}.fix"), "fix");
        let evidence = evidence(&mut errs, &v.evidence, &item);
        defects.push(Defect {
            title: v.title.value.trim().to_string(),
            where_: v.where_.value.trim().to_string(),
            fix: v.fix.value.trim().to_string(),
            evidence,
            line: d.referenced.line() as u32,
        });
    }

    match verdict {
        Some(verdict) if errs.out.is_empty() => Ok(Report {
            file: file.to_string(),
            verdict,
            mapping,
            defects,
        }),
        _ => Err(errs.out),
    }
}

fn non_empty(errs: &mut Errors<'_>, s: &Spanned<String>, item: &str, field: &str) {
    if s.value.trim().is_empty() {
        errs.push(
            code::EMPTY_TEXT,
            &s.referenced,
            item,
            format!("`{field}` is empty"),
            "say it in words; numbers in it must be backed by evidence",
        );
    }
}

fn evidence(errs: &mut Errors<'_>, lines: &[Spanned<EvidenceText>], item: &str) -> Vec<Evidence> {
    let mut out = Vec::new();
    for (j, e) in lines.iter().enumerate() {
        let text = e.value.0.trim();
        match parse_claim(text) {
            Ok(claim) => {
                let (line, column) = line_col(&e.referenced);
                out.push(Evidence {
                    text: text.to_string(),
                    claim,
                    line,
                    column,
                });
            }
            Err(g) => errs.push(
                code::GRAMMAR,
                &e.referenced,
                &format!("{item}.evidence[{j}]"),
                g.message,
                &g.hint,
            ),
        }
    }
    out
}
