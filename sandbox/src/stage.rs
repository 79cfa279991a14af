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
    let parent = dest.parent().unwrap_or(Path::new("."));
    create_dir(parent)?;
    harch_files::write_atomic_mode(dest, bytes, mode).map_err(SandboxError::io("writing", dest))
}

fn source_bytes(file: &StagedFile) -> Result<std::borrow::Cow<'_, [u8]>, SandboxError> {
    Ok(match &file.content {
        FileSource::Bytes(b) => b.into(),
        FileSource::Copy(src) => fs::read(src)
            .map_err(SandboxError::io("reading", src))?
            .into(),
    })
}

/// Seeds a file into the agent's writable area, unless the agent already has one there (a
/// retry continues from its own file). Every component is walked without following links.
pub(crate) fn seed_file(area: &Path, file: &StagedFile, mode: u32) -> Result<(), SandboxError> {
    let rel = checked_relative(&file.dest)?;
    let refused = |e: harch_files::Refused| SandboxError::Io {
        action: "seeding",
        path: area.join(rel),
        source: std::io::Error::other(e.to_string()),
    };
    let beneath = harch_files::Beneath::open(area).map_err(SandboxError::io("opening", area))?;
    if beneath.kind(rel).map_err(refused)?.is_some() {
        return Ok(());
    }
    beneath
        .write(rel, &source_bytes(file)?, mode)
        .map_err(refused)
}

pub(crate) fn stage_file(
    area: &Path,
    file: &StagedFile,
    mode: u32,
) -> Result<PathBuf, SandboxError> {
    let dest = area.join(checked_relative(&file.dest)?);
    write_atomic(&dest, &source_bytes(file)?, mode)?;
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

/// Hands the parts of a writable tree that the worker made (fresh directories, seeded files) to
/// the sandbox's user (only when the worker runs as root). What the agent made is already its
/// own and is left alone; links and special files are never touched, and neither is a file
/// with more than one name, which could be a hard link to a file outside. Iterative, so an
/// agent's deeply nested directories cannot exhaust the worker's stack; bounded in entries.
pub(crate) fn chown_tree(path: &Path, uid: u32, gid: u32) -> Result<(), SandboxError> {
    use std::os::unix::fs::MetadataExt;
    const MAX_ENTRIES: usize = 100_000;
    let mut stack = vec![path.to_path_buf()];
    let mut seen = 0usize;
    while let Some(p) = stack.pop() {
        seen += 1;
        if seen > MAX_ENTRIES {
            tracing::warn!(tree = %path.display(), "more than {MAX_ENTRIES} entries: the rest keep their owners");
            break;
        }
        let Ok(meta) = fs::symlink_metadata(&p) else {
            continue;
        };
        let ft = meta.file_type();
        let plain_file = ft.is_file() && meta.nlink() == 1;
        if !(ft.is_dir() || plain_file) {
            continue;
        }
        if meta.uid() != uid || meta.gid() != gid {
            std::os::unix::fs::lchown(&p, Some(uid), Some(gid))
                .map_err(SandboxError::io("chown", &p))?;
        }
        if ft.is_dir() {
            let entries = fs::read_dir(&p).map_err(SandboxError::io("listing", &p))?;
            stack.extend(entries.flatten().map(|e| e.path()));
        }
    }
    Ok(())
}
