//! The checker: every claim against the facts, every conclusion sorted into verified,
//! unverified or contradicted, and the decision the worker records.
//!
//! - **verified**: it cites evidence, all of it holds, and every number in its text (a row's
//!   step; a defect's title and fix) is stated by a claim that holds;
//! - **unverified**: nothing it cites is false, but it cites nothing, or its text has numbers
//!   no holding claim states;
//! - **contradicted**: some claim is false; the check says which and what the facts are.
//!
//! PASS is recorded only when the agent said PASS, the mapping has rows, every row is verified
//! and consistent, and the defect list is empty. Anything else is NO_PASS, with reasons.

use std::fmt;

use serde::{Deserialize, Serialize};

use crate::facts::Facts;
use crate::numbers::{Num, numbers_in};
use crate::report::{Decision, Defect, Evidence, Report, Row, Status};

#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Standing {
    Verified,
    Unverified,
    Contradicted,
}

impl fmt::Display for Standing {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.pad(match self {
            Standing::Verified => "verified",
            Standing::Unverified => "unverified",
            Standing::Contradicted => "contradicted",
        })
    }
}

/// One evidence line and whether it holds.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct CheckedClaim {
    pub text: String,
    pub line: u32,
    pub holds: bool,
    /// What the facts say, when the claim does not hold.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub truth: Option<String>,
}

/// A conclusion's standing and why.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Judgement {
    pub standing: Standing,
    /// Why it is not verified (empty when it is).
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub why: String,
    pub claims: Vec<CheckedClaim>,
    /// Numbers in its text that no holding claim states.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub unbacked: Vec<String>,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct CheckedRow {
    #[serde(flatten)]
    pub row: RowView,
    #[serde(flatten)]
    pub judgement: Judgement,
}

/// A row as the checker reports it (its evidence appears as checked claims).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct RowView {
    pub step: String,
    pub node: Option<String>,
    pub status: Status,
    pub line: u32,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct DefectView {
    pub title: String,
    #[serde(rename = "where")]
    pub where_: String,
    pub fix: String,
    pub line: u32,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct CheckedDefect {
    #[serde(flatten)]
    pub defect: DefectView,
    #[serde(flatten)]
    pub judgement: Judgement,
}

/// How many conclusions landed where.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Tally {
    pub verified: usize,
    pub unverified: usize,
    pub contradicted: usize,
}

impl Tally {
    fn add(&mut self, s: Standing) {
        match s {
            Standing::Verified => self.verified += 1,
            Standing::Unverified => self.unverified += 1,
            Standing::Contradicted => self.contradicted += 1,
        }
    }
}

/// A checked review: what the agent said, what is recorded and why, and every conclusion with
/// every claim.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Checked {
    pub file: String,
    /// The agent's verdict.
    pub said: Decision,
    /// The verdict the worker records.
    pub recorded: Decision,
    /// Why the recorded verdict is NO_PASS (empty for PASS).
    pub reasons: Vec<String>,
    pub mapping: Vec<CheckedRow>,
    pub defects: Vec<CheckedDefect>,
    pub rows: Tally,
    pub defect_tally: Tally,
    /// Claims checked, and how many of them hold.
    pub claims: usize,
    pub claims_holding: usize,
}

impl Checked {
    pub fn passed(&self) -> bool {
        self.recorded == Decision::Pass
    }
}

