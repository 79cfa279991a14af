//! The fetch itself: revision → sha, then config, index, shard headers and remote code at that
//! sha, validated with the guards' parsers and written as one truth directory.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Instant;

use harch_guards::truth::header::Header;
use harch_guards::truth::index::{self, Index};
use tokio::task::JoinSet;

use super::cache::Cache;
use super::client::{Hub, Target};
use super::error::FetchError;
use super::headers::{DEFAULT_GUESS, ShardHeader, fetch_header, guess_from_names};
use super::{FetchOptions, FetchReport};
use crate::snapshot;
use crate::source;
use crate::truth_dir::{self, DirFiles, FileRecord, TruthMeta};

/// Fetches the truth of `opts.model_id` at `opts.revision` into `opts.out`.
pub async fn fetch_truth(opts: &FetchOptions) -> Result<FetchReport, FetchError> {
    check_model_id(&opts.model_id)?;
    let started = Instant::now();
    if opts.offline {
        return from_snapshot(opts, started);
    }
    let hub = Arc::new(Hub::new(
        &opts.endpoint,
        &opts.model_id,
        opts.token.clone(),
        opts.concurrency,
        opts.timeout,
        opts.retry.clone(),
    )?);
    let cache = opts.cache_dir.clone().map(Cache::new);
    if is_sha(&opts.revision)
        && let Some(report) = from_cache(opts, &hub, cache.as_ref(), &opts.revision, started)?
    {
        return Ok(report);
    }
    let (sha, siblings) = resolve_revision(&hub, &opts.revision).await?;
    if let Some(report) = from_cache(opts, &hub, cache.as_ref(), &sha, started)? {
        return Ok(report);
    }
    let has = |f: &str| siblings.as_ref().is_none_or(|s| s.contains(f));

    // Independent of each other: one round trip for the three.
    let (want_generation, want_index) = (has(truth_dir::GENERATION_CONFIG), has(truth_dir::INDEX));
    let (config, generation, index_file) = tokio::join!(
        fetch_file(&hub, &sha, truth_dir::CONFIG),
        async {
            match want_generation {
                true => fetch_optional(&hub, &sha, truth_dir::GENERATION_CONFIG).await,
                false => Ok(None),
            }
        },
        async {
            match want_index {
                true => fetch_optional(&hub, &sha, truth_dir::INDEX).await,
                false => Ok(None),
            }
        },
    );
    let (config, generation, index_file) = (config?, generation?, index_file?);
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
    let plan: Vec<(String, u64)> = match &index {
        Some(idx) => {
            let mut names: BTreeMap<&str, Vec<&str>> = BTreeMap::new();
            for (tensor, file) in idx.entries() {
                names.entry(file).or_default().push(tensor);
            }
            names
                .into_iter()
                .map(|(file, ts)| (file.to_string(), guess_from_names(ts.into_iter())))
                .collect()
        }
        None => vec![(truth_dir::SINGLE_FILE.to_string(), DEFAULT_GUESS)],
    };
    let remote_code: Vec<String> = if source::needs_remote_code(&config_json) {
        source::auto_map_files(&config_json)
            .into_iter()
            .filter(|f| has(f))
            .collect()
    } else {
        Vec::new()
    };

    let bar = progress_bar(opts.progress, plan.len());
    let mut tasks: JoinSet<Result<ShardHeader, FetchError>> = JoinSet::new();
    for (file, guess) in plan {
        let hub = hub.clone();
        let sha = sha.clone();
        tasks.spawn(async move { fetch_header(&hub, &sha, &file, guess).await });
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
        let header = joined.map_err(|e| join_error(&opts.model_id, e))??;
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

    // Validate what was fetched as a whole before anything is written.
    let parsed: Vec<(String, Header)> = shard_headers
        .iter()
        .map(|s| (s.file.clone(), s.header.clone()))
        .collect();
    let inventory = index::assemble(index.as_ref(), parsed).map_err(|e| FetchError::Invalid {
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
    if let Some(g) = generation {
        push(
            truth_dir::GENERATION_CONFIG.into(),
            truth_dir::GENERATION_CONFIG,
            g.etag,
            g.size,
            g.body,
            false,
        );
    }
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
    for s in shard_headers {
        let rel = Path::new(truth_dir::SHARDS_DIR).join(format!(
            "{}{}",
            s.file,
            truth_dir::HEADER_SUFFIX
        ));
        push(rel, &s.file, s.etag, s.file_len, s.json, true);
    }
    let source_origin = if code.is_empty() {
        match source::resolve_native(&config_json) {
            Some(set) => {
                for (name, text) in set.files {
                    let rel = Path::new(truth_dir::SOURCE_DIR).join(&name);
                    entries.push(Entry {
                        key: String::new(),
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
        tensor_count: Some(inventory.tensors.len()),
        total_bytes: u64::try_from(inventory.total_bytes()).ok(),
        source_origin: source_origin.clone(),
    };
    let mut files: DirFiles = entries
        .iter()
        .map(|e| (e.rel.clone(), e.body.clone()))
        .collect();
    files.insert(truth_dir::TRUTH_JSON.into(), to_json(&meta));
    write_out(&opts.out, &files)?;
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
    Ok(report(opts, &hub, "hub", &meta, &files, started))
}

struct Entry {
    rel: PathBuf,
    key: String,
    body: Vec<u8>,
}

struct Fetched {
    body: Vec<u8>,
    etag: Option<String>,
    size: Option<u64>,
}

/// A whole small file (config, index, remote code).
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
) -> Result<Option<FetchReport>, FetchError> {
    let Some((mut meta, mut files)) = cache.and_then(|c| c.load(&opts.model_id, sha)) else {
        return Ok(None);
    };
    meta.requested_revision = Some(opts.revision.clone());
    if meta.source_origin.as_deref() != Some("repo")
        && let Ok(config) = serde_json::from_slice::<serde_json::Value>(
            files
                .get(Path::new(truth_dir::CONFIG))
                .map(Vec::as_slice)
                .unwrap_or(b"{}"),
        )
        && let Some(set) = source::resolve_native(&config)
    {
        for (name, text) in set.files {
            files.insert(
                Path::new(truth_dir::SOURCE_DIR).join(name),
                text.into_bytes(),
            );
        }
        meta.source_origin = Some(set.origin);
    }
    files.insert(truth_dir::TRUTH_JSON.into(), to_json(&meta));
    write_out(&opts.out, &files)?;
    Ok(Some(report(opts, hub, "cache", &meta, &files, started)))
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
    let source_origin = source::resolve_native(&truth.config).map(|set| {
        truth.sources = set.files;
        set.origin
    });
    let meta = TruthMeta {
        model_id: opts.model_id.clone(),
        revision: truth.revision.clone(),
        requested_revision: Some(opts.revision.clone()),
        origin: "snapshot".into(),
        files: Vec::new(),
        tensor_count: Some(truth.inventory.tensors.len()),
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
        source_origin,
        elapsed_ms: started.elapsed().as_millis() as u64,
    })
}

fn report(
    opts: &FetchOptions,
    hub: &Hub,
    origin: &str,
    meta: &TruthMeta,
    files: &DirFiles,
    started: Instant,
) -> FetchReport {
    FetchReport {
        model_id: opts.model_id.clone(),
        requested_revision: opts.revision.clone(),
        revision: meta.revision.clone(),
        out: opts.out.clone(),
        origin: origin.into(),
        files: files
            .keys()
            .map(|p| p.to_string_lossy().into_owned())
            .collect(),
        shards: files
            .keys()
            .filter(|p| p.starts_with(truth_dir::SHARDS_DIR))
            .count(),
        tensors: meta.tensor_count.unwrap_or(0),
        total_bytes: meta.total_bytes.unwrap_or(0),
        requests: hub.stats.requests.load(Ordering::Relaxed),
        bytes_transferred: hub.stats.bytes.load(Ordering::Relaxed),
        retries: hub.stats.retries.load(Ordering::Relaxed),
        source_origin: meta.source_origin.clone(),
        elapsed_ms: started.elapsed().as_millis() as u64,
    }
}

fn write_out(out: &Path, files: &DirFiles) -> Result<(), FetchError> {
    truth_dir::write_dir_atomically(out, files).map_err(|e| FetchError::Io {
        path: out.to_path_buf(),
        message: format!("{e:#}"),
    })
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
