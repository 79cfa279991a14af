//! `plan`'s layout search: what it names for DeepSeek-V3 and Qwen3-8B on H100 SXM, and the
//! property that every layout it names gives the same figures as a separate analysis of that
//! layout (the layout string it prints read back).

use crate::support;

use harch_analysis::search::{Candidate, SearchSpec, search};
use harch_analysis::{Fit, LayoutSpec, Model, Request, analyze};
use proptest::prelude::*;

fn spec(max_gpus: u32) -> SearchSpec {
    SearchSpec {
        node: 8,
        max_gpus,
        max_pp: 4,
        usd_per_gpu_hour: Some(2.5),
        max_tpot_s: None,
    }
}

fn h100(input: i128, output: i128) -> Request {
    let gpu = support::hardware().find("h100").unwrap().clone();
    let one = LayoutSpec::parse("attn=tp1")
        .unwrap()
        .resolve(Some(1))
        .unwrap();
    Request::new(gpu, one, input, output)
}

/// The candidate's figures equal those of `analyze` of its printed layout.
fn same_as_analyze(model: &Model, base: &Request, c: &Candidate) -> Result<(), String> {
    let layout = LayoutSpec::parse(&c.layout)
        .and_then(|s| s.resolve(Some(c.gpus)))
        .map_err(|e| format!("{}: {e}", c.layout))?;
    let mut req = base.clone();
    req.layout = layout;
    let (_, r) = analyze(model, &req).map_err(|e| e.to_string())?;
    let m = r.memory.as_ref();
    let got = (
        r.layout.clone(),
        r.gpus,
        r.verdict,
        m.map(|m| m.weights_bytes_per_gpu),
        m.map(|m| m.max_decode_requests),
        r.assumptions.decode_batch,
        r.tpot_bound_s,
        r.tpot_estimate_s,
        r.ttft_bound_s,
        r.ttft_estimate_s,
        r.tokens_per_s_per_gpu_estimate,
    );
    let want = (
        c.layout.clone(),
        c.gpus,
        c.verdict,
        c.weights_bytes_per_gpu,
        c.max_decode_requests,
        c.decode_batch,
        c.tpot_bound_s,
        c.tpot_estimate_s,
        c.ttft_bound_s,
        c.ttft_estimate_s,
        c.tokens_per_s_per_gpu_estimate,
    );
    if got == want {
        Ok(())
    } else {
        Err(format!("plan {want:?}\nanalyze {got:?}"))
    }
}

#[test]
fn deepseek_v3_does_not_fit_one_h100_node_and_plan_names_the_smallest_that_does() {
    let (ir, a, cfg) = support::evaluated("deepseek-ai/DeepSeek-V3");
    let model = Model::new(&ir, &a, &cfg).unwrap();
    let base = h100(1024, 1024);
    let found = search(&model, &base, &spec(64));
    let eight = found.by_gpus.iter().find(|g| g.gpus == 8).unwrap();
    assert!(eight.layouts > 0);
    assert_eq!(eight.fitting, 0, "673 GB of weights cannot fit 8 × 72 GiB");
    let smallest = &found.candidates[found.smallest.expect("some layout of 64 GPUs fits")];
    assert_eq!(smallest.verdict, Some(Fit::Fits));
    assert_eq!(smallest.gpus, 16, "{smallest:?}");
    assert!(smallest.max_decode_requests.unwrap() >= 1);
    let best = &found.candidates[found.best_tokens_per_s_per_gpu.unwrap()];
    assert!(best.tokens_per_s_per_gpu_estimate >= smallest.tokens_per_s_per_gpu_estimate);
    // At one price per GPU-hour the cheapest per token is the best per GPU.
    assert_eq!(
        found.best_usd_per_million_tokens,
        found.best_tokens_per_s_per_gpu
    );
    for i in [found.smallest, found.best_tokens_per_s_per_gpu]
        .into_iter()
        .flatten()
    {
        same_as_analyze(&model, &base, &found.candidates[i]).unwrap();
    }
}

#[test]
fn qwen3_8b_on_one_h100_names_the_batch_its_kv_budget_holds() {
    let (ir, a, cfg) = support::evaluated("Qwen/Qwen3-8B");
    let model = Model::new(&ir, &a, &cfg).unwrap();
    let base = h100(1024, 1024);
    let found = search(&model, &base, &spec(1));
    let c = &found.candidates[found.smallest.unwrap()];
    assert_eq!(
        (c.gpus, c.layout.as_str()),
        (1, "attn=tp1,ffn=tp1,moe=tp1,vocab=tp1")
    );
    // 90 % of 80 GiB, less the checkpoint's 16,381,470,720 bytes, over 2,048 tokens of
    // 36 layers × 8 KV heads × 128 × 2 (K, V) × 2 bytes.
    let usable = (80.0 * (1u64 << 30) as f64 * 0.9).floor() as i128;
    let kv = 2048 * 36 * 8 * 128 * 2 * 2;
    assert_eq!(c.max_decode_requests, Some((usable - 16_381_470_720) / kv));
    assert_eq!(c.decode_batch, c.max_decode_requests.unwrap());
    same_as_analyze(&model, &base, c).unwrap();
}

thread_local! {
    static QWEN_MOE: Model<'static> = {
        let (ir, a, cfg) = support::evaluated("Qwen/Qwen3-30B-A3B");
        let (ir, a) = (Box::leak(Box::new(ir)), Box::leak(Box::new(a)));
        Model::new(ir, a, &cfg).unwrap()
    };
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 12, ..ProptestConfig::default() })]

    #[test]
    fn every_layout_plan_names_is_what_analyze_of_it_says(
        input in 1i128..8192,
        output in 0i128..8192,
        max_gpus in prop::sample::select(vec![1u32, 4, 8, 16]),
    ) {
        QWEN_MOE.with(|model| {
            let base = h100(input, output);
            let found = search(model, &base, &spec(max_gpus));
            for i in [found.smallest, found.best_tokens_per_s_per_gpu, found.best_usd_per_million_tokens]
                .into_iter()
                .flatten()
            {
                let c = &found.candidates[i];
                prop_assert!(c.gpus <= max_gpus);
                prop_assert!(same_as_analyze(model, &base, c).is_ok(), "{:?}", same_as_analyze(model, &base, c));
            }
            Ok(())
        })?;
    }
}
