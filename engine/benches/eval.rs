//! Evaluation time of the spec library: DeepSeek-V3 alone (loaded once, then evaluated) and all
//! seven library models, against the configs of the bundled snapshots.
//!
//! `cargo bench -p harch-engine --bench eval`; figures are recorded in docs/benchmarks.md.

#[path = "../tests/support/mod.rs"]
mod support;

use std::hint::black_box;
use std::time::Duration;

use criterion::{Criterion, criterion_group, criterion_main};
use harch_engine::{EvalOptions, ModelIr, Repo, evaluate};

fn library() -> (Repo, Vec<(ModelIr, serde_json::Value)>) {
    let configs = support::snapshot_configs();
    let repo = Repo::from_files(support::library_files());
    let models = repo
        .model_names()
        .iter()
        .map(|name| {
            let ir = repo.load_model(name).expect("library spec loads");
            let config = support::config_for(&configs, &ir.architectures)
                .expect("a bundled config serves the spec")
                .clone();
            (ir, config)
        })
        .collect();
    (repo, models)
}

fn bench(c: &mut Criterion) {
    let (repo, models) = library();
    let (v3, v3_config) = models
        .iter()
        .find(|(ir, _)| ir.name == "deepseek_v3")
        .expect("deepseek_v3 in the library");

    c.bench_function("deepseek_v3/evaluate", |b| {
        b.iter(|| evaluate(black_box(v3), black_box(v3_config), EvalOptions::default()))
    });
    c.bench_function("deepseek_v3/evaluate+summary", |b| {
        b.iter(|| evaluate(v3, v3_config, EvalOptions::default()).summary())
    });
    c.bench_function("deepseek_v3/evaluate_symbolic", |b| {
        b.iter(|| evaluate(v3, v3_config, EvalOptions { symbolic: true }))
    });
    c.bench_function("deepseek_v3/load", |b| {
        b.iter(|| repo.load_model(black_box("deepseek_v3")).expect("loads"))
    });
    c.bench_function("library/evaluate+summary (7 models)", |b| {
        b.iter(|| {
            for (ir, config) in &models {
                black_box(evaluate(ir, config, EvalOptions::default()).summary());
            }
        })
    });
    c.bench_function("library/parse+load+evaluate (7 models)", |b| {
        let files = support::library_files();
        b.iter(|| {
            let repo = Repo::from_files(files.clone());
            for (ir, config) in &models {
                let ir2 = repo.load_model(&ir.name).expect("loads");
                black_box(evaluate(&ir2, config, EvalOptions::default()));
            }
        })
    });
}

criterion_group! {
    name = benches;
    config = Criterion::default()
        .sample_size(20)
        .warm_up_time(Duration::from_secs(1))
        .measurement_time(Duration::from_secs(3));
    targets = bench
}
criterion_main!(benches);
