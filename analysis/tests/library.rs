//! Weights per GPU, KV per request and the decode request limit of every library model on
//! B200 (180 GiB, 90% usable) at 1024 + 1024 tokens, under TP=1 and TP=8, and HuggingArch's
//! DeepSeek-V3 anchor (attention DP 8 + expert parallel 8). The expected figures were computed
//! independently of this crate, from the real checkpoint headers and config.json with
//! Megatron-style tensor-parallel rules by tensor name (column/row-parallel projections, vocab-
//! parallel embedding and head, norms and routers replicated, KV heads fewer than the TP degree
//! replicated, MLA latents replicated); see docs/analysis.md.

use crate::support;

use harch_analysis::{LayoutSpec, Model, Request, analyze};

struct Pinned {
    id: &'static str,
    layout: &'static str,
    gpus: u32,
    weights_bytes_per_gpu: i128,
    kv_bytes_per_request: i128,
    kv_bytes_per_request_per_gpu: i128,
    max_decode_requests: i128,
}

const PINNED: &[Pinned] = &[
    Pinned {
        id: "meta-llama/Llama-3.1-8B",
        layout: "attn=tp1",
        gpus: 1,
        weights_bytes_per_gpu: 16_060_522_496,
        kv_bytes_per_request: 268_435_456,
        kv_bytes_per_request_per_gpu: 268_435_456,
        max_decode_requests: 588,
    },
    Pinned {
        id: "meta-llama/Llama-3.1-8B",
        layout: "attn=tp8",
        gpus: 8,
        weights_bytes_per_gpu: 2_008_031_232,
        kv_bytes_per_request: 268_435_456,
        kv_bytes_per_request_per_gpu: 33_554_432,
        max_decode_requests: 5124,
    },
    Pinned {
        id: "Qwen/Qwen3-8B",
        layout: "attn=tp1",
        gpus: 1,
        weights_bytes_per_gpu: 16_381_470_720,
        kv_bytes_per_request: 301_989_888,
        kv_bytes_per_request_per_gpu: 301_989_888,
        max_decode_requests: 521,
    },
    Pinned {
        id: "Qwen/Qwen3-8B",
        layout: "attn=tp8",
        gpus: 8,
        weights_bytes_per_gpu: 2_048_223_232,
        kv_bytes_per_request: 301_989_888,
        kv_bytes_per_request_per_gpu: 37_748_736,
        max_decode_requests: 4553,
    },
    // 4 KV heads under TP 8: each GPU holds one (a quarter), replicated twice.
    Pinned {
        id: "Qwen/Qwen3-30B-A3B",
        layout: "attn=tp1",
        gpus: 1,
        weights_bytes_per_gpu: 61_064_245_248,
        kv_bytes_per_request: 201_326_592,
        kv_bytes_per_request_per_gpu: 201_326_592,
        max_decode_requests: 560,
    },
    Pinned {
        id: "Qwen/Qwen3-30B-A3B",
        layout: "attn=tp8",
        gpus: 8,
        weights_bytes_per_gpu: 7_680_585_728,
        kv_bytes_per_request: 201_326_592,
        kv_bytes_per_request_per_gpu: 50_331_648,
        max_decode_requests: 3303,
    },
    // 673 GB of weights (MTP not loaded) do not fit one GPU: no request fits.
    Pinned {
        id: "deepseek-ai/DeepSeek-V3",
        layout: "attn=tp1",
        gpus: 1,
        weights_bytes_per_gpu: 673_150_611_808,
        kv_bytes_per_request: 143_917_056,
        kv_bytes_per_request_per_gpu: 143_917_056,
        max_decode_requests: 0,
    },
    // The MLA latent has no head axis: TP does not shrink the cache.
    Pinned {
        id: "deepseek-ai/DeepSeek-V3",
        layout: "attn=tp8",
        gpus: 8,
        weights_bytes_per_gpu: 85_140_130_848,
        kv_bytes_per_request: 143_917_056,
        kv_bytes_per_request_per_gpu: 143_917_056,
        max_decode_requests: 617,
    },
    Pinned {
        id: "deepseek-ai/DeepSeek-V2-Lite",
        layout: "attn=tp1",
        gpus: 1,
        weights_bytes_per_gpu: 31_412_968_448,
        kv_bytes_per_request: 63_700_992,
        kv_bytes_per_request_per_gpu: 63_700_992,
        max_decode_requests: 2237,
    },
    Pinned {
        id: "deepseek-ai/DeepSeek-V2-Lite",
        layout: "attn=tp8",
        gpus: 8,
        weights_bytes_per_gpu: 3_988_544_512,
        kv_bytes_per_request: 63_700_992,
        kv_bytes_per_request_per_gpu: 63_700_992,
        max_decode_requests: 2668,
    },
    // 12 full layers grow with the context, 12 sliding layers stop at 128 tokens.
    Pinned {
        id: "openai/gpt-oss-20b",
        layout: "attn=tp1",
        gpus: 1,
        weights_bytes_per_gpu: 13_761_264_768,
        kv_bytes_per_request: 53_477_376,
        kv_bytes_per_request_per_gpu: 53_477_376,
        max_decode_requests: 2995,
    },
    Pinned {
        id: "openai/gpt-oss-20b",
        layout: "attn=tp8",
        gpus: 8,
        weights_bytes_per_gpu: 1_728_268_800,
        kv_bytes_per_request: 53_477_376,
        kv_bytes_per_request_per_gpu: 6_684_672,
        max_decode_requests: 25763,
    },
    // 12 full-attention layers (2 KV heads) plus constant DeltaNet state, split by value heads.
    Pinned {
        id: "Qwen/Qwen3-Next-80B-A3B",
        layout: "attn=tp1",
        gpus: 1,
        weights_bytes_per_gpu: 159_348_782_592,
        kv_bytes_per_request: 127_598_592,
        kv_bytes_per_request_per_gpu: 127_598_592,
        max_decode_requests: 114,
    },
    Pinned {
        id: "Qwen/Qwen3-Next-80B-A3B",
        layout: "attn=tp8",
        gpus: 8,
        weights_bytes_per_gpu: 20_026_091_072,
        kv_bytes_per_request: 127_598_592,
        kv_bytes_per_request_per_gpu: 34_824_192,
        max_decode_requests: 4419,
    },
    // HuggingArch's anchor: 93.92 GiB of weights per GPU (routed experts split 8 ways, the rest
    // replicated), 137 MiB of KV per request, at most 507 requests per GPU at decode.
    Pinned {
        id: "deepseek-ai/DeepSeek-V3",
        layout: "attn=dp8,moe=ep8",
        gpus: 8,
        weights_bytes_per_gpu: 100_840_747_360,
        kv_bytes_per_request: 143_917_056,
        kv_bytes_per_request_per_gpu: 143_917_056,
        max_decode_requests: 507,
    },
];

