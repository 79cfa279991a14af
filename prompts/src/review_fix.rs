//! The review and fix prompts. Review asks for `review.yaml`, whose every conclusion cites
//! checkable evidence in the review crate's grammar, with the forward source numbered so line
//! citations can be exact. Fix gets only work orders (`harch_review::work_orders`: verified
//! defects with their fix, fresh validation errors, places to look), never a review's unchecked
//! suggestions. Both carry the grammar, the staged source files with their line counts, and the
//! previous round's checker verdicts.

use harch_guards::truth::Truth;
use harch_review::{Checked, Standing, Tally, WorkOrder};
use serde::Serialize;

use crate::errors::PriorErrors;
use crate::render::{Prompt, PromptError, render};
use crate::truth_text::{DEFAULT_SOURCE_BUDGET, SourceFile, truth_text};

/// Where the staged forward source sits in the workspace.
pub const STAGED_SOURCE_DIR: &str = "truth/source";

pub struct ReviewInput<'a> {
    pub model_id: &'a str,
    pub spec_path: &'a str,
    pub spec_text: &'a str,
    /// Draft components the spec lists: (name, text).
    pub drafts: &'a [(String, String)],
    pub truth: &'a Truth,
    /// Where the agent writes its report, relative to the workspace (`review.yaml`).
    pub report_path: &'a str,
    /// The spec's node paths as the evaluation names them; mapping rows must name one of these
    /// or a path above one.
    pub node_paths: &'a [String],
    /// The previous round's checked review, when this is a re-review after a fix.
    pub previous: Option<&'a Checked>,
    /// The previous attempt's report errors, when its report was malformed.
    pub report_errors: Option<&'a PriorErrors>,
    /// Operator notes appended verbatim.
    pub notes: Option<&'a str>,
    /// What validation could not compare with the source (a layer's wiring it cannot follow):
    /// the review maps these by hand.
    pub unverified: &'a [String],
}

pub struct FixInput<'a> {
    pub model_id: &'a str,
    pub spec_path: &'a str,
    pub spec_text: &'a str,
    /// From `harch_review::work_orders`: the only things the fix agent is told to change.
    pub work_orders: &'a [WorkOrder],
    /// The checked review the orders come from (its verdict counts are shown, not its text).
    pub review: Option<&'a Checked>,
    /// The previous fix attempt's validation errors, when its spec did not validate.
    pub errors: Option<&'a PriorErrors>,
    pub truth: &'a Truth,
    /// Operator notes appended verbatim.
    pub notes: Option<&'a str>,
}

/// The evidence grammar as the prompts show it.
#[derive(Serialize)]
struct Grammar {
    forms: &'static str,
    examples: &'static str,
    max_src_lines: u32,
}

fn grammar() -> Grammar {
    Grammar {
        forms: harch_review::GRAMMAR,
        examples: harch_review::EXAMPLES,
        max_src_lines: harch_review::MAX_SRC_LINES,
    }
}

/// A staged source file and how many lines it has, so citations stay in range.
#[derive(Serialize)]
struct Staged {
    path: String,
    lines: usize,
}

fn staged(truth: &Truth) -> Vec<Staged> {
    truth
        .sources
        .iter()
        .map(|(name, text)| Staged {
            path: format!("{STAGED_SOURCE_DIR}/{name}"),
            lines: text.lines().count(),
        })
        .collect()
}

/// Source text with its line numbers at the left (`  527 | query = …`).
fn numbered(text: &str) -> String {
    let width = text.lines().count().to_string().len();
    let mut out = String::with_capacity(text.len() + text.len() / 4);
    for (i, line) in text.lines().enumerate() {
        out.push_str(&format!("{:>width$} | {line}\n", i + 1));
    }
    out
}

/// One conclusion of the previous round as a re-review sees it: what it was, where it landed,
/// and the facts its false claims disagreed with. No suggested fix is repeated.
#[derive(Serialize)]
struct PreviousItem {
    label: String,
    standing: Standing,
    why: String,
    false_claims: Vec<FalseClaim>,
}

#[derive(Serialize)]
struct FalseClaim {
    claim: String,
    truth: String,
}

#[derive(Serialize)]
struct Previous<'a> {
    said: String,
    recorded: String,
    reasons: &'a [String],
    rows: Tally,
    defects: Tally,
    items: Vec<PreviousItem>,
}

