//! An append-only JSONL transcript, flushed after every record so a crash or a kill loses at
//! most the step in flight.

use std::io::Write;
use std::path::{Path, PathBuf};

use crate::AgentError;

pub(crate) struct Transcript {
    path: PathBuf,
    file: std::fs::File,
}

impl Transcript {
    pub(crate) fn create(path: &Path) -> Result<Self, AgentError> {
        if let Some(dir) = path.parent() {
            std::fs::create_dir_all(dir).map_err(AgentError::io("creating directory", dir))?;
        }
        let file = std::fs::File::create(path).map_err(AgentError::io("creating", path))?;
        Ok(Transcript {
            path: path.to_path_buf(),
            file,
        })
    }

    pub(crate) fn record(&mut self, value: &serde_json::Value) -> Result<(), AgentError> {
        let mut line = serde_json::to_vec(value).expect("a Value always serializes");
        line.push(b'\n');
        self.file
            .write_all(&line)
            .and_then(|()| self.file.sync_data())
            .map_err(AgentError::io("writing", &self.path))
    }

    pub(crate) fn path(&self) -> &Path {
        &self.path
    }
}
