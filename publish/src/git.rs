//! The spec repository through the git command line: a bare local clone (no work tree to leave
//! dirty) that fetches the base branch, builds the model's branch as one commit on top of it,
//! and force-pushes that branch with a lease. The token reaches git only through a credential
//! helper that reads it from the child's environment: never in the URL, the config, an argument
//! or a message.
//!
//! Idempotence: the commit carries a `Harch-Bundle:` trailer naming its content. When the remote
//! branch already carries the same bundle, nothing is committed or pushed; when it carries a
//! commit harch did not make, the branch is left alone (a person's work is never overwritten).

mod cmd;

use std::collections::BTreeMap;
use std::fmt;
use std::fs::{File, OpenOptions};
use std::path::{Path, PathBuf};

use super::PublishError;
use super::bundle::BUNDLE_TRAILER;
use super::config::Token;
use cmd::{Git, Output};
pub use cmd::{classify_rejection, git_error};

/// A commit or tree id, as git prints it (40 hex digits).
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Oid(String);

impl Oid {
    /// The id in `text`, when it is one.
    pub fn parse(text: &str) -> Option<Oid> {
        let t = text.trim();
        (t.len() >= 40 && t.bytes().all(|b| b.is_ascii_hexdigit()))
            .then(|| Oid(t.to_ascii_lowercase()))
    }

    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl fmt::Display for Oid {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

/// A bare clone of the spec repository, locked for this process while it is open.
pub struct SpecRepo {
    git: Git,
    url: String,
    _lock: File,
}

/// What the remote holds of the two branches a publish touches.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RemoteState {
    pub base: Oid,
    /// The model's branch, when it exists.
    pub branch: Option<Oid>,
}

/// What the model's branch should carry.
#[derive(Clone, Copy)]
pub struct BranchPlan<'a> {
    pub branch: &'a str,
    pub files: &'a BTreeMap<String, Vec<u8>>,
    pub message: &'a str,
    /// [`bundle_id`](super::bundle::bundle_id) of `files`, also in `message`'s trailer.
    pub bundle_id: &'a str,
    /// Author and committer: name, email.
    pub author: (&'a str, &'a str),
}

/// What happened to the model's branch.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum BranchOutcome {
    /// A new commit was pushed (the branch was created, or reset onto the base).
    Pushed { commit: Oid, created: bool },
    /// The branch already carries this bundle: no commit, no push.
    Unchanged { commit: Oid },
    /// The base branch already holds exactly these files: nothing to propose.
    InBase,
}

impl SpecRepo {
    /// Opens (creating when missing) the bare clone at `dir` for `url`.
    pub fn open(dir: &Path, url: &str, token: Option<Token>) -> Result<SpecRepo, PublishError> {
        std::fs::create_dir_all(dir.parent().unwrap_or(Path::new(".")))
            .map_err(|e| PublishError::transient(format!("creating {}: {e}", dir.display())))?;
        let lock_path = PathBuf::from(format!("{}.lock", dir.display()));
        let lock = OpenOptions::new()
            .create(true)
            .truncate(false)
            .write(true)
            .open(&lock_path)
            .and_then(|f| f.lock().map(|()| f))
            .map_err(|e| {
                PublishError::transient(format!("locking {}: {e}", lock_path.display()))
            })?;
        let git = Git::new(dir, token);
        if dir.join("HEAD").is_file() {
            let out = git.run(&["rev-parse", "--is-bare-repository"], None)?;
            if !out.ok() || out.stdout.trim() != "true" {
                return Err(PublishError::permanent(format!(
                    "{} is not a bare git repository ({}); remove it or point publish.clone_dir elsewhere",
                    dir.display(),
                    out.stderr_line()
                )));
            }
        } else if dir.exists() && dir.read_dir().is_ok_and(|mut d| d.next().is_some()) {
            return Err(PublishError::permanent(format!(
                "{} exists and is not a git repository; point publish.clone_dir at an empty or new directory",
                dir.display()
            )));
        } else {
            let out = Git::bare_init(dir)?;
            out.check("creating the local clone")?;
        }
        Ok(SpecRepo {
            git,
            url: url.to_string(),
            _lock: lock,
        })
    }

