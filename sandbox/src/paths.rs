//! Resolving paths an agent hands to in-process tools (the OpenAI loop's read_file and
//! write_file), which Landlock cannot protect because they run in the worker itself.

use std::path::{Component, Path, PathBuf};

use crate::{SandboxError, Workspace};

fn reject(path: &str, reason: &'static str) -> SandboxError {
    SandboxError::PathRejected {
        path: path.to_string(),
        reason,
    }
}

/// Joins `rel` to `base` lexically, refusing absolute paths and `..`.
fn lexical_join(base: &Path, rel: &str) -> Result<PathBuf, SandboxError> {
    let p = Path::new(rel);
    if p.is_absolute() {
        return Err(reject(
            rel,
            "absolute paths are not allowed; use a path relative to the workspace",
        ));
    }
    let mut out = base.to_path_buf();
    for c in p.components() {
        match c {
            Component::Normal(n) => out.push(n),
            Component::CurDir => {}
            _ => return Err(reject(rel, "`..` is not allowed")),
        }
    }
    Ok(out)
}

/// Canonicalizes the longest existing prefix of `path` (following symlinks) and appends the rest,
/// so a symlink anywhere along the way is resolved before we check containment.
fn resolve_existing_prefix(path: &Path) -> std::io::Result<PathBuf> {
    let mut missing = Vec::new();
    let mut cur = path.to_path_buf();
    loop {
        match cur.canonicalize() {
            Ok(real) => {
                let mut out = real;
                for part in missing.iter().rev() {
                    out.push(part);
                }
                return Ok(out);
            }
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                let Some(name) = cur.file_name().map(|n| n.to_os_string()) else {
                    return Err(e);
                };
                missing.push(name);
                if !cur.pop() {
                    return Err(e);
                }
            }
            Err(e) => return Err(e),
        }
    }
}

impl Workspace {
    /// A file or directory the agent may read: anywhere inside the workspace root.
    pub fn resolve_read(&self, rel: &str) -> Result<PathBuf, SandboxError> {
        let joined = lexical_join(&self.root(), rel)?;
        let real = joined
            .canonicalize()
            .map_err(SandboxError::io("resolving", &joined))?;
        if !real.starts_with(self.root()) {
            return Err(reject(
                rel,
                "resolves (through a symlink) outside the workspace",
            ));
        }
        Ok(real)
    }

    /// A file the agent may write: inside `specs/models` or `specs/components/drafts`, relative
    /// to the workspace root (`specs/models/x.yaml`).
    pub fn resolve_write(&self, rel: &str) -> Result<PathBuf, SandboxError> {
        let joined = lexical_join(&self.root(), rel)?;
        let real =
            resolve_existing_prefix(&joined).map_err(SandboxError::io("resolving", &joined))?;
        let inside = self
            .writable_dirs()
            .iter()
            .any(|w| real.starts_with(w) && real != *w);
        if !inside {
            return Err(reject(
                rel,
                "only specs/models/ and specs/components/drafts/ are writable",
            ));
        }
        Ok(real)
    }
}
