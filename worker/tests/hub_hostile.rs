//! The Hub's answers are input too: names a repository supplies are refused when they would
//! leave the repository, a cache entry that went bad is found and fetched again, and a Hub that
//! fails a fifth of all requests (429s and 5xx on either hop of a redirect) still yields the
//! truth, with the retries counted.

use crate::support;

use std::path::Path;
use std::time::Duration;

use harch_worker::hub::{FetchError, FetchReport, RetryPolicy, fetch_truth};
use harch_worker::truth_dir::load_truth_dir;
use support::mock_hub::{Fault, MockFile, MockHub, MockRepo, SHA, header_json, requests};
use support::*;

/// A one-shard repo whose index names the shard `shard_name`, served under that name too.
fn repo_with_shard_name(shard_name: &str) -> MockRepo {
    let (json, payload) = header_json(&[("w", "F32", &[2])], 0);
    let mut repo = MockRepo::default();
    repo.files
        .insert("config.json".into(), MockFile::small(config()));
    repo.files.insert(
        "model.safetensors.index.json".into(),
        MockFile::small(
            serde_json::to_vec(&serde_json::json!({"weight_map": {"w": shard_name}})).unwrap(),
        ),
    );
    repo.files
        .insert(shard_name.into(), MockFile::shard(&json, payload));
    repo
}

/// Every file under `dir`, as relative paths.
fn tree(dir: &Path) -> Vec<String> {
    let mut out = Vec::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        for e in std::fs::read_dir(&d).unwrap().flatten() {
            let p = e.path();
            if p.is_dir() {
                stack.push(p.clone());
            }
            out.push(p.strip_prefix(dir).unwrap().to_string_lossy().into_owned());
        }
    }
    out.sort();
    out
}

#[tokio::test]
async fn traversal_in_an_index_shard_name_is_refused_and_nothing_is_written() {
    for bad in [
        "../../../../other/repo/resolve/main/model.safetensors",
        "/etc/model.safetensors",
        "shards/../../x.safetensors",
        "a\\..\\b.safetensors",
    ] {
        let (server, hub) = MockHub::start(Duration::ZERO).await;
        hub.add_repo("org/m", repo_with_shard_name(bad));
        let dir = tempfile::tempdir().unwrap();
        let out = dir.path().join("deep/er/t");
        let err = fetch_truth(&options(&server.uri(), "org/m", &out))
            .await
            .unwrap_err();
        assert!(
            matches!(&err, FetchError::UnsafeName { file, name, .. }
                if file == "model.safetensors.index.json" && name == bad),
            "{bad}: {err}"
        );
        let msg = err.to_string();
        assert!(
            msg.contains("not a plain relative path") && msg.contains(bad),
            "{msg}"
        );
        assert!(!err.is_transient());
        // Refused before any request for it: API, config, index.
        assert_eq!(requests(&server).await.len(), 2, "{bad}");
        // Nothing at all under the temp dir: not even the parent of --out was made.
        assert!(tree(dir.path()).is_empty(), "{bad}");
    }
}

#[tokio::test]
async fn traversal_in_auto_map_is_refused_and_nothing_is_written() {
    for bad in ["../../../x.Model", ".hidden.Model", "a/b.Model"] {
        let (server, hub) = MockHub::start(Duration::ZERO).await;
        let mut repo = sharded_repo(1);
        repo.files.insert(
            "config.json".into(),
            MockFile::small(
                serde_json::to_vec(&serde_json::json!({
                    "model_type": "x",
                    "auto_map": {"AutoModel": bad},
                }))
                .unwrap(),
            ),
        );
        hub.add_repo("org/m", repo);
        let dir = tempfile::tempdir().unwrap();
        let out = dir.path().join("t");
        let err = fetch_truth(&options(&server.uri(), "org/m", &out))
            .await
            .unwrap_err();
        assert!(
            matches!(&err, FetchError::UnsafeName { file, name, .. }
                if file == "config.json" && name == bad),
            "{bad}: {err}"
        );
        assert!(err.to_string().contains("auto_map"), "{err}");
        assert_eq!(requests(&server).await.len(), 2, "{bad}");
        assert!(tree(dir.path()).is_empty(), "{bad}");
    }
}

