//! Content-addressed cache of fetched truth files. Blobs are stored once under their Hub etag
//! (a header blob is the header of the file with that etag); a manifest per (repo, commit sha)
//! lists which blob is which truth-directory file. A commit's files never change, so a complete
//! manifest lets a later fetch of the same sha write the truth directory with no request at all.
//! Every write is a temp file renamed into place: a crash leaves no half-written blob.

use std::path::PathBuf;

use serde::{Deserialize, Serialize};

use crate::truth_dir::{DirFiles, TruthMeta, write_file_atomically as write_atomically};

pub struct Cache {
    root: PathBuf,
}

#[derive(Serialize, Deserialize)]
struct Manifest {
    meta: TruthMeta,
    /// (truth-dir relative path, blob key)
    files: Vec<(PathBuf, String)>,
}

impl Cache {
    pub fn new(root: PathBuf) -> Cache {
        Cache { root }
    }

    /// `$HARCH_CACHE_DIR`, else `$XDG_CACHE_HOME/harch/hub`, else `~/.cache/harch/hub`.
    pub fn default_root() -> Option<PathBuf> {
        if let Some(d) = std::env::var_os("HARCH_CACHE_DIR") {
            return Some(PathBuf::from(d));
        }
        let base = std::env::var_os("XDG_CACHE_HOME")
            .map(PathBuf::from)
            .or_else(|| std::env::var_os("HOME").map(|h| PathBuf::from(h).join(".cache")))?;
        Some(base.join("harch/hub"))
    }

    fn manifest_path(&self, repo: &str, sha: &str) -> PathBuf {
        self.root
            .join("manifests")
            .join(safe_name(&repo.replace('/', "__")))
            .join(format!("{}.json", safe_name(sha)))
    }

    /// Blob key for one file: its etag when the Hub gave one, else commit + path (still
    /// immutable, just not shared across commits).
    pub fn key(sha: &str, repo_path: &str, etag: Option<&str>, header_only: bool) -> String {
        let base = match etag {
            Some(e) if !e.is_empty() => safe_name(e),
            _ => safe_name(&format!("{sha}-{repo_path}")),
        };
        if header_only {
            format!("{base}.header")
        } else {
            base
        }
    }

    /// Everything cached for this commit, or None when anything is missing.
    pub fn load(&self, repo: &str, sha: &str) -> Option<(TruthMeta, DirFiles)> {
        let bytes = std::fs::read(self.manifest_path(repo, sha)).ok()?;
        let manifest: Manifest = serde_json::from_slice(&bytes).ok()?;
        let mut files = DirFiles::new();
        for (rel, key) in manifest.files {
            let blob = std::fs::read(self.root.join("blobs").join(&key)).ok()?;
            files.insert(rel, blob);
        }
        Some((manifest.meta, files))
    }

    /// Stores the blobs, then the manifest last, so a manifest only ever names stored blobs.
    pub fn store(
        &self,
        repo: &str,
        sha: &str,
        meta: &TruthMeta,
        files: &[(PathBuf, String, &[u8])],
    ) -> std::io::Result<()> {
        let blobs = self.root.join("blobs");
        for (_, key, bytes) in files {
            let p = blobs.join(key);
            if !p.exists() {
                write_atomically(&p, bytes)?;
            }
        }
        let manifest = Manifest {
            meta: meta.clone(),
            files: files
                .iter()
                .map(|(rel, key, _)| (rel.clone(), key.clone()))
                .collect(),
        };
        let json = serde_json::to_vec(&manifest).map_err(std::io::Error::other)?;
        write_atomically(&self.manifest_path(repo, sha), &json)
    }
}

/// File-name-safe form of an etag, sha or path.
fn safe_name(s: &str) -> String {
    s.chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.') {
                c
            } else {
                '_'
            }
        })
        .collect::<String>()
        .trim_start_matches('.')
        .to_string()
}
