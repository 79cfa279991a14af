//! Reading and writing beneath a trusted directory whose contents an untrusted process may have
//! made. Paths are walked component by component from the base's file descriptor with
//! `O_NOFOLLOW`, so neither a symlinked file nor a symlinked parent directory is ever followed
//! and nothing outside the base is reached. Only regular files with a single link are read; a
//! FIFO, socket or device is refused after an `lstat`, before any `open` (opening a FIFO blocks,
//! opening a device can have effects), and the `open` itself is non-blocking in case the entry
//! was swapped in between. Reads stop one byte past the caller's cap.

use std::ffi::{OsStr, OsString};
use std::fs::File;
use std::io::{self, Read, Write};
use std::os::fd::OwnedFd;
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::MetadataExt;
use std::path::{Component, Path, PathBuf};

use rustix::fs::{AtFlags, FileType, Mode, OFlags};

/// What an entry is, as `lstat` says (links are never followed).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    File,
    Dir,
    Symlink,
    Fifo,
    Socket,
    CharDevice,
    BlockDevice,
    Unknown,
}

impl Kind {
    fn of(ft: FileType) -> Kind {
        match ft {
            FileType::RegularFile => Kind::File,
            FileType::Directory => Kind::Dir,
            FileType::Symlink => Kind::Symlink,
            FileType::Fifo => Kind::Fifo,
            FileType::Socket => Kind::Socket,
            FileType::CharacterDevice => Kind::CharDevice,
            FileType::BlockDevice => Kind::BlockDevice,
            _ => Kind::Unknown,
        }
    }

    /// "a symbolic link", "a FIFO", … for messages.
    pub fn describe(self) -> &'static str {
        match self {
            Kind::File => "a regular file",
            Kind::Dir => "a directory",
            Kind::Symlink => "a symbolic link",
            Kind::Fifo => "a FIFO (named pipe)",
            Kind::Socket => "a socket",
            Kind::CharDevice => "a character device",
            Kind::BlockDevice => "a block device",
            Kind::Unknown => "a special file",
        }
    }
}

/// One directory entry, as found (not followed).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Entry {
    pub name: OsString,
    pub kind: Kind,
}

/// Why a path beneath the base was not read or written. Paths are shown relative to the base.
#[derive(Debug, thiserror::Error)]
pub enum Refused {
    #[error("`{path}` is not a plain relative path (no `/` at the start, no `..`)")]
    BadPath { path: String },
    #[error("`{path}` does not exist")]
    Missing { path: String },
    #[error("`{path}` is {}, not {wanted}", kind.describe())]
    WrongKind {
        path: String,
        kind: Kind,
        wanted: &'static str,
    },
    #[error("`{path}` has {links} hard links; only files with a single name are read")]
    HardLinked { path: String, links: u64 },
    #[error("`{path}` is larger than the {max}-byte limit")]
    TooLarge { path: String, max: u64 },
    #[error("`{path}` holds more than {max} entries")]
    TooManyEntries { path: String, max: usize },
    #[error("`{path}` is not UTF-8 text")]
    NotUtf8 { path: String },
    #[error("`{path}`: {source}")]
    Io {
        path: String,
        #[source]
        source: io::Error,
    },
}

impl Refused {
    pub fn is_missing(&self) -> bool {
        matches!(self, Refused::Missing { .. })
    }
}

/// A directory the caller trusts (it made it), whose contents it does not.
#[derive(Debug)]
pub struct Beneath {
    base: PathBuf,
    fd: OwnedFd,
}

impl Beneath {
    /// Opens `base` itself normally: the caller vouches for the path up to here.
    pub fn open(base: &Path) -> io::Result<Beneath> {
        let fd = rustix::fs::open(
            base,
            OFlags::RDONLY | OFlags::DIRECTORY | OFlags::CLOEXEC,
            Mode::empty(),
        )
        .map_err(|e| {
            let e = io::Error::from(e);
            io::Error::new(e.kind(), format!("opening {}: {e}", base.display()))
        })?;
        Ok(Beneath {
            base: base.to_path_buf(),
            fd,
        })
    }

