//! The sandbox's promises, each proven against the real kernel: writes outside the writable area
//! fail, staged truth and library files cannot be changed, rlimits bite.

use crate::common;

use common::{sh, workspace, workspace_with};
use harch_sandbox::testing::landlock_available;

#[tokio::test]
async fn writes_land_only_in_the_writable_area_home_and_tmp() {
    if !landlock_available() {
        return;
    }
    let f = workspace();
    let escape_tmp = std::env::temp_dir().join(format!("harch-escape-{}", std::process::id()));
    let script = format!(
        "echo ok > specs/models/m.yaml; echo ok > specs/components/drafts/d.yaml; \
         echo ok > \"$HOME/h\"; echo ok > \"$TMPDIR/t\"; \
         echo bad > {outside}; echo bad > {tmp}; echo bad > ../escape.txt; echo bad > specs/x.yaml; \
         mkdir ../newdir; echo done",
        outside = f.outside.display(),
        tmp = escape_tmp.display()
    );
    let (report, out, err) = sh(&f.ws, &script).await;
    assert!(report.landlock_enforced);
    assert_eq!(out.trim(), "done");
    let root = f.ws.root();
    for ok in ["specs/models/m.yaml", "specs/components/drafts/d.yaml"] {
        assert!(root.join(ok).exists(), "{ok} should be writable");
    }
    assert!(f.ws.home().join("h").exists());
    assert!(f.ws.tmp().join("t").exists());
    assert!(!f.outside.exists(), "write outside the job dir must fail");
    assert!(!escape_tmp.exists(), "write to the system /tmp must fail");
    assert!(!f.ws.job_dir().join("escape.txt").exists());
    assert!(!root.join("specs/x.yaml").exists());
    assert!(!f.ws.job_dir().join("newdir").exists());
    assert!(err.contains("Permission denied"), "{err}");
}

#[tokio::test]
async fn staged_truth_and_library_cannot_be_modified() {
    if !landlock_available() {
        return;
    }
    let f = workspace();
    let config = f.ws.truth_dir().join("config.json");
    let component =
        f.ws.specs_dir()
            .join("components/library/gqa_attention.yaml");
    let before = std::fs::read(&config).unwrap();
    let script = "echo bad > truth/config.json; echo bad >> truth/config.json; \
        chmod 644 truth/config.json; rm -f truth/config.json; mv truth/config.json truth/c2; \
        ln -s /etc/passwd truth/link; echo bad > truth/new.json; \
        echo bad > specs/components/library/gqa_attention.yaml; \
        rm -f specs/components/library/gqa_attention.yaml; \
        ln truth/config.json specs/models/hardlink && echo bad > specs/models/hardlink; \
        cp truth/config.json specs/models/copy.json; echo done";
    let (_, out, _) = sh(&f.ws, script).await;
    assert_eq!(out.trim(), "done");
    assert_eq!(std::fs::read(&config).unwrap(), before);
    assert_eq!(
        std::fs::read_to_string(&component).unwrap(),
        "component: gqa\n"
    );
    assert!(!f.ws.truth_dir().join("c2").exists());
    assert!(!f.ws.truth_dir().join("new.json").exists());
    assert!(std::fs::symlink_metadata(f.ws.truth_dir().join("link")).is_err());
    assert!(
        !f.ws.specs_dir().join("models/hardlink").exists(),
        "a hard link would alias truth"
    );
    // Reading is allowed: the copy into the writable area worked.
    assert_eq!(
        std::fs::read(f.ws.specs_dir().join("models/copy.json")).unwrap(),
        before
    );
}

#[tokio::test]
async fn file_size_limit_stops_a_large_write() {
    let f = workspace_with(|s| s.limits.max_file_size_bytes = Some(1 << 20));
    let (report, _, _) = sh(&f.ws, "head -c 3000000 /dev/zero > specs/models/big.bin").await;
    assert_ne!(report.exit_code, Some(0), "{report:?}");
    let size = std::fs::metadata(f.ws.specs_dir().join("models/big.bin"))
        .unwrap()
        .len();
    assert_eq!(size, 1 << 20);
}

