//! The spec repository through libgit2: a bare local clone (no work tree to leave dirty) that
//! fetches the base branch, builds the model's branch as one commit on top of it, and
//! force-pushes that branch with a lease, authenticating with the token only in the credential
//! callback (never in the URL, the config or a message).
//!
//! Idempotence: the commit carries a `Harch-Bundle:` trailer naming its content. When the remote
//! branch already carries the same bundle, nothing is committed or pushed; when it carries a
//! commit harch did not make, the branch is left alone (a person's work is never overwritten).

use std::cell::{Cell, RefCell};
use std::collections::BTreeMap;
use std::fs::{File, OpenOptions};
use std::path::{Path, PathBuf};

use git2::{
    CredentialType, Direction, ErrorClass, ErrorCode, FetchOptions, ObjectType, Oid, PushOptions,
    RemoteCallbacks, Repository, Signature,
};

use super::PublishError;
use super::bundle::BUNDLE_TRAILER;
use super::config::Token;

/// A bare clone of the spec repository, locked for this process while it is open.
pub struct SpecRepo {
    repo: Repository,
    url: String,
    token: Option<Token>,
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
        let repo = if dir.join("HEAD").is_file() {
            Repository::open_bare(dir).map_err(|e| {
                PublishError::permanent(format!(
                    "{} is not a bare git repository ({}); remove it or point publish.clone_dir elsewhere",
                    dir.display(),
                    e.message()
                ))
            })?
        } else if dir.exists() && dir.read_dir().is_ok_and(|mut d| d.next().is_some()) {
            return Err(PublishError::permanent(format!(
                "{} exists and is not a git repository; point publish.clone_dir at an empty or new directory",
                dir.display()
            )));
        } else {
            Repository::init_bare(dir).map_err(|e| git_error("creating the local clone", &e))?
        };
        Ok(SpecRepo {
            repo,
            url: url.to_string(),
            token,
            _lock: lock,
        })
    }

    /// Asks the remote where `base` and `branch` are, and fetches both into
    /// `refs/remotes/origin/`.
    pub fn fetch(&self, base: &str, branch: &str) -> Result<RemoteState, PublishError> {
        let mut remote = self
            .repo
            .remote_anonymous(&self.url)
            .map_err(|e| git_error("configuring the remote", &e))?;
        let tried = Cell::new(false);
        let heads: BTreeMap<String, Oid> = {
            let conn = remote
                .connect_auth(Direction::Fetch, Some(self.callbacks(&tried)), None)
                .map_err(|e| self.remote_error("connecting to", &e))?;
            conn.list()
                .map_err(|e| self.remote_error("listing branches of", &e))?
                .iter()
                .map(|h| (h.name().to_string(), h.oid()))
                .collect()
        };
        let base_ref = format!("refs/heads/{base}");
        let branch_ref = format!("refs/heads/{branch}");
        let Some(base_oid) = heads.get(&base_ref).copied() else {
            return Err(PublishError::permanent(format!(
                "the base branch `{base}` does not exist in {}: set publish.base_branch to a branch of the spec repository",
                self.url
            )));
        };
        let branch_oid = heads.get(&branch_ref).copied();
        let mut specs = vec![format!("+{base_ref}:refs/remotes/origin/{base}")];
        if branch_oid.is_some() {
            specs.push(format!("+{branch_ref}:refs/remotes/origin/{branch}"));
        }
        let tried = Cell::new(false);
        let mut fo = FetchOptions::new();
        fo.remote_callbacks(self.callbacks(&tried));
        remote
            .fetch(&specs, Some(&mut fo), None)
            .map_err(|e| self.remote_error("fetching from", &e))?;
        Ok(RemoteState {
            base: base_oid,
            branch: branch_oid,
        })
    }

    /// Whether the base commit's tree has a file at `path`.
    pub fn has_path(&self, commit: Oid, path: &str) -> bool {
        self.repo
            .find_commit(commit)
            .and_then(|c| c.tree())
            .and_then(|t| t.get_path(Path::new(path)))
            .is_ok()
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
        if let Some(tip) = state.branch
            && self.bundle_on_branch(tip, branch)?.as_deref() == Some(bundle_id)
        {
            return Ok(BranchOutcome::Unchanged { commit: tip });
        }
        let base = self
            .repo
            .find_commit(state.base)
            .map_err(|e| git_error("reading the base commit", &e))?;
        let base_tree = base
            .tree()
            .map_err(|e| git_error("reading the base tree", &e))?;
        let mut update = git2::build::TreeUpdateBuilder::new();
        for (path, bytes) in files {
            let oid = self
                .repo
                .blob(bytes)
                .map_err(|e| git_error("writing a blob", &e))?;
            update.upsert(path.as_str(), oid, git2::FileMode::Blob);
        }
        let tree_oid = update
            .create_updated(&self.repo, &base_tree)
            .map_err(|e| git_error("building the tree", &e))?;
        if tree_oid == base_tree.id() {
            return Ok(BranchOutcome::InBase);
        }
        let tree = self
            .repo
            .find_tree(tree_oid)
            .map_err(|e| git_error("reading the new tree", &e))?;
        let sig = Signature::now(author.0, author.1).map_err(|e| {
            PublishError::permanent(format!(
                "publish.author_name / author_email are not a valid git identity: {}",
                e.message()
            ))
        })?;
        let commit = self
            .repo
            .commit(None, &sig, &sig, message, &tree, &[&base])
            .map_err(|e| git_error("committing", &e))?;
        let local = format!("refs/heads/{branch}");
        self.repo
            .reference(&local, commit, true, "harch publish")
            .map_err(|e| git_error("updating the local branch", &e))?;
        self.push(branch, state.branch)?;
        Ok(BranchOutcome::Pushed {
            commit,
            created: state.branch.is_none(),
        })
    }

    /// The bundle id of the harch commit at the head of the remote branch (merges of the base
    /// into it, as GitHub's "Update branch" makes, are looked through). A commit without the
    /// trailer is someone else's work: a permanent error, never overwritten.
    fn bundle_on_branch(&self, tip: Oid, branch: &str) -> Result<Option<String>, PublishError> {
        let mut commit = self
            .repo
            .find_commit(tip)
            .map_err(|e| git_error("reading the branch", &e))?;
        while commit.parent_count() > 1 {
            commit = commit
                .parent(0)
                .map_err(|e| git_error("reading the branch history", &e))?;
        }
        let message = commit.message().unwrap_or("");
        match message
            .lines()
            .rev()
            .find_map(|l| l.strip_prefix(BUNDLE_TRAILER))
        {
            Some(id) => Ok(Some(id.trim().to_string())),
            None => {
                let who = commit.author();
                Err(PublishError::permanent(format!(
                    "branch `{branch}` has diverged: its commit {} by {} (\"{}\") was not made by harch, and harch will not overwrite it; merge or close its pull request and delete the branch, then retry",
                    &commit.id().to_string()[..12],
                    who.name().unwrap_or("?"),
                    commit
                        .summary()
                        .ok()
                        .flatten()
                        .unwrap_or("")
                        .chars()
                        .take(80)
                        .collect::<String>()
                )))
            }
        }
    }

    /// Force-pushes `commit` to `branch`, provided the remote branch is still where the fetch
    /// saw it (`expected`; None: absent). Reports each rejected ref with the server's message.
    fn push(&self, branch: &str, expected: Option<Oid>) -> Result<(), PublishError> {
        let mut remote = self
            .repo
            .remote_anonymous(&self.url)
            .map_err(|e| git_error("configuring the remote", &e))?;
        let tried = Cell::new(false);
        let rejected: RefCell<Option<String>> = RefCell::new(None);
        let moved: Cell<bool> = Cell::new(false);
        let dst = format!("refs/heads/{branch}");
        let mut cb = self.callbacks(&tried);
        cb.push_negotiation(|updates| {
            for u in updates {
                if u.dst_refname().ok() == Some(dst.as_str()) {
                    let now = (!u.src().is_zero()).then(|| u.src());
                    if now != expected {
                        moved.set(true);
                        return Err(git2::Error::from_str(
                            "the branch moved since it was fetched",
                        ));
                    }
                }
            }
            Ok(())
        });
        cb.push_update_reference(|_refname, status| {
            if let Some(msg) = status {
                *rejected.borrow_mut() = Some(msg.to_string());
            }
            Ok(())
        });
        let mut po = PushOptions::new();
        po.remote_callbacks(cb);
        let spec = format!("+refs/heads/{branch}:refs/heads/{branch}");
        let result = remote.push(&[spec.as_str()], Some(&mut po));
        if moved.get() {
            return Err(PublishError::transient(format!(
                "branch `{branch}` changed on the remote while publishing (another push raced this one); the retry fetches it again"
            )));
        }
        if let Err(e) = result {
            return Err(self.remote_error("pushing to", &e));
        }
        drop(po);
        if let Some(msg) = rejected.into_inner() {
            return Err(classify_rejection(branch, &msg));
        }
        Ok(())
    }

    /// Credentials for one operation: the token once, as `x-access-token` (GitHub's user for
    /// app and personal tokens); asked again, it was refused, and libgit2 must not loop.
    fn callbacks<'a>(&'a self, tried: &'a Cell<bool>) -> RemoteCallbacks<'a> {
        let mut cb = RemoteCallbacks::new();
        cb.credentials(move |_url, _user, allowed| {
            if tried.replace(true) {
                return Err(git2::Error::new(
                    ErrorCode::Auth,
                    ErrorClass::Http,
                    "the remote refused the token",
                ));
            }
            match &self.token {
                Some(t) if allowed.contains(CredentialType::USER_PASS_PLAINTEXT) => {
                    git2::Cred::userpass_plaintext("x-access-token", t.expose())
                }
                _ => Err(git2::Error::new(
                    ErrorCode::Auth,
                    ErrorClass::Http,
                    "the remote asks for credentials harch cannot give (only tokens over https are supported)",
                )),
            }
        });
        cb
    }

    fn remote_error(&self, what: &str, e: &git2::Error) -> PublishError {
        git_error(&format!("{what} {}", self.url), e)
    }

    /// The bare repository (for tests and inspection).
    pub fn repository(&self) -> &Repository {
        &self.repo
    }
}

