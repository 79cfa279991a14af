//! A sweep of 64 layouts of DeepSeek-V3 on B200 (8 to 64 GPUs; attention TP 1–8 with data
//! parallelism filling the rest; MoE as EP × TP in four splits), each with its memory plan,
//! derived communication and both phases' bound and estimate. Target: under one second on the
//! 2-core build machine.
//!
//! `cargo bench -p harch-analysis --bench sweep`; figures are recorded in docs/benchmarks.md.

#[path = "../tests/support/mod.rs"]
mod support;

use std::hint::black_box;
use std::time::Duration;

use criterion::{Criterion, criterion_group, criterion_main};
use harch_analysis::{Layout, LayoutSpec, Model, Plan, Request, analyze_plan};
use harch_engine::{EvalOptions, evaluate};

fn layouts() -> Vec<Layout> {
    let mut out = Vec::new();
    for gpus in [8u32, 16, 32, 64] {
        for attn_tp in [1u32, 2, 4, 8] {
            for moe_tp in [1u32, 2, 4, 8] {
                let spec = format!("attn=tp{attn_tp},moe=ep{}tp{moe_tp}", gpus / moe_tp);
                out.push(
                    LayoutSpec::parse(&spec)
                        .unwrap()
                        .resolve(Some(gpus))
                        .unwrap(),
                );
            }
        }
    }
    out
}

fn bench(c: &mut Criterion) {
    let (ir, a, cfg) = support::evaluated("deepseek-ai/DeepSeek-V3");
    let model = Model::new(&ir, &a, &cfg).unwrap();
    let b200 = support::hardware().find("B200").unwrap().clone();
    let layouts = layouts();
    assert_eq!(layouts.len(), 64);
    let sweep = |model: &Model| {
        let mut tokens = 0.0;
        for l in &layouts {
            let plan = Plan::new(model, l).expect("every layout divides DeepSeek-V3's dims");
            let r = analyze_plan(&plan, &Request::new(b200.clone(), l.clone(), 1024, 1024));
            tokens += r.tokens_per_s_per_gpu_estimate.unwrap_or(0.0);
        }
        tokens
    };
    let mut g = c.benchmark_group("deepseek_v3");
    g.sample_size(10).measurement_time(Duration::from_secs(20));
    g.bench_function("sweep_64_layouts", |b| {
        b.iter(|| black_box(sweep(black_box(&model))))
    });
    g.bench_function("evaluate+prepare+sweep_64_layouts", |b| {
        b.iter(|| {
            let a = evaluate(&ir, &cfg, EvalOptions { symbolic: true });
            let model = Model::new(&ir, &a, &cfg).unwrap();
            black_box(sweep(&model))
        })
    });
    g.bench_function("one_layout", |b| {
        b.iter(|| {
            let plan = Plan::new(&model, &layouts[5]).unwrap();
            black_box(analyze_plan(
                &plan,
                &Request::new(b200.clone(), layouts[5].clone(), 1024, 1024),
            ))
        })
    });
    g.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);
