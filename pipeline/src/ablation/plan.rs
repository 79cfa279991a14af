//! An ablation experiment on disk: `<out>/plan.json` (the configuration and, per run, the job
//! that carries it) and `<out>/runs/` (each finished run's `ablation.json`, collected from its
//! job). Re-running `ablate` with the same output directory queues only the runs that have
//! neither a record nor a job still pending or running.

use std::path::{Path, PathBuf};

use anyhow::{Context, bail};
use harch_guards::GuardSet;
use serde::{Deserialize, Serialize};

use super::RunRecord;
use harch_jobs::record::AblationRun;

pub const PLAN: &str = "plan.json";
pub const RUNS: &str = "runs";

/// What an experiment compares, recorded once and shown in the report's header.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Config {
    pub agent: String,
    pub agent_model: Option<String>,
    pub models: Vec<String>,
    pub tiers: Vec<Tier>,
    pub seeds: u32,
    pub revision: String,
    pub offline: bool,
    /// Every blocking guard, in tier order: the full validate's guard set.
    pub guard_set: Vec<String>,
    pub harch_version: String,
    /// sha256 of the generate template and the DSL reference it embeds (first 16 hex digits).
    pub prompt_hash: String,
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Tier {
    pub name: String,
    pub guards: Vec<String>,
}

impl Tier {
    /// A tier by name or number (`off`, `weight`, …, `all`, `0`-`9`).
    pub fn named(name: &str) -> Result<Tier, String> {
        let set = GuardSet::tier(name)?;
        let n = set.names().len();
        Ok(Tier {
            name: harch_guards::tiers::tier_names()[n].to_string(),
            guards: set.names().iter().map(|g| g.to_string()).collect(),
        })
    }

    /// An explicit guard list (`--guards a,b`), named after its guards.
    pub fn custom(list: &str) -> Result<Tier, String> {
        let set = GuardSet::list(list)?;
        let guards: Vec<String> = set.names().iter().map(|g| g.to_string()).collect();
        Ok(Tier {
            name: format!("custom:{}", guards.join("+")),
            guards,
        })
    }
}

/// One run of the plan and the job that carries it (the latest, after a resume).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct PlannedRun {
    pub model_id: String,
    pub tier: String,
    pub seed: u32,
    pub job_id: Option<String>,
}

impl PlannedRun {
    pub fn ablation(&self, tier: &Tier) -> AblationRun {
        AblationRun {
            tier: tier.name.clone(),
            guards: tier.guards.clone(),
            seed: self.seed,
        }
    }

    /// Where the run's record is collected: `runs/<org>__<name>/<tier>/seed-<n>.json`.
    pub fn record_path(&self, out: &Path) -> PathBuf {
        out.join(RUNS)
            .join(self.model_id.replace('/', "__"))
            .join(self.tier.replace([':', '+'], "_"))
            .join(format!("seed-{}.json", self.seed))
    }
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Plan {
    pub config: Config,
    pub runs: Vec<PlannedRun>,
}

impl Plan {
    /// Every (model, tier, seed) of `config`, no job yet.
    pub fn new(config: Config) -> Plan {
        let mut runs = Vec::new();
        for m in &config.models {
            for t in &config.tiers {
                for seed in 1..=config.seeds {
                    runs.push(PlannedRun {
                        model_id: m.clone(),
                        tier: t.name.clone(),
                        seed,
                        job_id: None,
                    });
                }
            }
        }
        Plan { config, runs }
    }

    pub fn load(out: &Path) -> anyhow::Result<Option<Plan>> {
        let path = out.join(PLAN);
        match std::fs::read(&path) {
            Ok(b) => serde_json::from_slice(&b)
                .map(Some)
                .with_context(|| format!("{}: not an ablation plan", path.display())),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
            Err(e) => Err(e).with_context(|| format!("reading {}", path.display())),
        }
    }

    pub fn save(&self, out: &Path) -> anyhow::Result<()> {
        std::fs::create_dir_all(out).with_context(|| format!("creating {}", out.display()))?;
        harch_jobs::store::write_atomic(&out.join(PLAN), &serde_json::to_vec_pretty(self)?)
    }

    /// The plan of `config` continued from `old` (same agent and model): runs already there
    /// keep their job; new models, tiers or seeds are added. Refuses a different agent, agent
    /// model or prompt: those would mix two experiments in one report.
    pub fn resume(old: Plan, config: Config) -> anyhow::Result<Plan> {
        let o = &old.config;
        if o.agent != config.agent
            || o.agent_model != config.agent_model
            || o.prompt_hash != config.prompt_hash
            || o.revision != config.revision
        {
            bail!(
                "this output directory holds an ablation of agent {} (model {}, prompt {}, revision {}); use another --out for agent {} (model {}, prompt {}, revision {})",
                o.agent,
                o.agent_model.as_deref().unwrap_or("default"),
                o.prompt_hash,
                o.revision,
                config.agent,
                config.agent_model.as_deref().unwrap_or("default"),
                config.prompt_hash,
                config.revision
            );
        }
        let mut merged = config.clone();
        for m in &o.models {
            if !merged.models.contains(m) {
                merged.models.push(m.clone());
            }
        }
        for t in &o.tiers {
            if !merged.tiers.iter().any(|x| x.name == t.name) {
                merged.tiers.push(t.clone());
            }
        }
        merged.seeds = merged.seeds.max(o.seeds);
        let mut plan = Plan::new(merged);
        for r in &mut plan.runs {
            r.job_id = old
                .runs
                .iter()
                .find(|x| x.model_id == r.model_id && x.tier == r.tier && x.seed == r.seed)
                .and_then(|x| x.job_id.clone());
        }
        Ok(plan)
    }

    pub fn tier(&self, name: &str) -> Option<&Tier> {
        self.config.tiers.iter().find(|t| t.name == name)
    }

    /// The collected records, in plan order; `None` for a run not finished yet.
    pub fn records(&self, out: &Path) -> anyhow::Result<Vec<(PlannedRun, Option<RunRecord>)>> {
        let mut v = Vec::new();
        for r in &self.runs {
            let path = r.record_path(out);
            let rec = if path.is_file() {
                Some(RunRecord::read(&path)?)
            } else {
                None
            };
            v.push((r.clone(), rec));
        }
        Ok(v)
    }
}

/// sha256 of the generate template and the DSL reference, as 16 hex digits.
pub fn prompt_hash() -> String {
    use sha2::{Digest, Sha256};
    let mut h = Sha256::new();
    h.update(harch_prompts::template_source("generate").unwrap_or_default());
    h.update(harch_prompts::DSL_REFERENCE);
    h.finalize()
        .iter()
        .take(8)
        .map(|b| format!("{b:02x}"))
        .collect()
}
