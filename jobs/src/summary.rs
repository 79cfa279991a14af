//! Stage summaries as types. A job record keeps each stage's summary as the JSON the stage wrote
//! ([`StageRecord::summary`]): the record sits below the crates that own some summaries' parts
//! (the review's verdict is `harch_review`'s), and a record must load whichever version wrote
//! it. Every stage's summary has a type that serializes to exactly that JSON; readers go
//! through the type ([`StageRecord::summary_as`], [`JobRecord::summary`]), never through keys.
//!
//! The part every agent stage shares, its runs ([`AgentRuns`]), is here because publish reads
//! it; the stages' own summaries are defined where the stages are (`harch_pipeline::summary`).

use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};

use crate::attempt::Attempt;
use crate::record::{JobRecord, StageRecord};
use crate::stage::Stage;

/// A stage's summary type.
pub trait StageSummary: Serialize + DeserializeOwned {
    /// The stage whose record holds this summary.
    const STAGE: Stage;
}

impl StageRecord {
    /// The summary read as `T`; None when the stage recorded none or one of another shape (a
    /// stage that has not finished, a record from a version that wrote other fields).
    pub fn summary_as<T: DeserializeOwned>(&self) -> Option<T> {
        if self.summary.is_null() {
            return None;
        }
        T::deserialize(&self.summary).ok()
    }
}

impl JobRecord {
    /// The summary of `T`'s stage, when the job has that stage and it recorded one.
    pub fn summary<T: StageSummary>(&self) -> Option<T> {
        self.stage(T::STAGE)?.summary_as()
    }
}

/// What an agent stage's loop records as it goes (mirrored into the job record after every
/// run): the backend, the operator round, whether the last run's result was accepted, and
/// every run.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct AgentRuns {
    pub backend: String,
    /// Operator retries before the runs of this round.
    #[serde(default)]
    pub round: u32,
    /// The last run's result passed the worker's check.
    #[serde(default)]
    pub valid: bool,
    #[serde(default)]
    pub attempts: Vec<Attempt>,
}

impl AgentRuns {
    /// Wall time of all runs.
    pub fn wall_ms(&self) -> u64 {
        self.attempts.iter().map(|a| a.wall_ms).sum()
    }
}

/// Which agent and which spec an agent stage worked on (generate adds its workspace's own
/// fields; review and fix record these).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct AgentTaskFields {
    pub agent: String,
    /// The spec's path (in the agent's workspace, or the job's stage dir for generate).
    pub spec: String,
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn agent_runs_read_and_write_the_recorded_json() {
        let old = json!({
            "backend": "claude",
            "round": 1,
            "valid": true,
            "attempts": [{
                "n": 3, "label": "generate-3", "round": 1, "phase": "checked",
                "started_ms": 5, "backend": "claude", "exit_code": 0, "claimed_success": true,
                "turns": 4, "input_tokens": 10, "output_tokens": 2, "cached_input_tokens": 0,
                "cost_usd": 0.25, "wall_ms": 900, "failure": null, "failure_message": null,
                "written": true, "rejected": null, "valid": true, "errors": 0,
                "error_codes": [], "prompt_bytes": 100, "prompt_est_tokens": 30,
                "counted": true, "dir": "attempts/generate/3"
            }]
        });
        let runs: AgentRuns = serde_json::from_value(old.clone()).unwrap();
        assert_eq!((runs.attempts.len(), runs.wall_ms()), (1, 900));
        assert_eq!(serde_json::to_value(&runs).unwrap(), old);
    }
}
