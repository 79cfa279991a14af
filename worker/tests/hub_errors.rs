//! Failures the fetcher must name precisely, sorted into transient and permanent, each with the
//! number of requests it cost. Nothing is written when a fetch fails.

use crate::support;

use std::time::{Duration, Instant};

use harch_worker::hub::{FetchError, fetch_truth};
use support::mock_hub::{Fault, MockFile, MockHub, MockRepo, header_json, requests};
use support::*;

async fn run(
    repo: MockRepo,
    faults: Vec<(&str, Vec<Fault>)>,
) -> (
    Result<harch_worker::hub::FetchReport, FetchError>,
    Vec<String>,
    bool,
) {
    let (server, hub) = MockHub::start(Duration::ZERO).await;
    hub.add_repo("org/m", repo);
    for (suffix, f) in faults {
        hub.fault(suffix, f);
    }
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("t");
    let result = fetch_truth(&options(&server.uri(), "org/m", &out)).await;
    (result, requests(&server).await, out.exists())
}

#[tokio::test]
async fn missing_repo_is_told_apart_from_a_missing_file() {
    let (server, _hub) = MockHub::start(Duration::ZERO).await;
    let dir = tempfile::tempdir().unwrap();
    let err = fetch_truth(&options(&server.uri(), "org/none", &dir.path().join("t")))
        .await
        .unwrap_err();
    assert!(matches!(err, FetchError::RepoNotFound { .. }), "{err}");
    assert!(!err.is_transient());
    assert_eq!(requests(&server).await.len(), 2);

    let mut repo = sharded_repo(1);
    repo.files.remove("config.json");
    // Asked for together with the index, at the branch (no API lookup without a cache).
    let (result, reqs, written) = run(repo, vec![]).await;
    let err = result.unwrap_err();
    assert!(
        matches!(&err, FetchError::FileNotFound { file, .. } if file == "config.json"),
        "{err}"
    );
    assert!(err.to_string().contains("no file `config.json`"));
    assert!(!err.is_transient());
    assert_eq!(reqs.len(), 2);
    assert!(!written);
}

#[tokio::test]
async fn plain_404_on_the_api_means_no_repo_and_on_resolve_means_no_file() {
    // Without x-error-code the status and the endpoint decide. The API is asked only when a
    // cached commit of the repo could be hit: fetch once into a cache, then again by branch.
    let (server, hub) = MockHub::start(Duration::ZERO).await;
    hub.add_repo("org/m", sharded_repo(1));
    let dir = tempfile::tempdir().unwrap();
    let mut opts = options(&server.uri(), "org/m", &dir.path().join("t"));
    opts.cache_dir = Some(dir.path().join("cache"));
    fetch_truth(&opts).await.unwrap();
    let before = requests(&server).await.len();
    hub.fault("/revision/main", vec![Fault::Status(404)]);
    let err = fetch_truth(&opts).await.unwrap_err();
    assert!(matches!(err, FetchError::RepoNotFound { .. }), "{err}");
    assert_eq!(requests(&server).await.len() - before, 1);
    let (result, reqs, _) = run(
        sharded_repo(1),
        vec![("/config.json", vec![Fault::Status(404)])],
    )
    .await;
    assert!(matches!(result, Err(FetchError::FileNotFound { .. })));
    assert_eq!(reqs.len(), 2);
}

#[tokio::test]
async fn unknown_revision() {
    let (server, hub) = MockHub::start(Duration::ZERO).await;
    hub.add_repo("org/m", sharded_repo(1));
    let dir = tempfile::tempdir().unwrap();
    let mut opts = options(&server.uri(), "org/m", &dir.path().join("t"));
    opts.revision = "no-such-branch".into();
    let err = fetch_truth(&opts).await.unwrap_err();
    assert!(matches!(err, FetchError::RevisionNotFound { .. }), "{err}");
    assert_eq!(requests(&server).await.len(), 2);
}

#[tokio::test]
async fn gated_repo_without_token_and_with_a_wrong_token() {
    let mut repo = sharded_repo(1);
    repo.gated_token = Some("hf_right".into());
    // The API itself is public here (like the Hub's for gated repos); the files are not.
    let (result, reqs, written) = run(repo.clone(), vec![]).await;
    let err = result.unwrap_err();
    assert!(
        matches!(
            err,
            FetchError::Gated {
                status: 401,
                with_token: false,
                ..
            }
        ),
        "{err}"
    );
    assert!(err.to_string().contains("set HF_TOKEN"));
    assert!(!err.is_transient());
    assert_eq!(reqs.len(), 2);
    assert!(!written);

    let (server, hub) = MockHub::start(Duration::ZERO).await;
    hub.add_repo("org/m", repo);
    let dir = tempfile::tempdir().unwrap();
    let mut opts = options(&server.uri(), "org/m", &dir.path().join("t"));
    opts.token = Some("hf_wrong".into());
    let err = fetch_truth(&opts).await.unwrap_err();
    assert!(
        matches!(
            err,
            FetchError::Gated {
                status: 403,
                with_token: true,
                ..
            }
        ),
        "{err}"
    );
    assert!(err.to_string().contains("has no access"));
    assert_eq!(requests(&server).await.len(), 2);
}

