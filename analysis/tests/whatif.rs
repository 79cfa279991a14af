//! What-if edits over real evaluations: re-stored weights hold the bytes their scheme says,
//! the KV dtype changes the caches that grow with the context and nothing else.

use crate::support;

use harch_analysis::whatif;
use harch_engine::ir::Growth;

fn weight_bytes(a: &harch_engine::Analysis) -> i128 {
    a.weights.iter().map(|w| a.weight_row_bytes(w).v).sum()
}

#[test]
fn llama_weights_restored_hold_their_schemes_bytes() {
    let (ir, a, _) = support::evaluated("meta-llama/Llama-3.1-8B");
    let total = weight_bytes(&a);
    // BF16 already: re-storing at BF16 changes nothing.
    let (b, e) = whatif::weights(&ir, &a, "bf16").unwrap();
    assert_eq!(weight_bytes(&b), total);
    // q, k, v, o, gate, up, down of the 32 layers: seven rows (each for all layers).
    assert_eq!(e.rows, 7);
    // Embedding and head (2 × 128,256 × 4,096 BF16) stay; every other matmul element is one
    // byte plus an FP32 scale per 128 × 128 block.
    let vocab = 2 * 128_256 * 4_096 * 2;
    let norms = (32 * 2 + 1) * 4_096 * 2;
    let matmul_elems: i128 = (total - vocab - norms) / 2;
    let (f, _) = whatif::weights(&ir, &a, "fp8").unwrap();
    let blocks: i128 = 32
        * [
            (4096, 4096),
            (1024, 4096),
            (1024, 4096),
            (4096, 4096),
            (14336, 4096),
            (14336, 4096),
            (4096, 14336),
        ]
        .iter()
        .map(|(o, i): &(i128, i128)| (o + 127) / 128 * ((i + 127) / 128))
        .sum::<i128>();
    assert_eq!(weight_bytes(&f), vocab + norms + matmul_elems + blocks * 4);
    // MXFP4: half a byte per element and a byte per 32.
    let (q, _) = whatif::weights(&ir, &a, "fp4").unwrap();
    assert_eq!(
        weight_bytes(&q),
        vocab + norms + matmul_elems / 2 + matmul_elems / 32
    );
    assert!(whatif::weights(&ir, &a, "int2").is_err());
}

#[test]
fn the_kv_dtype_changes_growing_caches_only() {
    let (_, a, _) = support::evaluated("Qwen/Qwen3-Next-80B-A3B");
    let (b, e) = whatif::kv_dtype(&a, "fp8").unwrap();
    assert!(e.rows > 0);
    for (x, y) in a.caches.iter().zip(&b.caches) {
        if x.growth == Growth::Constant {
            assert_eq!((x.dtype_bytes, &x.dtype), (y.dtype_bytes, &y.dtype));
        } else {
            assert_eq!(y.dtype_bytes, 1);
        }
    }
    assert!(a.caches.iter().any(|c| c.growth == Growth::Constant));
}
