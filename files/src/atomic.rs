//! Atomic replacement of a file in a directory the caller trusts.

use std::io::{self, Write};
use std::path::Path;

/// Writes `bytes` to `path` through a temporary file in the same directory and a rename, so
/// readers see the old content or the new, never a torn file. The temporary name is random and
/// created exclusively, so a name planted in the directory is never written through.
/// Not fsync'ed: atomic against crashes of the process, not against power loss.
pub fn write_atomic(path: &Path, bytes: &[u8]) -> io::Result<()> {
    write(path, bytes, None)
}

/// [`write_atomic`], with the file's permission bits set to `mode` before it appears.
pub fn write_atomic_mode(path: &Path, bytes: &[u8], mode: u32) -> io::Result<()> {
    write(path, bytes, Some(mode))
}

fn write(path: &Path, bytes: &[u8], mode: Option<u32>) -> io::Result<()> {
    let dir = match path.parent() {
        Some(p) if !p.as_os_str().is_empty() => p,
        _ => Path::new("."),
    };
    let name = path
        .file_name()
        .ok_or_else(|| with_path(io::ErrorKind::InvalidInput.into(), path))?;
    use std::os::unix::fs::PermissionsExt;
    // 0o666 less the umask, as `File::create` would make it (tempfile's own default is 0o600).
    let mut tmp = tempfile::Builder::new()
        .prefix(&format!(".{}.", name.to_string_lossy()))
        .suffix(".tmp")
        .permissions(std::fs::Permissions::from_mode(0o666))
        .tempfile_in(dir)
        .map_err(|e| with_path(e, path))?;
    tmp.write_all(bytes).map_err(|e| with_path(e, path))?;
    if let Some(mode) = mode {
        tmp.as_file()
            .set_permissions(std::fs::Permissions::from_mode(mode))
            .map_err(|e| with_path(e, path))?;
    }
    tmp.persist(path).map_err(|e| with_path(e.error, path))?;
    Ok(())
}

fn with_path(e: io::Error, path: &Path) -> io::Error {
    io::Error::new(e.kind(), format!("cannot write {}: {e}", path.display()))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::PermissionsExt;

    #[test]
    fn replaces_whole_files_and_sets_the_mode() {
        let tmp = tempfile::tempdir().unwrap();
        let p = tmp.path().join("a.txt");
        write_atomic(&p, b"one").unwrap();
        write_atomic_mode(&p, b"two", 0o444).unwrap();
        assert_eq!(std::fs::read(&p).unwrap(), b"two");
        let mode = std::fs::metadata(&p).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode, 0o444);
        // No temporary file is left behind.
        assert_eq!(std::fs::read_dir(tmp.path()).unwrap().count(), 1);
    }

    #[test]
    fn a_symlink_at_the_destination_is_replaced_not_followed() {
        let tmp = tempfile::tempdir().unwrap();
        let victim = tmp.path().join("victim");
        std::fs::write(&victim, "keep").unwrap();
        let p = tmp.path().join("link");
        std::os::unix::fs::symlink(&victim, &p).unwrap();
        write_atomic(&p, b"new").unwrap();
        assert_eq!(std::fs::read_to_string(&victim).unwrap(), "keep");
        assert!(!std::fs::symlink_metadata(&p).unwrap().is_symlink());
    }

    #[test]
    fn errors_name_the_file() {
        let err = write_atomic(Path::new("/nonexistent-dir/x"), b"").unwrap_err();
        assert!(err.to_string().contains("/nonexistent-dir/x"), "{err}");
    }
}
