//! Validating DeepSeek-V3 (91,991 tensors in 163 shard headers): wall time of reading the truth
//! directory and of `validate` (load, one evaluation, every guard), and the process's peak
//! memory; then the whole `harch-worker validate` process (release build) on the same truth
//! directory, as a user runs it, with and without the inventory cache. Run:
//! `cargo bench -p harch-worker --bench validate_deepseek`.
//! With `HARCH_BENCH_TRUTH_DIR=DIR` the truth directory is written to (an empty or absent) DIR
//! and kept, to profile one process on it (`perf record -g harch-worker validate ... --truth DIR`).

use std::time::{Duration, Instant};

use harch_guards::GuardSet;
use harch_truth::synth;
use harch_worker::{snapshot, source, specs, subject, truth_dir};

const MODEL: &str = "deepseek-ai/DeepSeek-V3";
const RUNS: usize = 15;

fn peak_rss_kib() -> Option<u64> {
    let status = std::fs::read_to_string("/proc/self/status").ok()?;
    status
        .lines()
        .find(|l| l.starts_with("VmHWM:"))?
        .split_whitespace()
        .nth(1)?
        .parse()
        .ok()
}

/// User + system CPU seconds of this process so far (wall time on a loaded machine says little).
fn cpu_seconds() -> f64 {
    let stat = std::fs::read_to_string("/proc/self/stat").unwrap_or_default();
    // After the `)` that closes the command name come fields 3 (state), 4, ...; utime and stime
    // are fields 14 and 15, so the 12th and 13th tokens after the `)`.
    let after = stat.rsplit_once(')').map(|(_, r)| r).unwrap_or("");
    let f: Vec<&str> = after.split_whitespace().collect();
    let ticks = |i: usize| f.get(i).and_then(|x| x.parse::<f64>().ok()).unwrap_or(0.0);
    (ticks(11) + ticks(12)) / 100.0
}

fn median(mut v: Vec<Duration>) -> Duration {
    v.sort();
    v[v.len() / 2]
}

