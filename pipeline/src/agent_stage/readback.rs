//! Reading back what an agent left in its workspace, as hostile input: through
//! [`harch_files::Beneath`] (no link followed, regular files only, capped sizes, nothing that can
//! block), on a blocking thread, under a deadline, so that nothing an agent makes can wedge the
//! worker's async threads, its stage timeout, cancel or SIGTERM.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::Duration;

use harch_files::{Beneath, Kind, Refused};

/// How long reading back may take before the attempt fails. Reads of capped regular files on a
/// local disk take milliseconds; this only bounds what a pathological filesystem could do.
pub const READ_BACK_TIMEOUT: Duration = Duration::from_secs(30);

/// What a stage reads back after a run, relative to the workspace root.
#[derive(Clone, Debug)]
pub struct ReadBack {
    /// The file the stage asks for (`specs/models/llama.yaml`, `review.yaml`): its absence means
    /// the agent wrote nothing.
    pub main: String,
    /// Other files read when present.
    pub optional: Vec<String>,
    /// Directories whose files with these extensions are read too (draft components).
    pub dirs: Vec<(String, Vec<&'static str>)>,
    pub max_file_bytes: u64,
    pub max_total_bytes: u64,
    /// Entries a listed directory may hold.
    pub max_entries: usize,
}

impl ReadBack {
    pub fn new(main: impl Into<String>) -> ReadBack {
        ReadBack {
            main: main.into(),
            optional: Vec::new(),
            dirs: Vec::new(),
            max_file_bytes: 4 << 20,
            max_total_bytes: 16 << 20,
            max_entries: 1000,
        }
    }
}

/// The files read back: workspace-relative path → text.
pub type AgentFiles = BTreeMap<String, String>;

/// The outcome of reading back: the files (None: the main file is missing), or why the worker
/// refused to read them.
pub type ReadResult = Result<Option<AgentFiles>, String>;

/// Reads back on a blocking thread; a read that overruns [`READ_BACK_TIMEOUT`] is abandoned
/// (its thread finishes on its own) and refused.
pub async fn read_back(root: PathBuf, spec: ReadBack) -> ReadResult {
    let task = tokio::task::spawn_blocking(move || read_back_blocking(&root, &spec));
    match tokio::time::timeout(READ_BACK_TIMEOUT, task).await {
        Ok(Ok(r)) => r,
        Ok(Err(e)) => Err(format!("reading the agent's files failed: {e}")),
        Err(_) => Err(format!(
            "reading the agent's files did not finish within {} s",
            READ_BACK_TIMEOUT.as_secs()
        )),
    }
}

pub fn read_back_blocking(root: &Path, spec: &ReadBack) -> ReadResult {
    let area = Beneath::open(root).map_err(|e| e.to_string())?;
    let mut files = AgentFiles::new();
    let mut total = 0u64;
    let mut take = |rel: String, files: &mut AgentFiles| -> Result<(), String> {
        let text = area
            .read_to_string(&rel, spec.max_file_bytes)
            .map_err(|e| e.to_string())?;
        total += text.len() as u64;
        if total > spec.max_total_bytes {
            return Err(format!(
                "the files read back total more than {} bytes",
                spec.max_total_bytes
            ));
        }
        files.insert(rel, text);
        Ok(())
    };
    match area.kind(&spec.main).map_err(|e| e.to_string())? {
        None => return Ok(None),
        Some(_) => take(spec.main.clone(), &mut files)?,
    }
    for rel in &spec.optional {
        if area.kind(rel).map_err(|e| e.to_string())?.is_some() {
            take(rel.clone(), &mut files)?;
        }
    }
    for (dir, extensions) in &spec.dirs {
        let entries = match area.list(dir, spec.max_entries) {
            Ok(e) => e,
            Err(Refused::Missing { .. }) => continue,
            Err(e) => return Err(e.to_string()),
        };
        for entry in entries {
            let name = entry.name.to_string_lossy();
            let wanted = extensions
                .iter()
                .any(|x| name.rsplit_once('.').is_some_and(|(_, ext)| ext == *x));
            // Subdirectories and other names are not the stage's business; anything with a
            // wanted name must be a plain file.
            if !wanted || entry.kind == Kind::Dir {
                continue;
            }
            if entry.name.to_str().is_none() {
                return Err(format!("`{dir}/{name}` has a name that is not UTF-8"));
            }
            take(format!("{dir}/{name}"), &mut files)?;
        }
    }
    Ok(Some(files))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn spec() -> ReadBack {
        let mut s = ReadBack::new("specs/models/m.yaml");
        s.dirs
            .push(("specs/components/drafts".into(), vec!["yaml", "yml"]));
        s.max_file_bytes = 64;
        s.max_total_bytes = 100;
        s
    }

    fn area() -> tempfile::TempDir {
        let tmp = tempfile::tempdir().unwrap();
        std::fs::create_dir_all(tmp.path().join("specs/models")).unwrap();
        std::fs::create_dir_all(tmp.path().join("specs/components/drafts/sub")).unwrap();
        tmp
    }

    #[test]
    fn reads_the_main_file_and_matching_drafts() {
        let tmp = area();
        let r = tmp.path();
        assert_eq!(read_back_blocking(r, &spec()), Ok(None));
        std::fs::write(r.join("specs/models/m.yaml"), "model: m\n").unwrap();
        std::fs::write(r.join("specs/components/drafts/d.yaml"), "component: d\n").unwrap();
        std::fs::write(r.join("specs/components/drafts/notes.txt"), "x").unwrap();
        std::os::unix::fs::symlink("/etc/passwd", r.join("specs/components/drafts/l.txt")).unwrap();
        let files = read_back_blocking(r, &spec()).unwrap().unwrap();
        assert_eq!(
            files.keys().collect::<Vec<_>>(),
            ["specs/components/drafts/d.yaml", "specs/models/m.yaml"]
        );
    }

    #[test]
    fn a_refused_draft_or_an_oversize_total_fails_the_read() {
        let tmp = area();
        let r = tmp.path();
        std::fs::write(r.join("specs/models/m.yaml"), "model: m\n").unwrap();
        std::os::unix::fs::symlink("/etc/shadow", r.join("specs/components/drafts/d.yaml"))
            .unwrap();
        let err = read_back_blocking(r, &spec()).unwrap_err();
        assert_eq!(
            err,
            "`specs/components/drafts/d.yaml` is a symbolic link, not a regular file"
        );
        std::fs::remove_file(r.join("specs/components/drafts/d.yaml")).unwrap();
        std::fs::write(r.join("specs/components/drafts/a.yaml"), "#".repeat(60)).unwrap();
        std::fs::write(r.join("specs/components/drafts/b.yml"), "#".repeat(60)).unwrap();
        let err = read_back_blocking(r, &spec()).unwrap_err();
        assert_eq!(err, "the files read back total more than 100 bytes");
    }
}
