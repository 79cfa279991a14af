//! What the review stage concluded, read defensively from the job record: the review and fix
//! stages are built separately, so every field is optional and a job without a review reads as
//! "not reviewed" (which makes the pull request a draft).
//!
//! Read from the record's `review` stage `summary` (the last round): `verdict` (`PASS` |
//! `NO_PASS`), `reasons` (strings), `mapping` (or `rows`): `{step, node, status, verdict}` with
//! `verdict` the checker's `verified` | `unverified` | `contradicted` (also read from
//! `evidence_verdict` or `checked`), and `defects`: `{title, where, verdict}`.

use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::queue::record::{JobRecord, StageState};

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
        let status = match text(v, &["verdict"]).map(|t| t.to_ascii_uppercase()) {
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
                verdict: text(r, &["verdict", "evidence_verdict", "checked"])
                    .unwrap_or_else(|| "unchecked".into()),
            })
            .collect();
        let defects = list(v, &["defects"])
            .iter()
            .map(|d| DefectRow {
                title: text(d, &["title"]).unwrap_or_default(),
                place: text(d, &["where"]),
                verdict: text(d, &["verdict", "evidence_verdict", "checked"])
                    .unwrap_or_else(|| "unchecked".into()),
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
        for odd in [json!(null), json!("PASS"), json!({"verdict": 3})] {
            assert_eq!(
                ReviewRecord::from_summary(&odd).status,
                ReviewStatus::NotReviewed
            );
        }
    }
}
