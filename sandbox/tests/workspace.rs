//! Staging and the path checks used by in-process tools.

use crate::common;

use harch_sandbox::{StageSpec, StagedFile, Workspace};

#[test]
fn staging_lays_out_read_only_truth_and_library() {
    let f = common::workspace();
    use std::os::unix::fs::PermissionsExt;
    let mode = std::fs::metadata(f.ws.truth_dir().join("config.json"))
        .unwrap()
        .permissions()
        .mode();
    assert_eq!(mode & 0o222, 0, "staged truth is not writable");
    assert!(f.ws.truth_dir().join("source/modeling_x.py").is_file());
    assert!(
        f.ws.specs_dir()
            .join("components/library/gqa_attention.yaml")
            .is_file()
    );
    for dir in f.ws.writable_dirs() {
        assert!(dir.is_dir());
    }
}

#[test]
fn recreating_restages_truth_and_keeps_the_agents_work() {
    let f = common::workspace();
    std::fs::write(f.ws.specs_dir().join("models/m.yaml"), "kept").unwrap();
    let spec = StageSpec {
        truth_files: vec![StagedFile::bytes("config.json", b"{\"v\":2}".to_vec())],
        seed_files: vec![StagedFile::bytes("models/m.yaml", b"seed".to_vec())],
        ..StageSpec::default()
    };
    let ws = Workspace::create(f.ws.job_dir(), &spec).unwrap();
    assert_eq!(
        std::fs::read_to_string(ws.truth_dir().join("config.json")).unwrap(),
        "{\"v\":2}"
    );
    assert!(!ws.truth_dir().join("source").exists());
    assert_eq!(
        std::fs::read_to_string(ws.specs_dir().join("models/m.yaml")).unwrap(),
        "kept"
    );
}

#[test]
fn bad_staging_paths_are_rejected() {
    let tmp = tempfile::tempdir().unwrap();
    for spec in [
        StageSpec {
            truth_files: vec![StagedFile::bytes("../x", b"".to_vec())],
            ..StageSpec::default()
        },
        StageSpec {
            truth_files: vec![StagedFile::bytes("/etc/x", b"".to_vec())],
            ..StageSpec::default()
        },
        StageSpec {
            seed_files: vec![StagedFile::bytes("arch/dims.yaml", b"".to_vec())],
            ..StageSpec::default()
        },
    ] {
        let err = Workspace::create(tmp.path(), &spec).unwrap_err();
        assert!(err.to_string().contains("must be relative"), "{err}");
    }
}

#[test]
fn write_paths_stay_in_the_writable_area() {
    let f = common::workspace();
    let ok = f.ws.resolve_write("specs/models/m.yaml").unwrap();
    assert_eq!(ok, f.ws.specs_dir().join("models/m.yaml"));
    assert!(
        f.ws.resolve_write("./specs/components/drafts/new/x.yaml")
            .is_ok()
    );
    for bad in [
        "truth/config.json",
        "specs/components/library/gqa_attention.yaml",
        "specs/models/../../truth/x",
        "/etc/passwd",
        "specs/models",
        "notes.txt",
    ] {
        assert!(f.ws.resolve_write(bad).is_err(), "{bad} accepted");
    }
    std::os::unix::fs::symlink(f.ws.truth_dir(), f.ws.specs_dir().join("models/link")).unwrap();
    let err =
        f.ws.resolve_write("specs/models/link/config.json")
            .unwrap_err();
    assert!(err.to_string().contains("writable"), "{err}");
}

#[test]
fn read_paths_stay_in_the_workspace() {
    let f = common::workspace();
    assert!(f.ws.resolve_read("truth/config.json").is_ok());
    assert!(f.ws.resolve_read("../logs").is_err());
    assert!(f.ws.resolve_read("/etc/passwd").is_err());
    std::os::unix::fs::symlink("/etc/passwd", f.ws.specs_dir().join("models/pw")).unwrap();
    let err = f.ws.resolve_read("specs/models/pw").unwrap_err();
    assert!(err.to_string().contains("outside the workspace"), "{err}");
}

