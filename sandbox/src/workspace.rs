//! The per-job workspace: its layout on disk, how it is staged, and which parts an agent may
//! write.
//!
//! ```text
//! <job_dir>/
//!   workspace/                   the agent's working directory
//!     truth/                     read-only: config.json, forward source, tensor list
//!     specs/arch, specs/quant    read-only: the spec repository's shared tables
//!     specs/components/library/  read-only: the component library
//!     specs/components/drafts/   writable: new components
//!     specs/models/              writable: the model spec
//!   home/                        writable: the agent's private HOME and config dirs
//!   tmp/                         writable: TMPDIR
//!   bin/validate                 read-only: wrapper running `harch-worker validate --json`
//!   logs/                        read-only to the agent: transcripts written by the worker
//! ```

use std::ffi::OsString;
use std::path::{Path, PathBuf};

use crate::fs_policy::FsPolicy;
use crate::rlimits::ResourceLimits;
use crate::stage::{self, StagedFile};
use crate::{SandboxCommand, SandboxError};

const READ_ONLY_FILE: u32 = 0o444;
const WRITABLE_FILE: u32 = 0o644;

/// Where the writable areas sit, relative to `workspace/specs`.
pub const MODELS_DIR: &str = "models";
pub const DRAFTS_DIR: &str = "components/drafts";
pub const LIBRARY_DIR: &str = "components/library";

/// The `validate` command staged on the agent's PATH.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ValidateCommand {
    /// The harch-worker binary (configurable so tests can use a fake).
    pub worker_bin: PathBuf,
    /// Arguments after `validate --json`. `{workspace}`, `{specs}` and `{truth}` are replaced by
    /// this workspace's absolute paths.
    pub args: Vec<String>,
}

/// What to stage into a new workspace.
#[derive(Clone, Debug, Default)]
pub struct StageSpec {
    /// Ground truth, destinations relative to `truth/`.
    pub truth_files: Vec<StagedFile>,
    /// The library's components, copied read-only to `specs/components/library`.
    pub library_components_dir: Option<PathBuf>,
    /// Other read-only spec directories: (destination relative to `specs/`, source), e.g.
    /// `("arch", specs/arch)`.
    pub support_dirs: Vec<(PathBuf, PathBuf)>,
    /// Files that start the writable area (a spec to fix), relative to `specs/`; each must land in
    /// `models/` or `components/drafts/`. Existing files are kept, so a retry continues.
    pub seed_files: Vec<StagedFile>,
    /// More writable directories, relative to the workspace root, outside `truth/` and `specs/`
    /// (a review stage's `review/`, where the agent writes its report).
    pub writable_dirs: Vec<PathBuf>,
    pub validate: Option<ValidateCommand>,
    pub fs_policy: FsPolicy,
    pub limits: ResourceLimits,
    /// PATH after the workspace's `bin/`; `None` keeps the worker's own PATH.
    pub base_path: Option<OsString>,
    /// Run sandboxed processes as this (uid, gid), and hand them the writable areas. Needed when
    /// the worker runs as root: the kernel never applies RLIMIT_NPROC to uid 0. The job dir's
    /// ancestors must be traversable by that user.
    pub run_as: Option<(u32, u32)>,
}

impl StageSpec {
    /// Stages the shared parts of a spec repository checkout (`arch/`, `quant/`, the component
    /// library) read-only.
    pub fn with_spec_repo(mut self, spec_root: &Path) -> Self {
        self.library_components_dir = Some(spec_root.join(LIBRARY_DIR));
        for dir in ["arch", "quant"] {
            if spec_root.join(dir).is_dir() {
                self.support_dirs.push((dir.into(), spec_root.join(dir)));
            }
        }
        self
    }
}

/// A staged workspace. Cheap to clone; owns nothing that needs dropping.
#[derive(Clone, Debug)]
pub struct Workspace {
    job_dir: PathBuf,
    pub(crate) fs_policy: FsPolicy,
    pub(crate) limits: ResourceLimits,
    base_path: OsString,
    pub(crate) run_as: Option<(u32, u32)>,
    /// `StageSpec::writable_dirs`, absolute.
    extra_writable: Vec<PathBuf>,
}