/// A libgit2 error, sorted: authentication, missing repositories and bad input are permanent;
/// the network, TLS hiccups, server errors, rate limits and held locks are transient.
pub fn git_error(what: &str, e: &git2::Error) -> PublishError {
    let msg = format!("{what}: {}", e.message());
    let lower = e.message().to_ascii_lowercase();
    let status = http_status(&lower);
    if e.code() == ErrorCode::Auth || matches!(status, Some(401 | 403)) {
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
    if e.code() == ErrorCode::Locked {
        return PublishError::transient(msg);
    }
    match e.class() {
        ErrorClass::Net | ErrorClass::Ssl | ErrorClass::Os | ErrorClass::Http => {
            PublishError::transient(msg)
        }
        _ if e.code() == ErrorCode::NotFound || lower.contains("not found") => {
            PublishError::permanent(msg)
        }
        _ => PublishError::permanent(msg),
    }
}

/// `unexpected http status code: 404` → 404.
fn http_status(lower: &str) -> Option<u16> {
    let i = lower.find("status code")?;
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

/// The object a reference names in the clone, if any (for tests and inspection).
pub fn resolve(repo: &Repository, refname: &str) -> Option<Oid> {
    repo.find_reference(refname)
        .ok()
        .and_then(|r| r.peel(ObjectType::Commit).ok())
        .map(|o| o.id())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rejections_and_errors_are_sorted() {
        assert!(classify_rejection("b", "failed to lock file").is_transient());
        assert!(!classify_rejection("b", "pre-receive hook declined").is_transient());
        assert!(!classify_rejection("b", "GH006: Protected branch update failed").is_transient());
        let e = git2::Error::new(
            ErrorCode::GenericError,
            ErrorClass::Http,
            "unexpected http status code: 404",
        );
        assert!(!git_error("x", &e).is_transient());
        let e = git2::Error::new(
            ErrorCode::GenericError,
            ErrorClass::Http,
            "unexpected http status code: 502",
        );
        assert!(git_error("x", &e).is_transient());
        let e = git2::Error::new(ErrorCode::Auth, ErrorClass::Http, "authentication required");
        assert!(!git_error("x", &e).is_transient());
        let e = git2::Error::new(ErrorCode::GenericError, ErrorClass::Net, "connection reset");
        assert!(git_error("x", &e).is_transient());
    }
}