    /// Asks the remote where `base` and `branch` are, and fetches both into
    /// `refs/remotes/origin/`.
    pub fn fetch(&self, base: &str, branch: &str) -> Result<RemoteState, PublishError> {
        let listed = self
            .git
            .remote(&["ls-remote", "--heads", "--", &self.url], None)?;
        listed.check_remote("listing branches of", &self.url)?;
        let heads: BTreeMap<&str, Oid> = listed
            .stdout
            .lines()
            .filter_map(|l| {
                let (oid, name) = l.split_once('\t')?;
                Some((name.trim(), Oid::parse(oid)?))
            })
            .collect();
        let base_ref = format!("refs/heads/{base}");
        let branch_ref = format!("refs/heads/{branch}");
        let Some(base_oid) = heads.get(base_ref.as_str()).cloned() else {
            return Err(PublishError::permanent(format!(
                "the base branch `{base}` does not exist in {}: set publish.base_branch to a branch of the spec repository",
                self.url
            )));
        };
        let branch_oid = heads.get(branch_ref.as_str()).cloned();
        let mut args = vec![
            "fetch".to_string(),
            "--no-tags".into(),
            "--no-write-fetch-head".into(),
            "--".into(),
            self.url.clone(),
            format!("+{base_ref}:refs/remotes/origin/{base}"),
        ];
        if branch_oid.is_some() {
            args.push(format!("+{branch_ref}:refs/remotes/origin/{branch}"));
        }
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        self.git
            .remote(&args, None)?
            .check_remote("fetching from", &self.url)?;
        Ok(RemoteState {
            base: base_oid,
            branch: branch_oid,
        })
    }

    /// Whether the commit's tree has a file at `path`.
    pub fn has_path(&self, commit: &Oid, path: &str) -> bool {
        self.git
            .run(&["cat-file", "-e", &format!("{commit}:{path}")], None)
            .is_ok_and(|o| o.ok())
    }

    /// Makes the remote `branch` carry `files` on top of the base, committing and pushing only
    /// when it does not already.
    pub fn publish_branch(
        &self,
        state: &RemoteState,
        plan: &BranchPlan<'_>,
    ) -> Result<BranchOutcome, PublishError> {
        let BranchPlan {
            branch,
            files,
            message,
            bundle_id,
            author,
        } = *plan;
        if let Some(tip) = &state.branch
            && self.bundle_on_branch(tip, branch)?.as_deref() == Some(bundle_id)
        {
            return Ok(BranchOutcome::Unchanged {
                commit: tip.clone(),
            });
        }
        check_identity(author)?;
        let base_tree = self.oid(
            &["rev-parse", &format!("{}^{{tree}}", state.base)],
            "reading the base tree",
        )?;
        let tree = self.tree_with(&state.base, files)?;
        if tree == base_tree {
            return Ok(BranchOutcome::InBase);
        }
        let commit = self.git.run_env(
            &[
                "commit-tree",
                "--no-gpg-sign",
                tree.as_str(),
                "-p",
                state.base.as_str(),
            ],
            Some(message.as_bytes()),
            &[
                ("GIT_AUTHOR_NAME", author.0),
                ("GIT_AUTHOR_EMAIL", author.1),
                ("GIT_COMMITTER_NAME", author.0),
                ("GIT_COMMITTER_EMAIL", author.1),
            ],
        )?;
        commit.check("committing")?;
        let commit = Oid::parse(&commit.stdout)
            .ok_or_else(|| PublishError::permanent("committing: git printed no commit id"))?;
        let local = format!("refs/heads/{branch}");
        self.git
            .run(&["update-ref", &local, commit.as_str()], None)?
            .check("updating the local branch")?;
        self.push(branch, state.branch.as_ref())?;
        Ok(BranchOutcome::Pushed {
            commit,
            created: state.branch.is_none(),
        })
    }

