//! The fetch itself: revision → sha, then config, index, shard headers and remote code at that
//! sha, validated with the guards' parsers and written as one truth directory.
//!
//! Local work overlaps the network: each shard header is parsed and checked as it arrives and
//! written into the staging directory while the other requests are in flight; once the whole
//! checkpoint has been checked (the index against every header), the staging directory is
//! renamed into place in one step. Every name the repository supplies (index shard names,
//! `auto_map` modules) is checked to be a plain relative path before it becomes a URL or a
//! file name, so nothing is ever written outside the staging directory.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Instant;

use harch_guards::truth::header::Header;
use harch_guards::truth::index::{self, Index};
use tokio::task::JoinSet;

use super::cache::{Cache, Miss};
use super::client::{Hub, Target};
use super::error::FetchError;
use super::headers::{DEFAULT_GUESS, ShardHeader, fetch_header, guess_from_names};
use super::{FetchOptions, FetchReport, Timings};
use harch_truth::names::check_repo_path;
use harch_truth::snapshot;
use harch_truth::source;
use harch_truth::truth_dir::{self, FileRecord, Staging, TruthMeta};

/// Fetches the truth of `opts.model_id` at `opts.revision` into `opts.out`.
pub async fn fetch_truth(opts: &FetchOptions) -> Result<FetchReport, FetchError> {
    check_model_id(&opts.model_id)?;
    let started = Instant::now();
    if opts.offline {
        return from_snapshot(opts, started);
    }
    let hub = Arc::new(
        Hub::new(
            &opts.endpoint,
            &opts.model_id,
            opts.token.clone(),
            opts.concurrency,
            opts.timeout,
            opts.retry.clone(),
            opts.deadline,
        )?
        .with_budget(opts.budget, opts.notices),
    );
    if opts.notices {
        eprintln!(
            "fetching {}@{} from {}",
            opts.model_id, opts.revision, opts.endpoint
        );
    }
    let fetch = fetch_online(opts, &hub, started);
    match opts.deadline {
        // Dropping the fetch drops its staging directory: nothing is left behind.
        Some(limit) => tokio::time::timeout(limit, fetch)
            .await
            .unwrap_or_else(|_| {
                Err(FetchError::Deadline {
                    repo: opts.model_id.clone(),
                    secs: limit.as_secs(),
                    requests: hub.stats.requests.load(Ordering::Relaxed),
                    retries: hub.stats.retries.load(Ordering::Relaxed),
                })
            }),
        None => fetch.await,
    }
}

