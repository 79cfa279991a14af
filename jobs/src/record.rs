//! A job's own record (`job.json`): what it is, where it stands, what each stage did.
//!
//! The queue store only carries deliveries; this record is the truth about a job, because the
//! Redis store cannot list jobs and no store knows about stages.

use serde::{Deserialize, Serialize};

use crate::stage::Stage;

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, clap::ValueEnum)]
#[serde(rename_all = "lowercase")]
pub enum JobKind {
    /// Write a spec for a model with an agent, verify, review, fix, publish.
    Generate,
    /// No agent: fetch the current truth and validate the library's spec against it.
    Revalidate,
}

impl JobKind {
    /// The stages a job of this kind runs when `--stages` is not given.
    pub fn default_stages(self) -> &'static [Stage] {
        match self {
            JobKind::Generate => &Stage::PIPELINE,
            JobKind::Revalidate => &[Stage::Fetch, Stage::Verify],
        }
    }

    pub fn as_str(self) -> &'static str {
        match self {
            JobKind::Generate => "generate",
            JobKind::Revalidate => "revalidate",
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum JobState {
    Pending,
    Running,
    Succeeded,
    Failed,
    Cancelled,
}

impl JobState {
    /// Final states never change again except through `retry`.
    pub fn is_final(self) -> bool {
        matches!(
            self,
            JobState::Succeeded | JobState::Failed | JobState::Cancelled
        )
    }

    pub fn as_str(self) -> &'static str {
        match self {
            JobState::Pending => "pending",
            JobState::Running => "running",
            JobState::Succeeded => "succeeded",
            JobState::Failed => "failed",
            JobState::Cancelled => "cancelled",
        }
    }

    /// The state after "job X has already …": `succeeded`, `failed`, `been cancelled`.
    pub fn past_tense(self) -> &'static str {
        match self {
            JobState::Cancelled => "been cancelled",
            s => s.as_str(),
        }
    }

    /// The state after "job X …": `is pending`, `is running`, `has succeeded`, `has failed`,
    /// `was cancelled`.
    pub fn is_phrase(self) -> &'static str {
        match self {
            JobState::Pending => "is pending",
            JobState::Running => "is running",
            JobState::Succeeded => "has succeeded",
            JobState::Failed => "has failed",
            JobState::Cancelled => "was cancelled",
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum StageState {
    Pending,
    Running,
    Done,
    Failed,
}

/// Whether a failure may go away by itself.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum FailureKind {
    Transient,
    Permanent,
}

/// Agent consumption, summed over a stage's attempts and over a job's stages.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct AgentUsage {
    pub turns: u64,
    pub input_tokens: u64,
    pub output_tokens: u64,
    pub cost_usd: f64,
}

impl AgentUsage {
    pub fn add(&mut self, other: &AgentUsage) {
        self.turns += other.turns;
        self.input_tokens += other.input_tokens;
        self.output_tokens += other.output_tokens;
        self.cost_usd += other.cost_usd;
    }
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct StageRecord {
    /// The stage as selected (`fetch`, `sleep:2000`, …).
    #[serde(rename = "name")]
    pub stage: Stage,
    pub state: StageState,
    /// Attempts so far, across deliveries.
    pub attempts: u32,
    pub started_ms: Option<u64>,
    pub finished_ms: Option<u64>,
    /// Time spent inside the stage itself, summed over attempts.
    pub work_ms: u64,
    /// Files the stage left in its directory (relative to the job dir).
    #[serde(default)]
    pub artifacts: Vec<String>,
    pub last_error: Option<String>,
    #[serde(default)]
    pub usage: AgentUsage,
    /// What the stage reports about its result (e.g. verify: valid, errors).
    #[serde(default)]
    pub summary: serde_json::Value,
}

impl StageRecord {
    pub fn new(stage: Stage) -> StageRecord {
        StageRecord {
            stage,
            state: StageState::Pending,
            attempts: 0,
            started_ms: None,
            finished_ms: None,
            work_ms: 0,
            artifacts: Vec::new(),
            last_error: None,
            usage: AgentUsage::default(),
            summary: serde_json::Value::Null,
        }
    }
}

/// What the operator asked for.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct JobRequest {
    pub model_id: String,
    pub revision: String,
    pub kind: JobKind,
    pub agent: String,
    pub guards: String,
    pub stages: Vec<Stage>,
    pub priority: u32,
    pub offline: bool,
    /// Generate without the library's own spec of this model (hidden from the agent's workspace
    /// and prompt), so a library model can be regenerated from its truth alone.
    #[serde(default)]
    pub exclude_library_spec: bool,
    /// The model the agent backend runs (`--model`); `None`: the backend's own default.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub agent_model: Option<String>,
    /// Set on the runs of an ablation (`harch-worker ablate`): generate works in a
    /// decontaminated workspace with the tier's guards and records `ablation.json`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ablation: Option<AblationRun>,
}

/// One run of an ablation: which tier (its guards) and which seed.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct AblationRun {
    /// The tier's name (`off`, `weight`, …, `all`, or `custom` for an explicit guard list).
    pub tier: String,
    /// The guards the agent's `validate` and the generate stage's check run.
    pub guards: Vec<String>,
    pub seed: u32,
}