#[tokio::test]
async fn rate_limit_is_retried_after_the_servers_delay() {
    let started = Instant::now();
    let (result, reqs, _) = run(
        sharded_repo(2),
        vec![("/config.json", vec![Fault::RateLimited(1)])],
    )
    .await;
    let report = result.unwrap();
    assert!(
        started.elapsed() >= Duration::from_secs(1),
        "Retry-After was not honoured"
    );
    assert_eq!(report.retries, 1);
    // 2 config (429, 200) + index + 2 × 2 shard.
    assert_eq!(reqs.len(), 7);
}

#[tokio::test]
async fn server_error_then_success_retries_only_the_failed_hop() {
    let (result, reqs, _) = run(
        sharded_repo(1),
        vec![(
            "/cdn/org/m/0123456789abcdef0123456789abcdef01234567/model-00001-of-00001.safetensors",
            vec![Fault::Status(500)],
        )],
    )
    .await;
    let report = result.unwrap();
    assert_eq!(report.retries, 1);
    // config + index + 302 + (500, 206): the redirect is not asked again.
    assert_eq!(reqs.len(), 5);
}

#[tokio::test]
async fn persistent_server_errors_end_as_a_transient_error() {
    let (result, reqs, written) = run(
        sharded_repo(1),
        vec![("/config.json", vec![Fault::Status(503); 5])],
    )
    .await;
    let err = result.unwrap_err();
    assert!(
        matches!(
            err,
            FetchError::Http {
                status: 503,
                attempts: 3,
                ..
            }
        ),
        "{err}"
    );
    assert!(err.is_transient());
    assert_eq!(reqs.len(), 3 + 1);
    assert!(!written);
}

#[tokio::test]
async fn truncated_body_is_retried_then_reported_transient() {
    let file = "model-00001-of-00001.safetensors";
    let cdn = format!("/cdn/org/m/{}/{file}", support::mock_hub::SHA);
    // Once short, then fine: one retry.
    let (result, reqs, _) = run(
        sharded_repo(1),
        vec![(cdn.as_str(), vec![Fault::ShortBody])],
    )
    .await;
    assert_eq!(result.unwrap().retries, 1);
    assert_eq!(reqs.len(), 5);
    // Always short: one redirect, then 3 attempts at the CDN, each a short 206.
    let (result, reqs, _) = run(
        sharded_repo(1),
        vec![(cdn.as_str(), vec![Fault::ShortBody; 3])],
    )
    .await;
    let err = result.unwrap_err();
    assert!(
        matches!(&err, FetchError::Network { message, .. } if message.contains("truncated")),
        "{err}"
    );
    assert!(err.is_transient());
    assert_eq!(reqs.len(), 2 + 1 + 3);
}

fn one_shard_repo(shard: MockFile, index_names: &[&str]) -> MockRepo {
    let mut repo = MockRepo::default();
    repo.files
        .insert("config.json".into(), MockFile::small(config()));
    let map: serde_json::Map<String, serde_json::Value> = index_names
        .iter()
        .map(|n| (n.to_string(), "model-00001-of-00001.safetensors".into()))
        .collect();
    repo.files.insert(
        "model.safetensors.index.json".into(),
        MockFile::small(serde_json::to_vec(&serde_json::json!({"weight_map": map})).unwrap()),
    );
    repo.files
        .insert("model-00001-of-00001.safetensors".into(), shard);
    repo
}

#[tokio::test]
async fn oversized_header_is_rejected_after_one_range() {
    let mut prefix = (200_000_000u64).to_le_bytes().to_vec();
    prefix.extend_from_slice(b"{}");
    let shard = MockFile {
        prefix,
        len: 300_000_000,
    };
    let (result, reqs, written) = run(one_shard_repo(shard, &["w"]), vec![]).await;
    let err = result.unwrap_err();
    assert!(
        matches!(&err, FetchError::Invalid { message, .. } if message.contains("cap")),
        "{err}"
    );
    assert!(!err.is_transient());
    assert_eq!(reqs.len(), 2 + 2);
    assert!(!written);
}

#[tokio::test]
async fn malformed_json_header_is_permanent_and_names_the_file() {
    let json = r#"{"w":{"dtype":"BF16","shape":[2],"data_offsets":[0,4]},,}"#;
    let (result, reqs, _) = run(one_shard_repo(MockFile::shard(json, 4), &["w"]), vec![]).await;
    let err = result.unwrap_err();
    assert!(
        matches!(&err, FetchError::Invalid { file, message, .. } if file == "model-00001-of-00001.safetensors" && message.contains("not valid JSON")),
        "{err}"
    );
    assert_eq!(reqs.len(), 4);
}

