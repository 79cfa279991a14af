//! What an agent changed: a fingerprint of every file in the writable area, taken before and
//! after a run, so "exited 0 but wrote nothing" is a fact the worker can see.

use std::collections::BTreeMap;
use std::hash::{DefaultHasher, Hash, Hasher};
use std::path::{Path, PathBuf};

use crate::Workspace;

#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct WritableSnapshot {
    files: BTreeMap<PathBuf, u64>,
}

impl WritableSnapshot {
    /// Files created, modified or removed since `before`, relative to the workspace root.
    pub fn changed_since(&self, before: &WritableSnapshot) -> Vec<PathBuf> {
        let mut changed: Vec<PathBuf> = self
            .files
            .iter()
            .filter(|(p, h)| before.files.get(*p) != Some(h))
            .map(|(p, _)| p.clone())
            .collect();
        changed.extend(
            before
                .files
                .keys()
                .filter(|p| !self.files.contains_key(*p))
                .cloned(),
        );
        changed.sort();
        changed
    }

    pub fn files(&self) -> impl Iterator<Item = &Path> {
        self.files.keys().map(PathBuf::as_path)
    }
}

/// At most this many entries are fingerprinted; an agent that makes more gets the rest unseen.
const MAX_ENTRIES: usize = 20_000;

impl Workspace {
    /// Fingerprints of the writable area from metadata alone (kind, size, mtime, inode, mode):
    /// no file is opened, so nothing an agent leaves there (a FIFO, a link to a device, a huge
    /// file) can block or slow the worker. Iterative and bounded in entries.
    pub fn snapshot_writable(&self) -> WritableSnapshot {
        use std::os::unix::fs::MetadataExt;
        let mut snap = WritableSnapshot::default();
        let root = self.root();
        let mut stack: Vec<PathBuf> = self.writable_dirs();
        let mut seen = 0usize;
        while let Some(dir) = stack.pop() {
            let Ok(entries) = std::fs::read_dir(&dir) else {
                continue;
            };
            for entry in entries.flatten() {
                seen += 1;
                if seen > MAX_ENTRIES {
                    return snap;
                }
                let path = entry.path();
                let Ok(meta) = std::fs::symlink_metadata(&path) else {
                    continue;
                };
                if meta.is_dir() {
                    stack.push(path);
                    continue;
                }
                let mut h = DefaultHasher::new();
                (
                    meta.mode(),
                    meta.len(),
                    meta.mtime(),
                    meta.mtime_nsec(),
                    meta.ino(),
                )
                    .hash(&mut h);
                let rel = path.strip_prefix(&root).unwrap_or(&path).to_path_buf();
                snap.files.insert(rel, h.finish());
            }
        }
        snap
    }
}
