//! Job records on disk, shared by every process that uses one data dir.
//!
//! Layout under the data dir:
//! - `jobs/<id>/job.json`: the record, replaced atomically (temp file + rename) under `jobs/<id>/.lock`
//! - `jobs/<id>/job.log`: one line per event, for `logs`
//! - `jobs/<id>/<stage>/`: a stage's artifacts, moved into place when the stage completes
//! - `active/<model>@<revision>#<kind>`: the pending or running job of that kind for that model
//!   revision (dedupe: a `revalidate` request never returns a pending `generate` job)
//!
//! Locks are `flock`s, so a killed process never leaves one behind.

use std::fs::{self, File, OpenOptions};
use std::io::Write;
use std::path::{Path, PathBuf};

use anyhow::{Context, bail};
use ulid::Ulid;

/// A new job id, greater than every id this process made before: jobs made in the same
/// millisecond keep their order, so `last` is the one made last. (Ids from two processes in
/// one millisecond are ordered by their random part.)
fn next_id() -> Ulid {
    static IDS: std::sync::Mutex<ulid::Generator> = std::sync::Mutex::new(ulid::Generator::new());
    let mut ids = IDS
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner);
    // Overflow: 2^80 ids in one millisecond.
    ids.generate().unwrap_or_else(|_| Ulid::generate())
}

use super::record::{JobRecord, JobRequest, now_ms};

#[derive(Debug, Clone)]
pub struct JobStore {
    root: PathBuf,
}

/// Writes `bytes` to `path` so that readers see the old or the new content, never a torn file
/// ([`harch_files::write_atomic`], with the path in the error).
pub fn write_atomic(path: &Path, bytes: &[u8]) -> anyhow::Result<()> {
    harch_files::write_atomic(path, bytes)
        .with_context(|| format!("cannot write {}", path.display()))
}

