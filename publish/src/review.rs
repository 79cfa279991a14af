//! What the review stage concluded, read from the job record: the review stage's summary is a
//! [`ReviewSummary`] (the checker's whole result under `checked`), and a job whose review did not
//! complete, or whose summary is not one, reads as "not reviewed" (which makes the pull request a
//! draft). Only the worker's `recorded` verdict counts, never the agent's `said`.

use harch_review::{Checked, Decision, ReviewSummary};
use serde::{Deserialize, Serialize};
use serde_json::Value;

use harch_jobs::record::{JobRecord, StageState};
use harch_jobs::stage::Stage;

#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ReviewStatus {
    Pass,
    NoPass,
    NotReviewed,
}

impl ReviewStatus {
    pub fn label(self) -> &'static str {
        match self {
            ReviewStatus::Pass => "PASS",
            ReviewStatus::NoPass => "NO_PASS",
            ReviewStatus::NotReviewed => "not reviewed",
        }
    }
}

#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct MappingRow {
    pub step: String,
    pub node: Option<String>,
    /// The reviewer's claim: `consistent`, `inconsistent`, `missing`.
    pub status: String,
    /// The checker's verdict on the row's evidence.
    pub verdict: String,
}

#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct DefectRow {
    pub title: String,
    #[serde(rename = "where")]
    pub place: Option<String>,
    pub verdict: String,
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ReviewRecord {
    pub status: ReviewStatus,
    pub reasons: Vec<String>,
    pub mapping: Vec<MappingRow>,
    pub defects: Vec<DefectRow>,
}

impl ReviewRecord {
    pub fn not_reviewed() -> ReviewRecord {
        ReviewRecord {
            status: ReviewStatus::NotReviewed,
            reasons: Vec::new(),
            mapping: Vec::new(),
            defects: Vec::new(),
        }
    }

    /// Reads the review stage of `job`, if it completed.
    pub fn from_job(job: &JobRecord) -> ReviewRecord {
        match job.stage(Stage::Review) {
            Some(s) if s.state == StageState::Done => s
                .summary_as::<ReviewSummary>()
                .map_or_else(ReviewRecord::not_reviewed, |r| {
                    ReviewRecord::from_checked(&r.checked)
                }),
            _ => ReviewRecord::not_reviewed(),
        }
    }

    /// Reads a review stage's summary; anything but a [`ReviewSummary`] is "not reviewed".
    pub fn from_summary(v: &Value) -> ReviewRecord {
        match ReviewSummary::deserialize(v) {
            Ok(summary) => ReviewRecord::from_checked(&summary.checked),
            Err(_) => ReviewRecord::not_reviewed(),
        }
    }

    pub fn from_checked(c: &Checked) -> ReviewRecord {
        ReviewRecord {
            status: match c.recorded {
                Decision::Pass => ReviewStatus::Pass,
                Decision::NoPass => ReviewStatus::NoPass,
            },
            reasons: c.reasons.clone(),
            mapping: c
                .mapping
                .iter()
                .map(|r| MappingRow {
                    step: r.row.step.clone(),
                    node: r.row.node.clone(),
                    status: r.row.status.to_string(),
                    verdict: r.judgement.standing.to_string(),
                })
                .collect(),
            defects: c
                .defects
                .iter()
                .map(|d| DefectRow {
                    title: d.defect.title.clone(),
                    place: Some(d.defect.where_.clone()),
                    verdict: d.judgement.standing.to_string(),
                })
                .collect(),
        }
    }

    /// Mapping rows whose evidence the checker did not verify, or that the reviewer did not
    /// find consistent.
    pub fn open_rows(&self) -> Vec<&MappingRow> {
        self.mapping
            .iter()
            .filter(|r| r.verdict != "verified" || r.status != "consistent")
            .collect()
    }

