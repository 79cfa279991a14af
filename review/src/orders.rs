//! Work orders for Agent Fix. They come from three places only: a fresh validation's errors
//! (load errors first: a spec that does not load cannot be fixed otherwise), the review's
//! verified defects and verified inconsistent or missing mapping rows, with their fix text and
//! evidence. An unverified finding becomes a place to look (its title and where, never its
//! suggested fix); a contradicted one only says that its evidence disagrees with the facts.

use std::fmt;

use harch_guards::Diagnostic;
use serde::{Deserialize, Serialize};

use crate::check::{Checked, Standing};
use crate::report::Status;

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum WorkOrder {
    /// The spec does not load: a load error of a fresh validation.
    Load { error: String },
    /// A fresh validation's error.
    Validate { error: String },
    /// A verified defect: what, where, the fix, and the evidence that backs it.
    Defect {
        title: String,
        #[serde(rename = "where")]
        where_: String,
        fix: String,
        evidence: Vec<String>,
    },
    /// A verified mapping row that is inconsistent or missing (rows carry no fix text).
    Step {
        step: String,
        node: Option<String>,
        status: Status,
        evidence: Vec<String>,
    },
    /// An unverified finding: only what and where to look.
    Check {
        title: String,
        #[serde(rename = "where")]
        where_: String,
    },
    /// A contradicted finding: only that its evidence disagrees with the facts.
    Disputed {
        #[serde(rename = "where")]
        where_: String,
    },
}

impl WorkOrder {
    /// True for the orders the fix agent acts on (errors and verified findings).
    pub fn is_actionable(&self) -> bool {
        !matches!(self, WorkOrder::Check { .. } | WorkOrder::Disputed { .. })
    }
}

impl fmt::Display for WorkOrder {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            WorkOrder::Load { error } => write!(f, "the spec does not load: {error}"),
            WorkOrder::Validate { error } => write!(f, "validation error: {error}"),
            WorkOrder::Defect {
                title,
                where_,
                fix,
                evidence,
            } => write!(
                f,
                "verified defect at {where_}: {title}; fix: {fix} (evidence: {})",
                evidence.join("; ")
            ),
            WorkOrder::Step {
                step,
                node,
                status,
                evidence,
            } => write!(
                f,
                "verified: the step `{step}` is {status} in the spec{} (evidence: {})",
                node.as_deref()
                    .map(|n| format!(" at {n}"))
                    .unwrap_or_default(),
                evidence.join("; ")
            ),
            WorkOrder::Check { title, where_ } => write!(
                f,
                "unverified finding, check it yourself against the source: {title} (look at {where_})"
            ),
            WorkOrder::Disputed { where_ } => write!(
                f,
                "a finding about {where_} cited evidence that disagrees with the facts; do not act on it"
            ),
        }
    }
}

fn texts(claims: &[crate::check::CheckedClaim]) -> Vec<String> {
    claims.iter().map(|c| c.text.clone()).collect()
}

/// The work orders for a fix round: `errors` are a validation's errors, run now on the spec
/// as saved (load errors carry the guard `load`); `review` is the last checked review, if any.
pub fn work_orders(review: Option<&Checked>, errors: &[Diagnostic]) -> Vec<WorkOrder> {
    let mut out: Vec<WorkOrder> = Vec::new();
    for d in errors.iter().filter(|d| d.guard == "load") {
        out.push(WorkOrder::Load {
            error: d.one_line(),
        });
    }
    for d in errors.iter().filter(|d| d.guard != "load") {
        out.push(WorkOrder::Validate {
            error: d.one_line(),
        });
    }
    let Some(review) = review else {
        return out;
    };
    let mut look = Vec::new();
    for d in &review.defects {
        let j = &d.judgement;
        match j.standing {
            Standing::Verified => out.push(WorkOrder::Defect {
                title: d.defect.title.clone(),
                where_: d.defect.where_.clone(),
                fix: d.defect.fix.clone(),
                evidence: texts(&j.claims),
            }),
            Standing::Unverified => look.push(WorkOrder::Check {
                title: d.defect.title.clone(),
                where_: d.defect.where_.clone(),
            }),
            Standing::Contradicted => look.push(WorkOrder::Disputed {
                where_: d.defect.where_.clone(),
            }),
        }
    }
    // A consistent row needs no fix, however well it was argued; the others are findings.
    for r in review
        .mapping
        .iter()
        .filter(|r| r.row.status != Status::Consistent)
    {
        let where_ = r
            .row
            .node
            .clone()
            .unwrap_or_else(|| "the spec (no node computes it)".to_string());
        match r.judgement.standing {
            Standing::Verified => out.push(WorkOrder::Step {
                step: r.row.step.clone(),
                node: r.row.node.clone(),
                status: r.row.status,
                evidence: texts(&r.judgement.claims),
            }),
            Standing::Unverified => look.push(WorkOrder::Check {
                title: format!("the step `{}` is {}", r.row.step, r.row.status),
                where_,
            }),
            Standing::Contradicted => look.push(WorkOrder::Disputed { where_ }),
        }
    }
    out.extend(look);
    out
}
