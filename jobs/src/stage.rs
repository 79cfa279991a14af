//! The stages a job can run, as a type. A stage is written as its name, with its argument after
//! a colon where it takes one (`fetch`, `sleep:2000`): that is the `--stages` syntax and the
//! form job records (on disk and in Redis) have always stored, so records written before this
//! type existed still load.
//!
//! This is the one place stage names are spelled: everything else names a stage by its variant.

use std::fmt;
use std::str::FromStr;

use serde::{Deserialize, Deserializer, Serialize, Serializer};

/// One stage of a job.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Stage {
    /// The model's truth dir (config, tensor inventory, forward source), from the Hub or the
    /// bundled snapshots.
    Fetch,
    /// An agent writes the spec; the worker validates it.
    Generate,
    /// The worker's own full validation of the job's spec.
    Verify,
    /// An agent maps forward() onto the spec; the worker checks every claim.
    Review,
    /// Fix-and-review rounds after a NO_PASS review.
    Fix,
    /// The verified spec proposed to the spec repository (or a dry run).
    Publish,
    /// Test stage: does nothing (the queue benchmark's stage).
    Noop,
    /// Test stage `sleep:MS`: sleeps MS milliseconds.
    Sleep { ms: u64 },
    /// Test stage `flaky:N`: fails transiently on its first N attempts.
    Flaky { failures: u64 },
    /// Test stage: fails permanently.
    Fail,
}

/// Why a stage name does not parse.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StageParseError(String);

impl fmt::Display for StageParseError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for StageParseError {}

impl Stage {
    /// The pipeline's stages, in the order they run.
    pub const PIPELINE: [Stage; 6] = [
        Stage::Fetch,
        Stage::Generate,
        Stage::Verify,
        Stage::Review,
        Stage::Fix,
        Stage::Publish,
    ];

    /// The stages whose work is agent runs (their loop is `pipeline::agent_stage`), in
    /// pipeline order.
    pub const AGENT: [Stage; 3] = [Stage::Generate, Stage::Review, Stage::Fix];

    /// The test stages' forms, for messages and help.
    pub const PROBE_FORMS: [&'static str; 4] = ["noop", "sleep:MS", "flaky:N", "fail"];

    /// The stage's name, without its argument (`sleep:2000` → `sleep`). It keys
    /// `stages.timeout_s` in queue.toml and names a stage's records.
    pub fn name(self) -> &'static str {
        match self {
            Stage::Fetch => "fetch",
            Stage::Generate => "generate",
            Stage::Verify => "verify",
            Stage::Review => "review",
            Stage::Fix => "fix",
            Stage::Publish => "publish",
            Stage::Noop => "noop",
            Stage::Sleep { .. } => "sleep",
            Stage::Flaky { .. } => "flaky",
            Stage::Fail => "fail",
        }
    }

    /// Where the stage stands in the pipeline; None for a test stage.
    pub fn pipeline_position(self) -> Option<usize> {
        Stage::PIPELINE.iter().position(|p| *p == self)
    }

    /// Whether the stage's work is agent runs.
    pub fn is_agent(self) -> bool {
        match self {
            Stage::Generate | Stage::Review | Stage::Fix => true,
            Stage::Fetch
            | Stage::Verify
            | Stage::Publish
            | Stage::Noop
            | Stage::Sleep { .. }
            | Stage::Flaky { .. }
            | Stage::Fail => false,
        }
    }

    /// What the stage reads that an earlier stage of the same job writes: a selection with a
    /// stage but not what it needs (`--stages verify`) is refused at `enqueue`, not failed later.
    pub fn needs(self) -> &'static [Stage] {
        match self {
            Stage::Generate | Stage::Verify => &[Stage::Fetch],
            Stage::Review => &[Stage::Fetch, Stage::Verify],
            Stage::Fix => &[Stage::Fetch, Stage::Review],
            Stage::Publish => &[Stage::Fetch, Stage::Verify],
            Stage::Fetch
            | Stage::Noop
            | Stage::Sleep { .. }
            | Stage::Flaky { .. }
            | Stage::Fail => &[],
        }
    }

    /// The stage with everything it needs, transitively, in pipeline order.
    pub fn with_needs(self) -> Vec<Stage> {
        let mut want = vec![self];
        let mut i = 0;
        while i < want.len() {
            for &n in want[i].needs() {
                if !want.contains(&n) {
                    want.push(n);
                }
            }
            i += 1;
        }
        let mut ordered: Vec<Stage> = Stage::PIPELINE
            .into_iter()
            .filter(|p| want.contains(p))
            .collect();
        if self.pipeline_position().is_none() {
            ordered.push(self);
        }
        ordered
    }

    /// The directory its artifacts live in once committed (`sleep:20` → `sleep-20`).
    pub fn dir_name(self) -> String {
        self.to_string().replace([':', '/'], "-")
    }

    /// `fetch,generate,verify`: a selection as `--stages` takes it.
    pub fn join(stages: &[Stage], sep: &str) -> String {
        stages
            .iter()
            .map(Stage::to_string)
            .collect::<Vec<_>>()
            .join(sep)
    }

    fn number(name: &str, arg: Option<&str>) -> Result<u64, StageParseError> {
        arg.and_then(|a| a.parse().ok())
            .ok_or_else(|| StageParseError(format!("stage `{name}` needs a number: `{name}:N`")))
    }
}

