//! The ledger of an agent stage: one record per agent run, numbered across stage retries,
//! deliveries and operator retries, written before the run starts and again the moment it
//! returns, so no run goes uncounted or unlabelled whatever happens to the worker afterwards.
//!
//! It lives outside the stage's staging dir (`jobs/<id>/attempts/<stage>/attempts.json`, next
//! to each run's kept files), so a stage retry or a failed job keeps it, and it is mirrored into
//! the job record so `status` shows it while the stage runs.

use std::path::{Path, PathBuf};

use anyhow::Context;
use harch_agents::{AgentOutcome, FailureKind};

pub use harch_jobs::attempt::{Attempt, Phase, stage_dir};
use harch_jobs::record::AgentUsage;
use harch_jobs::stage::Stage;

/// Records what the backend reported, the moment the run returns.
pub fn ran(a: &mut Attempt, o: &AgentOutcome) {
    a.phase = Phase::Ran;
    a.exit_code = o.exit_code;
    a.claimed_success = o.claimed_success;
    a.turns = o.turns;
    a.input_tokens = o.usage.map(|u| u.input_tokens);
    a.output_tokens = o.usage.map(|u| u.output_tokens);
    a.cached_input_tokens = o.usage.map(|u| u.cached_input_tokens);
    a.cost_usd = o.cost_usd;
    a.wall_ms = o.wall_ms;
    a.failure = o.failure.as_ref().map(|f| kind_name(f.kind));
    a.failure_message = o.failure.as_ref().map(|f| f.message.clone());
    a.counted = !a.provider_hiccup();
}

fn kind_name(kind: FailureKind) -> String {
    serde_json::to_value(kind)
        .ok()
        .and_then(|v| v.as_str().map(str::to_string))
        .unwrap_or_default()
}

const FILE: &str = "attempts.json";

/// The runs of one agent stage of one job.
#[derive(Debug)]
pub struct Ledger {
    path: PathBuf,
    pub attempts: Vec<Attempt>,
}

impl Ledger {
    /// The stage's ledger under `job_dir`; empty when there is none yet.
    pub fn load(job_dir: &Path, stage: Stage) -> anyhow::Result<Ledger> {
        let path = job_dir.join(stage_dir(stage)).join(FILE);
        let attempts = match std::fs::read(&path) {
            Ok(b) => serde_json::from_slice(&b)
                .with_context(|| format!("corrupt attempt ledger {}", path.display()))?,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Vec::new(),
            Err(e) => return Err(e).with_context(|| format!("reading {}", path.display())),
        };
        Ok(Ledger { path, attempts })
    }

    pub fn save(&self) -> anyhow::Result<()> {
        if let Some(dir) = self.path.parent() {
            std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
        }
        let bytes = serde_json::to_vec_pretty(&self.attempts)?;
        harch_jobs::store::write_atomic(&self.path, &bytes)
    }

    pub fn next_n(&self) -> u32 {
        self.attempts.iter().map(|a| a.n).max().unwrap_or(0) + 1
    }

    pub fn last_mut(&mut self) -> Option<&mut Attempt> {
        self.attempts.last_mut()
    }

    /// Runs that used up the budget of `round`.
    pub fn counted(&self, round: u32) -> u32 {
        self.of_round(round).filter(|a| a.counted).count() as u32
    }

    /// Runs that used up the budget of `cycle` in `round`.
    pub fn counted_in(&self, round: u32, cycle: u32) -> u32 {
        self.of_round(round)
            .filter(|a| a.counted && a.cycle == cycle)
            .count() as u32
    }

    pub fn cost(&self, round: u32) -> f64 {
        self.of_round(round).filter_map(|a| a.cost_usd).sum()
    }

    fn of_round(&self, round: u32) -> impl Iterator<Item = &Attempt> {
        self.attempts.iter().filter(move |a| a.round == round)
    }

    pub fn total_usage(&self) -> AgentUsage {
        let mut u = AgentUsage::default();
        for a in &self.attempts {
            u.add(&a.usage());
        }
        u
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn runs_are_numbered_across_rounds_and_budgets_count_per_round() {
        let tmp = tempfile::tempdir().unwrap();
        let mut l = Ledger::load(tmp.path(), Stage::Generate).unwrap();
        assert_eq!(l.next_n(), 1);
        for (n, round, counted) in [(1, 0, true), (2, 0, false), (3, 0, true), (4, 1, true)] {
            let mut a = Attempt::started(Stage::Generate, n, round, "claude");
            a.counted = counted;
            a.cost_usd = Some(1.5);
            l.attempts.push(a);
        }
        l.save().unwrap();
        let l = Ledger::load(tmp.path(), Stage::Generate).unwrap();
        assert_eq!(l.next_n(), 5);
        assert_eq!((l.counted(0), l.counted(1)), (2, 1));
        assert_eq!(l.cost(0), 4.5);
        assert_eq!(l.attempts[3].label, "generate-4");
        assert_eq!(l.attempts[3].dir, "attempts/generate/4");
        assert!(tmp.path().join("attempts/generate/attempts.json").is_file());
    }

    #[test]
    fn notes_say_what_happened() {
        let mut a = Attempt::started(Stage::Generate, 1, 0, "claude");
        a.phase = Phase::Checked;
        a.rejected =
            Some("`specs/models/m.yaml` is a FIFO (named pipe), not a regular file".into());
        let note = a.run_note("specs/models/m.yaml").unwrap();
        assert!(
            note.contains("refused to read your files: `specs/models/m.yaml` is a FIFO"),
            "{note}"
        );
        let mut b = Attempt::started(Stage::Generate, 2, 0, "claude");
        b.interrupt(true, "the stage timed out");
        assert_eq!(
            b.run_note("x").unwrap(),
            "The run was interrupted: the stage timed out."
        );
        assert!(b.line().contains(": interrupted;"), "{}", b.line());
    }
}
