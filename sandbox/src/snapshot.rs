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

impl Workspace {
    pub fn snapshot_writable(&self) -> WritableSnapshot {
        let mut snap = WritableSnapshot::default();
        let root = self.root();
        for dir in self.writable_dirs() {
            walk(&dir, &root, &mut snap.files);
        }
        snap
    }
}

fn walk(dir: &Path, root: &Path, out: &mut BTreeMap<PathBuf, u64>) {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return;
    };
    for entry in entries.flatten() {
        let path = entry.path();
        let Ok(kind) = entry.file_type() else {
            continue;
        };
        let mut h = DefaultHasher::new();
        if kind.is_dir() {
            walk(&path, root, out);
            continue;
        } else if kind.is_symlink() {
            // Never follow: an agent's link to /dev/zero must not hang the worker.
            std::fs::read_link(&path).ok().hash(&mut h);
        } else if kind.is_file() {
            let Ok(bytes) = std::fs::read(&path) else {
                continue;
            };
            bytes.hash(&mut h);
        } else {
            continue;
        }
        let rel = path.strip_prefix(root).unwrap_or(&path).to_path_buf();
        out.insert(rel, h.finish());
    }
}
