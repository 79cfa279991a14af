//! Kernel resource limits for sandboxed processes, applied between fork and exec.
//!
//! Everything called from [`apply_in_child`] must be async-signal-safe: the worker is a
//! multi-threaded tokio process and the forked child may not allocate or take locks.

use serde::{Deserialize, Serialize};

/// rlimits for one sandboxed process tree. `None` leaves the inherited limit.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct ResourceLimits {
    /// RLIMIT_NPROC. The kernel counts every process of the real user id, not only this tree, so
    /// leave room for what else runs under that user. Root normally bypasses it; the sandbox drops
    /// the capabilities that allow that (see [`apply_in_child`]).
    pub max_processes: Option<u64>,
    /// RLIMIT_NOFILE.
    pub max_open_files: Option<u64>,
    /// RLIMIT_FSIZE: the largest file a process may write (bytes).
    pub max_file_size_bytes: Option<u64>,
    /// RLIMIT_CPU: CPU seconds per process.
    pub cpu_seconds: Option<u64>,
}

impl Default for ResourceLimits {
    fn default() -> Self {
        ResourceLimits {
            max_processes: Some(4096),
            max_open_files: Some(4096),
            max_file_size_bytes: Some(256 << 20),
            cpu_seconds: Some(3600),
        }
    }
}

/// The Linux capability numbers that would let a root agent raise or ignore its rlimits.
#[cfg(target_os = "linux")]
const CAP_SYS_ADMIN: libc::c_ulong = 21;
#[cfg(target_os = "linux")]
const CAP_SYS_RESOURCE: libc::c_ulong = 24;

/// Applies the limits to the calling (freshly forked) process.
///
/// # Safety
/// Only async-signal-safe calls; meant for `pre_exec`.
pub(crate) fn apply_in_child(limits: &ResourceLimits) -> std::io::Result<()> {
    // A root worker would otherwise hand its agent the right to raise every limit again and to
    // ignore RLIMIT_NPROC. Dropping them from the bounding set makes exec leave them out; the
    // call fails harmlessly (EPERM) for an unprivileged worker, which never had them.
    #[cfg(target_os = "linux")]
    unsafe {
        libc::prctl(libc::PR_CAPBSET_DROP, CAP_SYS_RESOURCE, 0, 0, 0);
        libc::prctl(libc::PR_CAPBSET_DROP, CAP_SYS_ADMIN, 0, 0, 0);
    }
    set(libc::RLIMIT_NPROC, limits.max_processes)?;
    set(libc::RLIMIT_NOFILE, limits.max_open_files)?;
    set(libc::RLIMIT_FSIZE, limits.max_file_size_bytes)?;
    set(libc::RLIMIT_CPU, limits.cpu_seconds)?;
    Ok(())
}

#[cfg(target_os = "linux")]
type Resource = libc::__rlimit_resource_t;
#[cfg(not(target_os = "linux"))]
type Resource = libc::c_int;

fn set(resource: Resource, value: Option<u64>) -> std::io::Result<()> {
    let Some(value) = value else { return Ok(()) };
    let mut current = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: plain syscalls on a stack value.
    unsafe {
        if libc::getrlimit(resource, &mut current) != 0 {
            return Err(std::io::Error::last_os_error());
        }
        // Never try to raise a hard limit: that needs CAP_SYS_RESOURCE and would fail the spawn.
        let value = value as libc::rlim_t;
        let hard = if current.rlim_max == libc::RLIM_INFINITY {
            value
        } else {
            value.min(current.rlim_max)
        };
        let new = libc::rlimit {
            rlim_cur: hard,
            rlim_max: hard,
        };
        if libc::setrlimit(resource, &new) != 0 {
            return Err(std::io::Error::last_os_error());
        }
    }
    Ok(())
}
