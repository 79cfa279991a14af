//! Truth directories: the on-disk form of a model's ground truth that `validate` reads and the
//! Hub fetcher writes (layout in docs/truth-dir.md).
//!
//! ```text
//! config.json                      required
//! generation_config.json           optional
//! model.safetensors.index.json     sharded checkpoints only
//! shards/<file>.header.json        a shard's JSON header (or <file> itself, a real .safetensors)
//! inventory.txt                    range-compressed tensor list, when no headers are at hand
//! source/*.py                      forward source
//! truth.json                       provenance: model id, revision sha, files fetched
//! ```

use std::collections::BTreeMap;
use std::io::Read;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicUsize, Ordering};

use anyhow::{Context, bail};
use harch_guards::truth::header::{self, Header};
use harch_guards::truth::index::{self, Index};
use harch_guards::truth::{Inventory, Truth, ranges};
use serde::{Deserialize, Serialize};

use crate::inventory_cache::{self, InventoryCache, Key};

pub const CONFIG: &str = "config.json";
pub const GENERATION_CONFIG: &str = "generation_config.json";
pub const INDEX: &str = "model.safetensors.index.json";
pub const SINGLE_FILE: &str = "model.safetensors";
pub const SHARDS_DIR: &str = "shards";
pub const HEADER_SUFFIX: &str = ".header.json";
pub const INVENTORY: &str = "inventory.txt";
pub const SOURCE_DIR: &str = "source";
pub const TRUTH_JSON: &str = "truth.json";

/// `truth.json`: where the truth came from. Everything but `model_id` is optional so a
/// hand-made directory needs only `{"model_id": "org/name"}` (or no truth.json at all).
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct TruthMeta {
    pub model_id: String,
    /// Commit sha the files were fetched at.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub revision: Option<String>,
    /// What was asked for (branch, tag or sha) before it was resolved.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub requested_revision: Option<String>,
    /// `hub`, `snapshot` (bundled offline snapshot) or `local`.
    #[serde(default)]
    pub origin: String,
    /// Files written, with the Hub etag and full file size where known.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub files: Vec<FileRecord>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tensor_count: Option<usize>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub total_bytes: Option<u64>,
    /// transformers version whose modeling source was used for native architectures.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub source_origin: Option<String>,
}

#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct FileRecord {
    /// Path in the Hub repo (e.g. `model-00001-of-000163.safetensors`).
    pub path: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub etag: Option<String>,
    /// Size of the whole file on the Hub; for shards it lets a later load check that the
    /// header's offsets end exactly at the end of the payload.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub size: Option<u64>,
}

/// Reads a truth directory into [`Truth`], checking every header, the index against the
/// headers, and the sizes truth.json records.
pub fn load_truth_dir(path: &Path) -> anyhow::Result<Truth> {
    load_truth_dir_cached(path, None)
}

/// [`load_truth_dir`], taking the inventory from `cache` when these very files were read and
/// checked before, and keeping it there when they are read now.
pub fn load_truth_dir_cached(path: &Path, cache: Option<&InventoryCache>) -> anyhow::Result<Truth> {
    let meta = read_meta(path)?;
    let config_path = path.join(CONFIG);
    let config: serde_json::Value = serde_json::from_slice(
        &std::fs::read(&config_path)
            .with_context(|| format!("reading {}", config_path.display()))?,
    )
    .with_context(|| format!("{} is not valid JSON", config_path.display()))?;
    let inventory = load_inventory(path, meta.as_ref(), cache)?;
    let sources = load_sources(&path.join(SOURCE_DIR))?;
    Ok(Truth {
        config,
        inventory,
        sources,
        model_id: meta.as_ref().map(|m| m.model_id.clone()),
        revision: meta.and_then(|m| m.revision),
    })
}

pub fn read_meta(path: &Path) -> anyhow::Result<Option<TruthMeta>> {
    let p = path.join(TRUTH_JSON);
    match std::fs::read(&p) {
        Ok(bytes) => {
            Ok(Some(serde_json::from_slice(&bytes).with_context(|| {
                format!("{} is malformed", p.display())
            })?))
        }
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
        Err(e) => Err(e).with_context(|| format!("reading {}", p.display())),
    }
}