#[tokio::test]
async fn process_limit_stops_forking() {
    // RLIMIT_NPROC counts every process of the user, so 1 forbids any fork from the sandbox.
    // The kernel never applies it to uid 0, so a root worker runs the sandbox as `nobody`.
    let root = unsafe { libc_geteuid() } == 0;
    let f = workspace_with(|s| {
        s.limits.max_processes = Some(1);
        if root {
            s.run_as = Some((65534, 65534));
        }
    });
    if root {
        use std::os::unix::fs::PermissionsExt;
        let top = f.ws.job_dir().parent().unwrap();
        std::fs::set_permissions(top, std::fs::Permissions::from_mode(0o755)).unwrap();
    }
    let (report, out, err) = sh(&f.ws, "/bin/true & wait; echo forked").await;
    assert_ne!(out.trim(), "forked", "fork succeeded; stderr: {err}");
    assert_ne!(report.exit_code, Some(0));
    assert!(err.contains("fork"), "failed for another reason: {err}");
}

#[tokio::test]
async fn open_files_limit_applies() {
    let f = workspace_with(|s| s.limits.max_open_files = Some(17));
    let (_, out, _) = sh(&f.ws, "ulimit -n").await;
    assert_eq!(out.trim(), "17");
}

unsafe extern "C" {
    #[link_name = "geteuid"]
    fn libc_geteuid() -> u32;
}

#[tokio::test]
async fn a_root_worker_hands_the_writable_areas_to_its_sandbox_user() {
    if unsafe { libc_geteuid() } != 0 {
        eprintln!("skipping: needs a root worker");
        return;
    }
    let f = workspace_with(|s| s.run_as = Some((65534, 65534)));
    use std::os::unix::fs::PermissionsExt;
    let top = f.ws.job_dir().parent().unwrap();
    std::fs::set_permissions(top, std::fs::Permissions::from_mode(0o755)).unwrap();
    let config = f.ws.private_dir(".agent").unwrap();
    let (report, out, err) = sh(
        &f.ws,
        "id -u; echo a > specs/models/m.yaml && echo b > \"$HOME/.agent/c\" && echo c > \"$TMPDIR/t\" && echo ok",
    )
    .await;
    assert!(report.success(), "{err}");
    assert_eq!(out, "65534\nok\n");
    assert!(config.join("c").is_file());
}

/// The worker reads what an agent leaves in its writable roots: no links, FIFOs, sockets or
/// device nodes may appear there, while the temp-file-and-rename that editors and Claude Code's
/// Write use keeps working.
#[tokio::test]
async fn no_links_fifos_sockets_or_devices_in_the_writable_roots() {
    if !landlock_available() {
        return;
    }
    let f = workspace();
    std::fs::write(&f.outside, "outside").unwrap();
    let mut script = String::new();
    for (i, dir) in [
        "specs/models",
        "specs/components/drafts",
        "\"$HOME\"",
        "\"$TMPDIR\"",
    ]
    .iter()
    .enumerate()
    {
        script += &format!(
            "ln -s {outside} {dir}/link{i} 2>/dev/null && echo made-link; \
             ln -s /dev/zero {dir}/zero{i} 2>/dev/null && echo made-zero-link; \
             mkfifo {dir}/fifo{i} 2>/dev/null && echo made-fifo; \
             mknod {dir}/null{i} c 1 3 2>/dev/null && echo made-device; \
             perl -MIO::Socket::UNIX -e 'IO::Socket::UNIX->new(Type => SOCK_STREAM(), Local => \"{sock}\", Listen => 1) or exit 1' 2>/dev/null && echo made-socket; ",
            outside = f.outside.display(),
            sock = format!("{}/sock{i}", dir.trim_matches('"'))
                .replace("$HOME", "'\"$HOME\"'")
                .replace("$TMPDIR", "'\"$TMPDIR\"'"),
        );
    }
    // Claude Code's Write: a temp file renamed over the target, new and existing; a rename from
    // TMPDIR into the writable area.
    script += "echo one > specs/models/.m.yaml.tmp && mv specs/models/.m.yaml.tmp specs/models/m.yaml && \
               echo two > specs/models/.m.yaml.tmp && mv specs/models/.m.yaml.tmp specs/models/m.yaml && \
               echo three > \"$TMPDIR/d.yaml\" && mv \"$TMPDIR/d.yaml\" specs/components/drafts/d.yaml && echo renamed";
    let (report, out, err) = sh(&f.ws, &script).await;
    assert!(report.landlock_enforced);
    assert_eq!(out.trim(), "renamed", "stderr: {err}");
    assert_eq!(
        std::fs::read_to_string(f.ws.specs_dir().join("models/m.yaml")).unwrap(),
        "two\n"
    );
    assert!(f.ws.specs_dir().join("components/drafts/d.yaml").is_file());
    for dir in [
        f.ws.specs_dir().join("models"),
        f.ws.specs_dir().join("components/drafts"),
        f.ws.home(),
        f.ws.tmp(),
    ] {
        for e in std::fs::read_dir(&dir).unwrap() {
            let e = e.unwrap();
            let t = e.file_type().unwrap();
            assert!(t.is_file() || t.is_dir(), "{:?} is {t:?}", e.path());
        }
    }
}