async fn fetch_online(
    opts: &FetchOptions,
    hub: &Arc<Hub>,
    started: Instant,
) -> Result<FetchReport, FetchError> {
    let cache = opts.cache_dir.clone().map(Cache::new);
    let mut warnings: Vec<String> = Vec::new();
    if is_sha(&opts.revision)
        && let Some(report) = from_cache(
            opts,
            hub,
            cache.as_ref(),
            &opts.revision,
            started,
            &mut warnings,
        )?
    {
        return Ok(report);
    }
    // Asking the API which commit a branch is at pays only when the answer can be a cache hit.
    // Otherwise config.json and the index are asked for at the branch straight away, and the
    // commit comes from their `X-Repo-Commit`: one request and one round trip fewer.
    let ask_api =
        !is_sha(&opts.revision) && cache.as_ref().is_some_and(|c| c.has_repo(&opts.model_id));
    let (mut known_sha, siblings) = if ask_api {
        let (sha, siblings) = resolve_revision(hub, &opts.revision).await?;
        if let Some(report) = from_cache(opts, hub, cache.as_ref(), &sha, started, &mut warnings)? {
            return Ok(report);
        }
        (Some(sha), siblings)
    } else if is_sha(&opts.revision) {
        (Some(opts.revision.clone()), None)
    } else {
        (None, None)
    };
    let resolved = Instant::now();
    let has = |f: &str| siblings.as_ref().is_none_or(|s| s.contains(f));
    let want_index = has(truth_dir::INDEX);
    let mut at = known_sha.clone().unwrap_or_else(|| opts.revision.clone());
    let (mut config, mut index_file) = fetch_config_and_index(hub, &at, want_index).await?;
    if known_sha.is_none() {
        match config.commit.clone() {
            Some(commit) => {
                // A push between the two requests: take the index of the config's commit.
                if index_file
                    .as_ref()
                    .is_some_and(|i| i.commit != config.commit)
                {
                    index_file = fetch_optional(hub, &commit, truth_dir::INDEX).await?;
                }
                known_sha = Some(commit);
            }
            None => {
                // A server that does not say the commit: ask the API, and fetch at it.
                let (sha, _) = resolve_revision(hub, &opts.revision).await?;
                at = sha.clone();
                (config, index_file) = fetch_config_and_index(hub, &at, want_index).await?;
                known_sha = Some(sha);
            }
        }
    }
    let sha = known_sha.unwrap_or(at);

    let config_json: serde_json::Value =
        serde_json::from_slice(&config.body).map_err(|e| FetchError::Invalid {
            repo: opts.model_id.clone(),
            file: truth_dir::CONFIG.into(),
            message: e.to_string(),
        })?;
    let index: Option<Index> = match &index_file {
        Some(f) => Some(
            index::parse_index(&f.body).map_err(|e| FetchError::Invalid {
                repo: opts.model_id.clone(),
                file: truth_dir::INDEX.into(),
                message: e.to_string(),
            })?,
        ),
        None => None,
    };
    if index.is_none() && !has(truth_dir::SINGLE_FILE) {
        return Err(FetchError::NoSafetensors {
            repo: opts.model_id.clone(),
        });
    }

    if index.as_ref().is_some_and(|i| i.is_empty()) {
        return Err(FetchError::Invalid {
            repo: opts.model_id.clone(),
            file: truth_dir::INDEX.into(),
            message: "weight_map lists no tensors".into(),
        });
    }
    let unsafe_name = |file: &str, name: &str, why: &str| FetchError::UnsafeName {
        repo: opts.model_id.clone(),
        file: file.to_string(),
        name: name.to_string(),
        why: why.to_string(),
    };
    let plan: Vec<(String, u64)> = match &index {
        Some(idx) => {
            let mut names: BTreeMap<&str, Vec<&str>> = BTreeMap::new();
            for (tensor, file) in idx.iter() {
                names.entry(file).or_default().push(tensor);
            }
            for file in names.keys() {
                check_repo_path(file).map_err(|why| unsafe_name(truth_dir::INDEX, file, why))?;
            }
            names
                .into_iter()
                .map(|(file, ts)| (file.to_string(), guess_from_names(ts.into_iter())))
                .collect()
        }
        None => vec![(truth_dir::SINGLE_FILE.to_string(), DEFAULT_GUESS)],
    };
    let remote_code: Vec<String> = if source::needs_remote_code(&config_json) {
        let files = source::auto_map_files(&config_json).map_err(|e| {
            unsafe_name(
                truth_dir::CONFIG,
                &e.reference,
                "auto_map must name `module.Class` with a dotted Python module name",
            )
        })?;
        for file in &files {
            check_repo_path(file).map_err(|why| unsafe_name(truth_dir::CONFIG, file, why))?;
        }
        files.into_iter().filter(|f| has(f)).collect()
    } else {
        Vec::new()
    };

    let staging = Staging::new(&opts.out).map_err(|e| io_error(&opts.out, e))?;
    let header_rel = |file: &str| -> PathBuf {
        Path::new(truth_dir::SHARDS_DIR).join(format!("{file}{}", truth_dir::HEADER_SUFFIX))
    };
    // Directories first, so that a task still running after a failed fetch dropped the staging
    // directory cannot bring any of it back.
    let dirs: BTreeSet<PathBuf> = plan
        .iter()
        .filter_map(|(file, _)| header_rel(file).parent().map(Path::to_path_buf))
        .collect();
    for d in dirs {
        staging.create_dir(&d).map_err(|e| io_error(&opts.out, e))?;
    }
    let planned = Instant::now();

    let bar = progress_bar(opts.progress, plan.len());
    let mut tasks: JoinSet<Result<ShardHeader, FetchError>> = JoinSet::new();
    for (file, guess) in plan {
        let hub = hub.clone();
        let sha = sha.clone();
        let dest = staging.path().join(header_rel(&file));
        tasks.spawn(async move {
            let h = fetch_header(&hub, &sha, &file, guess).await?;
            // A header is tens to hundreds of kB into the page cache: cheaper inline than a hop
            // to the blocking pool. Plain write, no create: see the directories above.
            std::fs::write(&dest, &h.json).map_err(|e| FetchError::Io {
                path: dest.clone(),
                message: e.to_string(),
            })?;
            Ok(h)
        });
    }
    let mut code_tasks: JoinSet<Result<(String, Option<Fetched>), FetchError>> = JoinSet::new();
    for file in remote_code {
        let hub = hub.clone();
        let sha = sha.clone();
        code_tasks.spawn(async move {
            let f = fetch_optional(&hub, &sha, &file).await?;
            Ok((file, f))
        });
    }
    let mut shard_headers = Vec::new();
    while let Some(joined) = tasks.join_next().await {
        let header = joined
            .map_err(|e| join_error(&opts.model_id, e))?
            .map_err(|e| match e {
                // Without a file list, a missing index and a missing model.safetensors are
                // found by asking for them.
                FetchError::FileNotFound { file, .. }
                    if index.is_none() && file == truth_dir::SINGLE_FILE =>
                {
                    FetchError::NoSafetensors {
                        repo: opts.model_id.clone(),
                    }
                }
                e => e,
            })?;
        bar.inc(1);
        shard_headers.push(header);
    }
    bar.finish_and_clear();
    shard_headers.sort_by(|a, b| a.file.cmp(&b.file));
    let mut code: BTreeMap<String, Vec<u8>> = BTreeMap::new();
    while let Some(joined) = code_tasks.join_next().await {
        if let (file, Some(f)) = joined.map_err(|e| join_error(&opts.model_id, e))?? {
            code.insert(file, f.body);
        }
    }
    let fetched = Instant::now();

    // Validate what was fetched as a whole before the directory is put in place.
    let mut parsed: Vec<(String, Header)> = Vec::with_capacity(shard_headers.len());
    let mut shard_files = Vec::with_capacity(shard_headers.len());
    for s in shard_headers {
        parsed.push((s.file.clone(), s.header));
        shard_files.push((s.file, s.etag, s.file_len, s.json));
    }
    let inventory = index::assemble(index, parsed).map_err(|e| FetchError::Invalid {
        repo: opts.model_id.clone(),
        file: truth_dir::INDEX.into(),
        message: format!("index and shard headers disagree: {e}"),
    })?;

    let mut entries: Vec<Entry> = Vec::new();
    let mut records: Vec<FileRecord> = Vec::new();
    let mut push = |rel: PathBuf,
                    repo_path: &str,
                    etag: Option<String>,
                    size: Option<u64>,
                    body: Vec<u8>,
                    header_only: bool| {
        records.push(FileRecord {
            path: repo_path.to_string(),
            etag: etag.clone(),
            size,
        });
        entries.push(Entry {
            key: Cache::key(&sha, repo_path, etag.as_deref(), header_only),
            // Shard headers are in the staging directory already.
            staged: header_only,
            rel,
            body,
        });
    };
    push(
        truth_dir::CONFIG.into(),
        truth_dir::CONFIG,
        config.etag,
        config.size,
        config.body,
        false,
    );
    if let Some(i) = index_file {
        push(
            truth_dir::INDEX.into(),
            truth_dir::INDEX,
            i.etag,
            i.size,
            i.body,
            false,
        );
    }
    for (file, etag, file_len, json) in shard_files {
        push(header_rel(&file), &file, etag, file_len, json, true);
    }
    // Remote code without a modeling module (MiniMax-M3's auto_map names only its configuration
    // class) runs the transformers model of its model_type: the forward source is the native one.
    let remote_forward = code.keys().any(|f| {
        Path::new(f)
            .file_name()
            .is_some_and(|n| n.to_string_lossy().starts_with("modeling_"))
    });
    let native = if remote_forward {
        None
    } else {
        native_source(&config_json, &mut warnings)
    };
    let source_origin = if native.is_some() || code.is_empty() {
        match native {
            Some(set) => {
                for (name, text) in set.files {
                    let rel = Path::new(truth_dir::SOURCE_DIR).join(&name);
                    entries.push(Entry {
                        key: String::new(),
                        staged: false,
                        rel,
                        body: text.into_bytes(),
                    });
                }
                Some(set.origin)
            }
            None => None,
        }
    } else {
        for (file, body) in code {
            let name = Path::new(&file)
                .file_name()
                .map(|n| n.to_string_lossy().into_owned())
                .unwrap_or(file.clone());
            push(
                Path::new(truth_dir::SOURCE_DIR).join(name),
                &file,
                None,
                None,
                body,
                false,
            );
        }
        Some("repo".to_string())
    };

    let meta = TruthMeta {
        model_id: opts.model_id.clone(),
        revision: Some(sha.clone()),
        requested_revision: Some(opts.revision.clone()),
        origin: "hub".into(),
        files: records,
        tensor_count: Some(inventory.len()),
        total_bytes: u64::try_from(inventory.total_bytes()).ok(),
        source_origin: source_origin.clone(),
    };
    let io = |e| io_error(&opts.out, e);
    for e in entries.iter().filter(|e| !e.staged) {
        staging.write(&e.rel, &e.body).map_err(io)?;
    }
    staging
        .write(Path::new(truth_dir::TRUTH_JSON), &to_json(&meta))
        .map_err(io)?;
    staging.commit().map_err(io)?;
    if let Some(cache) = &cache {
        // Native sources come from this machine, not the repo: they are not cached per sha.
        let cached: Vec<(PathBuf, String, &[u8])> = entries
            .iter()
            .filter(|e| !e.key.is_empty())
            .map(|e| (e.rel.clone(), e.key.clone(), e.body.as_slice()))
            .collect();
        if let Err(e) = cache.store(&opts.model_id, &sha, &meta, &cached) {
            tracing::warn!("cache write failed: {e}");
        }
    }
    let mut files: Vec<PathBuf> = entries.into_iter().map(|e| e.rel).collect();
    files.push(truth_dir::TRUTH_JSON.into());
    files.sort();
    let timings = Timings {
        resolve_ms: ms(resolved - started),
        index_ms: ms(planned - resolved),
        headers_ms: ms(fetched - planned),
        local_ms: ms(fetched.elapsed()),
    };
    Ok(report(
        opts, hub, "hub", &meta, &files, warnings, timings, started,
    ))
}