fn previous(c: &Checked) -> Previous<'_> {
    let false_claims = |j: &harch_review::Judgement| {
        j.claims
            .iter()
            .filter(|c| !c.holds)
            .map(|c| FalseClaim {
                claim: c.text.clone(),
                truth: c.truth.clone().unwrap_or_default(),
            })
            .collect()
    };
    // A contradicted item's false claims are listed with the facts; its `why` says the same.
    let why = |j: &harch_review::Judgement| match j.standing {
        Standing::Contradicted => String::new(),
        _ => j.why.clone(),
    };
    let mut items: Vec<PreviousItem> = c
        .mapping
        .iter()
        .map(|r| PreviousItem {
            label: format!(
                "row `{}` → {} ({})",
                r.row.step,
                r.row.node.as_deref().unwrap_or("null"),
                r.row.status
            ),
            standing: r.judgement.standing,
            why: why(&r.judgement),
            false_claims: false_claims(&r.judgement),
        })
        .collect();
    items.extend(c.defects.iter().map(|d| PreviousItem {
        label: format!("defect `{}` at {}", d.defect.title, d.defect.where_),
        standing: d.judgement.standing,
        why: why(&d.judgement),
        false_claims: false_claims(&d.judgement),
    }));
    Previous {
        said: c.said.to_string(),
        recorded: c.recorded.to_string(),
        reasons: &c.reasons,
        rows: c.rows,
        defects: c.defect_tally,
        items,
    }
}

pub fn render_review(input: &ReviewInput<'_>) -> Result<Prompt, PromptError> {
    let mut truth = truth_text(input.truth, DEFAULT_SOURCE_BUDGET);
    for s in &mut truth.sources {
        s.text = numbered(&s.text);
    }
    let drafts: Vec<SourceFile> = input
        .drafts
        .iter()
        .map(|(n, t)| SourceFile {
            name: n.clone(),
            text: t.clone(),
        })
        .collect();
    let node_paths = input.node_paths.join("\n");
    let previous = input.previous.map(previous);
    let mut fragments = vec![
        ("spec".to_string(), input.spec_text.len()),
        ("tensor ranges".to_string(), truth.tensors.len()),
        (
            "forward source".to_string(),
            truth.sources.iter().map(|s| s.text.len()).sum(),
        ),
        ("node paths".to_string(), node_paths.len()),
    ];
    if let Some(p) = &previous {
        fragments.push((
            "previous verdicts".to_string(),
            p.items.iter().map(|i| i.label.len() + i.why.len()).sum(),
        ));
    }
    #[derive(Serialize)]
    struct Ctx<'a> {
        model_id: &'a str,
        spec_path: &'a str,
        spec_text: &'a str,
        drafts: Vec<SourceFile>,
        report_path: &'a str,
        truth: crate::TruthText,
        grammar: Grammar,
        staged: Vec<Staged>,
        node_paths: String,
        previous: Option<Previous<'a>>,
        report_errors: Option<&'a PriorErrors>,
        notes: Option<&'a str>,
        unverified: &'a [String],
    }
    render(
        "review",
        Ctx {
            model_id: input.model_id,
            spec_path: input.spec_path,
            spec_text: input.spec_text,
            drafts,
            report_path: input.report_path,
            truth,
            grammar: grammar(),
            staged: staged(input.truth),
            node_paths,
            previous,
            report_errors: input.report_errors,
            notes: input.notes,
            unverified: input.unverified,
        },
        fragments,
    )
}

pub fn render_fix(input: &FixInput<'_>) -> Result<Prompt, PromptError> {
    // The fix agent reads the source in the workspace: the prompt stays small.
    let truth = truth_text(input.truth, 0);
    let ops = harch_engine::ops::registry_text();
    let fragments = vec![
        ("spec".to_string(), input.spec_text.len()),
        ("op registry".to_string(), ops.len()),
        ("tensor ranges".to_string(), truth.tensors.len()),
        (
            "work orders".to_string(),
            input.work_orders.iter().map(|w| w.to_string().len()).sum(),
        ),
    ];
    #[derive(Serialize)]
    struct Verdicts {
        recorded: String,
        rows: Tally,
        defects: Tally,
    }
    #[derive(Serialize)]
    struct Ctx<'a> {
        model_id: &'a str,
        spec_path: &'a str,
        spec_text: &'a str,
        work_orders: &'a [WorkOrder],
        verdicts: Option<Verdicts>,
        errors: Option<&'a PriorErrors>,
        ops: String,
        truth: crate::TruthText,
        grammar: Grammar,
        staged: Vec<Staged>,
        notes: Option<&'a str>,
    }
    render(
        "fix",
        Ctx {
            model_id: input.model_id,
            spec_path: input.spec_path,
            spec_text: input.spec_text,
            work_orders: input.work_orders,
            verdicts: input.review.map(|c| Verdicts {
                recorded: c.recorded.to_string(),
                rows: c.rows,
                defects: c.defect_tally,
            }),
            errors: input.errors,
            ops,
            truth,
            grammar: grammar(),
            staged: staged(input.truth),
            notes: input.notes,
        },
        fragments,
    )
}