/// chmod, chown and extended attributes are no-ops for every sandboxed process, even on files
/// it owns (here the test runs the sandbox as its own user, who owns the staged truth), while
/// tools that copy modes as they go (`sed -i`, `cp -p`) still work.
#[tokio::test]
async fn modes_and_owners_are_frozen() {
    use std::os::unix::fs::{MetadataExt, PermissionsExt};
    let f = workspace();
    std::fs::write(&f.outside, "outside").unwrap();
    std::fs::set_permissions(&f.outside, std::fs::Permissions::from_mode(0o600)).unwrap();
    let config = f.ws.truth_dir().join("config.json");
    let before = std::fs::metadata(&config).unwrap();
    let script = format!(
        "chmod 666 truth/config.json && echo chmod-said-ok; chmod 000 {outside}; chmod 777 {outside}; \
         chown 65534 truth/config.json; chmod 777 truth; \
         echo 'a: 1' > specs/models/m.yaml && chmod 700 specs/models/m.yaml; \
         sed -i 's/1/2/' specs/models/m.yaml && echo sed-ok; cp -p specs/models/m.yaml specs/models/c.yaml && echo cp-ok",
        outside = f.outside.display()
    );
    let (_, out, err) = sh(&f.ws, &script).await;
    assert_eq!(out, "chmod-said-ok\nsed-ok\ncp-ok\n", "stderr: {err}");
    let after = std::fs::metadata(&config).unwrap();
    assert_eq!(after.mode(), before.mode());
    assert_eq!(after.uid(), before.uid());
    let outside = std::fs::metadata(&f.outside).unwrap();
    assert_eq!(outside.mode() & 0o777, 0o600);
    let m = std::fs::metadata(f.ws.specs_dir().join("models/m.yaml")).unwrap();
    assert_ne!(m.mode() & 0o777, 0o700);
    assert_eq!(
        std::fs::read_to_string(f.ws.specs_dir().join("models/m.yaml")).unwrap(),
        "a: 2\n"
    );
}

#[tokio::test]
async fn an_added_writable_dir_is_writable_under_the_same_rules() {
    if !landlock_available() {
        return;
    }
    let f = workspace_with(|s| s.writable_dirs.push("review".into()));
    let (_, out, err) = sh(
        &f.ws,
        "echo 'verdict: PASS' > review/review.yaml && echo wrote; ln -s /etc/passwd review/l 2>/dev/null || echo no-link",
    )
    .await;
    assert_eq!(out, "wrote\nno-link\n", "{err}");
    assert!(f.ws.root().join("review/review.yaml").is_file());
}