fn load_inventory(
    dir: &Path,
    meta: Option<&TruthMeta>,
    cache: Option<&InventoryCache>,
) -> anyhow::Result<Inventory> {
    let index_path = dir.join(INDEX);
    let sizes: BTreeMap<&str, u64> = meta
        .map(|m| {
            m.files
                .iter()
                .filter_map(|f| Some((f.path.as_str(), f.size?)))
                .collect()
        })
        .unwrap_or_default();
    let size = |file: &String| sizes.get(file.as_str()).copied();
    let listed = listed_headers(&dir.join(SHARDS_DIR))?;
    let cached = cache.and_then(|c| Some((c, cache_key(dir, &listed, &sizes)?)));
    if let Some((cache, key)) = &cached
        && let Some(inventory) = cache.get(key)
    {
        return Ok(inventory);
    }
    // The index and the headers on disk are parsed at the same time: for a large checkpoint
    // they are 20 MB of JSON and most of the time `validate` takes. The index, the largest
    // file, goes first.
    let jobs: Vec<Option<&String>> = std::iter::once(None)
        .chain(listed.iter().map(Some))
        .collect();
    let parts = parallel_map(&jobs, |job| match job {
        None => Part::Index(read_index(&index_path)),
        Some(file) => Part::Header(read_header(dir, file, size(file))),
    });
    let mut index = Ok(None);
    let mut headers = Vec::with_capacity(listed.len());
    for part in parts {
        match part {
            Part::Index(i) => index = i,
            Part::Header(h) => headers.push(h),
        }
    }
    let index = index?;
    let mut parsed: BTreeMap<String, anyhow::Result<Option<Header>>> =
        listed.iter().cloned().zip(headers).collect();
    let mut files: Vec<String> = match &index {
        Some(i) => i.shard_files(),
        None => vec![SINGLE_FILE.to_string()],
    };
    // Headers the index does not name still count: a stray shard is a disagreement to report.
    for extra in parsed.keys() {
        if !files.contains(extra) {
            files.push(extra.clone());
        }
    }
    // Shards the index names that are not bare headers: real .safetensors files, or missing.
    let rest: Vec<String> = files
        .iter()
        .filter(|f| !parsed.contains_key(*f))
        .cloned()
        .collect();
    let rest_headers = parallel_map(&rest, |file| read_header(dir, file, size(file)));
    parsed.extend(rest.into_iter().zip(rest_headers));
    let headers: Vec<anyhow::Result<Option<Header>>> = files
        .iter()
        .map(|f| parsed.remove(f).unwrap_or(Ok(None)))
        .collect();
    let mut shards: Vec<(String, Header)> = Vec::with_capacity(files.len());
    for (file, header) in files.into_iter().zip(headers) {
        match header? {
            Some(h) => shards.push((file, h)),
            // Without an index, a missing single file means "no headers here"; fall back below.
            None if index.is_none() => {}
            None => bail!(
                "{}: the index names shard `{file}` but neither {SHARDS_DIR}/{file}{HEADER_SUFFIX} nor {file} exists",
                dir.display()
            ),
        }
    }
    if index.is_none() && shards.is_empty() {
        return load_compressed_inventory(dir, meta);
    }
    let inventory = index::assemble(index, shards)
        .with_context(|| format!("{}: index and shard headers disagree", dir.display()))?;
    // Kept only if the files still hash to the key: one rewritten while it was parsed would
    // otherwise leave its new inventory under its old bytes' key.
    if let Some((cache, key)) = cached
        && cache_key(dir, &listed, &sizes).as_ref() == Some(&key)
        && let Err(e) = cache.put(&key, &inventory)
    {
        // A cache that cannot be written costs time, not correctness.
        tracing::debug!("keeping the inventory of {}: {e}", dir.display());
    }
    Ok(inventory)
}