impl JobRequest {
    /// The dedupe key: one pending or running job per model revision and kind, except that
    /// each run of an ablation (agent, agent model, tier, seed) is a job of its own.
    pub fn dedupe_key(&self) -> String {
        let key = format!(
            "{}#{}",
            super::model_id::revision_key(&self.model_id, &self.revision),
            self.kind.as_str()
        );
        match &self.ablation {
            None => key,
            Some(a) => {
                let model = self
                    .agent_model
                    .as_deref()
                    .map(|m| format!("-{}", m.replace('/', "%2F")))
                    .unwrap_or_default();
                format!("{key}~ablation-{}{model}-{}-{}", self.agent, a.tier, a.seed)
            }
        }
    }
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct JobRecord {
    pub id: String,
    pub request: JobRequest,
    pub state: JobState,
    /// Set by `cancel` on a running job; the worker stops the stage and finishes the cancel.
    #[serde(default)]
    pub cancel_requested: bool,
    pub created_ms: u64,
    pub updated_ms: u64,
    pub started_ms: Option<u64>,
    pub finished_ms: Option<u64>,
    /// Times a worker took this job from the queue (more than one after a crash or a retry).
    pub deliveries: u32,
    /// Stage attempts, all stages together.
    pub attempts: u32,
    /// Operator retries (`retry`). Each starts a new round: agent stages get a fresh attempt and
    /// cost budget.
    #[serde(default)]
    pub retries: u32,
    pub last_error: Option<String>,
    pub failure: Option<FailureKind>,
    /// The worker that holds (or last held) the job.
    pub worker: Option<String>,
    /// Queue-store task ids that carried this job (one per enqueue or retry).
    #[serde(default)]
    pub queue_tasks: Vec<String>,
    pub stages: Vec<StageRecord>,
}

impl JobRecord {
    pub fn new(id: String, request: JobRequest, now_ms: u64) -> JobRecord {
        let stages = request
            .stages
            .iter()
            .map(|s| StageRecord::new(*s))
            .collect();
        JobRecord {
            id,
            request,
            state: JobState::Pending,
            cancel_requested: false,
            created_ms: now_ms,
            updated_ms: now_ms,
            started_ms: None,
            finished_ms: None,
            deliveries: 0,
            attempts: 0,
            retries: 0,
            last_error: None,
            failure: None,
            worker: None,
            queue_tasks: Vec::new(),
            stages,
        }
    }

    /// Agent usage over all stages.
    pub fn usage(&self) -> AgentUsage {
        let mut total = AgentUsage::default();
        for s in &self.stages {
            total.add(&s.usage);
        }
        total
    }

    /// The stage running now, or the next one to run.
    pub fn current_stage(&self) -> Option<&StageRecord> {
        self.stages.iter().find(|s| s.state != StageState::Done)
    }

    pub fn stage(&self, stage: Stage) -> Option<&StageRecord> {
        self.stages.iter().find(|s| s.stage == stage)
    }

    pub fn stage_mut(&mut self, stage: Stage) -> Option<&mut StageRecord> {
        self.stages.iter_mut().find(|s| s.stage == stage)
    }
}

/// Milliseconds since the Unix epoch.
pub fn now_ms() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_millis() as u64)
        .unwrap_or(0)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    /// A `job.json` as the version before [`Stage`] wrote it (stage names as strings, a probe's
    /// argument after a colon): it loads, and writes back unchanged.
    #[test]
    fn a_record_written_before_stages_were_a_type_loads_and_writes_back_unchanged() {
        let stage = |name: &str, state: &str, summary: serde_json::Value| {
            json!({
                "name": name, "state": state, "attempts": 1, "started_ms": 10,
                "finished_ms": 20, "work_ms": 10, "artifacts": [], "last_error": null,
                "usage": {"turns": 0, "input_tokens": 0, "output_tokens": 0, "cost_usd": 0.0},
                "summary": summary
            })
        };
        let old = json!({
            "id": "01JD3XK4F5Q2W8Y6Z7A9B0C1D2",
            "request": {
                "model_id": "Qwen/Qwen3-8B", "revision": "main", "kind": "generate",
                "agent": "claude", "guards": "all",
                "stages": ["fetch", "generate", "verify", "sleep:2000", "flaky:1"],
                "priority": 0, "offline": true, "exclude_library_spec": false
            },
            "state": "running", "cancel_requested": false, "created_ms": 1, "updated_ms": 2,
            "started_ms": 3, "finished_ms": null, "deliveries": 1, "attempts": 3, "retries": 0,
            "last_error": null, "failure": null, "worker": "w1", "queue_tasks": ["t1"],
            "stages": [
                stage("fetch", "done", json!({"origin": "snapshot"})),
                stage("generate", "done", json!({"backend": "claude", "valid": true})),
                stage("verify", "running", serde_json::Value::Null),
                stage("sleep:2000", "pending", serde_json::Value::Null),
                stage("flaky:1", "pending", serde_json::Value::Null),
            ]
        });
        let rec: JobRecord = serde_json::from_value(old.clone()).unwrap();
        assert_eq!(
            rec.request.stages,
            [
                Stage::Fetch,
                Stage::Generate,
                Stage::Verify,
                Stage::Sleep { ms: 2000 },
                Stage::Flaky { failures: 1 }
            ]
        );
        assert_eq!(rec.current_stage().map(|s| s.stage), Some(Stage::Verify));
        assert!(rec.stage(Stage::Generate).is_some() && rec.stage(Stage::Fix).is_none());
        assert_eq!(serde_json::to_value(&rec).unwrap(), old);
        // A record naming a stage this version does not know is refused, saying which.
        let mut bad = old;
        bad["request"]["stages"][0] = json!("lint");
        let err = serde_json::from_value::<JobRecord>(bad)
            .unwrap_err()
            .to_string();
        assert!(err.contains("unknown stage `lint`"), "{err}");
    }
}
