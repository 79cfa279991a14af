//! Stages → implementations. The pipeline's order is fixed ([`Stage::PIPELINE`]); which stages a
//! job runs is its `--stages` selection; which implementation runs is [`StageRegistry::run`], one
//! exhaustive match, so a stage added to the type cannot be left without one.

use anyhow::bail;
use futures_util::future::BoxFuture;

use super::stage::{StageContext, StageError, StageOutput};
use super::stages::{fetch, fix, generate, probe, publish, review, verify};
use harch_jobs::config::PipelineSettings;
use harch_jobs::record::JobKind;
use harch_jobs::stage::Stage;

/// The stages this build runs: every [`Stage`].
#[derive(Clone, Default)]
pub struct StageRegistry;

impl StageRegistry {
    /// The stages this build provides.
    pub fn builtin() -> StageRegistry {
        StageRegistry
    }

    /// Runs `stage` once in `cx`, handing it only the sections of `settings` it reads. Every
    /// stage must be safe to run again after a crash: it starts from an empty `out_dir`, and any
    /// effect outside it must be idempotent (look before you create).
    pub fn run<'a>(
        &self,
        stage: Stage,
        cx: &'a StageContext,
        settings: &'a PipelineSettings,
    ) -> BoxFuture<'a, Result<StageOutput, StageError>> {
        let (agent, review, publish) = (&settings.agent, &settings.review, &settings.publish);
        match stage {
            Stage::Fetch => Box::pin(fetch::run(cx)),
            Stage::Generate => Box::pin(generate::run(cx, agent)),
            Stage::Verify => Box::pin(verify::run(cx)),
            Stage::Review => Box::pin(review::run(cx, agent)),
            Stage::Fix => Box::pin(fix::run(cx, agent, review)),
            Stage::Publish => Box::pin(publish::run(cx, publish)),
            Stage::Noop => Box::pin(probe::noop()),
            Stage::Sleep { ms } => Box::pin(probe::sleep(cx, ms)),
            Stage::Flaky { failures } => Box::pin(probe::flaky(cx, failures)),
            Stage::Fail => Box::pin(probe::fail()),
        }
    }

    /// Checks a `--stages` selection: pipeline order, no repeats, and every stage's needs
    /// selected before it. (Names and arguments were checked when the selection was parsed.)
    pub fn check_selection(&self, stages: &[Stage]) -> anyhow::Result<()> {
        if stages.is_empty() {
            bail!("--stages selects no stage");
        }
        let mut last_pipeline_pos = None;
        for (i, &stage) in stages.iter().enumerate() {
            if stages[..i].contains(&stage) {
                bail!("stage `{stage}` is selected twice");
            }
            let Some(pos) = stage.pipeline_position() else {
                continue;
            };
            if last_pipeline_pos.is_some_and(|last| pos < last) {
                bail!(
                    "stage `{stage}` is out of order: stages run as {}",
                    Stage::join(&Stage::PIPELINE, " → ")
                );
            }
            last_pipeline_pos = Some(pos);
            for need in stage.needs() {
                if !stages[..i].contains(need) {
                    bail!(
                        "stage `{stage}` needs `{need}` before it in the same job: add it, e.g. --stages {}",
                        Stage::join(&stage.with_needs(), ",")
                    );
                }
            }
        }
        Ok(())
    }

    /// The stages a job of `kind` runs when `--stages` is not given.
    pub fn default_stages(&self, kind: JobKind) -> Vec<Stage> {
        kind.default_stages().to_vec()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sel(s: &[&str]) -> Vec<Stage> {
        s.iter().map(|x| x.parse().unwrap()).collect()
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
            &["verify"],
            &["fetch", "generate", "publish"],
            &[],
        ] {
            assert!(r.check_selection(&sel(bad)).is_err(), "{bad:?} accepted");
        }
        let err = r
            .check_selection(&sel(&["fetch", "review"]))
            .unwrap_err()
            .to_string();
        assert!(err.contains("e.g. --stages fetch,verify,review"), "{err}");
    }

    #[test]
    fn every_kind_runs_a_selection_it_accepts() {
        let r = StageRegistry::builtin();
        for kind in [JobKind::Generate, JobKind::Revalidate] {
            r.check_selection(&r.default_stages(kind)).unwrap();
        }
    }
}
