//! Fetch benchmark: the real DeepSeek-V3 inventory (91,991 tensors; the bundled snapshot placed
//! into 163 shards in layer order, balanced by bytes) served by a local mock Hub with a fixed
//! per-request latency. Runs `fetch_truth` and, when a Python with huggingface_hub is at hand,
//! `huggingface_hub.get_safetensors_metadata` (scripts/bench-hf-safetensors-metadata.py)
//! against the same mock, alternating the two for a number of rounds (each run on a fresh mock
//! server), and reports each run's wall time, requests and bytes, the medians, the ratio of the
//! medians, and harch's time split.
//!
//! ```text
//! cargo bench -p harch-worker --bench fetch_deepseek
//! HARCH_BENCH_LATENCY_MS=20,50 HARCH_BENCH_ROUNDS=7 HARCH_BENCH_PYTHON=.cache/bench-venv/bin/python cargo bench ...
//! ```

#[path = "../tests/support/mock_hub.rs"]
mod mock_hub;

use std::path::{Path, PathBuf};
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use harch_worker::hub::{FetchOptions, Timings, fetch_truth};
use mock_hub::{MockFile, MockHub, MockRepo, requests};

const MODEL: &str = "deepseek-ai/DeepSeek-V3";
const SHARDS: usize = 163;

fn main() {
    let latencies: Vec<u64> = std::env::var("HARCH_BENCH_LATENCY_MS")
        .unwrap_or_else(|_| "20".into())
        .split(',')
        .filter_map(|s| s.trim().parse().ok())
        .collect();
    let rounds: usize = std::env::var("HARCH_BENCH_ROUNDS")
        .ok()
        .and_then(|r| r.parse().ok())
        .unwrap_or(5)
        .max(1);
    let repo = deepseek_repo();
    let python = python_with_hf_hub();
    if python.is_none() {
        eprintln!(
            "(no Python with huggingface_hub: set HARCH_BENCH_PYTHON or create .cache/bench-venv, see docs/benchmarks.md)"
        );
    }
    let runtime = tokio::runtime::Runtime::new().expect("tokio runtime");
    println!("| client | latency | round | wall s | requests | inventory requests | bytes |");
    println!("|---|---|---|---|---|---|---|");
    let mut summary = Vec::new();
    for ms in latencies {
        let latency = Duration::from_millis(ms);
        let (mut ours, mut theirs, mut splits) = (Vec::new(), Vec::new(), Vec::new());
        for round in 1..=rounds {
            let (rust, timings) = runtime.block_on(bench_rust(&repo, latency));
            println!("{}", rust.row("harch fetch_truth", ms, round));
            ours.push(rust);
            splits.push(timings);
            if let Some(py) = &python {
                match runtime.block_on(bench_python(&repo, latency, py)) {
                    Ok(r) => {
                        println!(
                            "{}",
                            r.row("huggingface_hub get_safetensors_metadata", ms, round)
                        );
                        theirs.push(r);
                    }
                    Err(e) => println!("| python | {ms} ms | {round} | failed: {e} | | | |"),
                }
            }
        }
        summary.push((ms, ours, theirs, splits));
    }
    println!();
    println!(
        "| latency | harch median (min) s | huggingface_hub median (min) s | ratio of medians | harch requests / bytes | huggingface_hub requests / bytes |"
    );
    println!("|---|---|---|---|---|---|");
    for (ms, ours, theirs, _) in &summary {
        let (om, omin) = median_min(ours);
        let (row_theirs, ratio, theirs_rb) = if theirs.is_empty() {
            ("-".to_string(), "-".to_string(), "-".to_string())
        } else {
            let (tm, tmin) = median_min(theirs);
            (
                format!("{tm:.3} ({tmin:.3})"),
                format!("{:.1}x", tm / om),
                format!("{} / {}", theirs[0].requests, theirs[0].bytes),
            )
        };
        println!(
            "| {ms} ms | {om:.3} ({omin:.3}) | {row_theirs} | {ratio} | {} / {} | {theirs_rb} |",
            ours[0].requests, ours[0].bytes
        );
    }
    println!();
    println!("harch time split (median of each phase, ms): resolve / index / headers / local work");
    for (ms, _, _, splits) in &summary {
        let med = |f: fn(&Timings) -> f64| {
            let mut v: Vec<f64> = splits.iter().map(f).collect();
            v.sort_by(f64::total_cmp);
            v[v.len() / 2]
        };
        println!(
            "{ms} ms latency: {:.1} / {:.1} / {:.1} / {:.1}",
            med(|t| t.resolve_ms),
            med(|t| t.index_ms),
            med(|t| t.headers_ms),
            med(|t| t.local_ms)
        );
    }
}

fn median_min(runs: &[Outcome]) -> (f64, f64) {
    let mut v: Vec<f64> = runs.iter().map(|r| r.wall.as_secs_f64()).collect();
    v.sort_by(f64::total_cmp);
    (v[v.len() / 2], v[0])
}

struct Outcome {
    wall: Duration,
    requests: usize,
    inventory_requests: usize,
    bytes: u64,
}

