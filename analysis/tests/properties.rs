//! Properties of the deployment analysis over random layouts of every library model:
//! per-GPU weights add up to the checkpoint plus the replicas' extra copies; the bound never
//! exceeds the estimate; more HBM bandwidth never slows a phase; layouts that hold the same
//! data per GPU move the same bytes.

use crate::support;

use harch_analysis::layout::{Dispatch, Mesh};
use harch_analysis::memory::Residency;
use harch_analysis::{Gpu, Layout, LayoutSpec, Model, Plan, Request, Step, analyze_plan};
use proptest::prelude::*;

thread_local! {
    static MODELS: Vec<Model<'static>> = support::LIBRARY
        .iter()
        .map(|id| {
            let (ir, a, cfg) = support::evaluated(id);
            let (ir, a) = (Box::leak(Box::new(ir)), Box::leak(Box::new(a)));
            Model::new(ir, a, &cfg).expect("library models evaluate with formulas")
        })
        .collect();
    static GPUS: Vec<Gpu> = support::hardware().gpus;
}

#[derive(Clone, Debug)]
struct Case {
    model: usize,
    gpu: usize,
    layout: String,
    gpus: u32,
    mtp: bool,
    batch: i128,
    input: i128,
    output: i128,
}

fn cases() -> impl Strategy<Value = Case> {
    (
        (
            0usize..7,
            0usize..5,
            0u32..=4,
            0u32..=1,
            0u32..=4,
            0u32..=4,
            0u32..=4,
        ),
        (
            any::<bool>(),
            any::<bool>(),
            any::<bool>(),
            1i128..600,
            1i128..4096,
            0i128..4096,
        ),
    )
        .prop_map(
            |((model, gpu, g, pp, at, ep, mt), (mtp, a2a, inner, batch, input, output))| {
                let gpus = 1u32 << g;
                let pp = if pp == 1 && gpus >= 2 { 2 } else { 1 };
                let stage = gpus / pp;
                let at = (1u32 << at).min(stage);
                let ep = (1u32 << ep).min(stage);
                let mt = (1u32 << mt).min(stage / ep);
                let layout = format!(
                    "attn=tp{at},moe=ep{ep}tp{mt},pp={pp},dispatch={},mesh={}",
                    if a2a { "a2a" } else { "allgather" },
                    if inner { "tp-inner" } else { "tp-outer" }
                );
                Case {
                    model,
                    gpu,
                    layout,
                    gpus,
                    mtp,
                    batch,
                    input,
                    output,
                }
            },
        )
}

fn request(c: &Case, layout: Layout) -> Request {
    let gpu = GPUS.with(|g| g[c.gpu].clone());
    let mut r = Request::new(gpu, layout, c.input, c.output);
    r.mtp = c.mtp;
    r.decode_batch = Some(c.batch);
    r
}