/// The cache key of a directory's inventory: every byte it is read from. `None` for a
/// directory without bare headers or with real `.safetensors` files (not kept).
fn cache_key(dir: &Path, listed: &[String], sizes: &BTreeMap<&str, u64>) -> Option<Key> {
    if listed.is_empty() || holds_real_files(dir) {
        return None;
    }
    let mut paths = vec![dir.join(INDEX)];
    paths.extend(
        listed
            .iter()
            .map(|f| dir.join(SHARDS_DIR).join(format!("{f}{HEADER_SUFFIX}"))),
    );
    let digests = parallel_map(&paths, |p| match read_bytes(p) {
        Ok(bytes) => Some(inventory_cache::digest(&bytes)),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Some([0; 32]),
        Err(_) => None,
    });
    let sizes = inventory_cache::digest(format!("{sizes:?}").as_bytes());
    let names = std::iter::once(INDEX).chain(listed.iter().map(String::as_str));
    let mut inputs: Vec<(&str, [u8; 32])> = names
        .zip(digests)
        .map(|(name, d)| Some((name, d?)))
        .collect::<Option<_>>()?;
    inputs.push((TRUTH_JSON, sizes));
    inventory_cache::key(inputs)
}

/// What one job of [`load_inventory`] read.
enum Part {
    Index(anyhow::Result<Option<Index>>),
    Header(anyhow::Result<Option<Header>>),
}

/// `f` over `items` on every core (this thread included), results in `items`' order. Each
/// thread takes the next item when it is done with one, so one large file does not leave a
/// core idle while another works through its share.
fn parallel_map<T: Sync, R: Send>(items: &[T], f: impl Fn(&T) -> R + Sync) -> Vec<R> {
    let threads = std::thread::available_parallelism()
        .map(|n| n.get())
        .unwrap_or(1)
        .min(items.len());
    if threads <= 1 {
        return items.iter().map(f).collect();
    }
    let next = AtomicUsize::new(0);
    let work = || {
        let mut done = Vec::new();
        loop {
            let k = next.fetch_add(1, Ordering::Relaxed);
            let Some(item) = items.get(k) else {
                return done;
            };
            done.push((k, f(item)));
        }
    };
    let mut done: Vec<(usize, R)> = std::thread::scope(|scope| {
        let helpers: Vec<_> = (1..threads).map(|_| scope.spawn(work)).collect();
        let mine = work();
        helpers
            .into_iter()
            .flat_map(|h| match h.join() {
                Ok(done) => done,
                Err(panic) => std::panic::resume_unwind(panic),
            })
            .chain(mine)
            .collect()
    });
    done.sort_unstable_by_key(|(k, _)| *k);
    done.into_iter().map(|(_, r)| r).collect()
}

/// A file's bytes: mapped when large, so that reading a 9 MB index costs neither a copy nor a
/// fresh page per 4 KB of it.
enum Bytes {
    Mapped(memmap2::Mmap),
    Read(Vec<u8>),
}

impl std::ops::Deref for Bytes {
    type Target = [u8];
    fn deref(&self) -> &[u8] {
        match self {
            Bytes::Mapped(m) => m,
            Bytes::Read(v) => v,
        }
    }
}

fn read_bytes(path: &Path) -> std::io::Result<Bytes> {
    const MAP_FROM: u64 = 64 * 1024;
    let file = std::fs::File::open(path)?;
    let len = file.metadata()?.len();
    if len < MAP_FROM {
        let mut v = Vec::with_capacity(len as usize);
        (&file).read_to_end(&mut v)?;
        return Ok(Bytes::Read(v));
    }
    // SAFETY: the map is read-only and dropped once parsed. A file truncated while mapped
    // would fault; truth directories are written once and renamed into place (harch never
    // rewrites a file in one), and agents only read them.
    let map = unsafe { memmap2::Mmap::map(&file)? };
    Ok(Bytes::Mapped(map))
}

fn read_index(path: &Path) -> anyhow::Result<Option<Index>> {
    let bytes = match read_bytes(path) {
        Ok(bytes) => bytes,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(e).with_context(|| format!("reading {}", path.display())),
    };
    let index = index::parse_index(&bytes).with_context(|| format!("{}", path.display()))?;
    Ok(Some(index))
}

fn listed_headers(shards_dir: &Path) -> anyhow::Result<Vec<String>> {
    let mut out = Vec::new();
    let entries = match std::fs::read_dir(shards_dir) {
        Ok(e) => e,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(out),
        Err(e) => return Err(e).with_context(|| format!("listing {}", shards_dir.display())),
    };
    for entry in entries {
        let name = entry?.file_name().to_string_lossy().into_owned();
        if let Some(file) = name.strip_suffix(HEADER_SUFFIX) {
            out.push(file.to_string());
        }
    }
    out.sort();
    Ok(out)
}

