//! The fetched truth of each library model validates against its library spec: the mock Hub
//! serves each model's real inventory (from its bundled snapshot, placed in shards), the fetcher
//! writes a truth directory, and the full validate accepts it.

mod support;

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
