//! Running `git` on the bare clone: a clean environment (no inherited repository, no prompts,
//! C locale so messages can be sorted), the token through a credential helper reading the
//! child's environment, and git's failures sorted transient or permanent.

use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use super::super::PublishError;
use super::super::config::Token;

/// The child's variable the credential helper reads the token from.
const TOKEN_VAR: &str = "HARCH_PUBLISH_GIT_TOKEN";

/// Answers git's `get` with the token as `x-access-token` (GitHub's user for app and personal
/// tokens); git calls it at most once per request and gives up when the token is refused.
const HELPER: &str = "!f() { test \"$1\" = get || exit 0; echo username=x-access-token; echo \"password=$HARCH_PUBLISH_GIT_TOKEN\"; }; f";

/// Variables that would point git at another repository or configuration than the clone's.
const INHERITED: &[&str] = &[
    "GIT_DIR",
    "GIT_WORK_TREE",
    "GIT_INDEX_FILE",
    "GIT_OBJECT_DIRECTORY",
    "GIT_ALTERNATE_OBJECT_DIRECTORIES",
    "GIT_NAMESPACE",
    "GIT_CONFIG",
    "GIT_CONFIG_PARAMETERS",
    "GIT_CONFIG_COUNT",
    "GIT_ASKPASS",
    "SSH_ASKPASS",
    "GIT_SSH_COMMAND",
    "GIT_EDITOR",
];

pub struct Git {
    dir: PathBuf,
    token: Option<Token>,
}

/// What one git command printed, and whether it succeeded.
pub struct Output {
    status: bool,
    pub stdout: String,
    pub stderr: String,
}

impl Git {
    pub fn new(dir: &Path, token: Option<Token>) -> Git {
        Git {
            dir: dir.to_path_buf(),
            token,
        }
    }

    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// `git init --bare DIR`.
    pub fn bare_init(dir: &Path) -> Result<Output, PublishError> {
        let mut c = base_command();
        c.arg("init").arg("--bare").arg("--quiet").arg(dir);
        execute(c, None)
    }

    /// A local command on the clone.
    pub fn run(&self, args: &[&str], stdin: Option<&[u8]>) -> Result<Output, PublishError> {
        self.run_env(args, stdin, &[])
    }

    pub fn run_env(
        &self,
        args: &[&str],
        stdin: Option<&[u8]>,
        env: &[(&str, &str)],
    ) -> Result<Output, PublishError> {
        let mut c = base_command();
        c.arg("--git-dir").arg(&self.dir).args(args);
        for (k, v) in env {
            c.env(k, v);
        }
        execute(c, stdin)
    }

    /// A command that talks to the remote: credentials only from harch's helper (the user's
    /// helpers are reset), never from a prompt.
    pub fn remote(&self, args: &[&str], stdin: Option<&[u8]>) -> Result<Output, PublishError> {
        let mut c = base_command();
        c.arg("--git-dir")
            .arg(&self.dir)
            .args(["-c", "credential.helper=", "-c", "core.askPass="]);
        if let Some(t) = &self.token {
            c.args(["-c", &format!("credential.helper={HELPER}")]);
            c.env(TOKEN_VAR, t.expose());
        }
        c.args(args);
        execute(c, stdin)
    }
}

fn base_command() -> Command {
    let mut c = Command::new("git");
    for k in INHERITED {
        c.env_remove(k);
    }
    c.env("GIT_TERMINAL_PROMPT", "0")
        .env("LC_ALL", "C")
        .env("LANGUAGE", "C");
    c
}

fn execute(mut c: Command, stdin: Option<&[u8]>) -> Result<Output, PublishError> {
    c.stdin(if stdin.is_some() {
        Stdio::piped()
    } else {
        Stdio::null()
    })
    .stdout(Stdio::piped())
    .stderr(Stdio::piped());
    let mut child = c.spawn().map_err(|e| {
        PublishError::permanent(format!(
            "cannot run git ({e}): publishing needs the git command line on PATH"
        ))
    })?;
    if let (Some(bytes), Some(mut pipe)) = (stdin, child.stdin.take()) {
        // A git that exits early closes the pipe; its status tells why.
        let _ = pipe.write_all(bytes);
    }
    let out = child
        .wait_with_output()
        .map_err(|e| PublishError::transient(format!("waiting for git: {e}")))?;
    Ok(Output {
        status: out.status.success(),
        stdout: String::from_utf8_lossy(&out.stdout).into_owned(),
        stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
    })
}

impl Output {
    pub fn ok(&self) -> bool {
        self.status
    }

