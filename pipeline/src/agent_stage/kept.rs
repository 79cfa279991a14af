//! What is kept of each run, in `jobs/<id>/attempts/<stage>/<n>/`: the prompt, the transcripts
//! and logs the sandbox captured (`<label>.*`), the worker's report on the result, and the files
//! read back (`files/…`). Never in the stage's staging dir, so a stage retry or a failed job keeps
//! them; written file by file, atomically.

use std::path::{Path, PathBuf};

use anyhow::Context;
use harch_files::{Beneath, Kind};

use super::readback::AgentFiles;

pub const PROMPT: &str = "prompt.md";
pub const FILES: &str = "files";

pub struct Kept {
    pub dir: PathBuf,
}

impl Kept {
    pub fn new(job_dir: &Path, rel_dir: &str) -> anyhow::Result<Kept> {
        let dir = job_dir.join(rel_dir);
        std::fs::create_dir_all(&dir).with_context(|| format!("creating {}", dir.display()))?;
        Ok(Kept { dir })
    }

    pub fn write(&self, name: &str, bytes: &[u8]) -> anyhow::Result<()> {
        harch_jobs::store::write_atomic(&self.dir.join(name), bytes)
    }

    /// The files read back, under `files/` with their workspace-relative paths.
    pub fn files(&self, files: &AgentFiles) -> anyhow::Result<()> {
        for (rel, text) in files {
            let path = self.dir.join(FILES).join(rel);
            if let Some(parent) = path.parent() {
                std::fs::create_dir_all(parent)
                    .with_context(|| format!("creating {}", parent.display()))?;
            }
            harch_jobs::store::write_atomic(&path, text.as_bytes())?;
        }
        Ok(())
    }

    /// Copies the run's logs (`<label>.*` in the sandbox's logs dir) here, each at most `max`
    /// bytes. The logs dir is the worker's, but it sits beside the agent's areas: read it as
    /// carefully as them. Returns what was copied and what was refused.
    pub fn logs(&self, logs_dir: &Path, label: &str, max: u64) -> (Vec<String>, Vec<String>) {
        let (mut copied, mut refused) = (Vec::new(), Vec::new());
        let area = match Beneath::open(logs_dir) {
            Ok(a) => a,
            Err(e) => {
                refused.push(e.to_string());
                return (copied, refused);
            }
        };
        let prefix = format!("{label}.");
        let entries = match area.list(".", 10_000) {
            Ok(e) => e,
            Err(e) => {
                refused.push(e.to_string());
                return (copied, refused);
            }
        };
        for e in entries {
            let Some(name) = e.name.to_str() else {
                continue;
            };
            if !name.starts_with(&prefix) || name.ends_with(".group") || e.kind == Kind::Dir {
                continue;
            }
            match area.copy_to(name, &self.dir.join(name), max) {
                Ok(_) => copied.push(name.to_string()),
                Err(e) => refused.push(e.to_string()),
            }
        }
        (copied, refused)
    }
}