    pub fn path(&self) -> &Path {
        &self.base
    }

    /// The whole content of regular file `rel`, at most `max` bytes.
    pub fn read(&self, rel: impl AsRef<Path>, max: u64) -> Result<Vec<u8>, Refused> {
        let rel = rel.as_ref();
        let file = self.open_file(rel)?;
        let mut buf = Vec::new();
        file.take(max.saturating_add(1))
            .read_to_end(&mut buf)
            .map_err(io_err(rel))?;
        if buf.len() as u64 > max {
            return Err(Refused::TooLarge {
                path: show(rel),
                max,
            });
        }
        Ok(buf)
    }

    /// [`Beneath::read`] as UTF-8 text.
    pub fn read_to_string(&self, rel: impl AsRef<Path>, max: u64) -> Result<String, Refused> {
        let rel = rel.as_ref();
        String::from_utf8(self.read(rel, max)?).map_err(|_| Refused::NotUtf8 { path: show(rel) })
    }

    /// Copies regular file `rel` (at most `max` bytes) to `dest`, atomically; returns its size.
    /// `dest` is a trusted path.
    pub fn copy_to(&self, rel: impl AsRef<Path>, dest: &Path, max: u64) -> Result<u64, Refused> {
        let rel = rel.as_ref();
        let dest_err = |e: io::Error| Refused::Io {
            path: dest.display().to_string(),
            source: e,
        };
        let file = self.open_file(rel)?;
        let dir = dest.parent().unwrap_or(Path::new("."));
        let mut tmp = tempfile::Builder::new()
            .prefix(".copy.")
            .tempfile_in(dir)
            .map_err(dest_err)?;
        let n = io::copy(&mut file.take(max.saturating_add(1)), &mut tmp).map_err(io_err(rel))?;
        if n > max {
            return Err(Refused::TooLarge {
                path: show(rel),
                max,
            });
        }
        tmp.flush().map_err(dest_err)?;
        tmp.persist(dest).map_err(|e| dest_err(e.error))?;
        Ok(n)
    }

    /// The entries of directory `rel` (`""` or `"."` for the base), sorted by name, refusing
    /// more than `max` of them. Nothing is followed or opened but the directory itself.
    pub fn list(&self, rel: impl AsRef<Path>, max: usize) -> Result<Vec<Entry>, Refused> {
        let rel = rel.as_ref();
        let dir = self.open_dir(rel)?;
        let mut stream = rustix::fs::Dir::new(dir).map_err(|e| io_err(rel)(e.into()))?;
        let mut out = Vec::new();
        while let Some(entry) = stream.read() {
            let entry = entry.map_err(|e| io_err(rel)(e.into()))?;
            let name = entry.file_name().to_bytes();
            if name == b"." || name == b".." {
                continue;
            }
            if out.len() == max {
                return Err(Refused::TooManyEntries {
                    path: show(rel),
                    max,
                });
            }
            let name = OsStr::from_bytes(name).to_os_string();
            let kind = match entry.file_type() {
                FileType::Unknown => {
                    // Some filesystems leave d_type empty: ask lstat.
                    let st = rustix::fs::statat(
                        stream.fd().map_err(|e| io_err(rel)(e.into()))?,
                        name.as_os_str(),
                        AtFlags::SYMLINK_NOFOLLOW,
                    )
                    .map_err(|e| io_err(rel)(e.into()))?;
                    Kind::of(FileType::from_raw_mode(st.st_mode))
                }
                ft => Kind::of(ft),
            };
            out.push(Entry { name, kind });
        }
        out.sort_by(|a, b| a.name.cmp(&b.name));
        Ok(out)
    }