impl fmt::Display for Stage {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        // Padded, so `{:<12}` lines up a table of stages.
        match self {
            Stage::Sleep { ms } => f.pad(&format!("sleep:{ms}")),
            Stage::Flaky { failures } => f.pad(&format!("flaky:{failures}")),
            s => f.pad(s.name()),
        }
    }
}

impl FromStr for Stage {
    type Err = StageParseError;

    fn from_str(spec: &str) -> Result<Stage, StageParseError> {
        let (name, arg) = match spec.split_once(':') {
            Some((name, arg)) => (name, Some(arg)),
            None => (spec, None),
        };
        let stage = match name {
            "fetch" => Stage::Fetch,
            "generate" => Stage::Generate,
            "verify" => Stage::Verify,
            "review" => Stage::Review,
            "fix" => Stage::Fix,
            "publish" => Stage::Publish,
            "noop" => Stage::Noop,
            "fail" => Stage::Fail,
            "sleep" => {
                return Ok(Stage::Sleep {
                    ms: Stage::number(name, arg)?,
                });
            }
            "flaky" => {
                return Ok(Stage::Flaky {
                    failures: Stage::number(name, arg)?,
                });
            }
            _ => {
                return Err(StageParseError(format!(
                    "unknown stage `{name}`: pipeline stages are {}; test stages are {}",
                    Stage::join(&Stage::PIPELINE, ", "),
                    Stage::PROBE_FORMS.join(", ")
                )));
            }
        };
        match arg {
            Some(_) => Err(StageParseError(format!(
                "stage `{name}` takes no `:argument`"
            ))),
            None => Ok(stage),
        }
    }
}

impl Serialize for Stage {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_str(self)
    }
}

impl<'de> Deserialize<'de> for Stage {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Stage, D::Error> {
        let text = std::borrow::Cow::<'de, str>::deserialize(d)?;
        text.parse().map_err(serde::de::Error::custom)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_stage_round_trips_through_its_text() {
        let tests = [
            Stage::Noop,
            Stage::Sleep { ms: 2000 },
            Stage::Flaky { failures: 2 },
            Stage::Fail,
        ];
        let all = Stage::PIPELINE.into_iter().chain(tests);
        for s in all {
            assert_eq!(s.to_string().parse::<Stage>().unwrap(), s);
            let json = serde_json::to_string(&s).unwrap();
            assert_eq!(json, format!("\"{s}\""));
            assert_eq!(serde_json::from_str::<Stage>(&json).unwrap(), s);
        }
        assert_eq!(Stage::Sleep { ms: 20 }.dir_name(), "sleep-20");
        assert_eq!(Stage::Fetch.dir_name(), "fetch");
        assert_eq!(format!("[{:<8}]", Stage::Sleep { ms: 5 }), "[sleep:5 ]");
    }

    #[test]
    fn bad_names_say_what_is_valid() {
        let err = "fecth".parse::<Stage>().unwrap_err().to_string();
        assert_eq!(
            err,
            "unknown stage `fecth`: pipeline stages are fetch, generate, verify, review, fix, \
             publish; test stages are noop, sleep:MS, flaky:N, fail"
        );
        assert_eq!(
            "fetch:1".parse::<Stage>().unwrap_err().to_string(),
            "stage `fetch` takes no `:argument`"
        );
        for bad in ["sleep", "sleep:", "sleep:abc", "flaky:-1"] {
            let err = bad.parse::<Stage>().unwrap_err().to_string();
            assert!(err.contains("needs a number"), "{bad}: {err}");
        }
        assert!(serde_json::from_str::<Stage>("\"lint\"").is_err());
    }

    #[test]
    fn needs_are_closed_and_ordered() {
        assert_eq!(
            Stage::Fix.with_needs(),
            [Stage::Fetch, Stage::Verify, Stage::Review, Stage::Fix]
        );
        assert_eq!(Stage::Noop.with_needs(), [Stage::Noop]);
        for s in Stage::PIPELINE {
            for n in s.needs() {
                assert!(
                    n.pipeline_position() < s.pipeline_position(),
                    "{s} needs {n}"
                );
            }
        }
        let agent: Vec<Stage> = Stage::PIPELINE
            .into_iter()
            .filter(|s| s.is_agent())
            .collect();
        assert_eq!(agent, Stage::AGENT);
    }
}