    /// The tree of `base` with `files` written over it, built in a private index so nothing
    /// else in the clone changes.
    fn tree_with(
        &self,
        base: &Oid,
        files: &BTreeMap<String, Vec<u8>>,
    ) -> Result<Oid, PublishError> {
        let mut entries = Vec::new();
        for (path, bytes) in files {
            let blob = self
                .git
                .run(&["hash-object", "-w", "--stdin"], Some(bytes))?;
            blob.check("writing a blob")?;
            let blob = Oid::parse(&blob.stdout)
                .ok_or_else(|| PublishError::permanent("writing a blob: git printed no id"))?;
            entries.extend_from_slice(format!("100644 blob {blob}\t{path}\0").as_bytes());
        }
        let index = tempfile::NamedTempFile::new_in(self.git.dir()).map_err(|e| {
            PublishError::transient(format!("creating an index in the local clone: {e}"))
        })?;
        let index_path = index.path().to_string_lossy().into_owned();
        let env = [("GIT_INDEX_FILE", index_path.as_str())];
        // An empty file is not an index: read-tree writes it afresh.
        std::fs::remove_file(index.path()).ok();
        self.git
            .run_env(&["read-tree", base.as_str()], None, &env)?
            .check("reading the base tree")?;
        self.git
            .run_env(
                &["update-index", "-z", "--add", "--index-info"],
                Some(&entries),
                &env,
            )?
            .check("building the tree")?;
        let tree = self.git.run_env(&["write-tree"], None, &env)?;
        tree.check("building the tree")?;
        Oid::parse(&tree.stdout)
            .ok_or_else(|| PublishError::permanent("building the tree: git printed no id"))
    }

    fn oid(&self, args: &[&str], what: &str) -> Result<Oid, PublishError> {
        let out = self.git.run(args, None)?;
        out.check(what)?;
        Oid::parse(&out.stdout)
            .ok_or_else(|| PublishError::permanent(format!("{what}: git printed no id")))
    }

    /// The bundle id of the harch commit at the head of the remote branch (merges of the base
    /// into it, as GitHub's "Update branch" makes, are looked through). A commit without the
    /// trailer is someone else's work: a permanent error, never overwritten.
    fn bundle_on_branch(&self, tip: &Oid, branch: &str) -> Result<Option<String>, PublishError> {
        let mut commit = self.commit(tip)?;
        let mut id = tip.clone();
        while commit.parents.len() > 1 {
            id = commit.parents[0].clone();
            commit = self.commit(&id)?;
        }
        match commit
            .message
            .lines()
            .rev()
            .find_map(|l| l.strip_prefix(BUNDLE_TRAILER))
        {
            Some(bundle) => Ok(Some(bundle.trim().to_string())),
            None => Err(PublishError::permanent(format!(
                "branch `{branch}` has diverged: its commit {} by {} (\"{}\") was not made by harch, and harch will not overwrite it; merge or close its pull request and delete the branch, then retry",
                &id.as_str()[..12],
                commit.author,
                commit
                    .message
                    .lines()
                    .next()
                    .unwrap_or("")
                    .chars()
                    .take(80)
                    .collect::<String>()
            ))),
        }
    }

    fn commit(&self, id: &Oid) -> Result<Commit, PublishError> {
        let out = self.git.run(&["cat-file", "commit", id.as_str()], None)?;
        out.check("reading the branch history")?;
        Ok(Commit::parse(&out.stdout))
    }

