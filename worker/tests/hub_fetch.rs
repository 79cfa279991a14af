//! The fetcher against a local server speaking the Hub protocol: what it writes and how many
//! requests it takes. Request counts are HTTP requests the server saw (redirect hops included).

use crate::support;

use std::time::Duration;

use harch_worker::hub::{FetchOptions, fetch_truth, guess_from_names};
use harch_worker::truth_dir::load_truth_dir;
use support::mock_hub::{MockFile, MockHub, MockRepo, SHA, header_json, requests};
use support::*;

#[tokio::test]
async fn single_file_repo_with_the_real_minilm_header() {
    let (server, hub) = MockHub::start(Duration::ZERO).await;
    hub.add_repo("sentence-transformers/all-MiniLM-L6-v2", minilm_repo());
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("truth");
    let opts = options(
        &server.uri(),
        "sentence-transformers/all-MiniLM-L6-v2",
        &out,
    );
    let report = fetch_truth(&opts).await.unwrap();

    assert_eq!(report.revision.as_deref(), Some(SHA));
    assert_eq!(report.tensors, 104);
    assert_eq!(report.shards, 1);
    // Config and index (absent) at the branch, then at the commit they named: resolve (302)
    // + CDN range for the one header.
    assert_eq!(
        requests(&server).await,
        [
            "GET /sentence-transformers/all-MiniLM-L6-v2/resolve/main/config.json".to_string(),
            "GET /sentence-transformers/all-MiniLM-L6-v2/resolve/main/model.safetensors.index.json"
                .to_string(),
            format!("GET /sentence-transformers/all-MiniLM-L6-v2/resolve/{SHA}/model.safetensors"),
            format!("GET /cdn/sentence-transformers/all-MiniLM-L6-v2/{SHA}/model.safetensors"),
        ]
    );
    assert_eq!(report.requests, 4);
    // Only the speculative range of the shard: no payload beyond it.
    let small = (MINILM_CONFIG.len() + 1024) as u64;
    assert!(report.bytes_transferred <= harch_worker::hub::DEFAULT_GUESS + small);

    let truth = load_truth_dir(&out).unwrap();
    assert_eq!(truth.inventory.len(), 104);
    assert_eq!(truth.revision.as_deref(), Some(SHA));
    assert_eq!(
        truth.inventory.total_bytes(),
        (MINILM_FILE_LEN - MINILM_HEAD.len() as u64) as u128
    );
    let header = std::fs::read(out.join("shards/model.safetensors.header.json")).unwrap();
    assert_eq!(header, MINILM_HEAD[8..]);
}

#[tokio::test]
async fn sharded_repo_takes_one_range_per_shard() {
    let (server, hub) = MockHub::start(Duration::ZERO).await;
    hub.add_repo("org/sharded", sharded_repo(5));
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("t");
    let report = fetch_truth(&options(&server.uri(), "org/sharded", &out))
        .await
        .unwrap();
    assert_eq!(report.tensors, 10);
    assert_eq!(report.shards, 5);
    // config + index + 5 × (302 + 206).
    assert_eq!(requests(&server).await.len(), 12);
    assert_eq!(report.requests, 12);
    assert_eq!(report.retries, 0);
    let truth = load_truth_dir(&out).unwrap();
    assert_eq!(truth.inventory.len(), 10);
    assert_eq!(
        truth.inventory.get(0).unwrap().shard,
        Some("model-00001-of-00005.safetensors")
    );
    assert_eq!(
        truth.inventory.total_size,
        Some(truth.inventory.total_bytes() as u64)
    );
}

/// One shard whose header is padded so that it ends exactly `extra` bytes after the
/// speculative first range.
fn boundary_repo(extra: i64) -> MockRepo {
    let name = "model.embed_tokens.weight";
    let guess = guess_from_names([name].into_iter()) as i64;
    let (json, payload) = header_json(&[(name, "BF16", &[4, 4])], (guess - 8 + extra) as usize);
    assert_eq!(json.len() as i64 + 8, guess + extra);
    let mut repo = MockRepo::default();
    repo.files
        .insert("config.json".into(), MockFile::small(config()));
    repo.files.insert(
        "model.safetensors.index.json".into(),
        MockFile::small(format!(
            r#"{{"metadata":{{"total_size":{payload}}},"weight_map":{{"{name}":"model-00001-of-00001.safetensors"}}}}"#
        )),
    );
    repo.files.insert(
        "model-00001-of-00001.safetensors".into(),
        MockFile::shard(&json, payload),
    );
    repo
}

