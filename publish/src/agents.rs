//! What the agents spent on this spec, read from the job record: per agent stage (generate,
//! review, fix) the backend, model, attempts, turns, tokens and cost. The stages record their
//! runs as they go ([`AgentRuns`]); the model is the one the job asked for.

use serde::{Deserialize, Serialize};

use harch_jobs::record::JobRecord;
use harch_jobs::stage::Stage;
use harch_jobs::summary::AgentRuns;

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct AgentStage {
    pub stage: Stage,
    pub backend: Option<String>,
    pub model: Option<String>,
    pub attempts: u64,
    pub turns: u64,
    pub input_tokens: u64,
    pub output_tokens: u64,
    pub cost_usd: f64,
    pub wall_ms: u64,
}

/// One entry per agent stage the job ran (with or without usage).
pub fn from_job(job: &JobRecord) -> Vec<AgentStage> {
    Stage::AGENT
        .into_iter()
        .filter_map(|stage| job.stage(stage))
        .map(|s| {
            let runs = s.summary_as::<AgentRuns>();
            AgentStage {
                stage: s.stage,
                backend: runs
                    .as_ref()
                    .map(|r| r.backend.clone())
                    .filter(|b| !b.is_empty()),
                // The model the job asked the backend for; None: the backend's own default.
                model: runs
                    .as_ref()
                    .and(job.request.agent_model.clone())
                    .filter(|m| !m.is_empty()),
                attempts: runs.as_ref().map_or(0, |r| r.attempts.len() as u64),
                turns: s.usage.turns,
                input_tokens: s.usage.input_tokens,
                output_tokens: s.usage.output_tokens,
                cost_usd: s.usage.cost_usd,
                wall_ms: runs.as_ref().map_or(0, AgentRuns::wall_ms),
            }
        })
        // A stage that ran no agent (or recorded nothing about it) is not an agent's work.
        .filter(|a| a.backend.is_some() || a.turns > 0 || a.input_tokens > 0 || a.cost_usd > 0.0)
        .collect()
}

/// The `Co-authored-by:` trailers for the agents that wrote or changed the spec: one per
/// backend, at an address in the reserved `.invalid` domain so that GitHub never attributes the
/// work to a real account.
pub fn co_author_trailers(stages: &[AgentStage]) -> Vec<String> {
    let mut seen = Vec::new();
    for s in stages {
        if s.stage == Stage::Review {
            continue; // a reviewer reads the spec; it does not author it
        }
        let Some(b) = &s.backend else { continue };
        let name = match &s.model {
            Some(m) => format!("{} agent ({})", trailer_safe(b), trailer_safe(m)),
            None => format!("{} agent", trailer_safe(b)),
        };
        let line = format!(
            "Co-authored-by: {name} <{}@agents.harch.invalid>",
            trailer_safe(b).replace(' ', "-")
        );
        if !seen.contains(&line) {
            seen.push(line);
        }
    }
    seen
}

/// No newlines or angle brackets: a trailer is one line with one address.
fn trailer_safe(s: &str) -> String {
    s.chars()
        .map(|c| {
            if c.is_control() || c == '<' || c == '>' {
                ' '
            } else {
                c
            }
        })
        .collect::<String>()
        .split_whitespace()
        .collect::<Vec<_>>()
        .join(" ")
}

#[cfg(test)]
mod tests {
    use super::*;
    use harch_jobs::record::{JobKind, JobRequest, StageState};
    use serde_json::json;

    #[test]
    fn usage_and_co_authors_come_from_the_agent_stages() {
        let mut job = JobRecord::new(
            "j".into(),
            JobRequest {
                model_id: "o/m".into(),
                revision: "main".into(),
                kind: JobKind::Generate,
                agent: "claude".into(),
                guards: "all".into(),
                stages: vec![Stage::Fetch, Stage::Generate, Stage::Review],
                priority: 0,
                offline: true,
                exclude_library_spec: false,
                agent_model: Some("opus\n<x>".into()),
                ablation: None,
            },
            0,
        );
        let g = &mut job.stages[1];
        g.state = StageState::Done;
        g.attempts = 1;
        g.usage.turns = 5;
        g.usage.cost_usd = 0.5;
        g.summary = json!({"backend": "claude", "attempts": [{"wall_ms": 10}, {"wall_ms": 5}]});
        let r = &mut job.stages[2];
        r.attempts = 1;
        r.summary = json!({"backend": "codex"});
        let stages = from_job(&job);
        assert_eq!(stages.len(), 2);
        assert_eq!(stages[0].attempts, 2);
        assert_eq!(stages[0].wall_ms, 15);
        assert_eq!(stages[0].turns, 5);
        assert_eq!(
            co_author_trailers(&stages),
            ["Co-authored-by: claude agent (opus x) <claude@agents.harch.invalid>"]
        );
    }
}
