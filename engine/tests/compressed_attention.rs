//! Caches compressed in time, hyper-connection streams and E8M0-scaled storage in the engine's
//! one evaluation, on a toy model shaped like DeepSeek-V4: one shared K=V head over a sliding
//! window beside a compressor's entries (one per `compress_ratio` tokens), a residual of
//! `hc_mult` streams mixed by a Sinkhorn-normalised matrix, and a grouped output projection.

use crate::support;

use harch_engine::analysis::attended_entries;
use harch_engine::{EvalOptions, Q, Repo, evaluate};
use serde_json::{Value, json};

const ATTENTION: &str = r#"component: toy_compressed_attention
role: attention
summary: "toy: one shared K=V head over a sliding window, beside compressed entries"
source: "Attention.forward"
dims: [d_model, n_heads, d_head, attn_window, compress_ratio, o_groups, d_o_rank]
inputs: [x]
graph:
  wq: { op: linear, in: x, args: { in: d_model, out: "n_heads * d_head" } }
  q: { op: head_split, in: wq, args: { heads: n_heads, head_dim: d_head } }
  wkv: { op: linear, in: x, args: { in: d_model, out: d_head } }
  kv: { op: head_split, in: wkv, args: { heads: 1, head_dim: d_head } }
  c_kv: { op: linear, in: x, path: compressor.wkv, args: { in: d_model, out: d_head } }
  c_gate: { op: linear, in: x, path: compressor.wgate, args: { in: d_model, out: d_head } }
  pooled: { op: compress, in: [c_kv, c_gate], path: compressor, leaves: { position_bias: ape }, args: { ratio: compress_ratio, dim: d_head } }
  c: { op: head_split, in: pooled, args: { heads: 1, head_dim: d_head } }
  s_win: { op: attention_score, in: [q, kv], args: { mask: causal, window: attn_window } }
  s_cmp: { op: attention_score, in: [q, c], args: { mask: causal } }
  s: { op: concat, in: [s_win, s_cmp] }
  p: { op: softmax, in: s }
  o: { op: attention_apply, in: [p, kv, c] }
  flat: { op: head_merge, in: o }
  groups: { op: head_split, in: flat, args: { heads: o_groups, head_dim: "n_heads * d_head / o_groups" } }
  wo_a: { op: block_diagonal_linear, in: groups, args: { groups: o_groups, in: "n_heads * d_head / o_groups", out: d_o_rank } }
  low: { op: head_merge, in: wo_a }
  wo_b: { op: linear, in: low, args: { in: "o_groups * d_o_rank", out: d_model } }
outputs: [wo_b]
cache:
  - { node: kv, kind: key_value, growth: window, window: attn_window }
  - { node: c, kind: compressed_key_value, growth: CMP_GROWTH }
  - { node: pooled, kind: compressor_state, growth: constant }
"#;

const BLOCK: &str = r#"component: toy_hc_block
role: block
summary: "toy: an attention between hyper-connection streams"
source: "DecoderLayer.forward"
dims: [d_model, hc_mult, hc_sinkhorn_iters]
slots: [attention]
inputs: [hidden]
graph:
  flat: { op: head_merge, in: hidden }
  flat_norm: { op: rmsnorm, in: flat, args: { dim: "hc_mult * d_model", weight: false } }
  mix: { op: linear, in: flat_norm, path: ".", leaves: { weight: hc_attn_fn }, args: { in: "hc_mult * d_model", out: "(2 + hc_mult) * hc_mult" } }
  pre: { op: slice, in: mix, args: { out: hc_mult } }
  pre_w: { op: sigmoid, in: pre }
  pre_col: { op: head_split, in: pre_w, args: { heads: hc_mult, head_dim: 1 } }
  weighted: { op: mul, in: [pre_col, hidden] }
  collapsed: { op: sum, in: weighted, args: { axis: 0 } }
  attention: { slot: attention, in: collapsed, path: attn }
  post: { op: slice, in: mix, args: { out: hc_mult, start: hc_mult } }
  post_col: { op: head_split, in: post, args: { heads: hc_mult, head_dim: 1 } }
  expanded: { op: mul, in: [post_col, attention] }
  comb_flat: { op: slice, in: mix, args: { out: "hc_mult * hc_mult", start: "2 * hc_mult" } }
  comb: { op: head_split, in: comb_flat, args: { heads: hc_mult, head_dim: hc_mult } }
  comb_ds: { op: sinkhorn, in: comb, args: { iters: hc_sinkhorn_iters } }
  mixed: { op: matmul, in: [comb_ds, hidden] }
  out: { op: add, in: [expanded, mixed] }