#[tokio::test]
async fn shard_names_in_subdirectories_are_fine() {
    let (server, hub) = MockHub::start(Duration::ZERO).await;
    hub.add_repo("org/m", repo_with_shard_name("weights/model-1.safetensors"));
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("t");
    let report = fetch_truth(&options(&server.uri(), "org/m", &out))
        .await
        .unwrap();
    assert_eq!(report.tensors, 1);
    assert!(
        out.join("shards/weights/model-1.safetensors.header.json")
            .is_file()
    );
    assert_eq!(load_truth_dir(&out).unwrap().inventory.len(), 1);
}

#[tokio::test]
async fn a_truncated_cache_blob_is_evicted_and_fetched_again() {
    let (server, hub) = MockHub::start(Duration::ZERO).await;
    hub.add_repo("org/sharded", sharded_repo(3));
    let dir = tempfile::tempdir().unwrap();
    let cache = dir.path().join("cache");
    let mut opts = options(&server.uri(), "org/sharded", &dir.path().join("t1"));
    opts.cache_dir = Some(cache.clone());
    let first = fetch_truth(&opts).await.unwrap();
    assert_eq!(first.origin, "hub");

    // Cut one header blob in half, as a full disk or a killed copy would.
    let blob = std::fs::read_dir(cache.join("blobs"))
        .unwrap()
        .flatten()
        .map(|e| e.path())
        .find(|p| p.to_string_lossy().contains("00002") && p.extension().unwrap() == "header")
        .expect("a header blob for shard 2");
    let full = std::fs::read(&blob).unwrap();
    std::fs::write(&blob, &full[..full.len() / 2]).unwrap();

    for revision in [SHA, "main"] {
        opts.revision = revision.into();
        opts.out = dir.path().join(format!("t-{revision}"));
        let before = requests(&server).await.len();
        let report = fetch_truth(&opts).await.unwrap();
        if revision == SHA {
            // The bad entry was found, evicted, and the Hub asked again.
            assert_eq!(report.origin, "hub");
            let evicted: Vec<_> = report
                .warnings
                .iter()
                .filter(|w| w.contains("failed its check and was evicted"))
                .collect();
            assert_eq!(evicted.len(), 1, "{:?}", report.warnings);
            assert_eq!(requests(&server).await.len() - before, 8);
            assert_eq!(std::fs::read(&blob).unwrap(), full);
        } else {
            // Repaired: a hit again (one revision lookup).
            assert_eq!(report.origin, "cache");
            assert_eq!(report.requests, 1);
        }
        let truth = load_truth_dir(&opts.out).unwrap();
        assert_eq!(truth.inventory.len(), 6);
    }
}

#[tokio::test]
async fn an_altered_cache_blob_of_the_same_size_is_caught_too() {
    let (server, hub) = MockHub::start(Duration::ZERO).await;
    hub.add_repo("org/sharded", sharded_repo(2));
    let dir = tempfile::tempdir().unwrap();
    let cache = dir.path().join("cache");
    let mut opts = options(&server.uri(), "org/sharded", &dir.path().join("t1"));
    opts.cache_dir = Some(cache.clone());
    opts.revision = SHA.into();
    fetch_truth(&opts).await.unwrap();
    let config_blob = cache.join("blobs/etag-config.json");
    let mut bytes = std::fs::read(&config_blob).unwrap();
    bytes[0] = b' ';
    std::fs::write(&config_blob, &bytes).unwrap();
    opts.out = dir.path().join("t2");
    let report = fetch_truth(&opts).await.unwrap();
    assert_eq!(report.origin, "hub");
    assert_eq!(
        std::fs::read(opts.out.join("config.json")).unwrap(),
        config()
    );
}

