//! Derived communication checked against hand-derived collectives, missing hardware figures
//! reported as INSUFFICIENT_EVIDENCE, `explain` terms, and sweeps.

use crate::support;

use harch_analysis::comm::{CommKind, Link};
use harch_analysis::report::{CommSummary, INSUFFICIENT_EVIDENCE};
use harch_analysis::sweep::{self, SweepSpec};
use harch_analysis::{ComputePrecision, LayoutSpec, Model, Report, Request, analyze, explain};

fn report(
    id: &str,
    gpu: &str,
    layout: &str,
    gpus: u32,
    batch: i128,
    tweak: impl FnOnce(&mut Request),
) -> Report {
    let hw = support::hardware();
    let (ir, a, cfg) = support::evaluated(id);
    let model = Model::new(&ir, &a, &cfg).unwrap();
    let layout = LayoutSpec::parse(layout)
        .unwrap()
        .resolve(Some(gpus))
        .unwrap();
    let mut req = Request::new(hw.find(gpu).unwrap().clone(), layout, 1024, 1024);
    req.decode_batch = Some(batch);
    tweak(&mut req);
    analyze(&model, &req).unwrap().1
}

fn decode_comm(r: &Report) -> Vec<&CommSummary> {
    r.communication
        .iter()
        .filter(|c| c.phase == "decode")
        .collect()
}

#[test]
fn tensor_parallel_llama_all_reduces_twice_per_layer_and_once_after_the_embedding() {
    let r = report(
        "meta-llama/Llama-3.1-8B",
        "H100 SXM",
        "attn=tp8",
        8,
        16,
        |_| {},
    );
    let c = decode_comm(&r);
    assert!(
        c.iter().all(|c| c.kind == CommKind::AllReduce
            && c.why == "partial sums"
            && c.link == Link::Intra),
        "{c:?}"
    );
    // Ring all-reduce of 16 tokens × 4096 bf16 values over 8 GPUs: 2 × 7/8 of the buffer.
    let one = 2.0 * 7.0 / 8.0 * 16.0 * 4096.0 * 2.0;
    // o_proj and down_proj in each of 32 layers, and the vocab-parallel embedding lookup.
    let total: f64 = c.iter().map(|c| c.bytes_per_gpu).sum();
    assert_eq!(total, one * (32.0 * 2.0 + 1.0));
    assert_eq!(r.decode.cost.as_ref().unwrap().comm_bytes_per_gpu, total);
}

#[test]
fn attention_data_parallel_with_expert_parallel_moe_dispatches_and_combines() {
    let r = report(
        "deepseek-ai/DeepSeek-V3",
        "B200",
        "attn=dp8,moe=ep8",
        8,
        507,
        |_| {},
    );
    let c = decode_comm(&r);
    assert_eq!(c.len(), 2, "{c:?}");
    // 58 MoE layers; 507 requests on each of 8 replicas; 8 experts per token spread over 8 GPUs,
    // 7/8 of each GPU's assignments live elsewhere; 7168 bf16 values each way.
    let bytes = 58.0 * (507.0 * 8.0) * 8.0 / 8.0 * 7168.0 * 2.0 * 7.0 / 8.0;
    for why in ["dispatch", "combine"] {
        let row = c.iter().find(|c| c.why == why).unwrap();
        assert_eq!(
            (row.kind, row.group, row.link),
            (CommKind::AllToAll, 8, Link::Intra)
        );
        assert_eq!(row.bytes_per_gpu, bytes, "{why}");
    }
}

#[test]
fn data_parallel_attention_with_tensor_parallel_moe_gathers_tokens_and_scatters_sums() {
    let r = report(
        "deepseek-ai/DeepSeek-V3",
        "B200",
        "attn=dp8,moe=tp8",
        8,
        64,
        |_| {},
    );
    let c = decode_comm(&r);
    let has = |kind, why| c.iter().any(|c| c.kind == kind && c.why == why);
    assert!(has(CommKind::AllGather, "tokens"), "{c:?}");
    assert!(has(CommKind::ReduceScatter, "partial sums"), "{c:?}");
    assert!(!has(CommKind::AllToAll, "dispatch"), "{c:?}");
}

#[test]
fn pipeline_stages_send_the_carried_stream_over_the_link_between_them() {
    let pipeline = |layout: &str, gpus: u32| {
        let r = report(
            "meta-llama/Llama-3.1-8B",
            "H100 SXM",
            layout,
            gpus,
            32,
            |_| {},
        );
        let p = decode_comm(&r)
            .into_iter()
            .find(|c| c.why == "pipeline")
            .unwrap()
            .clone();
        (r, p)
    };
    let (_, p) = pipeline("attn=tp4,pp=2", 8);
    // 32 tokens × 4096 bf16 values, shared by the 4 GPUs of the sending stage.
    assert_eq!(
        (p.kind, p.link, p.bytes_per_gpu),
        (CommKind::SendRecv, Link::Intra, 32.0 * 4096.0 * 2.0 / 4.0)
    );
    let (across, p) = pipeline("attn=tp8,pp=2", 16);
    assert_eq!(p.link, Link::Inter);
    let m = across.memory.unwrap();
    assert_eq!(m.weights_bytes_per_gpu_by_stage.len(), 2);
}