/// An exclusive `flock` held until dropped.
struct Locked(#[allow(dead_code)] File);

fn lock(path: &Path) -> anyhow::Result<Locked> {
    let f = OpenOptions::new()
        .create(true)
        .truncate(false)
        .write(true)
        .open(path)
        .with_context(|| format!("cannot open lock file {}", path.display()))?;
    f.lock()
        .with_context(|| format!("cannot lock {}", path.display()))?;
    Ok(Locked(f))
}

impl JobStore {
    /// Opens (creating if needed) the job records under `data_dir`.
    pub fn open(data_dir: &Path) -> anyhow::Result<JobStore> {
        for sub in ["jobs", "active"] {
            fs::create_dir_all(data_dir.join(sub)).with_context(|| {
                format!("cannot create data dir {}", data_dir.join(sub).display())
            })?;
        }
        Ok(JobStore {
            root: data_dir.to_path_buf(),
        })
    }

    /// The job records under `data_dir` for commands that only read them (`status`): `None`
    /// when there are none yet, without creating anything.
    pub fn existing(data_dir: &Path) -> Option<JobStore> {
        data_dir.join("jobs").is_dir().then(|| JobStore {
            root: data_dir.to_path_buf(),
        })
    }

    pub fn root(&self) -> &Path {
        &self.root
    }

    /// The directory of job `id`; refuses anything that is not a job id.
    pub fn job_dir(&self, id: &str) -> anyhow::Result<PathBuf> {
        if Ulid::from_string(id).is_err() {
            bail!("`{id}` is not a job id (job ids are 26-character ULIDs, as `enqueue` prints)");
        }
        Ok(self.root.join("jobs").join(id))
    }

    /// The job `given` names: a whole id, `last` (the newest job), or a unique prefix of an
    /// id, as git takes short hashes (any case: ids are upper-case Crockford base32). A prefix
    /// several jobs share is refused, listing them.
    pub fn resolve(&self, given: &str) -> anyhow::Result<String> {
        let want = given.trim().to_ascii_uppercase();
        if want == "LAST" {
            return self.ids()?.pop().ok_or_else(|| {
                anyhow::anyhow!(
                    "there is no last job: {} holds no jobs",
                    self.root.display()
                )
            });
        }
        if Ulid::from_string(&want).is_ok() {
            return Ok(want);
        }
        const CROCKFORD: &str = "0123456789ABCDEFGHJKMNPQRSTVWXYZ";
        if want.is_empty() || want.len() > 26 || !want.chars().all(|c| CROCKFORD.contains(c)) {
            bail!(
                "`{given}` is not a job id: give an id as `enqueue` printed it, a unique prefix \
                 of one (as `status` lists them), or `last`"
            );
        }
        let matches: Vec<String> = self
            .ids()?
            .into_iter()
            .filter(|id| id.starts_with(&want))
            .collect();
        match matches.as_slice() {
            [one] => Ok(one.clone()),
            [] => bail!("no job id starts with {want} in {}", self.root.display()),
            many => {
                let listed: Vec<String> = many
                    .iter()
                    .map(|id| match self.load(id) {
                        Ok(r) => format!("  {id}  {}  {}", r.request.model_id, r.state.as_str()),
                        Err(_) => format!("  {id}"),
                    })
                    .collect();
                bail!(
                    "job id prefix {want} is ambiguous: {} jobs start with it; give more \
                     characters:\n{}",
                    many.len(),
                    listed.join("\n")
                )
            }
        }
    }

    /// Every job id, oldest first (ULIDs sort by creation time).
    fn ids(&self) -> anyhow::Result<Vec<String>> {
        let dir = self.root.join("jobs");
        let mut ids: Vec<String> = match fs::read_dir(&dir) {
            Ok(entries) => entries
                .filter_map(Result::ok)
                .filter_map(|e| e.file_name().into_string().ok())
                .filter(|n| Ulid::from_string(n).is_ok())
                .collect(),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Vec::new(),
            Err(e) => return Err(e).with_context(|| format!("cannot list {}", dir.display())),
        };
        ids.sort();
        Ok(ids)
    }

    fn record_path(&self, id: &str) -> anyhow::Result<PathBuf> {
        Ok(self.job_dir(id)?.join("job.json"))
    }

    pub fn load(&self, id: &str) -> anyhow::Result<JobRecord> {
        let path = self.record_path(id)?;
        let text = match fs::read(&path) {
            Ok(t) => t,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                bail!("job {id} does not exist in {}", self.root.display())
            }
            Err(e) => return Err(e).with_context(|| format!("cannot read {}", path.display())),
        };
        serde_json::from_slice(&text)
            .with_context(|| format!("corrupt job record {}", path.display()))
    }

    fn save(&self, rec: &JobRecord) -> anyhow::Result<()> {
        let bytes = serde_json::to_vec_pretty(rec)?;
        write_atomic(&self.record_path(&rec.id)?, &bytes)
    }

    /// Read-modify-write of one record under its lock. `f` may refuse with an error, which leaves
    /// the record untouched.
    pub fn update<T>(
        &self,
        id: &str,
        f: impl FnOnce(&mut JobRecord) -> anyhow::Result<T>,
    ) -> anyhow::Result<(T, JobRecord)> {
        let dir = self.job_dir(id)?;
        if !dir.is_dir() {
            bail!("job {id} does not exist in {}", self.root.display());
        }
        let _guard = lock(&dir.join(".lock"))?;
        let mut rec = self.load(id)?;
        let out = f(&mut rec)?;
        rec.updated_ms = now_ms();
        self.save(&rec)?;
        Ok((out, rec))
    }

    /// Creates a job for `request`, unless that model revision already has a pending or running
    /// job of the same kind: then returns that one. The bool says whether the job is new. A new job records
    /// `queue_task` as the store task that will carry it.
    pub fn create_or_existing(
        &self,
        request: JobRequest,
        queue_task: &str,
    ) -> anyhow::Result<(JobRecord, bool)> {
        let _guard = lock(&self.root.join("enqueue.lock"))?;
        let key = self.active_key(&request);
        if let Ok(id) = fs::read_to_string(&key) {
            match self.load(id.trim()) {
                Ok(rec) if !rec.state.is_final() => return Ok((rec, false)),
                _ => {}
            }
        }
        let id = next_id().to_string();
        let mut rec = JobRecord::new(id.clone(), request, now_ms());
        rec.queue_tasks.push(queue_task.to_string());
        let dir = self.job_dir(&id)?;
        fs::create_dir_all(&dir).with_context(|| format!("cannot create {}", dir.display()))?;
        self.save(&rec)?;
        write_atomic(&key, id.as_bytes())?;
        Ok((rec, true))
    }

    /// Makes `rec` the active job of its model revision again (for `retry`); fails when another
    /// job of the same revision is pending or running.
    pub fn claim_active(&self, rec: &JobRecord) -> anyhow::Result<()> {
        let _guard = lock(&self.root.join("enqueue.lock"))?;
        let key = self.active_key(&rec.request);
        if let Ok(other) = fs::read_to_string(&key) {
            let other = other.trim();
            if other != rec.id
                && let Ok(o) = self.load(other)
                && !o.state.is_final()
            {
                bail!(
                    "{}@{} already has job {other} ({}); cancel it first",
                    rec.request.model_id,
                    rec.request.revision,
                    o.state.as_str()
                );
            }
        }
        write_atomic(&key, rec.id.as_bytes())
    }

    /// Forgets `rec` as its revision's active job (it reached a final state).
    pub fn release_active(&self, rec: &JobRecord) -> anyhow::Result<()> {
        let _guard = lock(&self.root.join("enqueue.lock"))?;
        let key = self.active_key(&rec.request);
        if fs::read_to_string(&key).is_ok_and(|id| id.trim() == rec.id) {
            fs::remove_file(&key).with_context(|| format!("cannot remove {}", key.display()))?;
        }
        Ok(())
    }

    fn active_key(&self, request: &JobRequest) -> PathBuf {
        self.root.join("active").join(request.dedupe_key())
    }

    /// Jobs pending or running, without reading every record.
    pub fn active_count(&self) -> anyhow::Result<usize> {
        let dir = self.root.join("active");
        let n = fs::read_dir(&dir)
            .with_context(|| format!("cannot list {}", dir.display()))?
            .filter_map(Result::ok)
            .filter(|e| !e.file_name().to_string_lossy().starts_with('.'))
            .count();
        Ok(n)
    }

    /// The records the dedupe index names (pending or running, unless a crash left one behind).
    pub fn active_jobs(&self) -> anyhow::Result<Vec<JobRecord>> {
        let dir = self.root.join("active");
        let mut out = Vec::new();
        for e in fs::read_dir(&dir)
            .with_context(|| format!("cannot list {}", dir.display()))?
            .filter_map(Result::ok)
        {
            if e.file_name().to_string_lossy().starts_with('.') {
                continue;
            }
            if let Ok(id) = fs::read_to_string(e.path())
                && let Ok(rec) = self.load(id.trim())
            {
                out.push(rec);
            }
        }
        Ok(out)
    }

    /// Every job, oldest first (ids are ULIDs, so names sort by creation time).
    pub fn list(&self) -> anyhow::Result<Vec<JobRecord>> {
        let ids = self.ids()?;
        ids.iter()
            .filter(|id| self.record_path(id).is_ok_and(|p| p.exists()))
            .map(|id| self.load(id))
            .collect()
    }

    /// Appends one line to the job's log.
    pub fn log(&self, id: &str, line: &str) -> anyhow::Result<()> {
        let path = self.job_dir(id)?.join("job.log");
        let stamp = humantime::format_rfc3339_millis(std::time::SystemTime::now());
        let mut f = OpenOptions::new()
            .create(true)
            .append(true)
            .open(&path)
            .with_context(|| format!("cannot open {}", path.display()))?;
        // One write per line keeps concurrent appends from interleaving.
        f.write_all(format!("{stamp} {line}\n").as_bytes())
            .with_context(|| format!("cannot write {}", path.display()))
    }

    /// Holds job `id`'s run lock, or None when another live process holds it.
    pub fn try_run_lock(&self, id: &str) -> anyhow::Result<Option<RunLock>> {
        let path = self.job_dir(id)?.join("run.lock");
        let f = OpenOptions::new()
            .create(true)
            .truncate(false)
            .write(true)
            .open(&path)
            .with_context(|| format!("cannot open {}", path.display()))?;
        match f.try_lock() {
            Ok(()) => Ok(Some(RunLock(f))),
            Err(fs::TryLockError::WouldBlock) => Ok(None),
            Err(fs::TryLockError::Error(e)) => {
                Err(e).with_context(|| format!("cannot lock {}", path.display()))
            }
        }
    }
}