    /// What `rel` is, without following it; `None` when it does not exist.
    pub fn kind(&self, rel: impl AsRef<Path>) -> Result<Option<Kind>, Refused> {
        let rel = rel.as_ref();
        let (parent, leaf) = match self.open_parent(rel) {
            Ok(p) => p,
            Err(Refused::Missing { .. }) => return Ok(None),
            Err(e) => return Err(e),
        };
        match rustix::fs::statat(&parent, leaf, AtFlags::SYMLINK_NOFOLLOW) {
            Ok(st) => Ok(Some(Kind::of(FileType::from_raw_mode(st.st_mode)))),
            Err(rustix::io::Errno::NOENT) => Ok(None),
            Err(e) => Err(io_err(rel)(e.into())),
        }
    }

    /// Replaces `rel` with `bytes` (mode `mode`) atomically, creating missing parent
    /// directories; refuses when a parent is a link or not a directory.
    pub fn write(&self, rel: impl AsRef<Path>, bytes: &[u8], mode: u32) -> Result<(), Refused> {
        let rel = rel.as_ref();
        let leaf = leaf_of(rel)?;
        let mut dir = rustix::io::dup(&self.fd).map_err(|e| io_err(rel)(e.into()))?;
        let mut walked = PathBuf::new();
        for part in parents_of(rel)? {
            walked.push(part);
            match rustix::fs::mkdirat(&dir, part, Mode::from_raw_mode(0o755)) {
                Ok(()) | Err(rustix::io::Errno::EXIST) => {}
                Err(e) => return Err(io_err(&walked)(e.into())),
            }
            dir = self.step_dir(&dir, part, &walked)?;
        }
        let err = io_err(rel);
        let mut attempt = 0u32;
        let (tmp_name, fd) = loop {
            let name = format!(
                ".{}.{}.{attempt}.tmp",
                leaf.to_string_lossy(),
                std::process::id()
            );
            match rustix::fs::openat(
                &dir,
                name.as_str(),
                OFlags::WRONLY | OFlags::CREATE | OFlags::EXCL | OFlags::NOFOLLOW | OFlags::CLOEXEC,
                Mode::from_raw_mode(0o600),
            ) {
                Ok(fd) => break (name, fd),
                // A name planted by someone else (file or link) is never reused or followed.
                Err(rustix::io::Errno::EXIST) if attempt < 64 => attempt += 1,
                Err(e) => return Err(err(e.into())),
            }
        };
        let result = (|| {
            let mut f = File::from(fd);
            f.write_all(bytes)?;
            rustix::fs::fchmod(&f, Mode::from_raw_mode(mode))?;
            rustix::fs::renameat(&dir, tmp_name.as_str(), &dir, leaf)?;
            Ok::<_, io::Error>(())
        })();
        if let Err(e) = result {
            let _ = rustix::fs::unlinkat(&dir, tmp_name.as_str(), AtFlags::empty());
            return Err(err(e));
        }
        Ok(())
    }

    fn open_file(&self, rel: &Path) -> Result<File, Refused> {
        let (parent, leaf) = self.open_parent(rel)?;
        let st = rustix::fs::statat(&parent, leaf, AtFlags::SYMLINK_NOFOLLOW).map_err(|e| {
            if e == rustix::io::Errno::NOENT {
                Refused::Missing { path: show(rel) }
            } else {
                io_err(rel)(e.into())
            }
        })?;
        let kind = Kind::of(FileType::from_raw_mode(st.st_mode));
        if kind != Kind::File {
            return Err(wrong_kind(rel, kind, "a regular file"));
        }
        let fd = rustix::fs::openat(
            &parent,
            leaf,
            OFlags::RDONLY | OFlags::NOFOLLOW | OFlags::NONBLOCK | OFlags::NOCTTY | OFlags::CLOEXEC,
            Mode::empty(),
        )
        .map_err(|e| match e {
            rustix::io::Errno::LOOP => wrong_kind(rel, Kind::Symlink, "a regular file"),
            rustix::io::Errno::NOENT => Refused::Missing { path: show(rel) },
            e => io_err(rel)(e.into()),
        })?;
        let file = File::from(fd);
        // Checked again on what was opened: the entry may have been swapped since the lstat.
        let meta = file.metadata().map_err(io_err(rel))?;
        if !meta.is_file() {
            let kind = Kind::of(FileType::from_raw_mode(meta.mode()));
            return Err(wrong_kind(rel, kind, "a regular file"));
        }
        if meta.nlink() > 1 {
            return Err(Refused::HardLinked {
                path: show(rel),
                links: meta.nlink(),
            });
        }
        Ok(file)
    }

