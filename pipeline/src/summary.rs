//! Each stage's summary in the job record, as a type (see [`harch_jobs::summary`] for why the
//! record keeps the JSON). Each type serializes to exactly the JSON the stage wrote before the
//! types existed, so old records read as these types and write back unchanged.
//!
//! Agent stages write their summary in parts: the loop mirrors its runs ([`AgentRuns`]) and the
//! task's fields after every run; the stage adds its result when it ends (a review's verdict,
//! the fix rounds). The parts are merged into one JSON object, and each type reads the whole.
//! The probe stages record no summary.

use serde::{Deserialize, Deserializer, Serialize};

use harch_jobs::stage::Stage;
pub use harch_jobs::summary::{AgentRuns, AgentTaskFields, StageSummary};
use harch_review::{Decision, ReviewRound, ReviewSummary, Tally};

use crate::ablation::decontaminate::Removed;

/// `fetch`: where the truth came from and what it holds.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct FetchSummary {
    /// `hub`, `cache` or `snapshot`.
    pub origin: String,
    /// Commit sha (None for a snapshot without one).
    pub revision: Option<String>,
    pub shards: usize,
    pub tensors: usize,
    pub total_bytes: u64,
    pub requests: u64,
    pub retries: u64,
    pub warnings: Vec<String>,
    pub timings: harch_hub::Timings,
}

impl StageSummary for FetchSummary {
    const STAGE: Stage = Stage::Fetch;
}

impl FetchSummary {
    pub fn of(r: &harch_hub::FetchReport) -> FetchSummary {
        FetchSummary {
            origin: r.origin.clone(),
            revision: r.revision.clone(),
            shards: r.shards,
            tensors: r.tensors,
            total_bytes: r.total_bytes,
            requests: r.requests,
            retries: r.retries,
            warnings: r.warnings.clone(),
            timings: r.timings.clone(),
        }
    }

    /// `hub@<sha>`, or the origin alone for a snapshot or an unknown revision.
    pub fn truth_line(&self) -> String {
        match &self.revision {
            Some(rev) if self.origin != "snapshot" => format!("{}@{rev}", self.origin),
            _ => self.origin.clone(),
        }
    }
}

/// `verify`: the worker's own validation of the job's spec.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct VerifySummary {
    pub valid: bool,
    pub errors: u64,
    pub warnings: u64,
    /// The spec's total weight bytes minus the checkpoint's, when the report carries it.
    pub bytes_diff: Option<i64>,
    /// The model spec checked.
    pub spec: String,
    /// A valid spec's declared gap, as one line.
    pub declared_gap: Option<String>,
    /// The guards that ran.
    pub guards: Option<Vec<String>>,
    pub matched_tensors: Option<u64>,
    pub checkpoint_tensors: Option<u64>,
}

impl StageSummary for VerifySummary {
    const STAGE: Stage = Stage::Verify;
}

/// What generate records of its task besides its runs.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct GenerateFields {
    pub agent: String,
    /// The accepted spec in the job dir (`generate/spec/models/<file>`).
    pub spec: String,
    /// The spec's path in the agent's workspace.
    pub workspace_spec: String,
    /// The library spec hidden from the agent, when the job asked for that.
    pub excluded_library_spec: Option<String>,
    /// What an ablation run's decontamination left out of the workspace.
    pub decontamination: Option<Vec<Removed>>,
}

/// `generate`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct GenerateSummary {
    #[serde(flatten)]
    pub runs: AgentRuns,
    #[serde(flatten)]
    pub task: GenerateFields,
}

impl StageSummary for GenerateSummary {
    const STAGE: Stage = Stage::Generate;
}

/// The verdict fields the review stage records after each review (its own and every fix
/// round's re-review): the last verdict, and every round's counts under `history`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ReviewVerdict {
    #[serde(flatten)]
    pub last: ReviewSummary,
    pub history: Vec<ReviewRound>,
}

/// `review`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ReviewStageSummary {
    #[serde(flatten)]
    pub runs: AgentRuns,
    #[serde(flatten)]
    pub task: AgentTaskFields,
    /// None while the first review is still running.
    #[serde(flatten)]
    pub verdict: Option<ReviewVerdict>,
}

impl StageSummary for ReviewStageSummary {
    const STAGE: Stage = Stage::Review;
}