impl Workspace {
    /// Builds (or rebuilds) the workspace under `job_dir`. Read-only parts are staged afresh each
    /// time; the writable area, HOME and TMPDIR are kept so a retried attempt continues.
    pub fn create(job_dir: &Path, spec: &StageSpec) -> Result<Workspace, SandboxError> {
        stage::create_dir(job_dir)?;
        let job_dir = job_dir
            .canonicalize()
            .map_err(SandboxError::io("resolving", job_dir))?;
        let mut ws = Workspace {
            job_dir,
            fs_policy: spec.fs_policy.clone(),
            limits: spec.limits.clone(),
            base_path: spec
                .base_path
                .clone()
                .or_else(|| std::env::var_os("PATH"))
                .unwrap_or_else(|| "/usr/local/bin:/usr/bin:/bin".into()),
            run_as: spec.run_as,
            extra_writable: Vec::new(),
        };
        for dir in &spec.writable_dirs {
            let rel = stage::checked_relative(dir)?;
            let top = rel
                .components()
                .next()
                .map(|c| c.as_os_str().to_os_string());
            if top.is_none_or(|t| t == "truth" || t == "specs") {
                return Err(SandboxError::BadStagedPath(dir.clone()));
            }
            ws.extra_writable.push(ws.root().join(rel));
        }
        // Nothing may still run in a workspace being rebuilt: a supervisor that died (a killed
        // worker) leaves its group recorded next to the logs.
        crate::leftovers::kill_recorded(&ws.logs_dir());
        for dir in [ws.root(), ws.home(), ws.tmp(), ws.logs_dir()] {
            stage::create_dir(&dir)?;
        }
        for dir in ws.writable_dirs() {
            stage::create_dir(&dir)?;
        }

        stage::remove_tree(&ws.truth_dir())?;
        stage::create_dir(&ws.truth_dir())?;
        for file in &spec.truth_files {
            stage::stage_file(&ws.truth_dir(), file, READ_ONLY_FILE)?;
        }

        let specs = ws.specs_dir();
        if let Some(lib) = &spec.library_components_dir {
            stage::remove_tree(&specs.join(LIBRARY_DIR))?;
            stage::copy_tree(lib, &specs.join(LIBRARY_DIR), READ_ONLY_FILE)?;
        }
        for (dest, src) in &spec.support_dirs {
            let dest = specs.join(stage::checked_relative(dest)?);
            if ws
                .writable_dirs()
                .iter()
                .any(|w| w.starts_with(&dest) || dest.starts_with(w))
            {
                return Err(SandboxError::BadStagedPath(dest));
            }
            stage::remove_tree(&dest)?;
            stage::copy_tree(src, &dest, READ_ONLY_FILE)?;
        }

        for file in &spec.seed_files {
            let dest = specs.join(stage::checked_relative(&file.dest)?);
            if !ws.writable_dirs().iter().any(|w| dest.starts_with(w)) {
                return Err(SandboxError::BadStagedPath(file.dest.clone()));
            }
            // The writable area is the agent's: its contents are walked without following links.
            stage::seed_file(&specs, file, WRITABLE_FILE)?;
        }

        if let Some((uid, gid)) = ws.run_as {
            for dir in ws.write_roots() {
                stage::chown_tree(&dir, uid, gid)?;
            }
        }

        stage::remove_tree(&ws.bin_dir())?;
        if let Some(v) = &spec.validate {
            let script = ws.validate_script(v);
            stage::write_atomic(&ws.bin_dir().join("validate"), script.as_bytes(), 0o555)?;
        } else {
            stage::create_dir(&ws.bin_dir())?;
        }
        Ok(ws)
    }

    fn validate_script(&self, v: &ValidateCommand) -> String {
        let substitute = |a: &str| {
            a.replace("{workspace}", &self.root().to_string_lossy())
                .replace("{specs}", &self.specs_dir().to_string_lossy())
                .replace("{truth}", &self.truth_dir().to_string_lossy())
        };
        let mut line = format!(
            "exec {} validate --json",
            shell_quote(&v.worker_bin.to_string_lossy())
        );
        for a in &v.args {
            line.push(' ');
            line.push_str(&shell_quote(&substitute(a)));
        }
        format!(
            "#!/bin/sh\n# Full harch validation of this workspace; prints JSON errors.\n{line} \"$@\"\n"
        )
    }

    pub fn job_dir(&self) -> &Path {
        &self.job_dir
    }
    /// The agent's working directory.
    pub fn root(&self) -> PathBuf {
        self.job_dir.join("workspace")
    }
    pub fn truth_dir(&self) -> PathBuf {
        self.root().join("truth")
    }
    pub fn specs_dir(&self) -> PathBuf {
        self.root().join("specs")
    }
    /// Directories the agent may write, in the order models, drafts, then `StageSpec::writable_dirs`.
    pub fn writable_dirs(&self) -> Vec<PathBuf> {
        let mut dirs = vec![
            self.specs_dir().join(MODELS_DIR),
            self.specs_dir().join(DRAFTS_DIR),
        ];
        dirs.extend(self.extra_writable.iter().cloned());
        dirs
    }
    pub fn home(&self) -> PathBuf {
        self.job_dir.join("home")
    }
    pub fn tmp(&self) -> PathBuf {
        self.job_dir.join("tmp")
    }
    pub fn bin_dir(&self) -> PathBuf {
        self.job_dir.join("bin")
    }
    pub fn logs_dir(&self) -> PathBuf {
        self.job_dir.join("logs")
    }
    pub fn fs_policy(&self) -> &FsPolicy {
        &self.fs_policy
    }
    pub fn limits(&self) -> &ResourceLimits {
        &self.limits
    }

    /// A private directory under HOME (an agent's config dir), created if missing.
    pub fn private_dir(&self, name: &str) -> Result<PathBuf, SandboxError> {
        let dir = self.home().join(stage::checked_relative(Path::new(name))?);
        stage::create_dir(&dir)?;
        if let Some((uid, gid)) = self.run_as {
            stage::chown_tree(&dir, uid, gid)?;
        }
        Ok(dir)
    }

    /// Everything a sandboxed process may write: the writable area, HOME and TMPDIR.
    pub(crate) fn write_roots(&self) -> Vec<PathBuf> {
        let mut roots = self.writable_dirs();
        roots.push(self.home());
        roots.push(self.tmp());
        roots
    }

    /// PATH for sandboxed processes: `bin/` (validate) first.
    pub fn path_env(&self) -> OsString {
        let mut path = self.bin_dir().into_os_string();
        if !self.base_path.is_empty() {
            path.push(":");
            path.push(&self.base_path);
        }
        path
    }

    /// A command that runs `program` confined to this workspace: cwd at the workspace root, an
    /// empty environment except PATH, HOME and TMPDIR, the filesystem policy and rlimits.
    pub fn command(&self, program: impl Into<OsString>) -> SandboxCommand {
        SandboxCommand::new(self, program.into())
    }
}

fn shell_quote(s: &str) -> String {
    format!("'{}'", s.replace('\'', r"'\''"))
}