async fn fetch_boundary(extra: i64) -> (Vec<String>, u64) {
    let (server, hub) = MockHub::start(Duration::ZERO).await;
    hub.add_repo("org/b", boundary_repo(extra));
    let dir = tempfile::tempdir().unwrap();
    let report = fetch_truth(&options(&server.uri(), "org/b", &dir.path().join("t")))
        .await
        .unwrap();
    assert_eq!(report.tensors, 1);
    let shard_requests = requests(&server)
        .await
        .into_iter()
        .filter(|r| r.contains("model-00001"))
        .collect();
    (shard_requests, report.bytes_transferred)
}

#[tokio::test]
async fn header_ending_exactly_at_the_speculative_range_takes_one_range() {
    let (reqs, _) = fetch_boundary(0).await;
    assert_eq!(reqs.len(), 2, "{reqs:?}"); // 302 + one 206
}

#[tokio::test]
async fn header_one_byte_past_the_speculative_range_takes_a_second_range() {
    let (reqs, _) = fetch_boundary(1).await;
    assert_eq!(reqs.len(), 4, "{reqs:?}"); // (302 + 206) twice
}

#[tokio::test]
async fn server_that_ignores_range_is_read_only_up_to_the_guess() {
    let (server, hub) = MockHub::start(Duration::ZERO).await;
    let mut repo = boundary_repo(-100);
    repo.ignore_range = true;
    hub.add_repo("org/b", repo);
    let dir = tempfile::tempdir().unwrap();
    let report = fetch_truth(&options(&server.uri(), "org/b", &dir.path().join("t")))
        .await
        .unwrap();
    assert_eq!(report.tensors, 1);
    assert_eq!(requests(&server).await.len(), 4);
}

#[tokio::test]
async fn gated_repo_fetches_with_the_right_token() {
    let (server, hub) = MockHub::start(Duration::ZERO).await;
    let mut repo = sharded_repo(1);
    repo.gated_token = Some("hf_secret".into());
    hub.add_repo("org/gated", repo);
    let dir = tempfile::tempdir().unwrap();
    let mut opts = options(&server.uri(), "org/gated", &dir.path().join("t"));
    opts.token = Some("hf_secret".into());
    let report = fetch_truth(&opts).await.unwrap();
    assert_eq!(report.tensors, 2);
    assert_eq!(requests(&server).await.len(), 4);
}

#[tokio::test]
async fn a_second_fetch_is_served_from_the_cache() {
    let (server, hub) = MockHub::start(Duration::ZERO).await;
    hub.add_repo("org/sharded", sharded_repo(3));
    let dir = tempfile::tempdir().unwrap();
    let mut opts = options(&server.uri(), "org/sharded", &dir.path().join("t1"));
    opts.cache_dir = Some(dir.path().join("cache"));
    let first = fetch_truth(&opts).await.unwrap();
    assert_eq!(first.origin, "hub");
    assert_eq!(requests(&server).await.len(), 8);

    // By branch: only the revision lookup.
    opts.out = dir.path().join("t2");
    let second = fetch_truth(&opts).await.unwrap();
    assert_eq!(second.origin, "cache");
    assert_eq!(second.requests, 1);
    assert_eq!(requests(&server).await.len(), 9);

    // By pinned sha: nothing at all.
    opts.out = dir.path().join("t3");
    opts.revision = SHA.into();
    let third = fetch_truth(&opts).await.unwrap();
    assert_eq!(third.origin, "cache");
    assert_eq!(third.requests, 0);
    assert_eq!(requests(&server).await.len(), 9);

    let a = load_truth_dir(&dir.path().join("t1")).unwrap();
    let c = load_truth_dir(&dir.path().join("t3")).unwrap();
    assert_eq!(a.inventory, c.inventory);
    assert_eq!(a.config, c.config);
}

