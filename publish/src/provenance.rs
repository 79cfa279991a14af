//! The provenance record committed next to a published spec
//! (`specs/provenance/<org>__<name>.json`): where the truth came from (model id, revision sha,
//! files and etags), what validation said, what the engine's evaluation found, the review's
//! verdicts, and what the agents spent. It is deterministic for a given job (no clocks), so a
//! retried publish produces the same bytes and no new commit. The spec repository's CI reads it
//! to fetch the same truth again (`harch-worker validate-changed`).

use std::path::Path;

use anyhow::Context;
use serde::{Deserialize, Serialize};

use super::agents::AgentStage;
use super::review::ReviewRecord;
use harch_truth::truth_dir::TruthMeta;

pub const SCHEMA: &str = "harch.provenance/1";
pub const DIR: &str = "specs/provenance";

/// `specs/provenance/<org>__<name>.json`.
pub fn path_for(model_id: &str) -> String {
    format!("{DIR}/{}.json", super::config::model_slug(model_id))
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Provenance {
    pub schema: String,
    pub model_id: String,
    /// The truth the spec was checked against, as the fetch stage recorded it.
    pub truth: TruthMeta,
    /// The model spec, as a path in the spec repository.
    pub spec: String,
    /// Draft components the spec uses, as paths in the spec repository.
    #[serde(default)]
    pub drafts: Vec<String>,
    pub validate: ValidateRecord,
    /// The engine's evaluation of the spec against this truth (copied, never recomputed).
    pub figures: Figures,
    pub review: ReviewRecord,
    #[serde(default)]
    pub agents: Vec<AgentStage>,
    pub job: JobRef,
    /// Commands that repeat the check from a checkout of the spec repository.
    pub reproduce: Vec<String>,
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ValidateRecord {
    pub valid: bool,
    pub guards: Vec<String>,
    pub errors: usize,
    pub checkpoint_tensors: usize,
    pub matched_tensors: usize,
    pub checkpoint_bytes: i128,
    pub spec_bytes: i128,
    pub byte_diff: i128,
    #[serde(default)]
    pub warnings: Vec<WarningRecord>,
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct WarningRecord {
    pub code: String,
    pub message: String,
}

/// The numbers of the pull request's summary table, as the engine's `Summary` gave them.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Figures {
    pub params_total: i128,
    pub params_active: i128,
    pub params_mtp: i128,
    pub weight_bytes: i128,
    pub weight_tensors: i128,
    pub kv_bytes_per_token: i128,
    pub kv_window_bytes_per_token: i128,
    pub state_bytes_per_sequence: i128,
    pub context: i128,
    pub decode_flops_per_token: i128,
    pub groups: Vec<GroupFigures>,
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct GroupFigures {
    pub stack: String,
    pub block: String,
    pub layers: String,
    pub count: usize,
    pub params: i128,
    pub kv_bytes_per_token: i128,
    pub state_bytes_per_sequence: i128,
}

impl Figures {
    pub fn from_summary(s: &harch_engine::analysis::Summary) -> Figures {
        Figures {
            params_total: s.params_total,
            params_active: s.params_active,
            params_mtp: s.params_mtp,
            weight_bytes: s.weight_bytes,
            weight_tensors: s.weight_tensors,
            kv_bytes_per_token: s.kv_bytes_per_token,
            kv_window_bytes_per_token: s.kv_window_bytes_per_token,
            state_bytes_per_sequence: s.state_bytes_per_sequence,
            context: s.context,
            decode_flops_per_token: s.decode_flops_per_token,
            groups: s
                .groups
                .iter()
                .map(|g| GroupFigures {
                    stack: g.stack.clone(),
                    block: g.block.clone(),
                    layers: g.layers.clone(),
                    count: g.count,
                    params: g.params,
                    kv_bytes_per_token: g.kv_bytes_per_token,
                    state_bytes_per_sequence: g.state_bytes_per_sequence,
                })
                .collect(),
        }
    }
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct JobRef {
    pub id: String,
    pub harch_version: String,
}

impl Provenance {
    /// The canonical bytes: pretty JSON with a final newline.
    pub fn to_bytes(&self) -> Vec<u8> {
        let mut v = serde_json::to_vec_pretty(self).expect("provenance serializes");
        v.push(b'\n');
        v
    }

    pub fn parse(bytes: &[u8], origin: &str) -> anyhow::Result<Provenance> {
        let p: Provenance = serde_json::from_slice(bytes)
            .with_context(|| format!("{origin} is not a harch provenance record"))?;
        if p.schema != SCHEMA {
            anyhow::bail!(
                "{origin} has schema `{}`; this harch reads `{SCHEMA}`",
                p.schema
            );
        }
        Ok(p)
    }

    pub fn read(path: &Path) -> anyhow::Result<Provenance> {
        let bytes = std::fs::read(path).with_context(|| format!("reading {}", path.display()))?;
        Provenance::parse(&bytes, &path.display().to_string())
    }
}

/// The commands that repeat the check from a checkout of the spec repository.
pub fn reproduce_commands(model_id: &str, truth: &TruthMeta, spec: &str) -> Vec<String> {
    use super::md::shell_word;
    let dir = format!("truth/{}", super::config::model_slug(model_id));
    let fetch = match (&truth.revision, truth.origin.as_str()) {
        (Some(sha), _) => format!(
            "harch-worker fetch {} --revision {} --out {}",
            shell_word(model_id),
            shell_word(sha),
            shell_word(&dir)
        ),
        (None, _) => format!(
            "harch-worker fetch {} --offline --out {}",
            shell_word(model_id),
            shell_word(&dir)
        ),
    };
    vec![
        fetch,
        format!(
            "harch-worker validate {} --truth {}",
            shell_word(spec),
            shell_word(&dir)
        ),
        format!(
            "harch-worker show {} --truth {}",
            shell_word(spec),
            shell_word(&dir)
        ),
    ]
}
