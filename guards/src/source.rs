//! The source guard: every stream's `src:` anchor occurs in this model's forward source, and
//! every stream has a producer and a reader.

use std::collections::{BTreeMap, BTreeSet};

use harch_engine::diag::Location;
use harch_engine::ir::{ModelIr, NodeKind, StreamKind};

use crate::report::Diagnostic;

mod stream_anchor;
mod wiring;

pub mod code {
    pub const ANCHOR_NOT_FOUND: &str = "O001";
    pub const NO_PRODUCER_OR_READER: &str = "O002";
    pub const NO_SOURCE: &str = "O003";
    pub const NO_ANCHOR: &str = "O004";
    pub const BUFFER_KIND: &str = "O005";
    pub const BUFFER_ANCHOR: &str = "O006";
    pub const STREAM_NOT_PASSED: &str = "O007";
    pub const RESIDUAL_SOURCE: &str = "O008";
    pub const MODULE_PLACEMENT: &str = "O009";
}

/// Names the source registers as buffers: the first argument of each
/// `register_buffer("name", ...)` (either quote), and the attribute each transformers-5
/// `self.name = nn.Buffer(...)` assigns.
pub fn registered_buffers<'a>(texts: impl IntoIterator<Item = &'a String>) -> BTreeSet<String> {
    let mut out = BTreeSet::new();
    for t in texts {
        for line in t.lines().filter(|l| l.contains("nn.Buffer(")) {
            let Some((lhs, rhs)) = line.split_once('=') else {
                continue;
            };
            let is_buffer = rhs.trim_start().starts_with("nn.Buffer(")
                || rhs.trim_start().starts_with("torch.nn.Buffer(");
            let name = lhs.trim().strip_prefix("self.").unwrap_or("");
            if is_buffer
                && !name.is_empty()
                && name.chars().all(|c| c.is_alphanumeric() || c == '_')
            {
                out.insert(name.to_string());
            }
        }
        for (at, _) in t.match_indices("register_buffer(") {
            let rest = t[at + "register_buffer(".len()..].trim_start();
            let Some(q) = rest.chars().next().filter(|c| *c == '"' || *c == '\'') else {
                continue;
            };
            if let Some(end) = rest[1..].find(q) {
                out.insert(rest[1..1 + end].to_string());
            }
        }
    }
    out
}

/// The tensor name a `parameter` or `buffer` node stores: the last segment of its path.
fn stored_name(n: &harch_engine::ir::NodeIr) -> &str {
    let p = n.path.as_deref().unwrap_or(&n.id);
    p.rsplit('.').next().unwrap_or(p)
}

/// Buffers and explicit parameters against the source: a buffer quotes where the source
/// registers it, and a tensor the source registers as a buffer is not declared a parameter.
fn stored_tensors(
    ir: &ModelIr,
    normalized: &[(&String, String)],
    buffers: &BTreeSet<String>,
    out: &mut Vec<Diagnostic>,
) {
    let nodes = ir
        .graph
        .iter()
        .chain(ir.components.values().flat_map(|c| c.nodes.iter()));
    for n in nodes {
        let NodeKind::Op(spec) = &n.kind else {
            continue;
        };
        let name = stored_name(n);
        match spec.name {
            "parameter" if buffers.contains(name) => out.push(
                Diagnostic::new("source", code::BUFFER_KIND, format!("`{}` is declared a parameter, but the forward source registers `{name}` as a buffer", n.id), n.loc.clone())
                    .hint(format!("declare it `op: buffer` with `src:` quoting the `register_buffer(\"{name}\"` line: a buffer is stored, never a parameter")),
            ),
            "buffer" => match &n.src {
                None => out.push(
                    Diagnostic::new("source", code::BUFFER_ANCHOR, format!("buffer `{}` has no `src:` anchor", n.id), n.loc.clone())
                        .hint(format!("src: '`register_buffer(\"{name}\"`' (copied verbatim from the source, in backticks)")),
                ),
                Some(src) if !normalized.is_empty() => {
                    for snip in anchor_snippets(src) {
                        let want = normalize(&snip);
                        if !normalized.iter().any(|(_, t)| t.contains(&want)) {
                            out.push(
                                Diagnostic::new("source", code::BUFFER_ANCHOR, format!("buffer `{}`: anchor `{snip}` is not in the forward source", n.id), n.loc.clone())
                                    .hint("quote, in backticks, the source's `register_buffer(...)` line for this tensor"),
                            );
                        }
                    }
                    if !buffers.contains(name) {
                        out.push(
                            Diagnostic::new("source", code::BUFFER_KIND, format!("buffer `{}`: the forward source registers no buffer named `{name}`", n.id), n.loc.clone())
                                .hint("a buffer is what `register_buffer(\"name\", ...)` creates; a learned tensor is `op: parameter`"),
                        );
                    }
                }
                Some(_) => {}
            },
            _ => {}
        }
    }
}

