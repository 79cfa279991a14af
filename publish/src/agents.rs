//! What the agents spent on this spec, read from the job record: per agent stage (generate,
//! review, fix) the backend, model, attempts, turns, tokens and cost. The stages record these
//! as they run; every field is optional here because the stages evolve separately.

use serde::{Deserialize, Serialize};
use serde_json::Value;

use harch_jobs::record::JobRecord;

/// The stages that run agents, in pipeline order.
pub const AGENT_STAGES: [&str; 3] = ["generate", "review", "fix"];

#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct AgentStage {
    pub stage: String,
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
    AGENT_STAGES
        .iter()
        .filter_map(|name| job.stage(name))
        .map(|s| {
            let sum = &s.summary;
            let attempts = sum.get("attempts").and_then(Value::as_array);
            let from_attempts = |key: &str| -> Option<String> {
                attempts?
                    .iter()
                    .rev()
                    .find_map(|a| a.get(key).and_then(Value::as_str).map(str::to_string))
            };
            let wall_ms = attempts
                .map(|a| {
                    a.iter()
                        .filter_map(|x| x.get("wall_ms").and_then(Value::as_u64))
                        .sum()
                })
                .unwrap_or(0);
            AgentStage {
                stage: s.name.clone(),
                backend: str_field(sum, "backend").or_else(|| from_attempts("backend")),
                model: str_field(sum, "model").or_else(|| from_attempts("model")),
                attempts: attempts.map_or(0, |a| a.len() as u64),
                turns: s.usage.turns,
                input_tokens: s.usage.input_tokens,
                output_tokens: s.usage.output_tokens,
                cost_usd: s.usage.cost_usd,
                wall_ms,
            }
        })
        // A stage that ran no agent (or recorded nothing about it) is not an agent's work.
        .filter(|a| a.backend.is_some() || a.turns > 0 || a.input_tokens > 0 || a.cost_usd > 0.0)
        .collect()
}

fn str_field(v: &Value, key: &str) -> Option<String> {
    v.get(key)
        .and_then(Value::as_str)
        .filter(|s| !s.is_empty())
        .map(str::to_string)
}

/// The `Co-authored-by:` trailers for the agents that wrote or changed the spec: one per
/// backend, at an address in the reserved `.invalid` domain so that GitHub never attributes the
/// work to a real account.
pub fn co_author_trailers(stages: &[AgentStage]) -> Vec<String> {
    let mut seen = Vec::new();
    for s in stages {
        if s.stage == "review" {
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
                stages: vec!["fetch".into(), "generate".into(), "review".into()],
                priority: 0,
                offline: true,
                exclude_library_spec: false,
                agent_model: None,
                ablation: None,
            },
            0,
        );
        let g = &mut job.stages[1];
        g.state = StageState::Done;
        g.attempts = 1;
        g.usage.turns = 5;
        g.usage.cost_usd = 0.5;
        g.summary = json!({"backend": "claude", "attempts": [{"wall_ms": 10}, {"wall_ms": 5, "model": "opus\n<x>"}]});
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
