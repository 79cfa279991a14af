//! An ablation's `validate`: a copy of harch-worker with the stage's settings (spec root, spec,
//! tier guards) sealed into its bytes (`harch_sandbox::sealed`), so that an agent who runs it
//! with other environment variables (`HARCH_ROOT`, `HARCH_VALIDATE_GUARDS`), copies it, or
//! starts it through the dynamic loader still gets its tier. The unsealed binary is kept out of
//! the sandbox's reach (`ablation_read_roots`).

use std::path::{Path, PathBuf};

use anyhow::Context;
use serde::{Deserialize, Serialize};

/// What a sealed harch-worker runs with, whatever its environment says.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SealedValidate {
    /// The spec repository (`HARCH_ROOT`): the job's workspace.
    pub root: PathBuf,
    /// The spec a bare `validate` checks (`HARCH_VALIDATE_SPEC`).
    pub spec: PathBuf,
    /// The tier's guards (`HARCH_VALIDATE_GUARDS`): flags select fewer, never more.
    pub guards: String,
}

/// The environment variables a sealed binary sets for itself, over whatever it was given.
impl SealedValidate {
    pub fn env(&self) -> [(&'static str, std::ffi::OsString); 3] {
        [
            ("HARCH_ROOT", self.root.clone().into_os_string()),
            ("HARCH_VALIDATE_SPEC", self.spec.clone().into_os_string()),
            ("HARCH_VALIDATE_GUARDS", self.guards.clone().into()),
        ]
    }
}

/// The settings sealed into the running binary, if it is a sealed copy. A slot that does not
/// parse is an error, not an unsealed binary: the copy must never fall back to every guard.
pub fn running() -> anyhow::Result<Option<SealedValidate>> {
    harch_sandbox::sealed::sealed()
        .map(|bytes| {
            serde_json::from_slice(&bytes)
                .context("this harch-worker's sealed settings are unreadable")
        })
        .transpose()
}

/// Writes `<dir>/harch-worker`: `worker` with `settings` sealed in, read-only and executable.
pub fn write(dir: &Path, worker: &Path, settings: &SealedValidate) -> anyhow::Result<PathBuf> {
    use std::os::unix::fs::PermissionsExt;
    let program = std::fs::read(worker).with_context(|| format!("reading {}", worker.display()))?;
    let sealed = harch_sandbox::sealed::seal(&program, &serde_json::to_vec(settings)?)
        .with_context(|| format!("sealing {}", worker.display()))?;
    std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
    let path = dir.join("harch-worker");
    harch_jobs::store::write_atomic(&path, &sealed)?;
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o555))?;
    Ok(path)
}