    /// Pushes the local `branch` to the remote one, provided the remote branch is still where
    /// the fetch saw it (`expected`; None: absent). Reports each rejected ref with the server's
    /// message.
    fn push(&self, branch: &str, expected: Option<&Oid>) -> Result<(), PublishError> {
        let dst = format!("refs/heads/{branch}");
        let lease = format!(
            "--force-with-lease={dst}:{}",
            expected.map(Oid::as_str).unwrap_or("")
        );
        let spec = format!("{dst}:{dst}");
        let out = self.git.remote(
            &[
                "push",
                "--porcelain",
                "--no-verify",
                &lease,
                "--",
                &self.url,
                &spec,
            ],
            None,
        )?;
        // `!<TAB>src:dst<TAB>[rejected] (stale info)` and the like, one line per refused ref.
        let refused = out.stdout.lines().find_map(|l| {
            let rest = l.strip_prefix("!\t")?;
            let (_, summary) = rest.split_once('\t')?;
            Some(summary.trim().to_string())
        });
        match refused {
            Some(summary) if summary.contains("stale info") => {
                Err(PublishError::transient(format!(
                    "branch `{branch}` changed on the remote while publishing (another push raced this one); the retry fetches it again"
                )))
            }
            Some(summary) => {
                let reason = summary
                    .split_once('(')
                    .map(|(_, r)| r.trim_end_matches(')').trim().to_string())
                    .unwrap_or(summary.clone());
                let remote = out.remote_lines();
                let msg = if remote.is_empty() {
                    reason
                } else {
                    format!("{reason}: {remote}")
                };
                Err(classify_rejection(branch, &msg))
            }
            None => out.check_remote("pushing to", &self.url),
        }
    }
}

/// A commit as `git cat-file commit` prints it: the fields harch reads.
struct Commit {
    parents: Vec<Oid>,
    /// The author's name.
    author: String,
    message: String,
}

impl Commit {
    fn parse(text: &str) -> Commit {
        let (head, message) = text.split_once("\n\n").unwrap_or((text, ""));
        let mut parents = Vec::new();
        let mut author = String::from("?");
        for line in head.lines() {
            if let Some(p) = line.strip_prefix("parent ").and_then(Oid::parse) {
                parents.push(p);
            } else if let Some(a) = line.strip_prefix("author ") {
                author = a.split(" <").next().unwrap_or("?").to_string();
            }
        }
        Commit {
            parents,
            author,
            message: message.to_string(),
        }
    }
}

/// Git refuses empty names and names with angle brackets or line breaks; say which setting.
fn check_identity((name, email): (&str, &str)) -> Result<(), PublishError> {
    let bad = |s: &str| s.trim().is_empty() || s.contains(['<', '>', '\n', '\0']);
    if bad(name) || email.contains(['<', '>', '\n', '\0']) {
        return Err(PublishError::permanent(format!(
            "publish.author_name / author_email are not a valid git identity: `{name}` <{email}>"
        )));
    }
    Ok(())
}

impl Output {
    fn check_remote(&self, what: &str, url: &str) -> Result<(), PublishError> {
        self.check(&format!("{what} {url}"))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn commits_are_read_from_git_cat_file() {
        let c = Commit::parse(
            "tree 4b825dc642cb6eb9a060e54bf8d69288fbee4904\nparent 1111111111111111111111111111111111111111\nparent 2222222222222222222222222222222222222222\nauthor Alice Doe <a@example.com> 1700000000 +0000\ncommitter Alice Doe <a@example.com> 1700000000 +0000\n\nsubject line\n\nHarch-Bundle: abc\n",
        );
        assert_eq!(c.parents.len(), 2);
        assert_eq!(c.author, "Alice Doe");
        assert!(c.message.starts_with("subject line\n"));
        assert!(Oid::parse("not an id").is_none());
    }

    #[test]
    fn identities_git_would_refuse_are_refused_first() {
        assert!(check_identity(("harch-bot", "bot@example.com")).is_ok());
        assert!(check_identity(("", "bot@example.com")).is_err());
        assert!(check_identity(("a <b>", "bot@example.com")).is_err());
    }
}
