//! What the review stage concluded, read defensively from the job record: the review and fix
//! stages are built separately, so every field is optional and a job without a review reads as
//! "not reviewed" (which makes the pull request a draft).
//!
//! Read from the record's `review` stage `summary` (the last round), or from its `checked`
//! object when it holds the checker's whole result (`harch_review::Checked`, as `harch-worker
//! evidence --json` prints it): the worker's `recorded` verdict (else `verdict`; the agent's own
//! `said` is never taken), `reasons`, `mapping` (or `rows`) of `{step, node, status, standing}`
//! (the checker's `verified` | `unverified` | `contradicted`, also read from `verdict` or
//! `evidence_verdict`), and `defects` of `{title, where, standing}`.

use serde::{Deserialize, Serialize};
use serde_json::Value;

use harch_jobs::record::{JobRecord, StageState};

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
        match job.stage("review") {
            Some(s) if s.state == StageState::Done => ReviewRecord::from_summary(&s.summary),
            _ => ReviewRecord::not_reviewed(),
        }
    }

    pub fn from_summary(v: &Value) -> ReviewRecord {
        let v = match v.get("checked") {
            Some(c) if c.is_object() => c,
            _ => v,
        };
        let status = match text(v, &["recorded", "verdict"]).map(|t| t.to_ascii_uppercase()) {
            Some(t) if t == "PASS" => ReviewStatus::Pass,
            Some(t) if t == "NO_PASS" || t == "NOPASS" || t == "NO-PASS" => ReviewStatus::NoPass,
            _ => ReviewStatus::NotReviewed,
        };
        let reasons = v
            .get("reasons")
            .and_then(Value::as_array)
            .map(|a| a.iter().filter_map(as_text).collect())
            .unwrap_or_default();
        let mapping = list(v, &["mapping", "rows"])
            .iter()
            .map(|r| MappingRow {
                step: text(r, &["step"]).unwrap_or_default(),
                node: text(r, &["node"]),
                status: text(r, &["status"]).unwrap_or_default(),
                verdict: text(r, VERDICT_KEYS).unwrap_or_else(|| "unchecked".into()),
            })
            .collect();
        let defects = list(v, &["defects"])
            .iter()
            .map(|d| DefectRow {
                title: text(d, &["title"]).unwrap_or_default(),
                place: text(d, &["where"]),
                verdict: text(d, VERDICT_KEYS).unwrap_or_else(|| "unchecked".into()),
            })
            .collect();
        ReviewRecord {
            status,
            reasons,
            mapping,
            defects,
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

/// Where a conclusion's evidence verdict may be.
const VERDICT_KEYS: &[&str] = &["standing", "verdict", "evidence_verdict"];

fn as_text(v: &Value) -> Option<String> {
    match v {
        Value::String(s) => Some(s.clone()),
        Value::Number(n) => Some(n.to_string()),
        Value::Bool(b) => Some(b.to_string()),
        _ => None,
    }
}

fn text(v: &Value, keys: &[&str]) -> Option<String> {
    keys.iter().find_map(|k| v.get(k).and_then(as_text))
}

fn list<'a>(v: &'a Value, keys: &[&str]) -> &'a [Value] {
    keys.iter()
        .find_map(|k| v.get(k).and_then(Value::as_array))
        .map(Vec::as_slice)
        .unwrap_or(&[])
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn a_pass_with_verified_rows_needs_no_draft() {
        let r = ReviewRecord::from_summary(&json!({
            "verdict": "PASS",
            "mapping": [{"step": "q/k norm", "node": "a.q_norm", "status": "consistent", "verdict": "verified"}],
        }));
        assert_eq!(r.status, ReviewStatus::Pass);
        assert!(r.draft_reasons().is_empty(), "{:?}", r.draft_reasons());
    }

    #[test]
    fn no_pass_unverified_rows_and_odd_shapes_make_a_draft() {
        let r = ReviewRecord::from_summary(&json!({
            "verdict": "no_pass",
            "reasons": ["window bound to the model card"],
            "rows": [
                {"step": "rope", "status": "consistent", "evidence_verdict": "unverified"},
                {"step": 7, "node": null, "status": "missing", "verdict": "verified"},
                "garbage"
            ],
            "defects": [{"title": "window 1024", "where": "x", "verdict": "verified"}],
        }));
        assert_eq!(r.status, ReviewStatus::NoPass);
        assert_eq!(r.open_rows().len(), 3);
        let reasons = r.draft_reasons().join("\n");
        assert!(reasons.contains("NO_PASS"), "{reasons}");
        assert!(reasons.contains("model card"), "{reasons}");
        assert!(reasons.contains("1 defect"), "{reasons}");
        for odd in [
            json!(null),
            json!("PASS"),
            json!({"verdict": 3}),
            json!({"said": "PASS"}),
        ] {
            assert_eq!(
                ReviewRecord::from_summary(&odd).status,
                ReviewStatus::NotReviewed
            );
        }
    }

    /// The checker's own result, as the review stage may record it: the worker's decision
    /// counts, never the agent's.
    #[test]
    fn the_checkers_result_is_read_as_it_serializes() {
        use harch_review::{
            Checked, CheckedRow, Decision, Judgement, RowView, Standing, Status, Tally,
        };
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
        let v = serde_json::to_value(&checked).unwrap();
        for summary in [v.clone(), json!({"round": 1, "checked": v})] {
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