/// A shard's header from `shards/<file>.header.json`, or from the real file's first bytes.
fn read_header(dir: &Path, file: &str, size: Option<u64>) -> anyhow::Result<Option<Header>> {
    // The name comes from the index: it must not reach outside the directory.
    if let Err(why) = crate::names::check_repo_path(file) {
        bail!(
            "{}: the index names shard `{file}`, which is not a plain relative path ({why})",
            dir.display()
        );
    }
    let bare = dir.join(SHARDS_DIR).join(format!("{file}{HEADER_SUFFIX}"));
    if bare.exists() {
        let json = read_bytes(&bare).with_context(|| format!("reading {}", bare.display()))?;
        let payload_len = size.map(|s| s.saturating_sub(header::LEN_PREFIX + json.len() as u64));
        let h = header::parse_json(&json, payload_len)
            .with_context(|| format!("{}", bare.display()))?;
        return Ok(Some(h));
    }
    for real in [dir.join(file), dir.join(SHARDS_DIR).join(file)] {
        if real.exists() {
            return read_safetensors_header(&real).map(Some);
        }
    }
    Ok(None)
}

/// Reads only the length prefix and the JSON header of a real `.safetensors` file.
pub fn read_safetensors_header(path: &Path) -> anyhow::Result<Header> {
    let mut f = std::fs::File::open(path).with_context(|| format!("opening {}", path.display()))?;
    let file_len = f.metadata()?.len();
    let mut prefix = [0u8; header::LEN_PREFIX as usize];
    let got = read_full(&mut f, &mut prefix)?;
    let len = header::json_len(&prefix[..got]).with_context(|| format!("{}", path.display()))?;
    let mut bytes = prefix.to_vec();
    f.take(len).read_to_end(&mut bytes)?;
    header::parse_file_prefix(&bytes, Some(file_len)).with_context(|| format!("{}", path.display()))
}

fn read_full(f: &mut std::fs::File, buf: &mut [u8]) -> std::io::Result<usize> {
    let mut n = 0;
    while n < buf.len() {
        match f.read(&mut buf[n..])? {
            0 => break,
            k => n += k,
        }
    }
    Ok(n)
}

fn load_compressed_inventory(dir: &Path, meta: Option<&TruthMeta>) -> anyhow::Result<Inventory> {
    let p = dir.join(INVENTORY);
    let text = std::fs::read_to_string(&p).with_context(|| {
        format!(
            "{}: no tensor inventory (expected {INDEX}, {SINGLE_FILE}, {SHARDS_DIR}/*{HEADER_SUFFIX} or {INVENTORY})",
            dir.display()
        )
    })?;
    let mut inventory = ranges::expand(&text).with_context(|| format!("{}", p.display()))?;
    inventory.total_size = meta.and_then(|m| m.total_bytes);
    if let Some(declared) = inventory.total_size
        && inventory.total_bytes() != declared as u128
    {
        bail!(
            "{}: tensors hold {} bytes but truth.json records {declared}",
            p.display(),
            inventory.total_bytes()
        );
    }
    Ok(inventory)
}

fn load_sources(dir: &Path) -> anyhow::Result<BTreeMap<String, String>> {
    let mut out = BTreeMap::new();
    let entries = match std::fs::read_dir(dir) {
        Ok(e) => e,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(out),
        Err(e) => return Err(e).with_context(|| format!("listing {}", dir.display())),
    };
    for entry in entries {
        let entry = entry?;
        let name = entry.file_name().to_string_lossy().into_owned();
        if name.ends_with(".py") {
            let text = std::fs::read_to_string(entry.path())
                .with_context(|| format!("reading {}", entry.path().display()))?;
            out.insert(name, text);
        }
    }
    Ok(out)
}

/// Files to put in a new truth directory, by relative path.
pub type DirFiles = BTreeMap<PathBuf, Vec<u8>>;