/// Whitespace runs collapsed to one space: anchors match across line breaks and indentation.
pub fn normalize(s: &str) -> String {
    s.split_whitespace().collect::<Vec<_>>().join(" ")
}

/// The forward source, normalized, that `src:` anchors are checked against.
#[derive(Default)]
pub struct AnchorSource<'a> {
    texts: Vec<(&'a String, String)>,
}

impl<'a> AnchorSource<'a> {
    pub fn new(files: &[(&'a String, &'a String)]) -> AnchorSource<'a> {
        AnchorSource {
            texts: files.iter().map(|(f, t)| (*f, normalize(t))).collect(),
        }
    }

    /// No source staged (the source guard reports that).
    pub fn is_empty(&self) -> bool {
        self.texts.is_empty()
    }

    /// Why `snippets` do not all hold: the first that is not in the forward source, with the
    /// files searched.
    pub fn absent(&self, snippets: &[String]) -> Option<String> {
        let s = snippets
            .iter()
            .find(|s| !self.texts.iter().any(|(_, t)| t.contains(&normalize(s))))?;
        let files: Vec<&str> = self.texts.iter().map(|(f, _)| f.as_str()).collect();
        Some(format!(
            "`{s}` is not in the forward source ({})",
            files.join(", ")
        ))
    }
}

/// The text an anchor promises: every backtick span, or the whole string when there is none.
pub fn anchor_snippets(src: &str) -> Vec<String> {
    let parts: Vec<&str> = src.split('`').collect();
    let spans: Vec<String> = parts
        .iter()
        .enumerate()
        .filter(|(k, _)| k % 2 == 1)
        .map(|(_, s)| s.to_string())
        .filter(|s| !s.trim().is_empty())
        .collect();
    if spans.is_empty() {
        vec![src.to_string()]
    } else {
        spans
    }
}

/// Streams that components of a stack's blocks write (`stream_out`) and read (`reads`).
fn stream_uses(ir: &ModelIr, blocks: &[String]) -> (BTreeSet<String>, BTreeSet<String>) {
    let mut written = BTreeSet::new();
    let mut read = BTreeSet::new();
    for b in blocks {
        let uses = ir.block_streams(b);
        written.extend(uses.written);
        read.extend(uses.read);
    }
    (written, read)
}

/// The forward-source files a spec's anchors are checked in: those its `sources:` names when
/// any is staged, else every staged file.
pub fn forward_sources<'a>(
    ir: &ModelIr,
    sources: &'a BTreeMap<String, String>,
) -> Vec<(&'a String, &'a String)> {
    let named: Vec<(&String, &String)> = sources
        .iter()
        .filter(|(f, _)| ir.sources.contains(f))
        .collect();
    if named.is_empty() {
        sources.iter().collect()
    } else {
        named
    }
}

/// A model's forward-source files ([`forward_sources`]), read into statements on first use
/// and shared by the checks that ask, so that a validation parses each file once and one whose
/// config settles every question parses none.
pub struct Forward<'a> {
    pub files: Vec<(&'a String, &'a String)>,
    read: std::cell::OnceCell<crate::pysrc::Sources<'a>>,
}

impl<'a> Forward<'a> {
    pub fn new(ir: &ModelIr, sources: &'a BTreeMap<String, String>) -> Forward<'a> {
        Forward {
            files: forward_sources(ir, sources),
            read: std::cell::OnceCell::new(),
        }
    }

    pub fn sources(&self) -> &crate::pysrc::Sources<'a> {
        self.read
            .get_or_init(|| crate::pysrc::Sources::read(&self.files))
    }
}

/// What the source guard found: its errors, and what it could not compare with the source.
pub struct Checked {
    pub errors: Vec<Diagnostic>,
    pub unverified: Vec<String>,
}