#[tokio::test]
async fn a_failed_cdn_hop_is_retried_without_the_redirect() {
    let cdn = format!("/cdn/org/m/{SHA}/model-00001-of-00001.safetensors");
    let (server, hub) = MockHub::start(Duration::ZERO).await;
    hub.add_repo("org/m", sharded_repo(1));
    hub.fault(&cdn, vec![Fault::Status(502), Fault::RateLimited(0)]);
    let dir = tempfile::tempdir().unwrap();
    let report = fetch_truth(&options(&server.uri(), "org/m", &dir.path().join("t")))
        .await
        .unwrap();
    assert_eq!(report.retries, 2);
    assert_eq!(report.rate_limited, 1);
    let reqs = requests(&server).await;
    // API, config, index, one 302 from the Hub (3 resolves), then the CDN three times (502,
    // 429, 206).
    let resolves = reqs.iter().filter(|r| r.contains("/resolve/")).count();
    let cdn_hits = reqs.iter().filter(|r| r.contains("/cdn/")).count();
    assert_eq!((reqs.len(), resolves, cdn_hits), (6, 3, 3), "{reqs:?}");
}

#[tokio::test]
async fn a_fifth_of_all_requests_failing_still_completes_every_time() {
    let mut faults_on = (0, 0, 0);
    for seed in 1..=6u64 {
        let (server, hub) = MockHub::start(Duration::ZERO).await;
        hub.add_repo("org/m", sharded_repo(40));
        hub.fault_rate(0.2, seed * 7919);
        let dir = tempfile::tempdir().unwrap();
        let out = dir.path().join("t");
        let mut opts = options(&server.uri(), "org/m", &out);
        opts.retry = RetryPolicy {
            base_delay: Duration::from_millis(2),
            max_delay: Duration::from_millis(50),
            ..RetryPolicy::default()
        };
        let report: FetchReport = fetch_truth(&opts)
            .await
            .unwrap_or_else(|e| panic!("seed {seed}: {e}"));
        let injected = hub.injected();
        assert_eq!(report.tensors, 80, "seed {seed}");
        // Every injected fault was retried, and counted in the report.
        assert_eq!(report.retries, injected.total(), "seed {seed}");
        assert_eq!(report.rate_limited, injected.rate_limited, "seed {seed}");
        assert_eq!(
            report.requests as usize,
            requests(&server).await.len(),
            "seed {seed}"
        );
        assert_eq!(load_truth_dir(&out).unwrap().inventory.len(), 80);
        faults_on.0 += injected.api;
        faults_on.1 += injected.resolve;
        faults_on.2 += injected.cdn;
    }
    // Both hops of the redirect took faults (and the API, most likely).
    assert!(faults_on.1 > 0 && faults_on.2 > 0, "{faults_on:?}");
}

#[tokio::test]
async fn a_missing_forward_source_is_a_warning_in_the_report() {
    let (server, hub) = MockHub::start(Duration::ZERO).await;
    hub.add_repo("org/m", sharded_repo(1));
    let dir = tempfile::tempdir().unwrap();
    let report = fetch_truth(&options(&server.uri(), "org/m", &dir.path().join("t")))
        .await
        .unwrap();
    assert_eq!(report.source_origin, None);
    assert_eq!(report.warnings.len(), 1, "{:?}", report.warnings);
    let w = &report.warnings[0];
    assert!(
        w.contains("no forward source for model_type `harch_test_arch`")
            && w.contains("scripts/fetch-transformers-src")
            && w.contains("O003"),
        "{w}"
    );
}

#[test]
fn a_truth_dir_whose_index_reaches_outside_is_refused_on_read() {
    let dir = tempfile::tempdir().unwrap();
    let truth = dir.path().join("truth");
    std::fs::create_dir(&truth).unwrap();
    std::fs::write(truth.join("config.json"), config()).unwrap();
    std::fs::write(
        truth.join("model.safetensors.index.json"),
        r#"{"weight_map": {"w": "../outside.safetensors"}}"#,
    )
    .unwrap();
    let (json, payload) = header_json(&[("w", "F32", &[2])], 0);
    let mut file = (json.len() as u64).to_le_bytes().to_vec();
    file.extend_from_slice(json.as_bytes());
    file.resize(file.len() + payload as usize, 0);
    std::fs::write(dir.path().join("outside.safetensors"), file).unwrap();
    let err = load_truth_dir(&truth).unwrap_err();
    assert!(
        format!("{err:#}").contains("`../outside.safetensors`, which is not a plain relative path"),
        "{err:#}"
    );
}