fn ms(d: std::time::Duration) -> f64 {
    (d.as_secs_f64() * 1e4).round() / 10.0
}

fn io_error(out: &Path, e: anyhow::Error) -> FetchError {
    FetchError::Io {
        path: out.to_path_buf(),
        message: format!("{e:#}"),
    }
}

/// The native forward source for this config, or a warning saying why there is none (a later
/// `validate` would only say O003).
fn native_source(
    config: &serde_json::Value,
    warnings: &mut Vec<String>,
) -> Option<source::SourceSet> {
    let found = source::resolve_native(config);
    if found.is_none() {
        let model_type = config
            .get("model_type")
            .and_then(|t| t.as_str())
            .unwrap_or("(none)");
        warnings.push(format!(
            "no forward source for model_type `{model_type}`: no auto_map code in the repo and no transformers source found (looked in {}); run scripts/fetch-transformers-src or set {}; validate will report O003",
            source::search_description(),
            source::SRC_ENV
        ));
    }
    found
}

struct Entry {
    rel: PathBuf,
    key: String,
    /// Written into the staging directory as it arrived.
    staged: bool,
    body: Vec<u8>,
}

struct Fetched {
    body: Vec<u8>,
    etag: Option<String>,
    size: Option<u64>,
    /// The commit the revision resolved to, when the Hub said (`X-Repo-Commit`).
    commit: Option<String>,
}