/// Whether `fetch` may write `model_id`'s truth at `out` without `--force`: when nothing is
/// there, an empty directory, or a truth directory of the same model (a refresh). Anything else
/// would be replaced by the write, so it is refused, saying why.
pub fn check_out_dir(out: &Path, model_id: &str) -> anyhow::Result<()> {
    let meta = match std::fs::symlink_metadata(out) {
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(()),
        Err(e) => return Err(e).with_context(|| format!("cannot inspect {}", out.display())),
        Ok(m) => m,
    };
    let refuse = |what: String| {
        anyhow::anyhow!(
            "--out {} {what}; writing the truth of {model_id} there would replace it: choose \
             another directory, or pass --force to replace it",
            out.display()
        )
    };
    if !meta.is_dir() {
        return Err(refuse("is a file, not a directory".into()));
    }
    let mut entries = std::fs::read_dir(out)
        .with_context(|| format!("cannot list {}", out.display()))?
        .peekable();
    if entries.peek().is_none() {
        return Ok(());
    }
    let owner = std::fs::read(out.join(TRUTH_JSON))
        .ok()
        .and_then(|b| serde_json::from_slice::<TruthMeta>(&b).ok())
        .map(|m| m.model_id);
    match owner {
        Some(m) if m == model_id => Ok(()),
        Some(m) => Err(refuse(format!("holds the truth of another model, {m}"))),
        None => Err(refuse(format!(
            "is not empty and is not a truth directory (no readable {TRUTH_JSON})"
        ))),
    }
}

/// Writes a whole truth directory at once: into a sibling temp directory, then renamed into
/// place, so readers never see half a truth and a crash leaves the old one intact.
pub fn write_dir_atomically(out: &Path, files: &DirFiles) -> anyhow::Result<()> {
    let staging = Staging::new(out)?;
    for (rel, bytes) in files {
        staging.write(rel, bytes)?;
    }
    staging.commit()
}

/// A truth directory being built: a temp directory next to `out` that files are written into
/// as they become known (the Hub fetcher writes each shard header while others are in flight),
/// renamed into place in one step by [`Staging::commit`]. Dropped without a commit, it is
/// removed: nothing is ever written at `out` but a whole directory.
pub struct Staging {
    dir: tempfile::TempDir,
    out: PathBuf,
    parent: PathBuf,
}

impl Staging {
    pub fn new(out: &Path) -> anyhow::Result<Staging> {
        // Absolute, so that `--out .` stages next to the directory rather than inside it.
        let out =
            std::path::absolute(out).with_context(|| format!("resolving {}", out.display()))?;
        let out = out.canonicalize().unwrap_or(out);
        let parent = out
            .parent()
            .map(Path::to_path_buf)
            .with_context(|| format!("{} has no parent to stage in", out.display()))?;
        std::fs::create_dir_all(&parent)
            .with_context(|| format!("creating {}", parent.display()))?;
        let dir = tempfile::Builder::new()
            .prefix(".truth-")
            .tempdir_in(&parent)
            .with_context(|| format!("creating a temp dir in {}", parent.display()))?;
        // The temp dir is 0700; a truth directory is an ordinary one.
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o755))?;
        Ok(Staging { dir, out, parent })
    }

    /// The staging directory itself, for writers that run elsewhere (the fetcher's tasks).
    pub fn path(&self) -> &Path {
        self.dir.path()
    }

    /// Creates `rel` and its parents inside the staging directory.
    pub fn create_dir(&self, rel: &Path) -> anyhow::Result<()> {
        let p = self.dir.path().join(rel);
        std::fs::create_dir_all(&p).with_context(|| format!("creating {}", p.display()))
    }

    /// Writes `rel` (a relative path the caller checked) inside the staging directory. Not
    /// fsync'ed one by one: [`Staging::commit`] makes the directory durable once.
    pub fn write(&self, rel: &Path, bytes: &[u8]) -> anyhow::Result<()> {
        let p = self.dir.path().join(rel);
        if let Some(d) = p.parent() {
            std::fs::create_dir_all(d).with_context(|| format!("creating {}", d.display()))?;
        }
        std::fs::write(&p, bytes).with_context(|| format!("writing {}", p.display()))
    }

    /// Moves the staged directory to `out` (an old one there is moved aside and removed), then
    /// fsyncs the parent directory once so the rename survives a crash.
    pub fn commit(self) -> anyhow::Result<()> {
        let Staging { dir, out, parent } = self;
        let staged = dir.keep();
        let cwd = std::env::current_dir()
            .ok()
            .and_then(|d| d.canonicalize().ok());
        let renamed = if out.is_dir() && cwd.as_deref().is_some_and(|c| c.starts_with(&out)) {
            // The caller's current directory (`--out .`): replaced in place, so that its shell
            // is not left in a deleted directory.
            replace_contents(&out, &staged).map(|()| {
                std::fs::remove_dir(&staged).ok();
            })
        } else if std::fs::symlink_metadata(&out).is_ok() {
            let old = parent.join(format!(
                ".truth-old-{}-{}",
                std::process::id(),
                out.file_name()
                    .map(|n| n.to_string_lossy().into_owned())
                    .unwrap_or_default()
            ));
            std::fs::rename(&out, &old)
                .with_context(|| format!("moving old {} aside", out.display()))
                .and_then(|()| {
                    match std::fs::rename(&staged, &out) {
                        Ok(()) if old.is_dir() => std::fs::remove_dir_all(&old).ok(),
                        // `--force` over a file.
                        Ok(()) => std::fs::remove_file(&old).ok(),
                        // Put the old truth back rather than leave nothing.
                        Err(e) => {
                            std::fs::rename(&old, &out).ok();
                            return Err(e)
                                .with_context(|| format!("renaming into {}", out.display()));
                        }
                    };
                    Ok(())
                })
        } else {
            std::fs::rename(&staged, &out)
                .with_context(|| format!("renaming into {}", out.display()))
        };
        if let Err(e) = renamed {
            std::fs::remove_dir_all(&staged).ok();
            return Err(e);
        }
        std::fs::File::open(&parent)
            .and_then(|d| d.sync_all())
            .with_context(|| format!("syncing {}", parent.display()))
    }
}

