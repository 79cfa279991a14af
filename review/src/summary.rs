//! What a job record keeps of a checked review: the review stage writes it into its summary (beside
//! the agent loop's own fields), `status` shows it, and publishing reads it back. One type for
//! writer and readers, so the record has one shape and no reader guesses at keys.

use serde::{Deserialize, Serialize};

use crate::{Checked, Decision, Tally};

/// The review stage's verdict fields: the worker's decision and counts, and the whole checked
/// review under `checked`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ReviewSummary {
    /// The verdict the worker records.
    pub recorded: Decision,
    /// The agent's own verdict (never acted on).
    pub said: Decision,
    pub reasons: Vec<String>,
    pub rows: Tally,
    pub defect_counts: Tally,
    pub claims: usize,
    pub claims_holding: usize,
    /// 0 for the review stage's own round, k for Agent Fix's k-th re-review.
    pub review_round: u32,
    pub checked: Checked,
}

impl ReviewSummary {
    pub fn of(c: &Checked, round: u32) -> ReviewSummary {
        ReviewSummary {
            recorded: c.recorded,
            said: c.said,
            reasons: c.reasons.clone(),
            rows: c.rows,
            defect_counts: c.defect_tally,
            claims: c.claims,
            claims_holding: c.claims_holding,
            review_round: round,
            checked: c.clone(),
        }
    }
}

/// One line of the review summary's `history`: each round's verdict and counts.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ReviewRound {
    pub round: u32,
    pub recorded: Decision,
    pub rows: Tally,
    pub defects: Tally,
}

impl ReviewRound {
    pub fn of(c: &Checked, round: u32) -> ReviewRound {
        ReviewRound {
            round,
            recorded: c.recorded,
            rows: c.rows,
            defects: c.defect_tally,
        }
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;
    use crate::{CheckedRow, Judgement, RowView, Standing, Status};

    /// The record's shape is the one job records already hold: the review stage wrote these keys
    /// with a `json!` literal before the type existed, and old records must stay readable.
    #[test]
    fn the_summary_serializes_as_records_already_hold_it() {
        let c = Checked {
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
            rows: Tally {
                verified: 0,
                unverified: 1,
                contradicted: 0,
            },
            defect_tally: Tally::default(),
            claims: 4,
            claims_holding: 3,
        };
        let old = json!({
            "recorded": c.recorded,
            "said": c.said,
            "reasons": c.reasons,
            "rows": c.rows,
            "defect_counts": c.defect_tally,
            "claims": c.claims,
            "claims_holding": c.claims_holding,
            "review_round": 2,
            "checked": c,
        });
        let new = serde_json::to_value(ReviewSummary::of(&c, 2)).unwrap();
        assert_eq!(new, old);
        assert_eq!(
            serde_json::from_value::<ReviewSummary>(old).unwrap(),
            ReviewSummary::of(&c, 2)
        );
        let round =
            json!({"round": 2, "recorded": c.recorded, "rows": c.rows, "defects": c.defect_tally});
        assert_eq!(serde_json::to_value(ReviewRound::of(&c, 2)).unwrap(), round);
    }
}
