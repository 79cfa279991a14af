//! What an untrusted process can leave in a directory, and what `Beneath` makes of it: links (to
//! secrets, to devices, as parent directories), FIFOs, sockets, hard links, huge files, odd
//! paths. Each is refused with a message naming the path; nothing outside the base is read or
//! written; nothing blocks.

use std::os::unix::fs::{PermissionsExt, symlink};
use std::path::Path;

use harch_files::{Beneath, Kind, Refused};

struct Area {
    tmp: tempfile::TempDir,
}

impl Area {
    fn new() -> Area {
        let tmp = tempfile::tempdir().unwrap();
        std::fs::create_dir_all(tmp.path().join("base/models")).unwrap();
        std::fs::write(tmp.path().join("secret.txt"), "TOPSECRET").unwrap();
        std::fs::set_permissions(
            tmp.path().join("secret.txt"),
            std::fs::Permissions::from_mode(0o600),
        )
        .unwrap();
        Area { tmp }
    }
    fn base(&self) -> std::path::PathBuf {
        self.tmp.path().join("base")
    }
    fn open(&self) -> Beneath {
        Beneath::open(&self.base()).unwrap()
    }
    fn secret(&self) -> std::path::PathBuf {
        self.tmp.path().join("secret.txt")
    }
}

fn mkfifo(path: &Path) {
    let c = std::ffi::CString::new(path.as_os_str().as_encoded_bytes()).unwrap();
    // SAFETY: a valid C string.
    assert_eq!(unsafe { libc::mkfifo(c.as_ptr(), 0o644) }, 0);
}

#[test]
fn regular_files_are_read_whole() {
    let a = Area::new();
    std::fs::write(a.base().join("models/m.yaml"), "model: m\n").unwrap();
    let b = a.open();
    assert_eq!(
        b.read_to_string("models/m.yaml", 100).unwrap(),
        "model: m\n"
    );
    assert_eq!(b.kind("models/m.yaml").unwrap(), Some(Kind::File));
    assert_eq!(b.kind("models/none.yaml").unwrap(), None);
    let e = b.read("models/none.yaml", 100).unwrap_err();
    assert!(e.is_missing(), "{e}");
    assert_eq!(e.to_string(), "`models/none.yaml` does not exist");
}

#[test]
fn a_symlink_to_a_secret_is_refused_as_file_and_as_parent_dir() {
    let a = Area::new();
    symlink(a.secret(), a.base().join("models/m.yaml")).unwrap();
    symlink(a.tmp.path(), a.base().join("up")).unwrap();
    let b = a.open();
    let e = b.read("models/m.yaml", 1 << 20).unwrap_err();
    assert_eq!(
        e.to_string(),
        "`models/m.yaml` is a symbolic link, not a regular file"
    );
    let e = b.read("up/secret.txt", 1 << 20).unwrap_err();
    assert_eq!(e.to_string(), "`up` is a symbolic link, not a directory");
    assert!(b.list("up", 10).is_err());
    assert!(!format!("{e:?}").contains("TOPSECRET"));
}

#[test]
fn fifos_and_device_links_never_block_or_stream() {
    let a = Area::new();
    mkfifo(&a.base().join("models/fifo.yaml"));
    symlink("/dev/zero", a.base().join("models/zero.yaml")).unwrap();
    let b = a.open();
    // A blocking open of the FIFO would hang this test forever.
    let e = b.read("models/fifo.yaml", 1 << 20).unwrap_err();
    assert_eq!(
        e.to_string(),
        "`models/fifo.yaml` is a FIFO (named pipe), not a regular file"
    );
    let e = b.read("models/zero.yaml", 1 << 20).unwrap_err();
    assert!(
        matches!(
            e,
            Refused::WrongKind {
                kind: Kind::Symlink,
                ..
            }
        ),
        "{e}"
    );
    let kinds: Vec<_> = b
        .list("models", 10)
        .unwrap()
        .into_iter()
        .map(|e| (e.name.into_string().unwrap(), e.kind))
        .collect();
    assert_eq!(
        kinds,
        [
            ("fifo.yaml".to_string(), Kind::Fifo),
            ("zero.yaml".to_string(), Kind::Symlink)
        ]
    );
}