/// Runs `f` with the case's model and plan, or rejects a case whose layout the model cannot
/// take (a degree that does not divide one of its dims).
fn with_plan<T>(c: &Case, f: impl FnOnce(&Model<'static>, &Plan, Layout) -> T) -> Option<T> {
    let layout = LayoutSpec::parse(&c.layout)
        .ok()?
        .resolve(Some(c.gpus))
        .ok()?;
    MODELS.with(|ms| {
        let m = &ms[c.model];
        let plan = Plan::new(m, &layout).ok()?;
        Some(f(m, &plan, layout))
    })
}

/// Both phases' costs of a case, whether or not its batch fits (the analysis withholds the
/// times of a deployment that does not fit; the properties hold for any step).
fn costs(plan: &Plan, req: &Request) -> Vec<Option<harch_analysis::cost::PhaseCost>> {
    let steps = [
        Step::prefill(req.prefill_batch, req.input),
        Step::decode(req.decode_batch.unwrap_or(1), req.context()),
    ];
    steps
        .iter()
        .map(|s| {
            plan.phase_cost(&req.gpu, s, &req.activations, &req.compute)
                .ok()
        })
        .collect()
}

fn close(a: f64, b: f64) -> bool {
    (a - b).abs() <= 1e-9 * a.abs().max(b.abs()).max(1e-30)
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 96, ..ProptestConfig::default() })]

    #[test]
    fn per_gpu_weights_add_up_to_the_checkpoint_plus_replicas(c in cases()) {
        let r = with_plan(&c, |m, plan, layout| {
            let res = Residency { mtp: c.mtp };
            let on_gpus: i128 = (0..layout.gpus).map(|g| plan.weights_on_gpu(g, res)).sum();
            let a = m.a;
            let resident = |w: &harch_engine::analysis::WeightRow| c.mtp || a.is_main_row(w.node);
            let total: i128 = a.weights.iter().filter(|w| resident(w)).map(|w| a.weight_row_bytes(w).v).sum();
            let extra: i128 = a.weights.iter().enumerate().filter(|(_, w)| resident(w))
                .map(|(i, w)| a.weight_row_bytes(w).v * (plan.weight_replicas(i) - 1)).sum();
            if c.mtp {
                prop_assert_eq!(total, a.weight_bytes().v);
            }
            prop_assert_eq!(on_gpus, total + extra, "{}", layout);
            Ok(())
        });
        prop_assume!(r.is_some());
        r.unwrap()?;
    }

    #[test]
    fn the_bound_never_exceeds_the_estimate(c in cases()) {
        let r = with_plan(&c, |_, plan, layout| {
            for cost in costs(plan, &request(&c, layout)) {
                if let Some(cost) = &cost {
                    prop_assert!(cost.bound_s <= cost.estimate_s * (1.0 + 1e-12), "{} > {}", cost.bound_s, cost.estimate_s);
                    prop_assert!(cost.bound_s > 0.0);
                }
            }
            Ok(())
        });
        prop_assume!(r.is_some());
        r.unwrap()?;
    }

    #[test]
    fn doubling_hbm_bandwidth_never_slows_a_phase(c in cases()) {
        let r = with_plan(&c, |_, plan, layout| {
            let req = request(&c, layout);
            let mut fast = req.clone();
            fast.gpu = req.gpu.with_hbm_scaled(2.0);
            for (x, y) in costs(plan, &req).into_iter().zip(costs(plan, &fast)) {
                if let (Some(x), Some(y)) = (&x, &y) {
                    prop_assert!(y.estimate_s <= x.estimate_s * (1.0 + 1e-12));
                    prop_assert!(y.bound_s <= x.bound_s * (1.0 + 1e-12));
                }
            }
            Ok(())
        });
        prop_assume!(r.is_some());
        r.unwrap()?;
    }

    /// Where GPUs sit in the mesh and how tokens reach experts change the collectives and the
    /// links, not the data each GPU holds and moves through its memory.
    #[test]
    fn layouts_holding_the_same_data_per_gpu_move_the_same_bytes(c in cases()) {
        let r = with_plan(&c, |m, plan, layout| {
            let req = request(&c, layout.clone());
            let base = analyze_plan(plan, &req);
            let flip_mesh = Layout { mesh: if layout.mesh == Mesh::TpInner { Mesh::TpOuter } else { Mesh::TpInner }, ..layout.clone() };
            let flip_dispatch = Layout { dispatch: if layout.dispatch == Dispatch::AllToAll { Dispatch::AllGather } else { Dispatch::AllToAll }, ..layout.clone() };
            for (other, same_comm) in [(flip_mesh, true), (flip_dispatch, false)] {
                let p2 = Plan::new(m, &other).expect("the same degrees divide the same dims");
                let rep = analyze_plan(&p2, &Request { layout: other.clone(), ..req.clone() });
                prop_assert_eq!(base.memory.as_ref().map(|m| m.weights_bytes_per_gpu), rep.memory.as_ref().map(|m| m.weights_bytes_per_gpu));
                for (x, y) in [(&base.prefill, &rep.prefill), (&base.decode, &rep.decode)] {
                    let (Some(x), Some(y)) = (&x.cost, &y.cost) else { continue };
                    prop_assert!(close(x.memory_bytes_per_gpu, y.memory_bytes_per_gpu), "{} vs {}: {} {}", layout, other, x.memory_bytes_per_gpu, y.memory_bytes_per_gpu);
                    prop_assert!(close(x.flops_per_gpu, y.flops_per_gpu));
                    if same_comm {
                        prop_assert!(close(x.comm_bytes_per_gpu, y.comm_bytes_per_gpu), "{} vs {}", layout, other);
                    }
                }
            }
            Ok(())
        });
        prop_assume!(r.is_some());
        r.unwrap()?;
    }

    #[test]
    fn a_resolved_layout_reads_back_as_itself(c in cases()) {
        if let Ok(l) = LayoutSpec::parse(&c.layout).and_then(|s| s.resolve(Some(c.gpus))) {
            let again = LayoutSpec::parse(&l.to_string()).unwrap().resolve(Some(l.gpus)).unwrap();
            prop_assert_eq!(l, again);
        }
    }
}

/// A model without experts holds and moves the same whatever the MoE part's degrees say.
#[test]
fn degrees_of_a_part_the_model_lacks_change_nothing() {
    MODELS.with(|ms| {
        let llama = &ms[0];
        let gpu = GPUS.with(|g| g.iter().find(|g| g.gpu == "H100 SXM").unwrap().clone());
        let run = |l: &str| {
            let layout = LayoutSpec::parse(l).unwrap().resolve(Some(8)).unwrap();
            let plan = Plan::new(llama, &layout).unwrap();
            let mut req = Request::new(gpu.clone(), layout, 2048, 512);
            req.decode_batch = Some(64);
            analyze_plan(&plan, &req)
        };
        let (a, b) = (run("attn=tp4dp2,moe=tp4dp2"), run("attn=tp4dp2,moe=ep8"));
        assert_eq!(
            a.memory.as_ref().unwrap().weights_bytes_per_gpu,
            b.memory.as_ref().unwrap().weights_bytes_per_gpu
        );
        let (x, y) = (a.decode.cost.unwrap(), b.decode.cost.unwrap());
        assert_eq!(x.memory_bytes_per_gpu, y.memory_bytes_per_gpu);
        assert_eq!(x.comm_bytes_per_gpu, y.comm_bytes_per_gpu);
        assert_eq!(x.estimate_s, y.estimate_s);
    });
}
