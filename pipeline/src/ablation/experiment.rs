//! Driving an experiment through the queue: which runs still need a job, the job each gets,
//! and collecting finished runs' records from their jobs into the output directory.

use std::path::Path;

use super::plan::{Plan, PlannedRun};
use super::run::FILE;
use harch_jobs::record::{JobKind, JobRequest};
use harch_jobs::stage::Stage;
use harch_jobs::store::JobStore;

/// Where a plan's runs stand after [`collect`].
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Progress {
    /// Runs with a record in the output directory.
    pub finished: usize,
    /// Runs whose job is pending or running.
    pub in_flight: usize,
    /// Runs with no record and no live job (never queued, or their job ended without a
    /// record: a failed fetch, a cancel): `ablate` queues them again.
    pub missing: usize,
}

impl Progress {
    pub fn done(&self) -> bool {
        self.in_flight == 0
    }
}

/// Copies the record of every run whose job wrote one into the output directory.
pub fn collect(plan: &Plan, out: &Path, store: &JobStore) -> anyhow::Result<Progress> {
    let mut p = Progress::default();
    for run in &plan.runs {
        let dest = run.record_path(out);
        if dest.is_file() {
            p.finished += 1;
            continue;
        }
        let Some(id) = &run.job_id else {
            p.missing += 1;
            continue;
        };
        let src = store.job_dir(id)?.join(FILE);
        if src.is_file() {
            let rec = super::RunRecord::read(&src)?;
            if let Some(parent) = dest.parent() {
                std::fs::create_dir_all(parent)?;
            }
            rec.write(&dest)?;
            p.finished += 1;
            continue;
        }
        match store.load(id) {
            Ok(job) if !job.state.is_final() => p.in_flight += 1,
            _ => p.missing += 1,
        }
    }
    Ok(p)
}

/// The runs that need a job: no record collected and no job pending or running.
pub fn needing_jobs(plan: &Plan, out: &Path, store: &JobStore) -> Vec<usize> {
    plan.runs
        .iter()
        .enumerate()
        .filter(|(_, r)| !r.record_path(out).is_file())
        .filter(|(_, r)| {
            r.job_id
                .as_ref()
                .is_none_or(|id| store.load(id).map_or(true, |j| j.state.is_final()))
        })
        .map(|(i, _)| i)
        .collect()
}

/// The generate job of one run: fetch and generate only, the library's own spec hidden, the
/// tier in `ablation`.
pub fn request(plan: &Plan, run: &PlannedRun, priority: u32) -> anyhow::Result<JobRequest> {
    let c = &plan.config;
    let tier = plan
        .tier(&run.tier)
        .ok_or_else(|| anyhow::anyhow!("tier `{}` is not in the plan", run.tier))?;
    Ok(JobRequest {
        model_id: run.model_id.clone(),
        revision: c.revision.clone(),
        kind: JobKind::Generate,
        agent: c.agent.clone(),
        guards: "all".into(),
        stages: vec![Stage::Fetch, Stage::Generate],
        priority,
        offline: c.offline,
        exclude_library_spec: true,
        agent_model: c.agent_model.clone(),
        ablation: Some(run.ablation(tier)),
    })
}