#[tokio::test]
async fn header_offsets_past_the_file_end_are_caught() {
    // The header claims 8 payload bytes; the file holds 4.
    let json = r#"{"w":{"dtype":"F32","shape":[2],"data_offsets":[0,8]}}"#;
    let (result, _, _) = run(one_shard_repo(MockFile::shard(json, 4), &["w"]), vec![]).await;
    let err = result.unwrap_err();
    assert!(
        matches!(&err, FetchError::Invalid { message, .. } if message.contains("payload is 4 bytes")),
        "{err}"
    );
}

#[tokio::test]
async fn index_and_shard_disagreement_is_permanent() {
    let (json, payload) = header_json(&[("a", "F32", &[2])], 0);
    // The index lists `b`, which no shard holds.
    let (result, reqs, written) = run(
        one_shard_repo(MockFile::shard(&json, payload), &["a", "b"]),
        vec![],
    )
    .await;
    let err = result.unwrap_err();
    assert!(
        matches!(&err, FetchError::Invalid { message, .. } if message.contains("`b`") && message.contains("no shard header")),
        "{err}"
    );
    assert!(!err.is_transient());
    assert_eq!(reqs.len(), 4);
    assert!(!written);
    // The shard holds `c`, which the index does not list.
    let (json, payload) = header_json(&[("a", "F32", &[2]), ("c", "F32", &[2])], 0);
    let (result, reqs, _) = run(
        one_shard_repo(MockFile::shard(&json, payload), &["a"]),
        vec![],
    )
    .await;
    assert!(
        matches!(result, Err(FetchError::Invalid { message, .. }) if message.contains("`c`") && message.contains("does not list"))
    );
    assert_eq!(reqs.len(), 4);
    // An index that lists nothing is no checkpoint.
    let (result, reqs, _) = run(one_shard_repo(MockFile::shard(&json, payload), &[]), vec![]).await;
    assert!(
        matches!(result, Err(FetchError::Invalid { message, .. }) if message.contains("no tensors"))
    );
    assert_eq!(reqs.len(), 2);
}

#[tokio::test]
async fn repo_without_safetensors() {
    let mut repo = MockRepo::default();
    repo.files
        .insert("config.json".into(), MockFile::small(config()));
    repo.files
        .insert("pytorch_model.bin".into(), MockFile::small(vec![0u8; 16]));
    let (result, reqs, _) = run(repo, vec![]).await;
    assert!(matches!(result, Err(FetchError::NoSafetensors { .. })));
    assert_eq!(reqs.len(), 3);
}

#[tokio::test]
async fn bad_model_ids_are_refused_before_any_request() {
    for id in ["../etc", "a/b/c", "-x/y", "org/na me", ""] {
        let err = fetch_truth(&options(
            "http://127.0.0.1:9",
            id,
            std::path::Path::new("/nonexistent"),
        ))
        .await
        .unwrap_err();
        assert!(matches!(err, FetchError::BadModelId { .. }), "{id}: {err}");
    }
}

#[tokio::test]
async fn connection_refused_is_transient() {
    let dir = tempfile::tempdir().unwrap();
    // The test budget allows two retries of a refused connection: three attempts, said.
    let err = fetch_truth(&options(
        "http://127.0.0.1:9",
        "org/m",
        &dir.path().join("t"),
    ))
    .await
    .unwrap_err();
    assert!(
        matches!(err, FetchError::Unreachable { attempts: 3, .. }),
        "{err}"
    );
    let text = err.to_string();
    assert!(
        text.contains("connection refused: nothing listens at 127.0.0.1:9")
            && text.contains("(3 requests)")
            && text.contains("HF_HUB_OFFLINE=1"),
        "{text}"
    );
    assert!(err.is_transient());
    // The default budget: one retry.
    let mut opts = options("http://127.0.0.1:9", "org/m", &dir.path().join("t"));
    opts.budget = harch_worker::hub::Budget::default();
    let err = fetch_truth(&opts).await.unwrap_err();
    assert!(
        matches!(err, FetchError::Unreachable { attempts: 2, .. }),
        "{err}"
    );
}

#[tokio::test]
async fn offline_without_a_snapshot_is_permanent() {
    let dir = tempfile::tempdir().unwrap();
    let mut opts = options("http://127.0.0.1:9", "org/unknown", &dir.path().join("t"));
    opts.offline = true;
    let err = fetch_truth(&opts).await.unwrap_err();
    assert!(matches!(err, FetchError::NoSnapshot { .. }));
    assert!(err.to_string().contains("deepseek-ai/DeepSeek-V3"));
    assert!(!err.is_transient());
}