/// A whole small file (config, index, remote code).
/// config.json and (when `want_index`) the index, in one round trip.
async fn fetch_config_and_index(
    hub: &Hub,
    at: &str,
    want_index: bool,
) -> Result<(Fetched, Option<Fetched>), FetchError> {
    let (config, index) = tokio::join!(fetch_file(hub, at, truth_dir::CONFIG), async {
        match want_index {
            true => fetch_optional(hub, at, truth_dir::INDEX).await,
            false => Ok(None),
        }
    });
    Ok((config?, index?))
}

async fn fetch_file(hub: &Hub, sha: &str, path: &str) -> Result<Fetched, FetchError> {
    let url = hub.file_url(sha, path);
    let r = hub
        .get(
            &url,
            &Target::File {
                path,
                revision: sha,
            },
            None,
            None,
        )
        .await?;
    Ok(Fetched {
        size: Some(r.body.len() as u64),
        body: r.body,
        etag: r.etag,
        commit: r.commit.filter(|c| is_sha(c)),
    })
}

/// Like [`fetch_file`], with a missing file as None.
async fn fetch_optional(hub: &Hub, sha: &str, path: &str) -> Result<Option<Fetched>, FetchError> {
    match fetch_file(hub, sha, path).await {
        Ok(f) => Ok(Some(f)),
        Err(FetchError::FileNotFound { .. }) => Ok(None),
        Err(e) => Err(e),
    }
}