#[tokio::test]
async fn refetch_replaces_the_truth_dir_atomically() {
    let (server, hub) = MockHub::start(Duration::ZERO).await;
    hub.add_repo("org/sharded", sharded_repo(2));
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("t");
    std::fs::create_dir_all(out.join("shards")).unwrap();
    std::fs::write(out.join("shards/stale.safetensors.header.json"), "{}").unwrap();
    fetch_truth(&options(&server.uri(), "org/sharded", &out))
        .await
        .unwrap();
    assert!(!out.join("shards/stale.safetensors.header.json").exists());
    assert_eq!(load_truth_dir(&out).unwrap().inventory.len(), 4);
    // No temp directories are left next to it.
    let leftovers: Vec<_> = std::fs::read_dir(dir.path())
        .unwrap()
        .flatten()
        .filter(|e| e.file_name().to_string_lossy().starts_with(".truth"))
        .collect();
    assert!(leftovers.is_empty());
}

#[tokio::test]
async fn offline_serves_the_bundled_snapshot_without_requests() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("t");
    let mut opts: FetchOptions = options("http://127.0.0.1:9", "deepseek-ai/DeepSeek-V3", &out);
    opts.offline = true;
    let report = fetch_truth(&opts).await.unwrap();
    assert_eq!(report.origin, "snapshot");
    assert_eq!(report.requests, 0);
    assert_eq!(report.tensors, 91_991);
    assert_eq!(report.total_bytes, 688_574_839_360);
    let truth = load_truth_dir(&out).unwrap();
    assert_eq!(truth.inventory.len(), 91_991);
    assert_eq!(truth.config["model_type"], "deepseek_v3");
}

/// A server that does not say which commit `main` is at: the fetcher asks the API, then reads
/// config, index and every shard at that commit, and records it.
#[tokio::test]
async fn a_server_that_does_not_say_the_commit_is_asked_and_the_fetch_pins_it() {
    let (server, hub) = MockHub::start(Duration::ZERO).await;
    let mut repo = sharded_repo(2);
    for file in ["config.json", "model.safetensors.index.json"] {
        repo.commit_at_main.insert(file.into(), None);
    }
    hub.add_repo("org/quiet", repo);
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("t");
    let report = fetch_truth(&options(&server.uri(), "org/quiet", &out))
        .await
        .unwrap();
    assert_eq!(report.revision.as_deref(), Some(SHA));
    let seen = requests(&server).await;
    for wanted in [
        "GET /api/models/org/quiet/revision/main".to_string(),
        format!("GET /org/quiet/resolve/{SHA}/config.json"),
        format!("GET /org/quiet/resolve/{SHA}/model.safetensors.index.json"),
        format!("GET /org/quiet/resolve/{SHA}/model-00001-of-00002.safetensors"),
    ] {
        assert!(seen.contains(&wanted), "no `{wanted}` in {seen:#?}");
    }
    assert!(
        !seen.iter().any(|r| r.contains("/resolve/main/model-")),
        "a shard was read at the branch: {seen:#?}"
    );
    assert_eq!(load_truth_dir(&out).unwrap().revision.as_deref(), Some(SHA));
}

/// The branch moves between the config and the index requests (their `X-Repo-Commit`s
/// differ): the index is read again at the config's commit, so config, index and headers are
/// one commit's files.
#[tokio::test]
async fn a_push_between_config_and_index_takes_the_index_of_the_configs_commit() {
    const PUSHED: &str = "fedcba9876543210fedcba9876543210fedcba98";
    let (server, hub) = MockHub::start(Duration::ZERO).await;
    let mut repo = sharded_repo(2);
    repo.commit_at_main.insert(
        "model.safetensors.index.json".into(),
        Some(PUSHED.to_string()),
    );
    hub.add_repo("org/moving", repo);
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("t");
    let report = fetch_truth(&options(&server.uri(), "org/moving", &out))
        .await
        .unwrap();
    assert_eq!(report.revision.as_deref(), Some(SHA));
    let seen = requests(&server).await;
    let again = format!("GET /org/moving/resolve/{SHA}/model.safetensors.index.json");
    assert!(seen.contains(&again), "no `{again}` in {seen:#?}");
    assert!(
        !seen.iter().any(|r| r.contains(PUSHED)),
        "nothing is read at the pushed commit: {seen:#?}"
    );
    // config + index at main, the index again at the commit, 2 × (302 + 206).
    assert_eq!(report.requests, 7, "{seen:#?}");
    assert_eq!(load_truth_dir(&out).unwrap().revision.as_deref(), Some(SHA));
}