    /// Git's message, on one line (`fatal:`/`error:` lines first).
    pub fn stderr_line(&self) -> String {
        let lines: Vec<&str> = self
            .stderr
            .lines()
            .map(str::trim)
            .filter(|l| !l.is_empty() && !l.starts_with("hint:"))
            .collect();
        lines.join("; ")
    }

    /// What the remote said (`remote: ` lines), on one line.
    pub fn remote_lines(&self) -> String {
        let lines: Vec<&str> = self
            .stderr
            .lines()
            .filter_map(|l| l.strip_prefix("remote:"))
            .map(str::trim)
            .filter(|l| !l.is_empty())
            .collect();
        lines.join("; ")
    }

    /// Ok when git succeeded, else its message sorted by [`git_error`].
    pub fn check(&self, what: &str) -> Result<(), PublishError> {
        if self.status {
            return Ok(());
        }
        Err(git_error(what, &self.stderr_line()))
    }
}

/// A git failure, sorted: authentication, missing repositories and bad input are permanent;
/// the network, TLS hiccups, server errors, rate limits and held locks are transient.
pub fn git_error(what: &str, message: &str) -> PublishError {
    let msg = format!("{what}: {message}");
    let lower = message.to_ascii_lowercase();
    let status = http_status(&lower);
    let auth = [
        "authentication failed",
        "could not read username",
        "could not read password",
        "terminal prompts disabled",
        "invalid username or password",
        "permission denied",
    ];
    if auth.iter().any(|a| lower.contains(a)) || matches!(status, Some(401 | 403)) {
        return PublishError::permanent(format!(
            "{msg} (authentication failed: check the token's access to the repository; it needs contents: write)"
        ));
    }
    if let Some(s) = status {
        return if s == 408 || s == 429 || s >= 500 {
            PublishError::transient(msg)
        } else {
            PublishError::permanent(msg)
        };
    }
    let transient = [
        "could not resolve host",
        "failed to connect",
        "connection timed out",
        "connection reset",
        "connection refused",
        "operation timed out",
        "early eof",
        "rpc failed",
        "ssl",
        "tls",
        "gnutls",
        "the remote end hung up",
        "unable to access",
        "index.lock",
        "unable to create",
        "cannot lock ref",
    ];
    if transient.iter().any(|t| lower.contains(t)) {
        return PublishError::transient(msg);
    }
    PublishError::permanent(msg)
}

/// `The requested URL returned error: 404` → 404.
fn http_status(lower: &str) -> Option<u16> {
    let i = lower
        .find("returned error:")
        .or_else(|| lower.find("status code"))?;
    lower[i..]
        .split(|c: char| !c.is_ascii_digit())
        .find(|t| t.len() == 3)
        .and_then(|t| t.parse().ok())
}

/// A ref the server refused to update. Branch protection, rulesets and hooks refuse every
/// time; a lock or a concurrent update clears on its own.
pub fn classify_rejection(branch: &str, msg: &str) -> PublishError {
    let lower = msg.to_ascii_lowercase();
    let transient = [
        "lock",
        "stale info",
        "fetch first",
        "non-fast-forward",
        "try again",
    ];
    if transient.iter().any(|t| lower.contains(t)) {
        return PublishError::transient(format!(
            "the remote did not update `{branch}` ({msg}); the retry fetches and pushes again"
        ));
    }
    PublishError::permanent(format!(
        "the remote rejected the push of `{branch}`: {msg} (a branch protection rule, ruleset or hook covers it: exempt the bot's branch prefix or change publish.branch_prefix)"
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rejections_and_errors_are_sorted() {
        assert!(classify_rejection("b", "failed to lock").is_transient());
        assert!(!classify_rejection("b", "pre-receive hook declined").is_transient());
        assert!(!classify_rejection("b", "GH006: Protected branch update failed").is_transient());
        let e = git_error(
            "x",
            "fatal: unable to access 'https://h/r.git/': The requested URL returned error: 404",
        );
        assert!(!e.is_transient());
        let e = git_error(
            "x",
            "fatal: unable to access 'https://h/r.git/': The requested URL returned error: 502",
        );
        assert!(e.is_transient());
        let e = git_error("x", "fatal: Authentication failed for 'https://h/r.git/'");
        assert!(!e.is_transient());
        assert!(e.to_string().contains("authentication failed"));
        let e = git_error(
            "x",
            "fatal: unable to access 'https://h/r.git/': Could not resolve host: h",
        );
        assert!(e.is_transient());
        let e = git_error(
            "x",
            "fatal: 'nowhere' does not appear to be a git repository",
        );
        assert!(!e.is_transient());
    }
}