outputs: [out]
"#;

const MODEL: &str = r#"model: toy_v4
summary: "a tiny model with compressed attention and hyper-connections"
architectures: [ToyV4]
dims:
  d_model: 64
  n_vocab: 100
  n_layers: 2
  n_heads: 4
  d_head: 16
  attn_window: 8
  compress_ratio: RATIO
  o_groups: 2
  d_o_rank: 8
  hc_mult: config.hc_mult
  hc_sinkhorn_iters: config.hc_sinkhorn_iters
blocks:
  layer:
    template: toy_hc_block
    fill: { attention: toy_compressed_attention }
quant_context:
  default: bf16
  cache: bf16
  per_role: { attention: fp8_e8m0_block128 }
  overrides:
    - { leaf: "*.ape", format: f32 }
graph:
  embed: { op: embedding, in: input_ids, path: embed, args: { vocab: n_vocab, dim: d_model } }
  streams: { op: expand, in: embed, args: { copies: hc_mult } }
  layers: { in: streams, stack: { repeat: n_layers, path: "layers.{i}", schedule: [{ block: layer }], streams: { hidden: { carries: true } } } }
  head_flat: { op: head_merge, in: layers }
  head_mix: { op: linear, in: head_flat, path: ".", leaves: { weight: hc_head_fn }, args: { in: "hc_mult * d_model", out: hc_mult } }
  head_pre: { op: sigmoid, in: head_mix }
  head_col: { op: head_split, in: head_pre, args: { heads: hc_mult, head_dim: 1 } }
  head_weighted: { op: mul, in: [head_col, layers] }
  collapsed: { op: sum, in: head_weighted, args: { axis: 0 } }
  norm: { op: rmsnorm, in: collapsed, path: norm, args: { dim: d_model } }
  head: { op: linear, in: norm, path: head, args: { in: d_model, out: n_vocab } }
outputs: [head]
"#;

fn repo(ratio: &str, growth: &str) -> Repo {
    repo_with(ATTENTION, ratio, growth)
}

/// The toy model with another attention component in place of [`ATTENTION`].
fn repo_with(attention: &str, ratio: &str, growth: &str) -> Repo {
    let mut files = support::library_files();
    files.insert(
        "specs/components/test/toy_compressed_attention.yaml".into(),
        attention.replace("CMP_GROWTH", growth),
    );
    files.insert(
        "specs/components/test/toy_hc_block.yaml".into(),
        BLOCK.into(),
    );
    files.insert(
        "specs/models/toy_v4.yaml".into(),
        MODEL.replace("RATIO", ratio),
    );
    Repo::from_files(files)
}

fn config(hc: i64) -> Value {
    json!({ "architectures": ["ToyV4"], "torch_dtype": "bfloat16", "hc_mult": hc, "hc_sinkhorn_iters": 20 })
}

fn eval(repo: &Repo, config: &Value) -> harch_engine::Analysis {
    let ir = repo.load_model("toy_v4").expect("loads");
    evaluate(&ir, config, EvalOptions::default())
}

#[test]
fn a_compressed_cache_grows_one_entry_per_ratio_tokens_beside_its_window() {
    let a = eval(&repo("4", "per_token"), &config(4));
    assert!(a.ok(), "{:?}", a.errors);
    // Compressed entries: 16 bf16 values per entry, 2 layers: 64 B per entry, one entry per
    // 4 tokens.
    assert_eq!(a.kv_bytes_per_token().v, 64 / 4);
    // The window keeps 8 positions of the 16-wide K=V head.
    assert_eq!(a.kv_window_bytes_per_token().v, 64);
    assert_eq!(a.kv_window_bytes_max().v, 64 * 8);
    // The compressor's pending tokens: 3 tokens of kv and gate (16 each), per layer.
    assert_eq!(a.state_bytes_per_sequence().v, 3 * 2 * 16 * 2 * 2);
    // At 102 tokens: 25 closed windows; a partial one adds nothing until it closes.
    assert_eq!(a.cache_bytes_at(102), 64 * 25 + 64 * 8 + 384);
    assert_eq!(a.cache_bytes_at(103), a.cache_bytes_at(100));
    assert_eq!(a.cache_bytes_at(104), a.cache_bytes_at(100) + 64);
    // A decode step reads every compressed entry and the window.
    assert_eq!(a.kv_bytes_read_at(&Q::lit(100)).v, 64 * 25 + 64 * 8 + 384);
}

