//! Process groups a dead supervisor left running. A run kills its whole group when it ends, when
//! it times out and when its future is dropped; only a supervisor that dies itself (SIGKILL, a
//! crash, a lost machine) leaves a group behind, still writing into the workspace. Each run
//! therefore records its group in `<stem>.group` next to its logs while it runs, and rebuilding
//! the workspace kills any group still recorded there before anything else happens.
//!
//! A recorded group id is only signalled while it still means the same group: Linux never hands
//! out a number that is still in use as a process group id, so if the leader has exited but
//! members remain, the number is still theirs; if a process with that pid exists, its start time
//! must be the recorded leader's.

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

const SUFFIX: &str = ".group";

/// Where a run with logs `<dir>/<stem>.*` records its process group.
pub(crate) fn group_file(dir: &Path, stem: &str) -> PathBuf {
    dir.join(format!("{stem}{SUFFIX}"))
}

/// Start time of `pid` in clock ticks since boot (field 22 of `/proc/<pid>/stat`).
fn start_time(pid: i32) -> Option<u64> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // The command name (field 2) may hold spaces and parentheses: fields after the last ')'.
    let rest = stat.rsplit_once(')')?.1;
    rest.split_whitespace().nth(19)?.parse().ok()
}

pub(crate) fn record(path: &Path, pgid: i32) {
    if let Some(start) = start_time(pgid) {
        let _ = harch_files::write_atomic(path, format!("{pgid} {start}\n").as_bytes());
    }
}

pub(crate) fn forget(path: &Path) {
    let _ = std::fs::remove_file(path);
}

/// Kills every group recorded under `dir` that still runs, waits (up to a few seconds) until
/// its members are gone, and removes the records. Returns the groups killed.
pub(crate) fn kill_recorded(dir: &Path) -> Vec<i32> {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return Vec::new();
    };
    let mut killed = Vec::new();
    for entry in entries.flatten() {
        let name = entry.file_name();
        if !name.to_string_lossy().ends_with(SUFFIX)
            || !entry.file_type().is_ok_and(|t| t.is_file())
        {
            continue;
        }
        let path = entry.path();
        let text = std::fs::read_to_string(&path).unwrap_or_default();
        let mut parts = text.split_whitespace();
        let pgid = parts.next().and_then(|p| p.parse::<i32>().ok());
        let start = parts.next().and_then(|p| p.parse::<u64>().ok());
        if let (Some(pgid), Some(start)) = (pgid, start)
            && pgid > 1
        {
            let same_group = match start_time(pgid) {
                None => true,
                Some(now) => now == start,
            };
            // SAFETY: plain syscall; pgid > 1 never names our own group or every process.
            if same_group && unsafe { libc::killpg(pgid, libc::SIGKILL) } == 0 {
                killed.push(pgid);
            }
        }
        forget(&path);
    }
    let deadline = Instant::now() + Duration::from_secs(5);
    for pgid in &killed {
        // SAFETY: signal 0 only checks for existence. Zombies answer too until reaped by init.
        while Instant::now() < deadline && unsafe { libc::killpg(*pgid, 0) } == 0 {
            if group_is_only_zombies(*pgid) {
                break;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }
    if !killed.is_empty() {
        tracing::warn!(groups = ?killed, dir = %dir.display(), "killed process groups left running by an earlier supervisor");
    }
    killed
}

fn group_is_only_zombies(pgid: i32) -> bool {
    let Ok(procs) = std::fs::read_dir("/proc") else {
        return true;
    };
    for p in procs.flatten() {
        let Some(pid) = p.file_name().to_str().and_then(|s| s.parse::<i32>().ok()) else {
            continue;
        };
        let Ok(stat) = std::fs::read_to_string(format!("/proc/{pid}/stat")) else {
            continue;
        };
        let Some(rest) = stat.rsplit_once(')').map(|r| r.1) else {
            continue;
        };
        let mut f = rest.split_whitespace();
        let state = f.next();
        let pgrp = f.nth(1).and_then(|s| s.parse::<i32>().ok());
        if pgrp == Some(pgid) && state != Some("Z") {
            return false;
        }
    }
    true
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::process::{CommandExt, ExitStatusExt};

    fn orphan_group() -> std::process::Child {
        std::process::Command::new("sh")
            .args(["-c", "sleep 300 & sleep 300"])
            .process_group(0)
            .spawn()
            .unwrap()
    }

    #[test]
    fn recorded_groups_are_killed_whole_and_forgotten() {
        let dir = tempfile::tempdir().unwrap();
        let mut child = orphan_group();
        let pgid = child.id() as i32;
        record(&group_file(dir.path(), "generate-1.claude"), pgid);
        assert!(dir.path().join("generate-1.claude.group").is_file());
        assert_eq!(kill_recorded(dir.path()), [pgid]);
        assert_eq!(child.wait().unwrap().signal(), Some(libc::SIGKILL));
        // The background sleep, a member of the same group, went too.
        assert!(group_is_only_zombies(pgid));
        assert!(!dir.path().join("generate-1.claude.group").exists());
    }

    #[test]
    fn a_pid_that_now_names_another_process_is_left_alone() {
        let dir = tempfile::tempdir().unwrap();
        let mut child = orphan_group();
        let pgid = child.id() as i32;
        // Same number, another start time: the recorded group is gone and the pid reused.
        std::fs::write(dir.path().join("x.group"), format!("{pgid} 1\n")).unwrap();
        assert!(kill_recorded(dir.path()).is_empty());
        assert!(
            child.try_wait().unwrap().is_none(),
            "an unrelated process was killed"
        );
        // SAFETY: our own child's group.
        unsafe { libc::killpg(pgid, libc::SIGKILL) };
        child.wait().unwrap();
    }
}