fn main() {
    let mut truth = snapshot::load_snapshot(MODEL).expect("bundled snapshot");
    if let Some(src) = source::resolve_native(&truth.config) {
        truth.sources = src.files;
    }
    let tmp = tempfile::tempdir().expect("tempdir");
    let dir = match std::env::var_os("HARCH_BENCH_TRUTH_DIR") {
        Some(kept) => std::path::PathBuf::from(kept),
        None => tmp.path().to_path_buf(),
    };
    synth::write_sharded_truth_dir(&truth, 163, &dir).expect("truth dir");
    let root = specs::root();
    let (mut read, mut check, mut total) = (vec![], vec![], vec![]);
    let mut last = None;
    let cpu0 = cpu_seconds();
    for _ in 0..RUNS {
        let t0 = Instant::now();
        let t = truth_dir::load_truth_dir(&dir).expect("load truth dir");
        let t1 = Instant::now();
        let repo = specs::read_repo(&root, &[]).expect("spec repo");
        let model = subject::library_model(&repo, &t.config)
            .expect("spec")
            .to_string();
        let (report, _) = harch_guards::validate(&repo, &model, &t, &GuardSet::all());
        let t2 = Instant::now();
        read.push(t1 - t0);
        check.push(t2 - t1);
        total.push(t2 - t0);
        last = Some(report);
    }
    let cpu_per_run = (cpu_seconds() - cpu0) / RUNS as f64;
    // Where the time goes, once: repository read, load, one evaluation.
    let repo_t = Instant::now();
    let repo = specs::read_repo(&root, &[]).expect("spec repo");
    let load_t = Instant::now();
    let model = subject::library_model(&repo, &truth.config)
        .expect("spec")
        .to_string();
    let ir = repo.load_model(&model).expect("loads");
    let eval_t = Instant::now();
    let a = harch_engine::evaluate(&ir, &truth.config, harch_engine::EvalOptions::default());
    let done = Instant::now();
    println!(
        "  phases: read spec repo {:.1} ms, load {:.1} ms, evaluate {:.1} ms ({} nodes, {} weight rows)",
        (load_t - repo_t).as_secs_f64() * 1e3,
        (eval_t - load_t).as_secs_f64() * 1e3,
        (done - eval_t).as_secs_f64() * 1e3,
        a.nodes.len(),
        a.weights.len()
    );
    // The forward-source reader the semantic guards use (issue 27): statements, cache writes
    // and what produces them, over every staged file, 15 times.
    let files: Vec<(&String, &String)> = truth.sources.iter().collect();
    let bytes: usize = files.iter().map(|(_, t)| t.len()).sum();
    let mut reads = vec![];
    let mut stmts = 0;
    for _ in 0..RUNS {
        let t0 = Instant::now();
        let src = harch_guards::pysrc::Sources::read(&files);
        for w in harch_guards::pysrc::flow::cache_writes(&src) {
            std::hint::black_box(harch_guards::pysrc::flow::producers(&src, &w));
        }
        reads.push(t0.elapsed());
        stmts = src.modules.iter().map(|m| m.stmts.len()).sum::<usize>();
    }
    println!(
        "  source reader: {} files, {} KiB, {stmts} statements, cache writes and their producers: median {:.2} ms",
        files.len(),
        bytes / 1024,
        median(reads).as_secs_f64() * 1e3
    );
    let r = last.expect("ran");
    println!(
        "validate {MODEL}: {} tensors in 163 shard headers, valid = {}, errors = {}",
        r.summary.checkpoint_tensors,
        r.valid,
        r.errors.len()
    );
    println!(
        "  read truth dir (163 headers + index + config): median {:.1} ms, min {:.1} ms",
        median(read.clone()).as_secs_f64() * 1e3,
        read.iter().min().unwrap().as_secs_f64() * 1e3
    );
    println!(
        "  load + evaluate + all guards:                  median {:.1} ms, min {:.1} ms",
        median(check.clone()).as_secs_f64() * 1e3,
        check.iter().min().unwrap().as_secs_f64() * 1e3
    );
    println!(
        "  total:                                         median {:.1} ms, min {:.1} ms ({RUNS} runs)",
        median(total.clone()).as_secs_f64() * 1e3,
        total.iter().min().unwrap().as_secs_f64() * 1e3
    );
    println!(
        "  CPU time per run (user + system): {:.1} ms",
        cpu_per_run * 1e3
    );
    if let Some(kib) = peak_rss_kib() {
        println!("  peak RSS of the process: {:.1} MiB", kib as f64 / 1024.0);
    }
    per_process(&dir);
}

/// `harch-worker validate deepseek-ai/DeepSeek-V3 --truth DIR`, one process per run: start-up,
/// reading the truth directory, every guard, the report. Three ways, taking turns: without the
/// inventory cache, with an empty one (the first validate of a directory, which fills it), and
/// with the entry it left (every later validate of the same directory).
fn per_process(truth: &std::path::Path) {
    let bin = env!("CARGO_BIN_EXE_harch-worker");
    let caches = tempfile::tempdir().expect("tempdir");
    let warm = caches.path().join("warm");
    let cold = caches.path().join("cold");
    let run = |cache: &std::path::Path| {
        let t0 = Instant::now();
        let out = std::process::Command::new(bin)
            .args(["validate", MODEL, "--truth"])
            .arg(truth)
            .env("HARCH_INVENTORY_CACHE", cache)
            .stdout(std::process::Stdio::null())
            .output()
            .expect("harch-worker runs");
        assert!(
            out.status.success(),
            "validate failed: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        t0.elapsed()
    };
    run(&warm);
    let (mut off, mut first, mut again) = (vec![], vec![], vec![]);
    for _ in 0..RUNS {
        off.push(run(std::path::Path::new("off")));
        let _ = std::fs::remove_dir_all(&cold);
        first.push(run(&cold));
        again.push(run(&warm));
    }
    for (what, walls) in [
        ("no inventory cache", off),
        ("first, filling the cache", first),
        ("again, from the cache", again),
    ] {
        println!(
            "  whole process (harch-worker validate {MODEL} --truth <dir>), {what}: median {:.1} ms, min {:.1} ms ({RUNS} runs)",
            median(walls.clone()).as_secs_f64() * 1e3,
            walls.iter().min().unwrap().as_secs_f64() * 1e3
        );
    }
}