#[test]
fn every_library_model_gives_the_pinned_figures_under_tp1_and_tp8() {
    let hw = support::hardware();
    let b200 = hw.find("B200").expect("B200 is in the table");
    for id in support::LIBRARY {
        let (ir, a, cfg) = support::evaluated(id);
        let model = Model::new(&ir, &a, &cfg).expect("library models evaluate with formulas");
        let cases: Vec<&Pinned> = PINNED.iter().filter(|p| p.id == id).collect();
        assert!(
            cases.iter().any(|p| p.layout == "attn=tp1")
                && cases.iter().any(|p| p.layout == "attn=tp8"),
            "{id}"
        );
        for p in cases {
            let layout = LayoutSpec::parse(p.layout)
                .unwrap()
                .resolve(Some(p.gpus))
                .unwrap();
            let (_, r) = analyze(&model, &Request::new(b200.clone(), layout, 1024, 1024)).unwrap();
            let m = r.memory.as_ref().expect("B200 has a memory figure");
            let got = (
                m.weights_bytes_per_gpu,
                m.kv_bytes_per_request,
                m.kv_bytes_per_request_per_gpu,
                m.max_decode_requests,
            );
            let want = (
                p.weights_bytes_per_gpu,
                p.kv_bytes_per_request,
                p.kv_bytes_per_request_per_gpu,
                p.max_decode_requests,
            );
            assert_eq!(got, want, "{id} {}", p.layout);
        }
    }
}

#[test]
fn the_anchor_reads_as_huggingarch_prints_it() {
    let (ir, a, cfg) = support::evaluated("deepseek-ai/DeepSeek-V3");
    let model = Model::new(&ir, &a, &cfg).unwrap();
    let req = support::anchor_request();
    let (_, r) = analyze(&model, &req).unwrap();
    let m = r.memory.unwrap();
    let gib = |b: i128| b as f64 / (1u64 << 30) as f64;
    assert_eq!(format!("{:.2}", gib(m.usable_bytes)), "162.00");
    assert_eq!(format!("{:.2}", gib(m.weights_bytes_per_gpu)), "93.92");
    assert_eq!(format!("{:.0}", gib(m.kv_budget_bytes)), "68");
    assert_eq!(
        format!("{:.0}", m.kv_bytes_per_request as f64 / (1u64 << 20) as f64),
        "137"
    );
    assert_eq!(m.max_decode_requests, 507);
    assert_eq!(m.max_decode_requests_total, 507 * 8);
    // The default decode batch is what fits.
    assert_eq!(r.assumptions.decode_batch, 507);
}

#[test]
fn mtp_layers_count_only_when_loaded() {
    let hw = support::hardware();
    let (ir, a, cfg) = support::evaluated("deepseek-ai/DeepSeek-V3");
    let model = Model::new(&ir, &a, &cfg).unwrap();
    let layout = LayoutSpec::parse("attn=tp1")
        .unwrap()
        .resolve(Some(1))
        .unwrap();
    let mut req = Request::new(hw.find("B200").unwrap().clone(), layout, 1024, 1024);
    let without = analyze(&model, &req).unwrap().1.memory.unwrap();
    req.mtp = true;
    let with = analyze(&model, &req).unwrap().1.memory.unwrap();
    // Layer 61's tensors in the checkpoint: 15,424,227,552 bytes; on one GPU all of them.
    assert_eq!(
        with.weights_bytes_per_gpu - without.weights_bytes_per_gpu,
        15_424_227_552
    );
    assert_eq!(with.weights_bytes_per_gpu, a.weight_bytes().v);
    // Its one MLA layer caches 576 bf16 elements per token.
    assert_eq!(
        with.kv_bytes_per_request - without.kv_bytes_per_request,
        576 * 2 * 2048
    );
}
