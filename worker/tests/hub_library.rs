//! The fetched truth of each library model validates against its library spec: the mock Hub
//! serves each model's real inventory (from its bundled snapshot, placed in shards), the fetcher
//! writes a truth directory, and the full validate accepts it.

use crate::support;

use std::time::Duration;

use harch_worker::hub::fetch_truth;
use support::mock_hub::{MockFile, MockHub, MockRepo};
use support::options;

fn repo_of(model_id: &str) -> MockRepo {
    let truth = harch_worker::snapshot::load_snapshot(model_id).expect("bundled snapshot");
    let shards = (truth.inventory.len() / 600).clamp(1, 163);
    let (files, index) = harch_truth::synth::shard(&truth, shards);
    let mut repo = MockRepo::default();
    for (file, header, payload) in files {
        repo.files.insert(file, MockFile::shard(&header, payload));
    }
    repo.files.insert(
        "model.safetensors.index.json".into(),
        MockFile::small(serde_json::to_vec(&index).unwrap()),
    );
    repo.files.insert(
        "config.json".into(),
        MockFile::small(serde_json::to_vec(&truth.config).unwrap()),
    );
    // Remote code named by auto_map: the repo serves the architecture's modeling file (taken from
    // the transformers cache at test time; no third-party code is committed).
    let native = harch_worker::source::resolve_native(&truth.config)
        .expect("run scripts/fetch-transformers-src first");
    // Each remote module is the native file it stands for: the same name, else the one its name
    // begins (`modeling_deepseek.py` is `modeling_deepseek_v3.py`), else the first.
    let modeling = |file: &str| -> String {
        let stem = file.trim_end_matches(".py");
        let native_modeling = || {
            native
                .files
                .iter()
                .filter(|(n, _)| n.starts_with("modeling_"))
        };
        native
            .files
            .get(file)
            .or_else(|| {
                native_modeling()
                    .find(|(n, _)| n.starts_with(stem))
                    .map(|(_, t)| t)
            })
            .or_else(|| native_modeling().next().map(|(_, t)| t))
            .cloned()
            .unwrap_or_default()
    };
    for file in harch_worker::source::auto_map_files(&truth.config).expect("auto_map") {
        let text = if file.starts_with("modeling_") {
            modeling(&file)
        } else {
            "# configuration\n".to_string()
        };
        repo.files.insert(file, MockFile::small(text.into_bytes()));
    }
    repo
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_fetched_library_truth_validates() {
    let (server, hub) = MockHub::start(Duration::ZERO).await;
    for id in harch_worker::snapshot::snapshot_ids() {
        hub.add_repo(id, repo_of(id));
        let dir = tempfile::tempdir().unwrap();
        let out = dir.path().join("truth");
        let report = fetch_truth(&options(&server.uri(), id, &out))
            .await
            .unwrap_or_else(|e| panic!("{id}: {e}"));
        let want = harch_worker::snapshot::load_snapshot(id)
            .unwrap()
            .inventory
            .len();
        assert_eq!(report.tensors, want, "{id}");
        let outcome = harch_worker::verify::validate_truth_dir(id, &out, "all").unwrap();
        assert!(outcome.valid, "{id}: {:#}", outcome.report_json);
        assert_eq!(outcome.report_json["summary"]["byte_diff"], 0, "{id}");
    }
}

fn cli(
    dir: &std::path::Path,
    endpoint: &str,
    offline: bool,
    args: &[&str],
) -> (i32, String, String) {
    let root = std::path::PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("..");
    let mut cmd = std::process::Command::new(env!("CARGO_BIN_EXE_harch-worker"));
    cmd.current_dir(dir)
        .env("HARCH_ROOT", &root)
        .env("HARCH_INVENTORY_CACHE", "off")
        .env("HOME", dir)
        .env("XDG_DATA_HOME", dir.join("data"))
        .env("XDG_CACHE_HOME", dir.join("cache"))
        .env("HF_ENDPOINT", endpoint)
        .env_remove("HF_TOKEN")
        .args(args);
    if offline {
        cmd.env("HF_HUB_OFFLINE", "1");
    } else {
        cmd.env_remove("HF_HUB_OFFLINE");
    }
    let out = cmd.output().unwrap();
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into(),
        String::from_utf8_lossy(&out.stderr).into(),
    )
}

/// Any Hub id (issue 29): a model that is not bundled is fetched from the Hub (here the mock,
/// serving a copy of Qwen3-8B under another id), the library spec serving its architecture is
/// found, validated against what was fetched, and answers — the same figures as the bundled
/// model's. Offline, the fetched truth is used again; an id the Hub does not have says what to
/// run.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_hub_id_that_is_not_bundled_is_fetched_validated_and_answered() {
    let (server, hub) = MockHub::start(Duration::ZERO).await;
    let copy = "someone/Qwen3-8B-copy";
    hub.add_repo(copy, repo_of("Qwen/Qwen3-8B"));
    let dir = tempfile::tempdir().unwrap();
    let (path, uri) = (dir.path().to_path_buf(), server.uri());
    let run = move |offline: bool, args: Vec<&'static str>| {
        let (path, uri) = (path.clone(), uri.clone());
        tokio::task::spawn_blocking(move || cli(&path, &uri, offline, &args))
    };
    let (code, out, err) = run(false, vec!["show", copy, "--json"]).await.unwrap();
    assert_eq!(code, 0, "{err}");
    assert!(err.contains("is not bundled: fetching its truth"), "{err}");
    let fetched: serde_json::Value = serde_json::from_str(&out).unwrap();
    let (_, out, _) = run(true, vec!["show", "Qwen/Qwen3-8B", "--json"])
        .await
        .unwrap();
    let bundled: serde_json::Value = serde_json::from_str(&out).unwrap();
    for k in ["params_total", "weight_bytes", "kv_bytes_per_token"] {
        assert_eq!(fetched[k], bundled[k], "{k}");
    }
    // analyze validates the spec against the fetched truth: verified, and it fits.
    let (code, out, err) = run(true, vec!["analyze", copy, "--gpu", "h100", "--json"])
        .await
        .unwrap();
    assert_eq!(code, 0, "{err}");
    let v: serde_json::Value = serde_json::from_str(&out).unwrap();
    assert_eq!(v["verdict"], "FITS", "{v}");
    assert_eq!(v["verified"], true, "{v}");
    assert!(
        !err.contains("fetching"),
        "offline: the fetched truth is read again: {err}"
    );
    // An id the Hub does not have: the error names what failed and the command to retry.
    let (code, _, err) = run(false, vec!["show", "someone/none-such"]).await.unwrap();
    assert_ne!(code, 0);
    assert!(
        err.contains("is not bundled and fetching it failed")
            && err.contains("harch-worker fetch someone/none-such --out DIR"),
        "{err}"
    );
}
