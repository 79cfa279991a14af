//! The filesystem policy of a sandboxed process tree, enforced with Landlock.
//!
//! The ruleset is built in the parent (it opens files and allocates) and only its file
//! descriptor crosses into the forked child, where [`restrict_in_child`] makes two syscalls.

use std::os::fd::OwnedFd;
use std::path::PathBuf;

use serde::{Deserialize, Serialize};

use crate::SandboxError;

/// Where a sandboxed process may read and write.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct FsPolicy {
    /// Fail instead of running unconfined when the kernel has no Landlock.
    pub require_landlock: bool,
    /// Trees the process may read and execute from (the agent CLIs, their runtimes, the system).
    pub read_roots: Vec<PathBuf>,
    /// Single device files the process may also write (`> /dev/null` and friends).
    pub writable_devices: Vec<PathBuf>,
    /// Extra trees the process may write, on top of the workspace's own writable areas.
    pub extra_write_roots: Vec<PathBuf>,
}

impl Default for FsPolicy {
    fn default() -> Self {
        FsPolicy {
            require_landlock: cfg!(target_os = "linux"),
            read_roots: vec![PathBuf::from("/")],
            writable_devices: ["/dev/null", "/dev/zero", "/dev/full", "/dev/tty"]
                .into_iter()
                .map(PathBuf::from)
                .collect(),
            extra_write_roots: Vec::new(),
        }
    }
}

/// The Landlock ABI version this kernel offers, or `None` when it has none.
pub fn landlock_abi() -> Option<u32> {
    #[cfg(target_os = "linux")]
    {
        const LANDLOCK_CREATE_RULESET_VERSION: libc::c_uint = 1;
        // SAFETY: the documented version query; no memory is passed.
        let v = unsafe {
            libc::syscall(
                libc::SYS_landlock_create_ruleset,
                std::ptr::null::<libc::c_void>(),
                0usize,
                LANDLOCK_CREATE_RULESET_VERSION,
            )
        };
        (v > 0).then_some(v as u32)
    }
    #[cfg(not(target_os = "linux"))]
    None
}

/// What a sandboxed process may do beneath a writable root: everything but make symbolic links,
/// FIFOs, sockets and device nodes. The worker reads what an agent leaves there; a link could
/// point it at a file the agent cannot read, a FIFO or device could block or flood its read.
/// Regular files and directories are all an agent needs: editors and Claude Code's Write make a
/// temporary file and rename it over the target in the same directory (MAKE_REG, REMOVE_FILE),
/// and renaming from another writable root is covered by REFER.
#[cfg(target_os = "linux")]
pub(crate) fn write_access(abi: landlock::ABI) -> landlock::BitFlags<landlock::AccessFs> {
    use landlock::{Access, AccessFs};
    AccessFs::from_all(abi)
        & !(AccessFs::MakeSym
            | AccessFs::MakeFifo
            | AccessFs::MakeSock
            | AccessFs::MakeChar
            | AccessFs::MakeBlock)
}

/// A ruleset ready to be enforced in a child; `None` inside means "run unconfined" (allowed
/// only when the policy does not require Landlock).
#[derive(Debug)]
pub(crate) struct PreparedRuleset(Option<OwnedFd>);

impl PreparedRuleset {
    #[cfg(target_os = "linux")]
    pub(crate) fn build(policy: &FsPolicy, write_roots: &[PathBuf]) -> Result<Self, SandboxError> {
        use landlock::{
            ABI, Access, AccessFs, CompatLevel, Compatible, PathBeneath, PathFd, Ruleset,
            RulesetAttr, RulesetCreatedAttr, Scope,
        };
        if landlock_abi().is_none() {
            return if policy.require_landlock {
                Err(SandboxError::LandlockUnavailable(
                    "landlock_create_ruleset returned no ABI".into(),
                ))
            } else {
                tracing::warn!(
                    "Landlock unavailable: sandboxed processes run without a filesystem policy"
                );
                Ok(PreparedRuleset(None))
            };
        }
        let abi = ABI::V6;
        let err = |e: &dyn std::fmt::Display| SandboxError::Landlock(e.to_string());
        let open = |p: &PathBuf| {
            PathFd::new(p).map_err(|e| SandboxError::Landlock(format!("{}: {e}", p.display())))
        };
        let mut ruleset = Ruleset::default()
            .set_compatibility(CompatLevel::BestEffort)
            .handle_access(AccessFs::from_all(abi))
            .map_err(|e| err(&e))?
            .scope(Scope::from_all(abi))
            .map_err(|e| err(&e))?
            .create()
            .map_err(|e| err(&e))?;
        for root in &policy.read_roots {
            ruleset = ruleset
                .add_rule(PathBeneath::new(open(root)?, AccessFs::from_read(abi)))
                .map_err(|e| err(&e))?;
        }
        for dev in policy.writable_devices.iter().filter(|d| d.exists()) {
            ruleset = ruleset
                .add_rule(PathBeneath::new(open(dev)?, AccessFs::from_file(abi)))
                .map_err(|e| err(&e))?;
        }
        for root in write_roots.iter().chain(&policy.extra_write_roots) {
            ruleset = ruleset
                .add_rule(PathBeneath::new(open(root)?, write_access(abi)))
                .map_err(|e| err(&e))?;
        }
        let fd: Option<OwnedFd> = ruleset.into();
        if fd.is_none() && policy.require_landlock {
            return Err(SandboxError::LandlockUnavailable(
                "ruleset not created".into(),
            ));
        }
        Ok(PreparedRuleset(fd))
    }

    #[cfg(not(target_os = "linux"))]
    pub(crate) fn build(policy: &FsPolicy, _write_roots: &[PathBuf]) -> Result<Self, SandboxError> {
        if policy.require_landlock {
            return Err(SandboxError::LandlockUnavailable("not Linux".into()));
        }
        Ok(PreparedRuleset(None))
    }

    pub(crate) fn is_enforced(&self) -> bool {
        self.0.is_some()
    }

    /// Confines the calling (freshly forked) process. Async-signal-safe: two syscalls.
    /// `PR_SET_NO_NEW_PRIVS` is set even without a ruleset: the seccomp filter needs it, and no
    /// sandboxed process has any business gaining privileges through a setuid binary.
    pub(crate) fn restrict_in_child(&self) -> std::io::Result<()> {
        #[cfg(target_os = "linux")]
        {
            // SAFETY: prctl and landlock_restrict_self take integers only.
            unsafe {
                if libc::prctl(libc::PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0 {
                    return Err(std::io::Error::last_os_error());
                }
                if let Some(fd) = &self.0 {
                    use std::os::fd::AsRawFd;
                    if libc::syscall(libc::SYS_landlock_restrict_self, fd.as_raw_fd(), 0u32) != 0 {
                        return Err(std::io::Error::last_os_error());
                    }
                }
            }
        }
        Ok(())
    }
}