pub fn check(
    ir: &ModelIr,
    sources: &BTreeMap<String, String>,
    renames: &crate::conversion::Renames,
) -> Checked {
    let mut out = Vec::new();
    let mut unverified = Vec::new();
    let texts = forward_sources(ir, sources);
    let normalized: Vec<(&String, String)> =
        texts.iter().map(|(f, t)| (*f, normalize(t))).collect();
    let file_loc = Location::in_file(&ir.file);
    if normalized.is_empty() {
        out.push(
            Diagnostic::new("source", code::NO_SOURCE, format!("no forward source is staged for this model (the spec names {})", if ir.sources.is_empty() { "none".to_string() } else { ir.sources.join(", ") }), file_loc.clone())
                .hint("stage modeling_*.py under the truth directory's source/ (`harch-worker fetch`), or run scripts/fetch-transformers-src for native architectures"),
        );
    }
    let buffers = registered_buffers(texts.iter().map(|(_, t)| *t));
    stored_tensors(ir, &normalized, &buffers, &mut out);
    let statements = std::cell::OnceCell::new();
    let statements = || statements.get_or_init(|| crate::pysrc::Sources::read(&texts));
    // An append stream may be read by a later stack, which declares it with `read:` alone.
    let read_later: BTreeSet<&str> = ir
        .graph
        .iter()
        .filter_map(|n| match &n.kind {
            NodeKind::Stack(st) => Some(st),
            _ => None,
        })
        .flat_map(|st| st.streams.iter())
        .filter(|s| matches!(s.kind, StreamKind::Earlier { .. }))
        .map(|s| s.name.as_str())
        .collect();
    for node in &ir.graph {
        let NodeKind::Stack(st) = &node.kind else {
            continue;
        };
        let blocks: Vec<String> = st.schedule.iter().map(|s| s.block.clone()).collect();
        let (written, mut read) = stream_uses(ir, &blocks);
        for s in &st.streams {
            if matches!(s.kind, StreamKind::Append { .. }) && read_later.contains(s.name.as_str()) {
                read.insert(s.name.clone());
            }
        }
        for s in &st.streams {
            let loc = node.loc.clone();
            match &s.src {
                None => out.push(Diagnostic::new("source", code::NO_ANCHOR, format!("stream `{}` of stack `{}` has no `src:` anchor", s.name, node.id), loc.clone()).hint("src: \"one line on where it comes from, with a `snippet copied from forward()` in backticks\"")),
                Some(src) if !normalized.is_empty() => {
                    for snip in anchor_snippets(src) {
                        let want = normalize(&snip);
                        if !normalized.iter().any(|(_, t)| t.contains(&want)) {
                            let files: Vec<&str> = normalized.iter().map(|(f, _)| f.as_str()).collect();
                            out.push(
                                Diagnostic::new("source", code::ANCHOR_NOT_FOUND, format!("stream `{}`: anchor `{snip}` is not in the forward source ({})", s.name, files.join(", ")), loc.clone())
                                    .hint("quote, in backticks, a snippet copied verbatim from the forward source where this value is produced or consumed"),
                            );
                        } else if let Some(why) = stream_anchor::not_passing(statements(), &snip, &s.name) {
                            out.push(
                                Diagnostic::new("source", code::STREAM_NOT_PASSED, format!("stream `{}` of stack `{}`: anchor {why}", s.name, node.id), loc.clone())
                                    .hint("quote, in backticks, the statement of a function's body that passes this value on (an assignment, call or return), not a name that occurs elsewhere"),
                            );
                        }
                    }
                }
                Some(_) => {}
            }
            // A carried stream is produced by each layer's block and read by the next layer.
            if !s.carries {
                // An append stream is saved by the stack itself, an earlier stack's by that one.
                if matches!(s.kind, StreamKind::Internal) && !written.contains(&s.name) {
                    out.push(Diagnostic::new("source", code::NO_PRODUCER_OR_READER, format!("stream `{}` of stack `{}` has no producer: no component writes it with `stream_out`", s.name, node.id), loc.clone()).hint(format!("a component publishes it with `stream_out: {{ {}: <node> }}`", s.name)));
                }
                if !read.contains(&s.name) {
                    out.push(Diagnostic::new("source", code::NO_PRODUCER_OR_READER, format!("stream `{}` of stack `{}` has no reader: no component lists it in `reads`", s.name, node.id), loc.clone()).hint(format!("a consuming component declares `reads: [{}]`", s.name)));
                }
            }
        }
        let declared: BTreeSet<String> = st.streams.iter().map(|s| s.name.clone()).collect();
        for w in written.iter().chain(read.iter()) {
            if !declared.contains(w) {
                out.push(Diagnostic::new("source", code::NO_PRODUCER_OR_READER, format!("stream `{w}` is written or read inside stack `{}` but the stack does not declare it", node.id), node.loc.clone()).hint("declare it under the stack's `streams:` with a `src:` anchor"));
            }
        }
    }
    if !normalized.is_empty() {
        let w = wiring::check(ir, statements(), renames);
        out.extend(w.errors);
        unverified = w.unverified;
    }
    Checked {
        errors: out,
        unverified,
    }
}

#[cfg(test)]
mod buffer_tests {
    use super::registered_buffers;

    #[test]
    fn buffers_are_found_the_v4_and_the_v5_way() {
        let src = [
            "self.register_buffer(\"inv_freq\", inv_freq, persistent=False)\n".to_string(),
            "        self.e_score_correction_bias = nn.Buffer(torch.zeros((self.num_experts), dtype=torch.float32))\n        self.tid2eid = torch.nn.Buffer(torch.zeros(v, k, dtype=torch.int64))\n        self.weight = nn.Parameter(torch.ones(h))\n        x = nn.Buffer(y)\n".to_string(),
        ];
        let got: Vec<String> = registered_buffers(src.iter()).into_iter().collect();
        assert_eq!(got, ["e_score_correction_bias", "inv_freq", "tid2eid"]);
    }
}