impl Outcome {
    fn row(&self, client: &str, ms: u64, round: usize) -> String {
        format!(
            "| {client} | {ms} ms | {round} | {:.3} | {} | {} | {} |",
            self.wall.as_secs_f64(),
            self.requests,
            self.inventory_requests,
            self.bytes
        )
    }
}

/// Requests for the inventory alone: revision lookup, index (incl. probes for it and for a
/// single model.safetensors), shard headers (resolve and CDN hops). The rest (config, remote
/// code) is what only harch fetches.
fn inventory_requests(reqs: &[String]) -> usize {
    reqs.iter()
        .filter(|r| r.contains("/revision/") || r.contains(".safetensors"))
        .count()
}

async fn bench_rust(repo: &MockRepo, latency: Duration) -> (Outcome, Timings) {
    let (server, hub) = MockHub::start(latency).await;
    hub.add_repo(MODEL, repo.clone());
    let dir = tempfile::tempdir().expect("temp dir");
    let mut opts = FetchOptions::from_env(MODEL, dir.path().join("truth"));
    opts.endpoint = server.uri();
    opts.token = None;
    opts.offline = false;
    opts.cache_dir = None;
    let started = Instant::now();
    let report = fetch_truth(&opts).await.expect("fetch");
    let wall = started.elapsed();
    assert_eq!(report.tensors, 91_991);
    assert_eq!(report.shards, SHARDS);
    let reqs = requests(&server).await;
    assert_eq!(report.requests as usize, reqs.len());
    // Reading back what was written: the cost `validate` pays per run for the inventory.
    let load_started = Instant::now();
    let truth = harch_worker::truth_dir::load_truth_dir(&dir.path().join("truth")).expect("load");
    eprintln!(
        "load_truth_dir: {} tensors in {:.1} ms",
        truth.inventory.len(),
        load_started.elapsed().as_secs_f64() * 1e3
    );
    (
        Outcome {
            wall,
            requests: reqs.len(),
            inventory_requests: inventory_requests(&reqs),
            bytes: hub.sent_bytes.load(Ordering::Relaxed),
        },
        report.timings,
    )
}

async fn bench_python(
    repo: &MockRepo,
    latency: Duration,
    python: &Path,
) -> Result<Outcome, String> {
    let (server, hub) = MockHub::start(latency).await;
    hub.add_repo(MODEL, repo.clone());
    let home = tempfile::tempdir().map_err(|e| e.to_string())?;
    let script =
        Path::new(env!("CARGO_MANIFEST_DIR")).join("../scripts/bench-hf-safetensors-metadata.py");
    let out = tokio::process::Command::new(python)
        .arg(script)
        .arg(MODEL)
        .env("HF_ENDPOINT", server.uri())
        .env("HF_HOME", home.path())
        .env("HF_HUB_DISABLE_TELEMETRY", "1")
        .env("HF_HUB_DISABLE_PROGRESS_BARS", "1")
        .env_remove("HF_TOKEN")
        .output()
        .await
        .map_err(|e| e.to_string())?;
    if !out.status.success() {
        return Err(String::from_utf8_lossy(&out.stderr)
            .lines()
            .last()
            .unwrap_or("")
            .to_string());
    }
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).map_err(|e| e.to_string())?;
    if v["tensors"] != 91_991 {
        return Err(format!("python saw {} tensors", v["tensors"]));
    }
    let reqs = requests(&server).await;
    Ok(Outcome {
        wall: Duration::from_secs_f64(v["wall_s"].as_f64().unwrap_or(f64::NAN)),
        requests: reqs.len(),
        inventory_requests: inventory_requests(&reqs),
        bytes: hub.sent_bytes.load(Ordering::Relaxed),
    })
}

fn python_with_hf_hub() -> Option<PathBuf> {
    let candidate = std::env::var_os("HARCH_BENCH_PYTHON")
        .map(PathBuf::from)
        .unwrap_or_else(|| {
            Path::new(env!("CARGO_MANIFEST_DIR")).join("../.cache/bench-venv/bin/python")
        });
    candidate.exists().then_some(candidate)
}

/// The mock repo: config (from the snapshot), generation config (which harch does not fetch),
/// remote code named by auto_map, the index and 163 virtual shards.
fn deepseek_repo() -> MockRepo {
    let truth = harch_worker::snapshot::load_snapshot(MODEL).expect("bundled DeepSeek-V3 snapshot");
    let (shards, index) = harch_truth::synth::shard(&truth, SHARDS);
    let mut repo = MockRepo::default();
    for (file, header, payload) in shards {
        repo.files.insert(file, MockFile::shard(&header, payload));
    }
    repo.files.insert(
        "model.safetensors.index.json".into(),
        MockFile::small(serde_json::to_vec_pretty(&index).expect("index json")),
    );
    repo.files.insert(
        "config.json".into(),
        MockFile::small(serde_json::to_vec_pretty(&truth.config).expect("config json")),
    );
    repo.files.insert(
        "generation_config.json".into(),
        MockFile::small(
            br#"{"_from_model_config": true, "bos_token_id": 0, "eos_token_id": 1}"#.to_vec(),
        ),
    );
    for file in harch_worker::source::auto_map_files(&truth.config).expect("auto_map") {
        repo.files
            .insert(file, MockFile::small(b"# remote code stand-in\n".to_vec()));
    }
    repo
}
