//! Copying files into a workspace: relative destinations checked, every file written atomically
//! (temp file + rename) so a crash never leaves half a file behind.

use std::fs;
use std::path::{Component, Path, PathBuf};

use crate::SandboxError;

/// One file to stage: where it comes from and where it lands, relative to its area.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct StagedFile {
    pub dest: PathBuf,
    pub content: FileSource,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub enum FileSource {
    Copy(PathBuf),
    Bytes(Vec<u8>),
}

impl StagedFile {
    pub fn copy(dest: impl Into<PathBuf>, from: impl Into<PathBuf>) -> Self {
        StagedFile {
            dest: dest.into(),
            content: FileSource::Copy(from.into()),
        }
    }

    pub fn bytes(dest: impl Into<PathBuf>, bytes: impl Into<Vec<u8>>) -> Self {
        StagedFile {
            dest: dest.into(),
            content: FileSource::Bytes(bytes.into()),
        }
    }
}

/// `rel` must be a plain relative path: no root, no `..`, not empty.
pub(crate) fn checked_relative(rel: &Path) -> Result<&Path, SandboxError> {
    let plain = rel
        .components()
        .all(|c| matches!(c, Component::Normal(_) | Component::CurDir));
    if !plain || rel.as_os_str().is_empty() {
        return Err(SandboxError::BadStagedPath(rel.to_path_buf()));
    }
    Ok(rel)
}

pub(crate) fn create_dir(path: &Path) -> Result<(), SandboxError> {
    fs::create_dir_all(path).map_err(SandboxError::io("creating directory", path))
}

pub(crate) fn write_atomic(dest: &Path, bytes: &[u8], mode: u32) -> Result<(), SandboxError> {
    use std::os::unix::fs::PermissionsExt;
    let parent = dest.parent().unwrap_or(Path::new("."));
    create_dir(parent)?;
    let name = dest
        .file_name()
        .map(|n| n.to_string_lossy())
        .unwrap_or_default();
    let tmp = parent.join(format!(".{name}.{}.tmp", std::process::id()));
    fs::write(&tmp, bytes).map_err(SandboxError::io("writing", &tmp))?;
    fs::set_permissions(&tmp, fs::Permissions::from_mode(mode))
        .map_err(SandboxError::io("setting permissions of", &tmp))?;
    fs::rename(&tmp, dest).map_err(SandboxError::io("renaming into", dest))
}

pub(crate) fn stage_file(
    area: &Path,
    file: &StagedFile,
    mode: u32,
) -> Result<PathBuf, SandboxError> {
    let dest = area.join(checked_relative(&file.dest)?);
    match &file.content {
        FileSource::Bytes(b) => write_atomic(&dest, b, mode)?,
        FileSource::Copy(src) => {
            let bytes = fs::read(src).map_err(SandboxError::io("reading", src))?;
            write_atomic(&dest, &bytes, mode)?;
        }
    }
    Ok(dest)
}

/// Copies a directory tree (regular files and directories only; links are not followed so a
/// library cannot smuggle a pointer out of the workspace).
pub(crate) fn copy_tree(from: &Path, to: &Path, mode: u32) -> Result<(), SandboxError> {
    create_dir(to)?;
    let entries = fs::read_dir(from).map_err(SandboxError::io("listing", from))?;
    for entry in entries {
        let entry = entry.map_err(SandboxError::io("listing", from))?;
        let kind = entry
            .file_type()
            .map_err(SandboxError::io("inspecting", entry.path()))?;
        let target = to.join(entry.file_name());
        if kind.is_dir() {
            copy_tree(&entry.path(), &target, mode)?;
        } else if kind.is_file() {
            let bytes =
                fs::read(entry.path()).map_err(SandboxError::io("reading", entry.path()))?;
            write_atomic(&target, &bytes, mode)?;
        }
    }
    Ok(())
}

/// Removes a directory tree if it exists (read-only files included: they are owned by us).
pub(crate) fn remove_tree(path: &Path) -> Result<(), SandboxError> {
    match fs::remove_dir_all(path) {
        Ok(()) => Ok(()),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(()),
        Err(e) => Err(SandboxError::Io {
            action: "removing",
            path: path.to_path_buf(),
            source: e,
        }),
    }
}

/// Hands a tree to the sandbox's user (only used when the worker runs as root).
pub(crate) fn chown_tree(path: &Path, uid: u32, gid: u32) -> Result<(), SandboxError> {
    std::os::unix::fs::lchown(path, Some(uid), Some(gid))
        .map_err(SandboxError::io("chown", path))?;
    if path.is_dir() && !path.is_symlink() {
        let entries = fs::read_dir(path).map_err(SandboxError::io("listing", path))?;
        for entry in entries.flatten() {
            chown_tree(&entry.path(), uid, gid)?;
        }
    }
    Ok(())
}