    fn open_dir(&self, rel: &Path) -> Result<OwnedFd, Refused> {
        let mut dir = rustix::io::dup(&self.fd).map_err(|e| io_err(rel)(e.into()))?;
        let mut walked = PathBuf::new();
        for part in components(rel)? {
            walked.push(part);
            dir = self.step_dir(&dir, part, &walked)?;
        }
        Ok(dir)
    }

    /// The parent directory of `rel`, opened without following links, and its last component.
    fn open_parent<'p>(&self, rel: &'p Path) -> Result<(OwnedFd, &'p OsStr), Refused> {
        let leaf = leaf_of(rel)?;
        let mut dir = rustix::io::dup(&self.fd).map_err(|e| io_err(rel)(e.into()))?;
        let mut walked = PathBuf::new();
        for part in parents_of(rel)? {
            walked.push(part);
            dir = self.step_dir(&dir, part, &walked)?;
        }
        Ok((dir, leaf))
    }

    fn step_dir(&self, dir: &OwnedFd, part: &OsStr, walked: &Path) -> Result<OwnedFd, Refused> {
        rustix::fs::openat(
            dir,
            part,
            OFlags::RDONLY | OFlags::DIRECTORY | OFlags::NOFOLLOW | OFlags::CLOEXEC,
            Mode::empty(),
        )
        .map_err(|e| match e {
            rustix::io::Errno::NOENT => Refused::Missing { path: show(walked) },
            rustix::io::Errno::LOOP | rustix::io::Errno::NOTDIR => {
                let kind = rustix::fs::statat(dir, part, AtFlags::SYMLINK_NOFOLLOW)
                    .map(|st| Kind::of(FileType::from_raw_mode(st.st_mode)))
                    .unwrap_or(Kind::Unknown);
                wrong_kind(walked, kind, "a directory")
            }
            e => io_err(walked)(e.into()),
        })
    }
}

fn show(rel: &Path) -> String {
    rel.display().to_string()
}

fn wrong_kind(rel: &Path, kind: Kind, wanted: &'static str) -> Refused {
    Refused::WrongKind {
        path: show(rel),
        kind,
        wanted,
    }
}

fn io_err(rel: &Path) -> impl Fn(io::Error) -> Refused + '_ {
    move |source| Refused::Io {
        path: show(rel),
        source,
    }
}

/// The normal components of `rel`; anything else (root, `..`, a prefix) is refused.
fn components(rel: &Path) -> Result<Vec<&OsStr>, Refused> {
    let mut out = Vec::new();
    for c in rel.components() {
        match c {
            Component::Normal(p) => out.push(p),
            Component::CurDir => {}
            _ => return Err(Refused::BadPath { path: show(rel) }),
        }
    }
    Ok(out)
}

fn leaf_of(rel: &Path) -> Result<&OsStr, Refused> {
    components(rel)?
        .last()
        .copied()
        .ok_or_else(|| Refused::BadPath { path: show(rel) })
}

fn parents_of(rel: &Path) -> Result<Vec<&OsStr>, Refused> {
    let mut parts = components(rel)?;
    parts.pop();
    Ok(parts)
}
