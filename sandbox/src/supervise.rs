//! Running a sandboxed process to its end: both output streams drained concurrently into capped
//! log files, a wall-clock limit, and the whole process group killed (TERM, then KILL) when the
//! time or output runs out, when the leader exits leaving children behind, or when the caller's
//! future is dropped.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

use tokio::io::{AsyncRead, AsyncReadExt, AsyncWriteExt};
use tokio::sync::Notify;

use crate::{SandboxCommand, SandboxError};

/// Limits and log destinations for one run.
#[derive(Clone, Debug)]
pub struct RunOptions {
    pub wall_time: Duration,
    pub max_stdout_bytes: u64,
    pub max_stderr_bytes: u64,
    pub stdout_path: PathBuf,
    pub stderr_path: PathBuf,
    /// How long the group gets between TERM and KILL.
    pub term_grace: Duration,
    /// Where the running group is recorded, so that rebuilding the workspace can kill it if
    /// this supervisor dies first ([`Workspace::create`](crate::Workspace::create)).
    pub group_file: Option<PathBuf>,
}

impl RunOptions {
    /// Logs `<stem>.stdout` and `<stem>.stderr` in `dir`, 16 MiB / 1 MiB caps, 5 s grace.
    pub fn new(dir: &Path, stem: &str, wall_time: Duration) -> Self {
        RunOptions {
            wall_time,
            max_stdout_bytes: 16 << 20,
            max_stderr_bytes: 1 << 20,
            stdout_path: dir.join(format!("{stem}.stdout")),
            stderr_path: dir.join(format!("{stem}.stderr")),
            term_grace: Duration::from_secs(5),
            group_file: Some(crate::leftovers::group_file(dir, stem)),
        }
    }
}

/// How a run ended.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RunReport {
    /// The exit code, when the process exited on its own.
    pub exit_code: Option<i32>,
    /// The signal that ended it, if any.
    pub signal: Option<i32>,
    pub timed_out: bool,
    /// A stream exceeded its cap; the process group was killed and the log holds exactly the cap.
    pub output_capped: bool,
    pub stdout_bytes: u64,
    pub stderr_bytes: u64,
    pub wall_time: Duration,
    pub landlock_enforced: bool,
    pub stdout_path: PathBuf,
    pub stderr_path: PathBuf,
}

impl RunReport {
    pub fn success(&self) -> bool {
        self.exit_code == Some(0) && !self.timed_out && !self.output_capped
    }
}

/// Kills the group on drop, so a cancelled run leaves nothing running, and forgets its record.
struct GroupGuard(i32, Option<PathBuf>);

impl Drop for GroupGuard {
    fn drop(&mut self) {
        signal_group(self.0, libc::SIGKILL);
        if let Some(f) = &self.1 {
            crate::leftovers::forget(f);
        }
    }
}

fn signal_group(pgid: i32, sig: i32) -> bool {
    // pgid 0 or 1 would signal our own group or everything: never.
    if pgid <= 1 {
        return false;
    }
    // SAFETY: plain syscall.
    unsafe { libc::killpg(pgid, sig) == 0 }
}

