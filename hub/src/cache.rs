//! Content-addressed cache of fetched truth files. Blobs are stored once under their Hub etag
//! (a header blob is the header of the file with that etag); a manifest per (repo, commit sha)
//! lists which blob is which truth-directory file. A commit's files never change, so a complete
//! manifest lets a later fetch of the same sha write the truth directory with no request at all.
//! Every write is a temp file renamed into place: a crash leaves no half-written blob.
//!
//! A hit is only as good as the disk under it: the manifest records each blob's size and
//! SHA-256 when it is written, and every read checks both. A blob that fails (truncated,
//! altered, missing) is evicted with its manifest, and the fetch goes to the Hub again.

use std::path::{Path, PathBuf};

use harch_files::write_atomic;
use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

use harch_truth::cache_dir::harch_cache_dir;
use harch_truth::names::check_repo_path;
use harch_truth::truth_dir::{DirFiles, TruthMeta};

pub struct Cache {
    root: PathBuf,
}

#[derive(Serialize, Deserialize)]
struct Manifest {
    meta: TruthMeta,
    files: Vec<ManifestFile>,
}

#[derive(Serialize, Deserialize)]
struct ManifestFile {
    /// Truth-directory relative path.
    rel: String,
    /// Blob name under `blobs/`.
    key: String,
    size: u64,
    /// Lowercase hex SHA-256 of the blob.
    sha256: String,
}

/// Why a cache entry was not used.
#[derive(Debug, PartialEq, Eq)]
pub enum Miss {
    /// Nothing cached for this commit.
    Absent,
    /// Something cached failed its check; it was evicted.
    Corrupt(String),
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
        harch_cache_dir("hub")
    }

    fn manifest_path(&self, repo: &str, sha: &str) -> PathBuf {
        self.root
            .join("manifests")
            .join(safe_name(&repo.replace('/', "__")))
            .join(format!("{}.json", safe_name(sha)))
    }

    /// True when some commit of `repo` is cached: only then can asking the Hub which commit a
    /// branch is at lead to a hit.
    pub fn has_repo(&self, repo: &str) -> bool {
        let dir = self
            .root
            .join("manifests")
            .join(safe_name(&repo.replace('/', "__")));
        std::fs::read_dir(dir).is_ok_and(|mut entries| entries.next().is_some())
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

    /// Everything cached for this commit, each blob checked against its recorded size and
    /// SHA-256. A manifest or blob that fails is evicted (and reported), so the caller fetches
    /// afresh and a later store writes it again.
    pub fn load(&self, repo: &str, sha: &str) -> Result<(TruthMeta, DirFiles), Miss> {
        let manifest_path = self.manifest_path(repo, sha);
        let bytes = match std::fs::read(&manifest_path) {
            Ok(b) => b,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Err(Miss::Absent),
            Err(e) => return Err(Miss::Corrupt(format!("{}: {e}", manifest_path.display()))),
        };
        let evict = |why: String, blob: Option<&Path>| {
            if let Some(blob) = blob {
                std::fs::remove_file(blob).ok();
            }
            std::fs::remove_file(&manifest_path).ok();
            tracing::warn!("cache entry evicted: {why}");
            Miss::Corrupt(why)
        };
        let manifest: Manifest = match serde_json::from_slice(&bytes) {
            Ok(m) => m,
            Err(e) => {
                return Err(evict(
                    format!("{} is not a manifest: {e}", manifest_path.display()),
                    None,
                ));
            }
        };
        let mut files = DirFiles::new();
        for f in manifest.files {
            let blob_path = self.root.join("blobs").join(&f.key);
            if let Err(why) = check_repo_path(&f.rel) {
                return Err(evict(format!("manifest names `{}`: {why}", f.rel), None));
            }
            if safe_name(&f.key) != f.key || f.key.is_empty() {
                return Err(evict(format!("manifest names blob `{}`", f.key), None));
            }
            let blob = match std::fs::read(&blob_path) {
                Ok(b) => b,
                Err(e) => {
                    return Err(evict(format!("{}: {e}", blob_path.display()), None));
                }
            };
            if blob.len() as u64 != f.size || sha256_hex(&blob) != f.sha256 {
                return Err(evict(
                    format!(
                        "{} holds {} bytes that do not match the {} bytes and SHA-256 recorded for {}",
                        blob_path.display(),
                        blob.len(),
                        f.size,
                        f.rel
                    ),
                    Some(&blob_path),
                ));
            }
            files.insert(PathBuf::from(f.rel), blob);
        }
        Ok((manifest.meta, files))
    }

    /// Stores the blobs, then the manifest last, so a manifest only ever names stored blobs.
    /// A blob already there is rewritten unless it has the right size (its hash is checked on
    /// every read).
    pub fn store(
        &self,
        repo: &str,
        sha: &str,
        meta: &TruthMeta,
        files: &[(PathBuf, String, &[u8])],
    ) -> std::io::Result<()> {
        let blobs = self.root.join("blobs");
        std::fs::create_dir_all(&blobs)?;
        let mut listed = Vec::with_capacity(files.len());
        for (rel, key, bytes) in files {
            let p = blobs.join(key);
            let same_size = std::fs::metadata(&p).is_ok_and(|m| m.len() == bytes.len() as u64);
            if !same_size {
                write_atomic(&p, bytes)?;
            }
            listed.push(ManifestFile {
                rel: rel.to_string_lossy().into_owned(),
                key: key.clone(),
                size: bytes.len() as u64,
                sha256: sha256_hex(bytes),
            });
        }
        let manifest = Manifest {
            meta: meta.clone(),
            files: listed,
        };
        let json = serde_json::to_vec(&manifest).map_err(std::io::Error::other)?;
        let path = self.manifest_path(repo, sha);
        if let Some(dir) = path.parent() {
            std::fs::create_dir_all(dir)?;
        }
        write_atomic(&path, &json)
    }
}

fn sha256_hex(bytes: &[u8]) -> String {
    let digest = Sha256::digest(bytes);
    let mut hex = String::with_capacity(64);
    for b in digest {
        hex.push_str(&format!("{b:02x}"));
    }
    hex
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
