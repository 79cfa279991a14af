//! Stage names → implementations. The pipeline's order is fixed; which stages a job runs is its
//! `--stages` selection; which implementation runs is looked up here.

use std::collections::BTreeMap;
use std::sync::Arc;

use anyhow::bail;

use super::stage::{Stage, StageError, split_stage_name};
use super::stages::{
    fetch::FetchStage, fix::FixStage, generate::GenerateStage, probe, publish::PublishStage,
    review::ReviewStage, verify::VerifyStage,
};

/// The pipeline's stages, in order.
pub const PIPELINE: [&str; 6] = ["fetch", "generate", "verify", "review", "fix", "publish"];

/// What a pipeline stage reads that an earlier stage of the same job writes: a selection with
/// a stage but not what it needs (`--stages verify`) is refused at `enqueue`, not failed later.
pub const NEEDS: [(&str, &[&str]); 5] = [
    ("generate", &["fetch"]),
    ("verify", &["fetch"]),
    ("review", &["fetch", "verify"]),
    ("fix", &["fetch", "review"]),
    ("publish", &["fetch", "verify"]),
];

/// The stages `stage` needs earlier in its job.
pub fn needs(stage: &str) -> &'static [&'static str] {
    NEEDS
        .iter()
        .find(|(s, _)| *s == stage)
        .map_or(&[], |(_, n)| *n)
}

/// Stages that do no model work: the queue's own tests and the benchmark use them to exercise
/// the machinery (`noop`, `sleep:MS`, `flaky:N` fails transiently N times, `fail` fails
/// permanently).
pub const PROBES: [&str; 4] = ["noop", "sleep", "flaky", "fail"];

#[derive(Clone, Default)]
pub struct StageRegistry {
    stages: BTreeMap<String, Arc<dyn Stage>>,
}

impl StageRegistry {
    /// The stages this build provides.
    pub fn builtin() -> StageRegistry {
        let mut r = StageRegistry::default();
        r.register("fetch", Arc::new(FetchStage));
        r.register("generate", Arc::new(GenerateStage));
        r.register("verify", Arc::new(VerifyStage));
        r.register("review", Arc::new(ReviewStage));
        r.register("fix", Arc::new(FixStage));
        r.register("publish", Arc::new(PublishStage));
        r.register("noop", Arc::new(probe::Noop));
        r.register("sleep", Arc::new(probe::Sleep));
        r.register("flaky", Arc::new(probe::Flaky));
        r.register("fail", Arc::new(probe::Fail));
        r
    }

    /// Adds or replaces the implementation of `name`.
    pub fn register(&mut self, name: &str, stage: Arc<dyn Stage>) {
        self.stages.insert(name.to_string(), stage);
    }

    /// The implementation for a selected stage (`sleep:2000` → `sleep`).
    pub fn get(&self, spec: &str) -> Result<Arc<dyn Stage>, StageError> {
        let (name, _) = split_stage_name(spec);
        self.stages.get(name).cloned().ok_or_else(|| {
            StageError::permanent(format!(
                "stage `{name}` is not available in this build of harch-worker"
            ))
        })
    }

    /// Checks a `--stages` selection: known names this build can run, pipeline order, no
    /// repeats, and every stage's needs selected before it.
    pub fn check_selection(&self, stages: &[String]) -> anyhow::Result<()> {
        if stages.is_empty() {
            bail!("--stages selects no stage");
        }
        let mut last_pipeline_pos = None;
        for (i, spec) in stages.iter().enumerate() {
            let (name, arg) = split_stage_name(spec);
            if stages[..i].contains(spec) {
                bail!("stage `{spec}` is selected twice");
            }
            if let Some(pos) = PIPELINE.iter().position(|p| *p == name) {
                if arg.is_some() {
                    bail!("stage `{name}` takes no `:argument`");
                }
                if last_pipeline_pos.is_some_and(|last| pos < last) {
                    bail!(
                        "stage `{name}` is out of order: stages run as {}",
                        PIPELINE.join(" → ")
                    );
                }
                last_pipeline_pos = Some(pos);
                if !self.stages.contains_key(name) {
                    bail!(
                        "stage `{name}` is not available in this build of harch-worker (it has {})",
                        self.available().join(", ")
                    );
                }
                for need in needs(name) {
                    if !stages[..i].iter().any(|s| s == need) {
                        bail!(
                            "stage `{name}` needs `{need}` before it in the same job: add it, e.g. --stages {}",
                            with_needs(name).join(",")
                        );
                    }
                }
            } else if PROBES.contains(&name) || self.stages.contains_key(name) {
                probe::check_arg(name, arg)?;
            } else {
                bail!(
                    "unknown stage `{name}`: pipeline stages are {}; test stages are {}",
                    PIPELINE.join(", "),
                    PROBES.join(", ")
                );
            }
        }
        Ok(())
    }

    /// The stages a job of `kind` runs when `--stages` is not given: the kind's stages that this
    /// build has (a default job must be one this build can run to success).
    pub fn default_stages(&self, kind: harch_jobs::record::JobKind) -> Vec<String> {
        kind.default_stages()
            .iter()
            .filter(|s| self.stages.contains_key(**s))
            .map(|s| s.to_string())
            .collect()
    }

    /// The pipeline stages this build registers, in pipeline order.
    pub fn available(&self) -> Vec<&'static str> {
        PIPELINE
            .into_iter()
            .filter(|p| self.stages.contains_key(*p))
            .collect()
    }
}

/// `stage` with everything it needs, transitively, in pipeline order.
fn with_needs(stage: &str) -> Vec<&'static str> {
    let mut want = vec![stage];
    let mut i = 0;
    while i < want.len() {
        for &n in needs(want[i]) {
            if !want.contains(&n) {
                want.push(n);
            }
        }
        i += 1;
    }
    PIPELINE.into_iter().filter(|p| want.contains(p)).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sel(s: &[&str]) -> Vec<String> {
        s.iter().map(|x| x.to_string()).collect()
    }

    #[test]
    fn selections() {
        let r = StageRegistry::builtin();
        r.check_selection(&sel(&["fetch", "verify"])).unwrap();
        r.check_selection(&sel(&["fetch", "generate", "verify", "publish"]))
            .unwrap();
        r.check_selection(&sel(&["noop", "sleep:10", "flaky:2"]))
            .unwrap();
        for bad in [
            &["verify", "fetch"][..],
            &["fetch", "fetch"],
            &["fecth"],
            &["sleep:abc"],
            &["fetch:1"],
            &["verify"],
            &["fetch", "generate", "publish"],
            &[],
        ] {
            assert!(r.check_selection(&sel(bad)).is_err(), "{bad:?} accepted");
        }
    }

    #[test]
    fn every_pipeline_stage_is_built_in_and_unknown_ones_fail_permanently() {
        let r = StageRegistry::builtin();
        for stage in PIPELINE {
            assert!(r.get(stage).is_ok(), "{stage} is not registered");
        }
        match r.get("lint") {
            Err(StageError::Permanent(m)) => assert!(m.contains("lint"), "{m}"),
            _ => panic!("an unknown stage should fail permanently"),
        }
        assert!(r.get("sleep:5").is_ok());
    }
}