#[test]
fn an_attention_over_compressed_entries_attends_one_per_ratio_positions() {
    let a = eval(&repo("4", "per_token"), &config(4));
    assert!(a.ok(), "{:?}", a.errors);
    let rows: Vec<_> = a
        .nodes
        .iter()
        .filter(|n| n.id.ends_with(".s_cmp"))
        .collect();
    assert_eq!(rows.len(), 1, "one row stands for both layers");
    let s = rows[0];
    // 2 * heads * d_head per attended entry, 2 layers; at 100 positions it attends 25.
    assert_eq!(a.node_decode_flops(s, &Q::lit(100)).v, 2 * 2 * 4 * 16 * 25);
    // Prefill of 10 tokens: query t sees floor(t/4) entries: 0+0+0+1+1+1+1+2+2+2 = 10.
    assert_eq!(a.node_prefill_flops(s, &Q::lit(10)).v, 2 * 2 * 4 * 16 * 10);
    // The windowed scores are capped at the window, not divided by the ratio.
    let w = a.nodes.iter().find(|n| n.id.ends_with(".s_win")).unwrap();
    assert_eq!(a.node_decode_flops(w, &Q::lit(100)).v, 2 * 2 * 4 * 16 * 8);
    // One softmax over both key sets spans the window and the entries (5 per score), and
    // the weighted sum the same positions (2 * heads * d_head each).
    let p = a.nodes.iter().find(|n| n.id.ends_with(".p")).unwrap();
    assert_eq!(a.node_decode_flops(p, &Q::lit(100)).v, 2 * 5 * 4 * (8 + 25));
    let o = a.nodes.iter().find(|n| n.id.ends_with(".o")).unwrap();
    assert_eq!(
        a.node_decode_flops(o, &Q::lit(100)).v,
        2 * 2 * 4 * 16 * (8 + 25)
    );
    // Prefill of 10 tokens: query t attends min(8, t) window positions and floor(t/4)
    // entries, in one sum: 52 + 10.
    let brute: i128 = (1..=10).map(|t: i128| t.min(8) + t / 4).sum();
    assert_eq!(brute, 62);
    assert_eq!(a.node_prefill_flops(p, &Q::lit(10)).v, 2 * 5 * 4 * brute);
    // The Inspector's formula of the context agrees with the figure on both sides of the window.
    for ctx in [3, 8, 100, 5000] {
        let f = a.decode_flops_of_ctx(&Q::atom("ctx", ctx, true), |n| n.id.ends_with(".p"));
        assert_eq!(f.v, a.node_decode_flops(p, &Q::lit(ctx)).v, "ctx {ctx}");
    }
    // The grouped output projection multiplies its blocks only: 2 groups of 32 -> 8.
    let o = a.nodes.iter().find(|n| n.id.ends_with(".wo_a")).unwrap();
    assert_eq!(a.node_decode_flops(o, &Q::lit(100)).v, 2 * 2 * 2 * 32 * 8);
}

#[test]
fn attended_entries_sum_floor_t_over_r_capped_by_a_selection() {
    let brute = |s: i128, cap: Option<i128>, r: i128| -> i128 {
        (1..=s).map(|t| (t / r).min(cap.unwrap_or(i128::MAX))).sum()
    };
    for s in [0, 1, 3, 4, 5, 17, 128, 1000] {
        for r in [1, 4, 128] {
            for cap in [None, Some(1), Some(3), Some(512)] {
                let got = attended_entries(&Q::lit(s), cap.map(Q::lit).as_ref(), &Q::lit(r)).v;
                assert_eq!(got, brute(s, cap, r), "s={s} r={r} cap={cap:?}");
            }
        }
    }
}

#[test]
fn hyper_connection_streams_follow_hc_mult_and_scales_rename_the_leaf() {
    for hc in [2i128, 4] {
        let a = eval(&repo("4", "per_token"), &config(hc as i64));
        assert!(a.ok(), "hc {hc}: {:?}", a.errors);
        let fn_row = a
            .weights
            .iter()
            .find(|w| w.name == "layers.{i}.hc_attn_fn")
            .expect("hc_attn_fn");
        let shape: Vec<i128> = fn_row.logical.iter().map(|q| q.v).collect();
        assert_eq!(shape, [(2 + hc) * hc, hc * 64]);
        let head: Vec<i128> = a
            .weights
            .iter()
            .find(|w| w.name == "hc_head_fn")
            .expect("hc_head_fn")
            .logical
            .iter()
            .map(|q| q.v)
            .collect();
        assert_eq!(head, [hc, hc * 64]);
    }
    let a = eval(&repo("4", "per_token"), &config(4));
    let wq = a
        .weights
        .iter()
        .find(|w| w.name == "layers.{i}.attn.wq.weight")
        .expect("wq");
    let stored: Vec<(&str, &str, Vec<i128>)> = wq
        .stored
        .iter()
        .map(|s| {
            (
                s.name.as_str(),
                s.dtype.as_str(),
                s.shape.iter().map(|q| q.v).collect(),
            )
        })
        .collect();
    assert_eq!(
        stored,
        [
            ("layers.{i}.attn.wq.weight", "F8_E4M3", vec![64, 64]),
            ("layers.{i}.attn.wq.scale", "F8_E8M0", vec![1, 1]),
        ]
    );
    let by = a.weight_bytes_by_dtype();
    // The position bias of each compressor, in F32: 4 x 16 per layer.
    assert_eq!(by.get("F32").copied(), Some(2 * 4 * 16 * 4));
}