async fn resolve_revision(
    hub: &Hub,
    revision: &str,
) -> Result<(String, Option<BTreeSet<String>>), FetchError> {
    let url = hub.revision_url(revision);
    let r = hub
        .get(&url, &Target::Revision { revision }, None, None)
        .await?;
    let invalid = |message: String| FetchError::Invalid {
        repo: hub.repo.clone(),
        file: format!("API answer for revision `{revision}`"),
        message,
    };
    let v: serde_json::Value =
        serde_json::from_slice(&r.body).map_err(|e| invalid(e.to_string()))?;
    let sha = v
        .get("sha")
        .and_then(|s| s.as_str())
        .filter(|s| is_sha(s))
        .ok_or_else(|| invalid("no 40-hex `sha`".into()))?
        .to_string();
    let siblings = v.get("siblings").and_then(|s| s.as_array()).map(|list| {
        list.iter()
            .filter_map(|e| e.get("rfilename")?.as_str().map(str::to_string))
            .collect()
    });
    Ok((sha, siblings))
}

fn from_cache(
    opts: &FetchOptions,
    hub: &Hub,
    cache: Option<&Cache>,
    sha: &str,
    started: Instant,
    warnings: &mut Vec<String>,
) -> Result<Option<FetchReport>, FetchError> {
    let Some(cache) = cache else {
        return Ok(None);
    };
    let (mut meta, mut files) = match cache.load(&opts.model_id, sha) {
        Ok(hit) => hit,
        Err(Miss::Absent) => return Ok(None),
        Err(Miss::Corrupt(why)) => {
            // Once per fetch: a pinned sha and its resolved form are the same entry.
            if warnings.is_empty() {
                warnings.push(format!(
                    "cache entry for {sha} failed its check and was evicted ({why}); fetched from the Hub"
                ));
            }
            return Ok(None);
        }
    };
    let looked_up = Instant::now();
    meta.requested_revision = Some(opts.revision.clone());
    let mut warnings = std::mem::take(warnings);
    if meta.source_origin.as_deref() != Some("repo") {
        let config = serde_json::from_slice::<serde_json::Value>(
            files
                .get(Path::new(truth_dir::CONFIG))
                .map(Vec::as_slice)
                .unwrap_or(b"{}"),
        )
        .unwrap_or_default();
        meta.source_origin = None;
        if let Some(set) = native_source(&config, &mut warnings) {
            for (name, text) in set.files {
                files.insert(
                    Path::new(truth_dir::SOURCE_DIR).join(name),
                    text.into_bytes(),
                );
            }
            meta.source_origin = Some(set.origin);
        }
    }
    files.insert(truth_dir::TRUTH_JSON.into(), to_json(&meta));
    truth_dir::write_dir_atomically(&opts.out, &files).map_err(|e| io_error(&opts.out, e))?;
    let names: Vec<PathBuf> = files.keys().cloned().collect();
    let timings = Timings {
        resolve_ms: ms(looked_up - started),
        local_ms: ms(looked_up.elapsed()),
        ..Timings::default()
    };
    Ok(Some(report(
        opts, hub, "cache", &meta, &names, warnings, timings, started,
    )))
}

fn from_snapshot(opts: &FetchOptions, started: Instant) -> Result<FetchReport, FetchError> {
    let no_snapshot = || FetchError::NoSnapshot {
        model_id: opts.model_id.clone(),
        available: snapshot::snapshot_ids().join(", "),
    };
    let mut truth = snapshot::try_load_snapshot(&opts.model_id)
        .map_err(|e| FetchError::Invalid {
            repo: opts.model_id.clone(),
            file: "bundled snapshot".into(),
            message: format!("{e:#}"),
        })?
        .ok_or_else(no_snapshot)?;
    let mut warnings = Vec::new();
    let source_origin = native_source(&truth.config, &mut warnings).map(|set| {
        truth.sources = set.files;
        set.origin
    });
    let meta = TruthMeta {
        model_id: opts.model_id.clone(),
        revision: truth.revision.clone(),
        requested_revision: Some(opts.revision.clone()),
        origin: "snapshot".into(),
        files: Vec::new(),
        tensor_count: Some(truth.inventory.len()),
        total_bytes: u64::try_from(truth.inventory.total_bytes()).ok(),
        source_origin: source_origin.clone(),
    };
    truth_dir::write_from_truth(&opts.out, &truth, &meta).map_err(|e| FetchError::Io {
        path: opts.out.clone(),
        message: format!("{e:#}"),
    })?;
    let mut files = vec![
        truth_dir::CONFIG.to_string(),
        truth_dir::INVENTORY.to_string(),
        truth_dir::TRUTH_JSON.to_string(),
    ];
    files.extend(
        truth
            .sources
            .keys()
            .map(|n| format!("{}/{n}", truth_dir::SOURCE_DIR)),
    );
    Ok(FetchReport {
        model_id: opts.model_id.clone(),
        requested_revision: opts.revision.clone(),
        revision: truth.revision,
        out: opts.out.clone(),
        origin: "snapshot".into(),
        files,
        shards: 0,
        tensors: meta.tensor_count.unwrap_or(0),
        total_bytes: meta.total_bytes.unwrap_or(0),
        requests: 0,
        bytes_transferred: 0,
        retries: 0,
        rate_limited: 0,
        source_origin,
        warnings,
        elapsed_ms: started.elapsed().as_millis() as u64,
        timings: Timings {
            local_ms: ms(started.elapsed()),
            ..Timings::default()
        },
    })
}