/// Checks a well-formed report against the facts.
pub fn check(report: &Report, facts: &Facts<'_>) -> Checked {
    let mut claims = 0;
    let mut claims_holding = 0;
    let mut judge = |evidence: &[Evidence], texts: &[&str]| {
        let j = judge(evidence, texts, facts);
        claims += j.claims.len();
        claims_holding += j.claims.iter().filter(|c| c.holds).count();
        j
    };
    let mapping: Vec<CheckedRow> = report
        .mapping
        .iter()
        .map(|r: &Row| CheckedRow {
            judgement: judge(&r.evidence, &[&r.step]),
            row: RowView {
                step: r.step.clone(),
                node: r.node.clone(),
                status: r.status,
                line: r.line,
            },
        })
        .collect();
    let defects: Vec<CheckedDefect> = report
        .defects
        .iter()
        .map(|d: &Defect| CheckedDefect {
            judgement: judge(&d.evidence, &[&d.title, &d.fix]),
            defect: DefectView {
                title: d.title.clone(),
                where_: d.where_.clone(),
                fix: d.fix.clone(),
                line: d.line,
            },
        })
        .collect();
    let mut rows = Tally::default();
    mapping.iter().for_each(|r| rows.add(r.judgement.standing));
    let mut defect_tally = Tally::default();
    defects
        .iter()
        .for_each(|d| defect_tally.add(d.judgement.standing));

    let mut reasons = Vec::new();
    if report.verdict == Decision::NoPass {
        reasons.push("the review says NO_PASS".to_string());
    }
    if mapping.is_empty() {
        reasons.push("the mapping has no rows".to_string());
    }
    for (i, r) in mapping.iter().enumerate() {
        let what = format!(
            "mapping row {} (line {}, `{}`)",
            i + 1,
            r.row.line,
            crate::claim::clip(&r.row.step, 60)
        );
        if r.judgement.standing != Standing::Verified {
            reasons.push(format!(
                "{what} is {}: {}",
                r.judgement.standing, r.judgement.why
            ));
        }
        if r.row.status != Status::Consistent {
            reasons.push(format!("{what} is {}", r.row.status));
        }
    }
    if !defects.is_empty() {
        reasons.push(format!(
            "{} remain ({} verified, {} unverified, {} contradicted)",
            match defects.len() {
                1 => "1 defect".to_string(),
                n => format!("{n} defects"),
            },
            defect_tally.verified,
            defect_tally.unverified,
            defect_tally.contradicted
        ));
    }
    let recorded = if reasons.is_empty() {
        Decision::Pass
    } else {
        Decision::NoPass
    };
    Checked {
        file: report.file.clone(),
        said: report.verdict,
        recorded,
        reasons,
        mapping,
        defects,
        rows,
        defect_tally,
        claims,
        claims_holding,
    }
}

fn judge(evidence: &[Evidence], texts: &[&str], facts: &Facts<'_>) -> Judgement {
    let mut backed: Vec<Num> = Vec::new();
    let mut claims = Vec::new();
    for e in evidence {
        let c = facts.check(&e.claim);
        if c.holds {
            backed.extend(e.claim.numbers());
        }
        claims.push(CheckedClaim {
            text: e.text.clone(),
            line: e.line,
            holds: c.holds,
            truth: c.truth,
        });
    }
    let mut unbacked: Vec<String> = Vec::new();
    for t in texts {
        for n in numbers_in(t) {
            let s = n.to_string();
            if !backed.contains(&n) && !unbacked.contains(&s) {
                unbacked.push(s);
            }
        }
    }
    let false_claims: Vec<&CheckedClaim> = claims.iter().filter(|c| !c.holds).collect();
    let (standing, why) = if !false_claims.is_empty() {
        let shown: Vec<String> = false_claims
            .iter()
            .map(|c| {
                format!(
                    "`{}` does not hold: {}",
                    crate::claim::clip(&c.text, 120),
                    c.truth.as_deref().unwrap_or("")
                )
            })
            .collect();
        (Standing::Contradicted, shown.join("; "))
    } else if claims.is_empty() {
        (Standing::Unverified, "it cites no evidence".to_string())
    } else if !unbacked.is_empty() {
        (
            Standing::Unverified,
            format!(
                "no holding claim states {}",
                unbacked
                    .iter()
                    .map(|n| format!("`{n}`"))
                    .collect::<Vec<_>>()
                    .join(", ")
            ),
        )
    } else {
        (Standing::Verified, String::new())
    };
    Judgement {
        standing,
        why,
        claims,
        unbacked,
    }
}