#[test]
fn bad_compression_is_a_located_error() {
    // A ratio of 0: the compressor node is named.
    let a = eval(&repo("0", "per_token"), &config(4));
    let e = a
        .errors
        .iter()
        .find(|e| e.code == "S002")
        .unwrap_or_else(|| panic!("{:?}", a.errors));
    assert!(
        e.location
            .node
            .as_deref()
            .is_some_and(|n| n.ends_with("pooled")),
        "{e:?}"
    );
    assert!(e.message.contains("ratio = 0"), "{}", e.message);
    // The window put on the compressed cache.
    let r = repo("4", "window, window: attn_window");
    let a = eval(&r, &config(4));
    let e = a
        .errors
        .iter()
        .find(|e| e.code == "L015")
        .unwrap_or_else(|| panic!("{:?}", a.errors));
    assert!(
        e.message.contains("one entry per 4 tokens"),
        "{}",
        e.message
    );
    assert!(
        e.location
            .file
            .as_deref()
            .is_some_and(|f| f.ends_with("toy_compressed_attention.yaml")),
        "{e:?}"
    );
    // An hc_mult the mixing does not fit: 0 copies.
    let a = eval(&repo("4", "per_token"), &config(0));
    assert!(!a.ok());
    // The V4 checkpoint's own quantization_config evaluates (which schemes it calls for is the
    // packing guard's: library/tests/quant_config.rs, deepseek_v4_guards.rs).
    let mut c = config(4);
    c["quantization_config"] = json!({ "activation_scheme": "dynamic", "fmt": "e4m3", "quant_method": "fp8",
        "scale_fmt": "ue8m0", "weight_block_size": [128, 128] });
    let a = eval(&repo("4", "per_token"), &c);
    assert!(a.ok(), "{:?}", a.errors);
}

#[test]
fn one_softmax_over_two_key_sets_needs_a_value_input_for_each() {
    let one_value = ATTENTION.replace("in: [p, kv, c]", "in: [p, kv]");
    let a = eval(&repo_with(&one_value, "4", "per_token"), &config(4));
    let e = a.errors.first().expect("an error");
    assert!(
        e.message
            .contains("span 2 key set(s) but `in:` gives 1 value input(s)"),
        "{e:?}"
    );
    assert!(
        e.location
            .node
            .as_deref()
            .is_some_and(|n| n.ends_with(".o")),
        "{e:?}"
    );
}

#[test]
fn a_decode_step_reads_each_value_set_of_a_joint_softmax_by_its_own_law() {
    // Values apart from the keys, so that only attention_apply reads them; the windowed set
    // second, so that its law is a joint set's, not the row's own.
    let separate = ATTENTION
        .replace(
            "  c_kv:",
            "  wv: { op: linear, in: x, args: { in: d_model, out: d_head } }\n  v: { op: head_split, in: wv, args: { heads: 1, head_dim: d_head } }\n  c_kv:",
        )
        .replace("in: [s_win, s_cmp]", "in: [s_cmp, s_win]")
        .replace("in: [p, kv, c]", "in: [p, c, v]");
    let a = eval(&repo_with(&separate, "4", "per_token"), &config(4));
    let reads = a.decode_reads();
    let of = |suffix: &str| {
        reads
            .iter()
            .find(|r| a.nodes[r.node].id.ends_with(suffix))
            .unwrap_or_else(|| panic!("no read of {suffix}: {reads:?}"))
    };
    // The first set's values are read over the window only, the entries all of them.
    assert_eq!(of(".wv").window.as_ref().map(|w| w.v), Some(8));
    assert_eq!(a.nodes[of(".wv").reader].op, "attention_apply");
    assert_eq!(of(".pooled").window, None);
}