/// The review history alone: what a later round reads to add its own line.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct ReviewHistory {
    #[serde(default)]
    pub history: Vec<ReviewRound>,
}

/// One fix round: its work orders, whether a fix was made, and the re-review's verdict.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct FixRound {
    pub round: u32,
    pub work_orders: usize,
    pub actionable: usize,
    pub fixed: bool,
    pub recorded: Decision,
    pub rows: Tally,
    pub defects: Tally,
}

/// `fix`. A PASS review needs no fix: then only `needed`, `recorded` and (empty) `rounds`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct FixSummary {
    /// The last fix loop's runs, when a fix agent ran.
    #[serde(flatten)]
    pub runs: Option<AgentRuns>,
    #[serde(flatten)]
    pub task: Option<AgentTaskFields>,
    pub needed: bool,
    /// Present once fixing was needed: the round whose fix was accepted last (null: none was).
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        deserialize_with = "present"
    )]
    pub fixed_in_round: Option<Option<u32>>,
    /// The verdict after the last round.
    pub recorded: Decision,
    pub rounds: Vec<FixRound>,
}

impl StageSummary for FixSummary {
    const STAGE: Stage = Stage::Fix;
}

impl FixSummary {
    /// The round whose fix was accepted last, if any.
    pub fn fixed_in(&self) -> Option<u32> {
        self.fixed_in_round.flatten()
    }
}

/// A key that is present, with a value or null (`Some(None)` for null); absent is `None`.
fn present<'de, D: Deserializer<'de>, T: Deserialize<'de>>(
    d: D,
) -> Result<Option<Option<T>>, D::Error> {
    Option::<T>::deserialize(d).map(Some)
}

#[cfg(test)]
mod tests {
    use serde::de::DeserializeOwned;
    use serde_json::{Value, json};

    use super::*;

    /// Reads `old` (a summary as an earlier version recorded it) as `T` and writes it back.
    fn round_trip<T: DeserializeOwned + Serialize>(old: Value) -> T {
        let typed: T = serde_json::from_value(old.clone()).unwrap();
        assert_eq!(serde_json::to_value(&typed).unwrap(), old);
        typed
    }

    fn attempt(stage: &str, n: u32, wall_ms: u64) -> Value {
        json!({
            "n": n, "label": format!("{stage}-{n}"), "round": 0, "phase": "checked",
            "started_ms": 1, "backend": "claude", "exit_code": 0, "claimed_success": true,
            "turns": 3, "input_tokens": 100, "output_tokens": 10, "cached_input_tokens": 0,
            "cost_usd": 0.5, "wall_ms": wall_ms, "failure": null, "failure_message": null,
            "written": true, "rejected": null, "valid": true, "errors": 0, "error_codes": [],
            "prompt_bytes": 2000, "prompt_est_tokens": 600, "counted": true,
            "dir": format!("attempts/{stage}/{n}")
        })
    }

    fn tally(verified: usize) -> Value {
        serde_json::to_value(Tally {
            verified,
            ..Tally::default()
        })
        .unwrap()
    }

    #[test]
    fn fetch() {
        let s: FetchSummary = round_trip(json!({
            "origin": "hub", "revision": "0123abcd", "shards": 4, "tensors": 399,
            "total_bytes": 16_060_522_496u64, "requests": 9, "retries": 1,
            "warnings": ["no forward source"],
            "timings": {"resolve_ms": 1.5, "index_ms": 20.25, "headers_ms": 300.0, "local_ms": 4.0}
        }));
        assert_eq!(s.truth_line(), "hub@0123abcd");
        let s: FetchSummary = round_trip(json!({
            "origin": "snapshot", "revision": null, "shards": 1, "tensors": 10,
            "total_bytes": 100, "requests": 0, "retries": 0, "warnings": [],
            "timings": {"resolve_ms": 0.0, "index_ms": 0.0, "headers_ms": 0.0, "local_ms": 0.5}
        }));
        assert_eq!(s.truth_line(), "snapshot");
    }