/// Proof that this process runs a job; released on drop or when the process dies.
pub struct RunLock(#[allow(dead_code)] File);

#[cfg(test)]
mod tests {
    use super::*;
    use crate::record::{JobKind, JobState};

    fn request(model: &str) -> JobRequest {
        JobRequest {
            model_id: model.into(),
            revision: "main".into(),
            kind: JobKind::Revalidate,
            agent: "claude".into(),
            guards: "full".into(),
            stages: vec![crate::stage::Stage::Noop],
            priority: 0,
            offline: true,
            exclude_library_spec: false,
            agent_model: None,
            ablation: None,
        }
    }

    #[test]
    fn dedupes_until_the_job_is_final() {
        let tmp = tempfile::tempdir().unwrap();
        let store = JobStore::open(tmp.path()).unwrap();
        let (a, new_a) = store.create_or_existing(request("org/m"), "t").unwrap();
        let (b, new_b) = store.create_or_existing(request("org/m"), "t").unwrap();
        assert!(new_a && !new_b);
        assert_eq!(a.id, b.id);
        assert_eq!(store.active_count().unwrap(), 1);
        let (_, done) = store
            .update(&a.id, |r| {
                r.state = JobState::Succeeded;
                Ok(())
            })
            .unwrap();
        store.release_active(&done).unwrap();
        assert_eq!(store.active_count().unwrap(), 0);
        let (c, new_c) = store.create_or_existing(request("org/m"), "t").unwrap();
        assert!(new_c && c.id != a.id);
        assert_eq!(store.list().unwrap().len(), 2);
    }

    #[test]
    fn refuses_ids_that_are_paths() {
        let tmp = tempfile::tempdir().unwrap();
        let store = JobStore::open(tmp.path()).unwrap();
        assert!(store.load("../../etc").is_err());
        let err = store.load("01JZZZZZZZZZZZZZZZZZZZZZZZ").unwrap_err();
        assert!(err.to_string().contains("does not exist"), "{err}");
    }

    #[test]
    fn prefixes_and_last_resolve_and_an_ambiguous_prefix_lists_the_jobs() {
        let tmp = tempfile::tempdir().unwrap();
        let store = JobStore::open(tmp.path()).unwrap();
        let (a, _) = store.create_or_existing(request("org/a"), "t").unwrap();
        let (b, _) = store.create_or_existing(request("org/b"), "t").unwrap();
        assert_eq!(store.resolve("last").unwrap(), b.id);
        assert_eq!(store.resolve(&a.id).unwrap(), a.id);
        // The shortest prefix that tells them apart, in lower case.
        let common =
            a.id.chars()
                .zip(b.id.chars())
                .take_while(|(x, y)| x == y)
                .count();
        let short = a.id[..=common].to_ascii_lowercase();
        assert_eq!(store.resolve(&short).unwrap(), a.id);
        let err = store.resolve(&a.id[..common]).unwrap_err().to_string();
        assert!(
            err.contains("is ambiguous: 2 jobs start with it")
                && err.contains(&format!("{}  org/a  pending", a.id))
                && err.contains(&format!("{}  org/b  pending", b.id)),
            "{err}"
        );
        let err = store.resolve("ZZZZ").unwrap_err().to_string();
        assert!(err.contains("no job id starts with ZZZZ"), "{err}");
        let err = store.resolve("../x").unwrap_err().to_string();
        assert!(err.contains("is not a job id"), "{err}");
        let empty = tempfile::tempdir().unwrap();
        let err = JobStore {
            root: empty.path().into(),
        }
        .resolve("last")
        .unwrap_err();
        assert!(err.to_string().contains("there is no last job"), "{err}");
    }

    #[test]
    fn run_lock_is_exclusive() {
        let tmp = tempfile::tempdir().unwrap();
        let store = JobStore::open(tmp.path()).unwrap();
        let (a, _) = store.create_or_existing(request("org/m"), "t").unwrap();
        let held = store.try_run_lock(&a.id).unwrap();
        assert!(held.is_some());
        assert!(store.try_run_lock(&a.id).unwrap().is_none());
        drop(held);
        assert!(store.try_run_lock(&a.id).unwrap().is_some());
    }
}
