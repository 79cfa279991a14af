//! Shared helpers for the sandbox's integration tests.
#![allow(dead_code)]

use std::path::{Path, PathBuf};
use std::time::Duration;

use harch_sandbox::{RunOptions, RunReport, StageSpec, StagedFile, ValidateCommand, Workspace};

pub fn fake_worker(dir: &Path) -> PathBuf {
    let path = dir.join("fake-harch-worker");
    std::fs::write(&path, "#!/bin/sh\necho \"fake-worker $*\"\n").unwrap();
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o755)).unwrap();
    path
}

pub struct Fixture {
    pub _tmp: tempfile::TempDir,
    pub ws: Workspace,
    pub outside: PathBuf,
}

pub fn workspace() -> Fixture {
    workspace_with(|_| {})
}

pub fn workspace_with(edit: impl FnOnce(&mut StageSpec)) -> Fixture {
    let tmp = tempfile::tempdir().unwrap();
    let lib = tmp.path().join("library");
    std::fs::create_dir_all(&lib).unwrap();
    std::fs::write(lib.join("gqa_attention.yaml"), "component: gqa\n").unwrap();
    let mut spec = StageSpec {
        truth_files: vec![
            StagedFile::bytes("config.json", br#"{"hidden_size": 64}"#.to_vec()),
            StagedFile::bytes("source/modeling_x.py", b"class X: pass\n".to_vec()),
        ],
        library_components_dir: Some(lib),
        validate: Some(ValidateCommand {
            worker_bin: fake_worker(tmp.path()),
            args: vec!["--specs".into(), "{specs}".into()],
        }),
        ..StageSpec::default()
    };
    spec.fs_policy.require_landlock = harch_sandbox::testing::require_landlock();
    edit(&mut spec);
    let ws = Workspace::create(&tmp.path().join("job"), &spec).unwrap();
    let outside = tmp.path().join("outside.txt");
    Fixture {
        _tmp: tmp,
        ws,
        outside,
    }
}

pub fn opts(ws: &Workspace, stem: &str, wall: Duration) -> RunOptions {
    let mut o = RunOptions::new(&ws.logs_dir(), stem, wall);
    o.term_grace = Duration::from_millis(500);
    o
}

pub async fn sh(ws: &Workspace, script: &str) -> (RunReport, String, String) {
    let mut cmd = ws.command("/bin/sh");
    cmd.args(["-c", script]);
    let report = cmd
        .run(&opts(ws, "sh", Duration::from_secs(20)))
        .await
        .unwrap();
    let out = std::fs::read_to_string(&report.stdout_path).unwrap();
    let err = std::fs::read_to_string(&report.stderr_path).unwrap();
    (report, out, err)
}
