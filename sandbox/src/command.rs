//! The one way harch starts an untrusted process: [`SandboxCommand`], built from a
//! [`Workspace`], always gets a cleared environment, its own process group, closed stdin, the
//! workspace's rlimits and its Landlock policy.

use std::collections::BTreeMap;
use std::ffi::OsString;
use std::path::PathBuf;
use std::process::Stdio;
use std::sync::Arc;

use crate::freeze::ModeFreeze;
use crate::fs_policy::{FsPolicy, PreparedRuleset};
use crate::rlimits::{self, ResourceLimits};
use crate::{SandboxError, Workspace, env};

#[derive(Clone, Debug)]
pub struct SandboxCommand {
    program: OsString,
    args: Vec<OsString>,
    cwd: PathBuf,
    env: BTreeMap<String, OsString>,
    fs_policy: FsPolicy,
    write_roots: Vec<PathBuf>,
    limits: ResourceLimits,
    run_as: Option<(u32, u32)>,
}

/// A spawned sandboxed process and what was enforced on it.
pub struct SandboxedChild {
    pub child: tokio::process::Child,
    /// The process group id (= the leader's pid); every descendant that did not escape with
    /// setsid shares it.
    pub pgid: i32,
    pub landlock_enforced: bool,
}

impl SandboxCommand {
    pub(crate) fn new(ws: &Workspace, program: OsString) -> Self {
        let mut env = BTreeMap::new();
        env.insert("PATH".to_string(), ws.path_env());
        env.insert("HOME".to_string(), ws.home().into_os_string());
        env.insert("TMPDIR".to_string(), ws.tmp().into_os_string());
        env.insert("LANG".to_string(), "C.UTF-8".into());
        env.insert("TERM".to_string(), "dumb".into());
        SandboxCommand {
            program,
            args: Vec::new(),
            cwd: ws.root(),
            env,
            fs_policy: ws.fs_policy.clone(),
            write_roots: ws.write_roots(),
            limits: ws.limits.clone(),
            run_as: ws.run_as,
        }
    }

    pub fn arg(&mut self, arg: impl Into<OsString>) -> &mut Self {
        self.args.push(arg.into());
        self
    }

    pub fn args<I: IntoIterator<Item = S>, S: Into<OsString>>(&mut self, args: I) -> &mut Self {
        self.args.extend(args.into_iter().map(Into::into));
        self
    }

    /// Sets one variable. Publishing credentials (GitHub, Hub tokens) are refused.
    pub fn env(
        &mut self,
        name: &str,
        value: impl Into<OsString>,
    ) -> Result<&mut Self, SandboxError> {
        env::check(name)?;
        self.env.insert(name.to_string(), value.into());
        Ok(self)
    }

    pub fn current_dir(&mut self, dir: impl Into<PathBuf>) -> &mut Self {
        self.cwd = dir.into();
        self
    }

    pub fn limits_mut(&mut self) -> &mut ResourceLimits {
        &mut self.limits
    }

    pub fn program(&self) -> &OsString {
        &self.program
    }

    pub fn get_args(&self) -> &[OsString] {
        &self.args
    }

    pub fn get_env(&self) -> &BTreeMap<String, OsString> {
        &self.env
    }

    /// Starts the process: stdin from /dev/null, stdout and stderr piped (the caller must drain
    /// both; [`SandboxCommand::run`] does), a new process group, rlimits and Landlock applied
    /// between fork and exec.
    pub fn spawn(&self) -> Result<SandboxedChild, SandboxError> {
        let ruleset = Arc::new(PreparedRuleset::build(&self.fs_policy, &self.write_roots)?);
        let landlock_enforced = ruleset.is_enforced();
        let mut cmd = tokio::process::Command::new(&self.program);
        cmd.args(&self.args)
            .current_dir(&self.cwd)
            .env_clear()
            .envs(&self.env)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .process_group(0)
            .kill_on_drop(true);
        if let Some((uid, gid)) = self.run_as {
            // std drops supplementary groups and switches ids before our pre_exec runs.
            cmd.uid(uid).gid(gid);
        }
        let limits = self.limits.clone();
        let in_child = Arc::clone(&ruleset);
        let freeze = Arc::new(ModeFreeze::build());
        // SAFETY: the closure only makes async-signal-safe syscalls (setrlimit, prctl,
        // landlock_restrict_self) on values prepared before the fork.
        unsafe {
            cmd.pre_exec(move || {
                rlimits::apply_in_child(&limits)?;
                in_child.restrict_in_child()?;
                freeze.install_in_child()
            });
        }
        let child = cmd.spawn().map_err(|source| SandboxError::Spawn {
            program: self.program.to_string_lossy().into_owned(),
            source,
        })?;
        let pgid = child.id().map(|id| id as i32).unwrap_or(0);
        Ok(SandboxedChild {
            child,
            pgid,
            landlock_enforced,
        })
    }
}