/// Empties `dir` and moves `staged`'s entries into it.
fn replace_contents(dir: &Path, staged: &Path) -> anyhow::Result<()> {
    for entry in std::fs::read_dir(dir)? {
        let p = entry?.path();
        if p.is_dir() && !p.is_symlink() {
            std::fs::remove_dir_all(&p)
        } else {
            std::fs::remove_file(&p)
        }
        .with_context(|| format!("removing {}", p.display()))?;
    }
    for entry in std::fs::read_dir(staged)? {
        let entry = entry?;
        let to = dir.join(entry.file_name());
        std::fs::rename(entry.path(), &to)
            .with_context(|| format!("moving into {}", to.display()))?;
    }
    Ok(())
}

/// Writes a truth that has no shard headers (a bundled snapshot) as a truth directory: config,
/// range-compressed inventory, sources, truth.json.
pub fn write_from_truth(out: &Path, truth: &Truth, meta: &TruthMeta) -> anyhow::Result<()> {
    let mut files = DirFiles::new();
    files.insert(CONFIG.into(), serde_json::to_vec_pretty(&truth.config)?);
    files.insert(
        INVENTORY.into(),
        ranges::compress(truth.inventory.iter()).into_bytes(),
    );
    for (name, text) in &truth.sources {
        files.insert(Path::new(SOURCE_DIR).join(name), text.clone().into_bytes());
    }
    files.insert(TRUTH_JSON.into(), serde_json::to_vec_pretty(meta)?);
    write_dir_atomically(out, &files)
}

/// Writes one file via a temp file in the same directory and a rename.
pub fn write_file_atomically(path: &Path, bytes: &[u8]) -> std::io::Result<()> {
    use std::io::Write;
    let dir = match path.parent() {
        Some(p) if !p.as_os_str().is_empty() => p,
        _ => Path::new("."),
    };
    std::fs::create_dir_all(dir)?;
    let mut tmp = tempfile::NamedTempFile::new_in(dir)?;
    tmp.write_all(bytes)?;
    // Temp files are created 0600; the result is an ordinary file others may read (0644).
    use std::os::unix::fs::PermissionsExt;
    tmp.as_file()
        .set_permissions(std::fs::Permissions::from_mode(0o644))?;
    tmp.as_file().sync_all()?;
    tmp.persist(path).map_err(|e| e.error)?;
    Ok(())
}
/// Whether `dir` or its `shards/` holds a real `.safetensors` file.
pub fn holds_real_files(dir: &Path) -> bool {
    [dir.to_path_buf(), dir.join(SHARDS_DIR)]
        .iter()
        .filter_map(|d| std::fs::read_dir(d).ok())
        .flatten()
        .filter_map(Result::ok)
        .any(|e| e.file_name().to_string_lossy().ends_with(".safetensors"))
}