#[test]
fn sockets_are_refused() {
    let a = Area::new();
    let path = a.base().join("models/sock.yaml");
    let _listener = std::os::unix::net::UnixListener::bind(&path).unwrap();
    let e = a.open().read("models/sock.yaml", 100).unwrap_err();
    assert_eq!(
        e.to_string(),
        "`models/sock.yaml` is a socket, not a regular file"
    );
}

#[test]
fn hard_links_are_refused() {
    let a = Area::new();
    std::fs::hard_link(a.secret(), a.base().join("models/m.yaml")).unwrap();
    let e = a.open().read("models/m.yaml", 100).unwrap_err();
    assert!(matches!(e, Refused::HardLinked { links: 2, .. }), "{e}");
}

#[test]
fn reads_stop_at_the_cap() {
    let a = Area::new();
    std::fs::write(a.base().join("models/big.yaml"), vec![b'#'; 4097]).unwrap();
    let b = a.open();
    let e = b.read("models/big.yaml", 4096).unwrap_err();
    assert_eq!(
        e.to_string(),
        "`models/big.yaml` is larger than the 4096-byte limit"
    );
    assert_eq!(b.read("models/big.yaml", 4097).unwrap().len(), 4097);
    let dest = a.tmp.path().join("copy");
    assert!(b.copy_to("models/big.yaml", &dest, 4096).is_err());
    assert!(!dest.exists());
    assert_eq!(b.copy_to("models/big.yaml", &dest, 1 << 20).unwrap(), 4097);
}

#[test]
fn paths_that_leave_the_base_are_refused() {
    let a = Area::new();
    let b = a.open();
    for p in [
        "../secret.txt",
        "/etc/passwd",
        "models/../../secret.txt",
        "",
    ] {
        let e = b.read(p, 100).unwrap_err();
        assert!(matches!(e, Refused::BadPath { .. }), "{p}: {e}");
    }
    assert!(b.write("../x", b"", 0o644).is_err());
}

#[test]
fn listing_is_bounded() {
    let a = Area::new();
    for i in 0..5 {
        std::fs::write(a.base().join(format!("models/{i}.yaml")), "").unwrap();
    }
    let b = a.open();
    assert_eq!(b.list("models", 5).unwrap().len(), 5);
    let e = b.list("models", 4).unwrap_err();
    assert_eq!(e.to_string(), "`models` holds more than 4 entries");
}

#[test]
fn writes_never_go_through_planted_links() {
    let a = Area::new();
    let b = a.open();
    // A link where the file goes is replaced, not followed.
    symlink(a.secret(), a.base().join("models/m.yaml")).unwrap();
    b.write("models/m.yaml", b"model: m\n", 0o644).unwrap();
    assert_eq!(std::fs::read_to_string(a.secret()).unwrap(), "TOPSECRET");
    assert_eq!(
        b.read_to_string("models/m.yaml", 100).unwrap(),
        "model: m\n"
    );
    // A link as a parent directory is refused.
    symlink(a.tmp.path(), a.base().join("models/sub")).unwrap();
    let e = b.write("models/sub/secret.txt", b"x", 0o644).unwrap_err();
    assert_eq!(
        e.to_string(),
        "`models/sub` is a symbolic link, not a directory"
    );
    assert_eq!(std::fs::read_to_string(a.secret()).unwrap(), "TOPSECRET");
    // Missing parents are made; the mode is applied.
    b.write("drafts/new/d.yaml", b"d", 0o444).unwrap();
    let mode = std::fs::metadata(a.base().join("drafts/new/d.yaml"))
        .unwrap()
        .permissions()
        .mode();
    assert_eq!(mode & 0o777, 0o444);
}