#[test]
fn the_snapshot_sees_what_changed() {
    let f = common::workspace();
    let before = f.ws.snapshot_writable();
    assert_eq!(before.files().count(), 0);
    std::fs::write(f.ws.specs_dir().join("models/m.yaml"), "a").unwrap();
    let after = f.ws.snapshot_writable();
    assert_eq!(
        after.changed_since(&before),
        vec![std::path::PathBuf::from("specs/models/m.yaml")]
    );
    assert!(f.ws.snapshot_writable().changed_since(&after).is_empty());
}

#[test]
fn the_projects_spec_repository_stages_read_only_without_its_models() {
    let repo = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../specs");
    let tmp = tempfile::tempdir().unwrap();
    let spec = StageSpec::default().with_spec_repo(&repo);
    let ws = Workspace::create(&tmp.path().join("job"), &spec).unwrap();
    let specs = ws.specs_dir();
    for staged in ["arch/dims.yaml", "components/library/gqa_attention.yaml"] {
        let original = std::fs::read(repo.join(staged)).unwrap();
        assert_eq!(
            std::fs::read(specs.join(staged)).unwrap(),
            original,
            "{staged}"
        );
    }
    // The model specs are what the agent writes: none is handed to it.
    assert_eq!(std::fs::read_dir(specs.join("models")).unwrap().count(), 0);
}

/// Seeding writes into the agent's area without following what it planted there.
#[test]
fn seeding_never_follows_links_the_agent_planted() {
    let f = common::workspace();
    std::fs::write(&f.outside, "outside").unwrap();
    let models = f.ws.specs_dir().join("models");
    std::os::unix::fs::symlink(f.outside.parent().unwrap(), models.join("sub")).unwrap();
    let seed = |dest: &str| StageSpec {
        seed_files: vec![StagedFile::bytes(dest, b"seed".to_vec())],
        ..StageSpec::default()
    };
    let err = Workspace::create(f.ws.job_dir(), &seed("models/sub/outside.txt")).unwrap_err();
    assert!(
        err.to_string().contains("`models/sub` is a symbolic link"),
        "{err}"
    );
    assert_eq!(std::fs::read_to_string(&f.outside).unwrap(), "outside");
    // A link where the seed goes counts as the agent's own file: kept, never written through.
    std::os::unix::fs::symlink(&f.outside, models.join("m.yaml")).unwrap();
    Workspace::create(f.ws.job_dir(), &seed("models/m.yaml")).unwrap();
    assert_eq!(std::fs::read_to_string(&f.outside).unwrap(), "outside");
    // A fresh seed lands.
    let ws = Workspace::create(f.ws.job_dir(), &seed("components/drafts/new/d.yaml")).unwrap();
    assert_eq!(
        std::fs::read_to_string(ws.specs_dir().join("components/drafts/new/d.yaml")).unwrap(),
        "seed"
    );
}

/// A stage that needs the agent to write elsewhere (review: `review/review.yaml`) names the
/// directory; it gets the same rules as the spec areas and may not overlap the staged parts.
#[test]
fn stages_may_add_writable_dirs_outside_the_staged_parts() {
    let f = common::workspace();
    let spec = |dir: &str| StageSpec {
        writable_dirs: vec![dir.into()],
        ..StageSpec::default()
    };
    let ws = Workspace::create(f.ws.job_dir(), &spec("review")).unwrap();
    let review = ws.root().join("review");
    assert!(review.is_dir());
    assert!(ws.writable_dirs().contains(&review));
    assert_eq!(
        ws.resolve_write("review/review.yaml").unwrap(),
        review.join("review.yaml")
    );
    for bad in ["truth/x", "specs/arch", "../x", "/tmp/x"] {
        let err = Workspace::create(f.ws.job_dir(), &spec(bad)).unwrap_err();
        assert!(err.to_string().contains("must be relative"), "{bad}: {err}");
    }
}
