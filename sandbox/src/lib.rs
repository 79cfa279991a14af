//! harch-sandbox: the per-job workspace an agent works in, and the only way harch starts an
//! agent's processes.
//!
//! It owns the workspace layout and staging (ground truth and the spec library read-only, a
//! writable area for the model spec and draft components, a `validate` wrapper on PATH), process
//! isolation (Landlock: writes only inside the writable area, the private HOME and TMPDIR, and
//! there no links, FIFOs, sockets or devices; seccomp: modes, owners and extended attributes
//! frozen; rlimits; a cleared environment that refuses publishing credentials; its own process
//! group, recorded so a rebuilt workspace kills what a dead supervisor left running)
//! and supervision (concurrent draining of stdout and stderr into capped logs, wall-clock
//! timeouts, TERM then KILL of the whole group).
//!
//! It must not know about agents, prompts or specs' contents, and it never talks to the network.
//!
//! ```no_run
//! # async fn demo(job_dir: &std::path::Path) -> Result<(), harch_sandbox::SandboxError> {
//! use harch_sandbox::{RunOptions, StageSpec, StagedFile, Workspace};
//! let spec = StageSpec {
//!     truth_files: vec![StagedFile::bytes("config.json", b"{}".to_vec())],
//!     ..StageSpec::default()
//! };
//! let ws = Workspace::create(job_dir, &spec)?;
//! let mut cmd = ws.command("sh");
//! cmd.args(["-c", "echo hi > specs/models/m.yaml"]);
//! let report = cmd
//!     .run(&RunOptions::new(&ws.logs_dir(), "demo", std::time::Duration::from_secs(10)))
//!     .await?;
//! assert!(report.success());
//! # Ok(()) }
//! ```

mod command;
mod env;
mod error;
mod freeze;
mod fs_policy;
mod leftovers;
mod paths;
mod rlimits;
pub mod sealed;
mod snapshot;
mod stage;
mod supervise;
#[cfg(feature = "testing")]
pub mod testing;
mod workspace;

pub use command::{SandboxCommand, SandboxedChild};
pub use env::is_forbidden as is_forbidden_env;
pub use error::SandboxError;
pub use fs_policy::{FsPolicy, landlock_abi};
pub use rlimits::ResourceLimits;
pub use snapshot::WritableSnapshot;
pub use stage::{FileSource, StagedFile};
pub use supervise::{RunOptions, RunReport};
pub use workspace::{DRAFTS_DIR, LIBRARY_DIR, MODELS_DIR, StageSpec, ValidateCommand, Workspace};