impl SandboxCommand {
    /// Spawns the command and supervises it to the end. Errors only when it cannot start or its
    /// logs cannot be written; timeouts and floods are facts in the report.
    pub async fn run(&self, opts: &RunOptions) -> Result<RunReport, SandboxError> {
        for p in [&opts.stdout_path, &opts.stderr_path] {
            if let Some(dir) = p.parent() {
                std::fs::create_dir_all(dir)
                    .map_err(SandboxError::io("creating directory", dir))?;
            }
        }
        let stdout_file = tokio::fs::File::create(&opts.stdout_path)
            .await
            .map_err(SandboxError::io("creating", &opts.stdout_path))?;
        let stderr_file = tokio::fs::File::create(&opts.stderr_path)
            .await
            .map_err(SandboxError::io("creating", &opts.stderr_path))?;

        let started = Instant::now();
        let mut spawned = self.spawn()?;
        let guard = GroupGuard(spawned.pgid, opts.group_file.clone());
        if let Some(f) = &opts.group_file {
            crate::leftovers::record(f, spawned.pgid);
        }
        let flood = Arc::new(Notify::new());
        let out = spawned.child.stdout.take().expect("stdout is piped");
        let err = spawned.child.stderr.take().expect("stderr is piped");
        let out_task = tokio::spawn(drain(
            out,
            stdout_file,
            opts.max_stdout_bytes,
            flood.clone(),
        ));
        let err_task = tokio::spawn(drain(
            err,
            stderr_file,
            opts.max_stderr_bytes,
            flood.clone(),
        ));

        let mut timed_out = false;
        let exited = tokio::select! {
            s = spawned.child.wait() => Some(s),
            _ = tokio::time::sleep(opts.wall_time) => { timed_out = true; None }
            _ = flood.notified() => None,
        };
        let status = match exited {
            Some(s) => s,
            None => {
                signal_group(guard.0, libc::SIGTERM);
                match tokio::time::timeout(opts.term_grace, spawned.child.wait()).await {
                    Ok(s) => s,
                    Err(_) => {
                        signal_group(guard.0, libc::SIGKILL);
                        spawned.child.wait().await
                    }
                }
            }
        }
        .map_err(SandboxError::io(
            "waiting for",
            PathBuf::from(self.program()),
        ))?;
        reap_leftovers(guard.0, opts.term_grace).await;
        drop(guard);

        let (stdout_bytes, out_capped) = join_drain(out_task).await;
        let (stderr_bytes, err_capped) = join_drain(err_task).await;
        use std::os::unix::process::ExitStatusExt;
        Ok(RunReport {
            exit_code: status.code(),
            signal: status.signal(),
            timed_out,
            output_capped: out_capped || err_capped,
            stdout_bytes,
            stderr_bytes,
            wall_time: started.elapsed(),
            landlock_enforced: spawned.landlock_enforced,
            stdout_path: opts.stdout_path.clone(),
            stderr_path: opts.stderr_path.clone(),
        })
    }
}

/// The leader is gone; whatever it left in its group gets TERM, a grace period, then KILL.
async fn reap_leftovers(pgid: i32, grace: Duration) {
    if !signal_group(pgid, libc::SIGTERM) {
        return;
    }
    let deadline = Instant::now() + grace;
    // Zombies still answer signal 0, so this may wait the whole grace period where nothing
    // reaps orphans; KILL afterwards is harmless either way.
    while Instant::now() < deadline && signal_group(pgid, 0) {
        tokio::time::sleep(Duration::from_millis(25)).await;
    }
    signal_group(pgid, libc::SIGKILL);
}

async fn join_drain(task: tokio::task::JoinHandle<(u64, bool)>) -> (u64, bool) {
    // Once the group is dead the pipes close; a process that escaped the group (setsid) could
    // hold them open, so the wait is bounded.
    let abort = task.abort_handle();
    match tokio::time::timeout(Duration::from_secs(2), task).await {
        Ok(Ok(r)) => r,
        _ => {
            abort.abort();
            (0, false)
        }
    }
}

/// Copies `from` into `to` until EOF or until `cap` bytes; on overflow it writes exactly `cap`
/// bytes, wakes the supervisor and stops reading (the writer then gets EPIPE or is killed).
async fn drain(
    mut from: impl AsyncRead + Unpin,
    mut to: tokio::fs::File,
    cap: u64,
    flood: Arc<Notify>,
) -> (u64, bool) {
    let mut buf = vec![0u8; 64 * 1024];
    let mut written = 0u64;
    let mut capped = false;
    loop {
        let n = match from.read(&mut buf).await {
            Ok(0) | Err(_) => break,
            Ok(n) => n,
        };
        let room = cap.saturating_sub(written) as usize;
        let take = n.min(room);
        if to.write_all(&buf[..take]).await.is_err() {
            break;
        }
        written += take as u64;
        if take < n {
            capped = true;
            flood.notify_one();
            break;
        }
    }
    let _ = to.flush().await;
    (written, capped)
}
