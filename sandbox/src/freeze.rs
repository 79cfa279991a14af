//! Freezing file modes, owners and extended attributes for sandboxed processes, with a seccomp
//! filter.
//!
//! Landlock governs reads, writes and creations, but not `chmod`, `chown` or `setxattr` (ACLs
//! live in extended attributes): a process may change the mode of any file it owns, wherever it
//! is. When the worker is not root its agents run under the worker's own uid, so they own the
//! staged truth, the job records and everything else of the worker's, and could make them
//! unreadable to the worker or writable by other users. The filter below makes those calls
//! no-ops: they report success and change nothing. Success rather than `EPERM`, because ordinary
//! tools copy modes as part of their work and give up when that fails (`sed -i` preserves the
//! edited file's mode, Node's `copyFile` and coreutils' `cp` set the new file's mode); an agent
//! has no use for the modes themselves.
//!
//! On a foreign syscall ABI (32-bit calls on x86_64, the x32 ABI) every call fails with
//! `ENOSYS`, so the same calls cannot be reached under other numbers.

use std::io;

/// A compiled filter, built in the parent; only a pointer to it crosses the fork.
#[derive(Debug)]
pub(crate) struct ModeFreeze {
    #[cfg(all(
        target_os = "linux",
        any(target_arch = "x86_64", target_arch = "aarch64")
    ))]
    program: Vec<libc::sock_filter>,
}

#[cfg(all(
    target_os = "linux",
    any(target_arch = "x86_64", target_arch = "aarch64")
))]
mod bpf {
    // Classic BPF and seccomp ABI constants (stable kernel ABI).
    /// BPF_LD | BPF_W | BPF_ABS
    pub const LD_W_ABS: u16 = 0x20;
    /// BPF_JMP | BPF_JEQ | BPF_K
    pub const JMP_JEQ_K: u16 = 0x15;
    /// BPF_JMP | BPF_JGE | BPF_K
    pub const JMP_JGE_K: u16 = 0x35;
    pub const RET_K: u16 = 0x06;
    pub const RET_ALLOW: u32 = 0x7fff_0000;
    pub const RET_ERRNO: u32 = 0x0005_0000;
    /// Offsets in `struct seccomp_data`.
    pub const NR: u32 = 0;
    pub const ARCH: u32 = 4;
    pub const PR_SET_SECCOMP: libc::c_int = 22;
    pub const SECCOMP_MODE_FILTER: libc::c_ulong = 2;

    #[cfg(target_arch = "x86_64")]
    pub const NATIVE_ARCH: u32 = 0xC000_003E;
    #[cfg(target_arch = "aarch64")]
    pub const NATIVE_ARCH: u32 = 0xC000_00B7;
    /// x86_64's x32 ABI marks its syscall numbers with this bit.
    #[cfg(target_arch = "x86_64")]
    pub const X32_SYSCALL_BIT: u32 = 0x4000_0000;

    /// Newer calls share their number on every architecture.
    const FCHMODAT2: i64 = 452;
    const SETXATTRAT: i64 = 463;
    const REMOVEXATTRAT: i64 = 466;

    /// Every call that changes a file's mode, owner or extended attributes.
    pub fn frozen_calls() -> Vec<i64> {
        let mut calls = vec![
            libc::SYS_fchmod,
            libc::SYS_fchmodat,
            FCHMODAT2,
            libc::SYS_fchown,
            libc::SYS_fchownat,
            libc::SYS_setxattr,
            libc::SYS_lsetxattr,
            libc::SYS_fsetxattr,
            SETXATTRAT,
            libc::SYS_removexattr,
            libc::SYS_lremovexattr,
            libc::SYS_fremovexattr,
            REMOVEXATTRAT,
        ];
        #[cfg(target_arch = "x86_64")]
        calls.extend([libc::SYS_chmod, libc::SYS_chown, libc::SYS_lchown]);
        calls
    }

    pub fn stmt(code: u16, k: u32) -> libc::sock_filter {
        libc::sock_filter {
            code,
            jt: 0,
            jf: 0,
            k,
        }
    }

    pub fn jump(code: u16, k: u32, jt: u8, jf: u8) -> libc::sock_filter {
        libc::sock_filter { code, jt, jf, k }
    }
}

impl ModeFreeze {
    #[cfg(all(
        target_os = "linux",
        any(target_arch = "x86_64", target_arch = "aarch64")
    ))]
    pub(crate) fn build() -> ModeFreeze {
        use bpf::*;
        let calls = frozen_calls();
        let n = calls.len();
        let mut p = vec![
            stmt(LD_W_ABS, ARCH),
            jump(JMP_JEQ_K, NATIVE_ARCH, 1, 0),
            stmt(RET_K, RET_ERRNO | libc::ENOSYS as u32),
            stmt(LD_W_ABS, NR),
        ];
        #[cfg(target_arch = "x86_64")]
        p.extend([
            jump(JMP_JGE_K, X32_SYSCALL_BIT, 0, 1),
            stmt(RET_K, RET_ERRNO | libc::ENOSYS as u32),
        ]);
        for (i, nr) in calls.iter().enumerate() {
            // On a match, skip the remaining comparisons and the ALLOW: land on the no-op.
            let to_noop = (n - i) as u8;
            p.push(jump(JMP_JEQ_K, *nr as u32, to_noop, 0));
        }
        p.push(stmt(RET_K, RET_ALLOW));
        // errno 0: the call returns 0 without running.
        p.push(stmt(RET_K, RET_ERRNO));
        ModeFreeze { program: p }
    }

    #[cfg(not(all(
        target_os = "linux",
        any(target_arch = "x86_64", target_arch = "aarch64")
    )))]
    pub(crate) fn build() -> ModeFreeze {
        ModeFreeze {}
    }

    /// Installs the filter on the calling (freshly forked) process. Async-signal-safe: one
    /// `prctl` on memory prepared before the fork. Needs `PR_SET_NO_NEW_PRIVS`, which the
    /// Landlock step sets first.
    pub(crate) fn install_in_child(&self) -> io::Result<()> {
        #[cfg(all(
            target_os = "linux",
            any(target_arch = "x86_64", target_arch = "aarch64")
        ))]
        {
            let prog = libc::sock_fprog {
                len: self.program.len() as libc::c_ushort,
                filter: self.program.as_ptr() as *mut libc::sock_filter,
            };
            // SAFETY: prctl reads `prog` and the program it points to, both alive here.
            let rc = unsafe {
                libc::prctl(
                    bpf::PR_SET_SECCOMP,
                    bpf::SECCOMP_MODE_FILTER,
                    &prog as *const libc::sock_fprog,
                )
            };
            if rc != 0 {
                return Err(io::Error::last_os_error());
            }
        }
        Ok(())
    }
}
