//! The hardware table as committed: every GPU has its memory and bandwidth with a cited source,
//! and the dense rates read back as the datasheets state them (sparse figures halved).

use crate::support;

#[test]
fn every_gpu_cites_its_figures_and_dense_rates_read_back() {
    let t = support::hardware();
    for g in &t.gpus {
        for f in [&g.memory, &g.hbm_bandwidth].into_iter().flatten() {
            assert!(!f.source.is_empty() && f.url.is_some(), "{}: {f:?}", g.gpu);
        }
        assert!(g.memory.is_some() && g.hbm_bandwidth.is_some(), "{}", g.gpu);
    }
    let dense = |gpu: &str, p: &str| t.find(gpu).unwrap().peak_flops(p).unwrap();
    assert_eq!(dense("A100 SXM", "bf16"), 312e12);
    assert_eq!(dense("H100 PCIe", "bf16"), 756.5e12);
    assert_eq!(dense("H100 PCIe", "fp8"), 1513e12);
    assert_eq!(dense("L40S", "fp8"), 733e12);
    assert_eq!(dense("MI325X", "bf16"), 1307.4e12);
    assert_eq!(dense("MI355X", "fp4"), 10e15);
    assert_eq!(dense("B300", "fp4"), 15e15);
    // The H20's listings quote dense rates (no sparsity flag).
    assert_eq!(dense("H20", "bf16"), 148e12);
    assert_eq!(dense("H20", "fp8"), 296e12);
    let gib = (1u64 << 30) as f64;
    assert_eq!(t.find("a100").unwrap().memory_bytes().unwrap(), 80.0 * gib);
    assert_eq!(
        t.find("mi355x").unwrap().memory_bytes().unwrap(),
        288.0 * gib
    );
    assert_eq!(t.find("h20").unwrap().memory_bytes().unwrap(), 96.0 * gib);
    // An A100 has no FP8 rate: FP8 weights run at BF16.
    assert_eq!(t.find("a100").unwrap().runs_at("fp8"), Some("bf16"));
    assert_eq!(t.find("h100").unwrap().gpu, "H100 SXM");
    assert_eq!(t.closest("h100 pcie ").unwrap().gpu, "H100 PCIe");
}
