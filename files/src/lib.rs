//! harch-files: file helpers every harch crate may use. It sits below every other harch crate
//! and depends on none of them.
//!
//! - [`write_atomic`]: readers see the old content or the new, never a torn file.
//! - [`Beneath`]: reading (and writing) inside a directory that an untrusted process could have
//!   written, such as an agent's workspace. Every path is walked one component at a time from a
//!   trusted base with `O_NOFOLLOW`, so no symbolic link is ever followed (not in the file name,
//!   not in a parent directory); only regular files with one name are read, never more than a
//!   caller's byte cap, and FIFOs, sockets and devices are refused without being opened, so a
//!   read cannot block or run forever. Refusals are [`Refused`] values that name the offending
//!   path relative to the base, fit to be shown to whoever made the file.
//!
//! ```
//! # fn demo(dir: &std::path::Path) -> Result<(), Box<dyn std::error::Error>> {
//! use harch_files::{Beneath, write_atomic};
//! write_atomic(&dir.join("notes.txt"), b"hello")?;
//! let area = Beneath::open(dir)?;
//! assert_eq!(area.read_to_string("notes.txt", 1 << 20)?, "hello");
//! # Ok(()) }
//! # demo(tempfile::tempdir().unwrap().path()).unwrap();
//! ```

mod atomic;
mod beneath;

pub use atomic::{write_atomic, write_atomic_mode};
pub use beneath::{Beneath, Entry, Kind, Refused};