    /// Why the pull request must be a draft; empty when it may be opened ready for review.
    pub fn draft_reasons(&self) -> Vec<String> {
        let mut out = Vec::new();
        match self.status {
            ReviewStatus::NotReviewed => out.push(
                "not reviewed: no review stage completed for this job, so no one has mapped forward() onto the spec".to_string(),
            ),
            ReviewStatus::NoPass => {
                out.push("the review verdict is NO_PASS".to_string());
                out.extend(self.reasons.iter().map(|r| format!("review: {r}")));
            }
            ReviewStatus::Pass => {}
        }
        let open = self.open_rows();
        if !open.is_empty() {
            out.push(format!(
                "{} of {} mapping rows are not verified and consistent",
                open.len(),
                self.mapping.len()
            ));
        }
        if !self.defects.is_empty() {
            out.push(format!(
                "{} defect(s) remain in the review report",
                self.defects.len()
            ));
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use harch_review::{
        CheckedDefect, CheckedRow, DefectView, Judgement, RowView, Standing, Status, Tally,
    };
    use serde_json::json;

    fn checked(recorded: Decision, rows: &[(Status, Standing)], defects: usize) -> Checked {
        let judgement = |standing| Judgement {
            standing,
            why: String::new(),
            claims: vec![],
            unbacked: vec![],
        };
        Checked {
            file: "review.yaml".into(),
            said: Decision::Pass,
            recorded,
            reasons: match recorded {
                Decision::Pass => vec![],
                Decision::NoPass => vec!["window bound to the model card".into()],
            },
            mapping: rows
                .iter()
                .enumerate()
                .map(|(i, (status, standing))| CheckedRow {
                    row: RowView {
                        step: format!("step {i}"),
                        node: None,
                        status: *status,
                        line: i as u32,
                    },
                    judgement: judgement(*standing),
                })
                .collect(),
            defects: (0..defects)
                .map(|i| CheckedDefect {
                    defect: DefectView {
                        title: "window 1024".into(),
                        where_: "x".into(),
                        fix: "y".into(),
                        line: i as u32,
                    },
                    judgement: judgement(Standing::Verified),
                })
                .collect(),
            rows: Tally::default(),
            defect_tally: Tally::default(),
            claims: 0,
            claims_holding: 0,
        }
    }

    fn summary(c: &Checked) -> Value {
        serde_json::to_value(ReviewSummary::of(c, 0)).unwrap()
    }

    #[test]
    fn a_pass_with_verified_rows_needs_no_draft() {
        let c = checked(
            Decision::Pass,
            &[(Status::Consistent, Standing::Verified)],
            0,
        );
        let r = ReviewRecord::from_summary(&summary(&c));
        assert_eq!(r.status, ReviewStatus::Pass);
        assert!(r.draft_reasons().is_empty(), "{:?}", r.draft_reasons());
    }

    #[test]
    fn no_pass_unverified_rows_and_other_shapes_make_a_draft() {
        let c = checked(
            Decision::NoPass,
            &[
                (Status::Consistent, Standing::Unverified),
                (Status::Missing, Standing::Verified),
                (Status::Consistent, Standing::Contradicted),
            ],
            1,
        );
        let r = ReviewRecord::from_summary(&summary(&c));
        assert_eq!(r.status, ReviewStatus::NoPass);
        assert_eq!(r.open_rows().len(), 3);
        let reasons = r.draft_reasons().join("\n");
        assert!(reasons.contains("NO_PASS"), "{reasons}");
        assert!(reasons.contains("model card"), "{reasons}");
        assert!(reasons.contains("1 defect"), "{reasons}");
        // Not a review summary: not reviewed, whatever verdict-like keys it has.
        for odd in [
            json!(null),
            json!("PASS"),
            json!({"verdict": "PASS", "mapping": []}),
            json!({"said": "PASS"}),
            serde_json::to_value(&c).unwrap(),
        ] {
            assert_eq!(
                ReviewRecord::from_summary(&odd).status,
                ReviewStatus::NotReviewed
            );
        }
    }

    /// The checker's own result, as the review stage records it: the worker's decision counts,
    /// never the agent's.
    #[test]
    fn the_checkers_result_is_read_as_it_serializes() {
        let checked = Checked {
            file: "review.yaml".into(),
            said: Decision::Pass,
            recorded: Decision::NoPass,
            reasons: vec!["row 1 is unverified".into()],
            mapping: vec![CheckedRow {
                row: RowView {
                    step: "q/k norm".into(),
                    node: Some("layers.attention.q_norm".into()),
                    status: Status::Consistent,
                    line: 3,
                },
                judgement: Judgement {
                    standing: Standing::Unverified,
                    why: "cites nothing".into(),
                    claims: vec![],
                    unbacked: vec![],
                },
            }],
            defects: vec![],
            rows: Tally::default(),
            defect_tally: Tally::default(),
            claims: 0,
            claims_holding: 0,
        };
        let mut with_loop_fields = summary(&checked);
        with_loop_fields["agent"] = json!("claude");
        with_loop_fields["history"] = json!([]);
        for summary in [summary(&checked), with_loop_fields] {
            let r = ReviewRecord::from_summary(&summary);
            assert_eq!(r.status, ReviewStatus::NoPass);
            assert_eq!(r.reasons, ["row 1 is unverified"]);
            assert_eq!(r.mapping[0].verdict, "unverified");
            assert_eq!(r.mapping[0].status, "consistent");
            assert_eq!(
                r.mapping[0].node.as_deref(),
                Some("layers.attention.q_norm")
            );
        }
    }
}