#[allow(clippy::too_many_arguments)]
fn report(
    opts: &FetchOptions,
    hub: &Hub,
    origin: &str,
    meta: &TruthMeta,
    files: &[PathBuf],
    warnings: Vec<String>,
    timings: Timings,
    started: Instant,
) -> FetchReport {
    FetchReport {
        model_id: opts.model_id.clone(),
        requested_revision: opts.revision.clone(),
        revision: meta.revision.clone(),
        out: opts.out.clone(),
        origin: origin.into(),
        files: files
            .iter()
            .map(|p| p.to_string_lossy().into_owned())
            .collect(),
        shards: files
            .iter()
            .filter(|p| p.starts_with(truth_dir::SHARDS_DIR))
            .count(),
        tensors: meta.tensor_count.unwrap_or(0),
        total_bytes: meta.total_bytes.unwrap_or(0),
        requests: hub.stats.requests.load(Ordering::Relaxed),
        bytes_transferred: hub.stats.bytes.load(Ordering::Relaxed),
        retries: hub.stats.retries.load(Ordering::Relaxed),
        rate_limited: hub.stats.rate_limited.load(Ordering::Relaxed),
        source_origin: meta.source_origin.clone(),
        warnings,
        elapsed_ms: started.elapsed().as_millis() as u64,
        timings,
    }
}

fn to_json(meta: &TruthMeta) -> Vec<u8> {
    let mut v = serde_json::to_vec_pretty(meta).unwrap_or_default();
    v.push(b'\n');
    v
}

fn join_error(repo: &str, e: tokio::task::JoinError) -> FetchError {
    FetchError::Io {
        path: PathBuf::from(repo),
        message: format!("fetch task failed: {e}"),
    }
}

fn progress_bar(enabled: bool, len: usize) -> indicatif::ProgressBar {
    use std::io::IsTerminal;
    if !enabled || !std::io::stderr().is_terminal() {
        return indicatif::ProgressBar::hidden();
    }
    let bar = indicatif::ProgressBar::new(len as u64);
    if let Ok(style) =
        indicatif::ProgressStyle::with_template("{msg} [{bar:30}] {pos}/{len} shard headers")
    {
        bar.set_style(style.progress_chars("=> "));
    }
    bar.set_message("fetching");
    bar
}

pub fn is_sha(s: &str) -> bool {
    s.len() == 40
        && s.bytes()
            .all(|b| b.is_ascii_hexdigit() && !b.is_ascii_uppercase())
}

/// Hub ids are `name` or `org/name` of `[A-Za-z0-9._-]`, no `..`, no leading `-` or `.`.
pub fn check_model_id(id: &str) -> Result<(), FetchError> {
    let bad = |why: &str| FetchError::BadModelId {
        model_id: id.to_string(),
        why: why.to_string(),
    };
    let parts: Vec<&str> = id.split('/').collect();
    if parts.len() > 2 {
        return Err(bad("at most one `/` (org/name)"));
    }
    for p in parts {
        if p.is_empty() || p.len() > 96 {
            return Err(bad("each part must have 1 to 96 characters"));
        }
        if !p
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-'))
        {
            return Err(bad("only letters, digits, `.`, `_` and `-` are allowed"));
        }
        if p.starts_with(['-', '.']) || p.contains("..") {
            return Err(bad("no leading `-` or `.`, and no `..`"));
        }
    }
    Ok(())
}