#[test]
fn a_missing_figure_is_insufficient_evidence_naming_it_and_leaves_the_rest() {
    // MXFP4 experts on an H100, whose datasheet has no FP4 rate: they run at the next wider
    // precision it has (FP8), and the report says so.
    let r = report("openai/gpt-oss-20b", "H100 SXM", "attn=tp1", 1, 8, |_| {});
    assert_eq!(r.status, "ok");
    assert_eq!(
        r.assumptions
            .precision_fallbacks
            .get("fp4")
            .map(String::as_str),
        Some("fp8")
    );
    let c = r.decode.cost.as_ref().unwrap();
    assert!(
        c.rows
            .iter()
            .all(|row| row.precision.as_deref() != Some("fp4"))
    );
    // One precision for every op that the table lacks is still missing evidence.
    let r = report("openai/gpt-oss-20b", "H100 SXM", "attn=tp1", 1, 8, |q| {
        q.compute = ComputePrecision::Fixed("fp4".into())
    });
    assert_eq!(r.status, INSUFFICIENT_EVIDENCE);
    assert_eq!(r.decode.status, INSUFFICIENT_EVIDENCE);
    assert_eq!(
        r.decode.missing,
        vec!["H100 SXM: peak_flops.fp4".to_string()]
    );
    assert!(r.decode.cost.is_none() && r.tpot_estimate_s.is_none());
    assert!(r.memory.is_some(), "memory needs no FLOP rate");
    // Saying the matmuls run at BF16 asks for a figure the table has.
    let r = report("openai/gpt-oss-20b", "H100 SXM", "attn=tp1", 1, 8, |q| {
        q.compute = ComputePrecision::Fixed("bf16".into())
    });
    assert_eq!(r.status, "ok");
    // Two MI300X nodes: the data sheet names no network rate.
    let r = report(
        "meta-llama/Llama-3.1-8B",
        "MI300X",
        "attn=tp8,pp=2",
        16,
        8,
        |_| {},
    );
    assert_eq!(
        r.decode.missing,
        vec!["MI300X: internode_bandwidth".to_string()]
    );
    // Inside one GB200 NVL72 domain everything is known; beyond it, not.
    let r = report(
        "meta-llama/Llama-3.1-8B",
        "GB200",
        "attn=tp8",
        64,
        8,
        |_| {},
    );
    assert_eq!(r.status, "ok", "{:?}", r.missing);
    let r = report(
        "deepseek-ai/DeepSeek-V3",
        "GB200",
        "attn=dp128,moe=ep128",
        128,
        8,
        |_| {},
    );
    assert_eq!(
        r.decode.missing,
        vec!["GB200: internode_bandwidth".to_string()]
    );
}

#[test]
fn explain_shows_the_terms_of_the_estimate_and_the_bound() {
    let (ir, a, cfg) = support::evaluated("deepseek-ai/DeepSeek-V3");
    let model = Model::new(&ir, &a, &cfg).unwrap();
    let req = support::anchor_request();
    let (plan, r) = analyze(&model, &req).unwrap();
    let e = explain::explain(&plan, &req, &r, "decode.estimate_s").unwrap();
    assert_eq!(e.label, "estimate");
    assert!(
        e.formula
            .starts_with("Σ rows max(compute, memory, communication)"),
        "{}",
        e.formula
    );
    assert!(
        e.terms
            .iter()
            .any(|(k, v)| k.contains("attention") && v.contains("cache")),
        "{:?}",
        e.terms
    );
    assert!(
        e.terms.iter().any(|(_, v)| v.contains("all-to-all")),
        "{:?}",
        e.terms
    );
    assert!(e.more.is_some());
    let b = explain::explain(&plan, &req, &r, "decode.bound_s").unwrap();
    assert_eq!(b.label, "bound");
    assert_eq!(b.terms.len(), 3);
    let w = explain::explain(&plan, &req, &r, "weights_bytes_per_gpu").unwrap();
    assert_eq!((w.label, w.value.as_str()), ("exact", "100,840,747,360 B"));
    assert!(w.terms[0].1.contains("1/8 of it"), "{:?}", w.terms[0]);
    assert!(explain::explain(&plan, &req, &r, "nonsense").is_none());
}

#[test]
fn sweeps_scale_the_layout_and_mark_extrapolations() {
    let (ir, a, cfg) = support::evaluated("deepseek-ai/DeepSeek-V3");
    let model = Model::new(&ir, &a, &cfg).unwrap();
    let req = support::anchor_request();
    let spec = SweepSpec::parse("ep=4,8,...,64").unwrap();
    let rows = sweep::run(&model, &req, &spec);
    let gpus: Vec<u32> = rows
        .iter()
        .map(|r| r.report.as_ref().unwrap().gpus)
        .collect();
    assert_eq!(gpus, vec![4, 8, 16, 32, 64]);
    // Four GPUs cannot hold the weights.
    assert_eq!(
        rows[0]
            .report
            .as_ref()
            .unwrap()
            .memory
            .as_ref()
            .unwrap()
            .max_decode_requests,
        0
    );
    let csv = sweep::csv(&spec, &rows);
    assert!(csv.starts_with("ep,gpus,layout,decode_context,extrapolated,"));
    assert_eq!(csv.lines().count(), 6);
    let spec = SweepSpec::parse("context=131072,262144").unwrap();
    let rows = sweep::run(&model, &req, &spec);
    let flags: Vec<bool> = rows
        .iter()
        .map(|r| r.report.as_ref().unwrap().extrapolated)
        .collect();
    assert_eq!(flags, vec![false, true], "the published limit is 163,840");
    let svg = harch_analysis::plot::svg(&spec, &rows, "DeepSeek-V3 on B200").unwrap();
    assert!(
        svg.starts_with("<svg") && svg.contains("extrapolation"),
        "{}",
        &svg[..200]
    );
}