    #[test]
    fn verify() {
        let s: VerifySummary = round_trip(json!({
            "valid": true, "errors": 0, "warnings": 2, "bytes_diff": -4096,
            "spec": "specs/models/llama.yaml", "declared_gap": null,
            "guards": ["schema", "weight"], "matched_tensors": 291, "checkpoint_tensors": 291
        }));
        assert_eq!(s.bytes_diff, Some(-4096));
        // A report that stopped early has no byte difference, guards or tensor counts.
        round_trip::<VerifySummary>(json!({
            "valid": false, "errors": 3, "warnings": 0, "bytes_diff": null, "spec": "llama",
            "declared_gap": "gap: rotary scaling", "guards": null, "matched_tensors": null,
            "checkpoint_tensors": null
        }));
    }

    #[test]
    fn generate() {
        let s: GenerateSummary = round_trip(json!({
            "backend": "claude", "round": 0, "valid": true,
            "attempts": [attempt("generate", 1, 40), attempt("generate", 2, 60)],
            "agent": "claude", "spec": "generate/spec/models/llama.yaml",
            "workspace_spec": "specs/models/llama.yaml", "excluded_library_spec": null,
            "decontamination": [{"path": "specs/models/llama.yaml", "why": "the target"}]
        }));
        assert_eq!(s.runs.wall_ms(), 100);
        round_trip::<GenerateSummary>(json!({
            "backend": "codex", "round": 1, "valid": false, "attempts": [],
            "agent": "codex", "spec": "generate/spec/models/m.yaml",
            "workspace_spec": "specs/models/m.yaml",
            "excluded_library_spec": "specs/models/m.yaml", "decontamination": null
        }));
    }

    /// The verdict fields of a checked review, as the review stage records them.
    fn verdict(round: u32) -> Value {
        let checked = harch_review::Checked {
            file: "review.yaml".into(),
            said: Decision::Pass,
            recorded: Decision::NoPass,
            reasons: vec!["row 2 is unverified".into()],
            mapping: vec![],
            defects: vec![],
            rows: Tally {
                verified: 1,
                ..Tally::default()
            },
            defect_tally: Tally::default(),
            claims: 4,
            claims_holding: 3,
        };
        serde_json::to_value(ReviewSummary::of(&checked, round)).unwrap()
    }

    #[test]
    fn review() {
        let mut old = json!({
            "backend": "claude", "round": 0, "valid": true,
            "attempts": [attempt("review", 1, 5)],
            "agent": "claude", "spec": "specs/models/llama.yaml",
            "history": [
                {"round": 0, "recorded": "NO_PASS", "rows": tally(1), "defects": tally(0)},
                {"round": 1, "recorded": "PASS", "rows": tally(2), "defects": tally(0)}
            ]
        });
        let Value::Object(v) = verdict(1) else {
            unreachable!()
        };
        old.as_object_mut().unwrap().extend(v);
        let s: ReviewStageSummary = round_trip(old);
        let v = s.verdict.unwrap();
        assert_eq!((v.last.review_round, v.history.len()), (1, 2));
        // While the first review runs, only its runs are recorded.
        let running: ReviewStageSummary = round_trip(json!({
            "backend": "claude", "round": 0, "valid": false, "attempts": [],
            "agent": "claude", "spec": "specs/models/llama.yaml"
        }));
        assert!(running.verdict.is_none());
    }

    #[test]
    fn fix() {
        let not_needed: FixSummary =
            round_trip(json!({"needed": false, "recorded": "PASS", "rounds": []}));
        assert!(not_needed.runs.is_none() && not_needed.fixed_in_round.is_none());
        let round = json!({"round": 1, "work_orders": 3, "actionable": 2, "fixed": true,
            "recorded": "PASS", "rows": tally(5), "defects": tally(0)});
        let fixed: FixSummary = round_trip(json!({
            "backend": "claude", "round": 0, "valid": true,
            "attempts": [attempt("fix", 1, 7)],
            "agent": "claude", "spec": "specs/models/llama.yaml",
            "needed": true, "fixed_in_round": 1, "recorded": "PASS", "rounds": [round]
        }));
        assert_eq!(fixed.fixed_in(), Some(1));
        // Rounds that needed no fix agent: no runs, and no round's fix accepted.
        let unfixed: FixSummary = round_trip(json!({
            "needed": true, "fixed_in_round": null, "recorded": "NO_PASS", "rounds": []
        }));
        assert_eq!(unfixed.fixed_in_round, Some(None));
    }
}
