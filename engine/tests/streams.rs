//! Cross-layer streams (chapter 2.2 of the write-up) in the engine's one evaluation, on toy
//! models shaped like the sources that need them: a top-k selection computed by some layers and
//! reused by later ones (GLM-5's `prev_topk_indices`), the carried stream saved at every other
//! layer's entry and merged by each later layer (attention residuals), and hidden states saved
//! after chosen layers and read by a later stack (EAGLE-3's auxiliary hidden states).

use crate::support;

use harch_engine::{Analysis, EvalOptions, Q, Repo, evaluate};
use serde_json::json;

const BLOCK: &str = r#"component: toy_res_block
role: block
summary: "toy: a pre-norm residual around one attention"
source: "DecoderLayer.forward"
dims: [d_model]
slots: [attention]
inputs: [hidden]
graph:
  norm: { op: rmsnorm, in: hidden, path: input_layernorm, args: { dim: d_model } }
  attention: { slot: attention, in: norm, path: self_attn }
  out: { op: add, in: [hidden, attention] }
outputs: [out]
"#;

const FULL: &str = r#"component: toy_dsa_full
role: attention
summary: "toy: an indexer selects the top k positions, published for the shared layers"
source: "Attention.forward"
dims: [d_model, n_heads, d_head, n_index_heads, n_index_topk]
inputs: [x]
graph:
  q_proj: { op: linear, in: x, args: { in: d_model, out: "n_heads * d_head" } }
  q: { op: head_split, in: q_proj, args: { heads: n_heads, head_dim: d_head } }
  k_proj: { op: linear, in: x, args: { in: d_model, out: d_head } }
  k: { op: head_split, in: k_proj, args: { heads: 1, head_dim: d_head } }
  v_proj: { op: linear, in: x, args: { in: d_model, out: d_head } }
  v: { op: head_split, in: v_proj, args: { heads: 1, head_dim: d_head } }
  iq_proj: { op: linear, in: x, path: indexer.wq, args: { in: d_model, out: "n_index_heads * d_head" } }
  iq: { op: head_split, in: iq_proj, args: { heads: n_index_heads, head_dim: d_head } }
  ik_proj: { op: linear, in: x, path: indexer.wk, args: { in: d_model, out: d_head } }
  ik: { op: head_split, in: ik_proj, args: { heads: 1, head_dim: d_head } }
  index_logits: { op: attention_score, in: [iq, ik], args: { mask: causal } }
  index_weights: { op: linear, in: x, path: indexer.weights_proj, args: { in: d_model, out: n_index_heads } }
  index_scores: { op: head_weighted_sum, in: [index_logits, index_weights] }
  topk: { op: topk_select, in: index_scores, args: { k: n_index_topk } }
  scores: { op: attention_score, in: [q, k, topk], args: { mask: causal } }
  probs: { op: softmax, in: scores }
  context: { op: attention_apply, in: [probs, v] }
  merged: { op: head_merge, in: context }
  o_proj: { op: linear, in: merged, args: { in: "n_heads * d_head", out: d_model } }
outputs: [o_proj]
stream_out: { dsa_topk: topk }
cache:
  - { node: k, kind: key, growth: per_token }
  - { node: v, kind: value, growth: per_token }
  - { node: ik, kind: key, growth: per_token }
"#;

const SHARED: &str = r#"component: toy_dsa_shared
role: attention
summary: "toy: attends the positions an earlier layer selected"
source: "Attention.forward"
dims: [d_model, n_heads, d_head]
inputs: [x]
reads: [dsa_topk]
graph:
  q_proj: { op: linear, in: x, args: { in: d_model, out: "n_heads * d_head" } }
  q: { op: head_split, in: q_proj, args: { heads: n_heads, head_dim: d_head } }
  k_proj: { op: linear, in: x, args: { in: d_model, out: d_head } }
  k: { op: head_split, in: k_proj, args: { heads: 1, head_dim: d_head } }
  v_proj: { op: linear, in: x, args: { in: d_model, out: d_head } }
  v: { op: head_split, in: v_proj, args: { heads: 1, head_dim: d_head } }
  scores: { op: attention_score, in: [q, k, dsa_topk], args: { mask: causal } }
  probs: { op: softmax, in: scores }
  context: { op: attention_apply, in: [probs, v] }
  merged: { op: head_merge, in: context }
  o_proj: { op: linear, in: merged, args: { in: "n_heads * d_head", out: d_model } }
outputs: [o_proj]
cache:
  - { node: k, kind: key, growth: per_token }
  - { node: v, kind: value, growth: per_token }
"#;

const DSA_MODEL: &str = r#"model: toy_dsa
summary: "toy: full layers select, shared layers reuse the selection"
architectures: [ToyDsa]
dims:
  d_model: 64
  n_vocab: 100
  n_layers: 4
  n_heads: 4
  d_head: 16
  n_index_heads: 2
  n_index_topk: 32
blocks:
  full: { template: toy_res_block, fill: { attention: toy_dsa_full } }
  shared: { template: toy_res_block, fill: { attention: toy_dsa_shared } }
quant_context: { default: bf16 }
graph:
  embed: { op: embedding, in: input_ids, path: embed, args: { vocab: n_vocab, dim: d_model } }
  layers:
    in: embed
    stack:
      repeat: n_layers
      path: "layers.{i}"
      schedule:
        - { block: full, where: "FULL" }
        - { block: shared, where: "SHARED" }
      streams:
        hidden: { carries: true }
        STREAM: { src: "the full layer's selection is passed on: `prev_topk_indices=topk_indices`" }
  norm: { op: rmsnorm, in: layers, path: norm, args: { dim: d_model } }
  head: { op: linear, in: norm, path: head, args: { in: d_model, out: n_vocab } }
outputs: [head]
"#;

fn dsa(full: (&str, &str), stream: &str) -> Repo {
    let mut files = support::library_files();
    files.insert(
        "specs/components/test/toy_res_block.yaml".into(),
        BLOCK.into(),
    );
    files.insert(
        "specs/components/test/toy_dsa_full.yaml".into(),
        FULL.into(),
    );
    files.insert(
        "specs/components/test/toy_dsa_shared.yaml".into(),
        SHARED.into(),
    );
    files.insert(
        "specs/models/toy_dsa.yaml".into(),
        DSA_MODEL
            .replace("FULL", full.0)
            .replace("SHARED", full.1)
            .replace("STREAM", stream),
    );
    Repo::from_files(files)
}

fn eval(repo: &Repo, model: &str) -> Analysis {
    let ir = repo.load_model(model).expect("loads");
    evaluate(
        &ir,
        &json!({ "architectures": ["Toy"], "torch_dtype": "bfloat16" }),
        EvalOptions::default(),
    )
}

fn codes(a: &Analysis) -> Vec<&str> {
    a.errors.iter().map(|e| e.code).collect()
}

fn row<'a>(a: &'a Analysis, id: &str) -> &'a harch_engine::analysis::NodeRow {
    a.node(id).unwrap_or_else(|| panic!("no row {id}"))
}

#[test]
fn a_selection_published_by_one_layer_caps_the_attention_of_later_layers() {
    let a = eval(&dsa(("i % 2 == 0", "i % 2 == 1"), "dsa_topk"), "toy_dsa");
    assert!(a.ok(), "{:?}", a.errors);
    let shared = row(&a, "layers[shared].attention.scores");
    let full_index = row(&a, "layers[full].attention.index_logits");
    // The shared layers read 32 positions at any context; the indexer reads every position.
    let at = |n, ctx: i128| a.node_decode_flops(n, &Q::lit(ctx)).v;
    assert_eq!(at(shared, 4096), at(shared, 32));
    assert!(at(shared, 16) < at(shared, 32));
    assert_eq!(at(full_index, 4096), 128 * at(full_index, 32));
    // Each query head scores 32 positions of 16 channels, 2 FLOPs each, in both shared layers.
    assert_eq!(at(shared, 4096), 2 * 4 * 32 * 16 * 2);
    // The selection is live through its readers and the stream names its producer and readers.
    assert!(a.dead_nodes().is_empty(), "dead: {:?}", a.dead_nodes());
    let s = a
        .streams
        .iter()
        .find(|s| s.name == "dsa_topk")
        .expect("stream row");
    assert_eq!(s.producers, ["layers[full].attention"]);
    assert_eq!(s.readers, ["layers[shared].attention"]);
}

#[test]
fn a_stream_read_before_any_layer_writes_it_is_a_located_error() {
    // Layer 0 is shared: nothing has selected yet.
    let a = eval(&dsa(("i % 2 == 1", "i % 2 == 0"), "dsa_topk"), "toy_dsa");
    let e = a.errors.iter().find(|e| e.code == "A006").expect("A006");
    assert!(
        e.message.contains("layer 0") && e.message.contains("dsa_topk"),
        "{}",
        e.message
    );
    // Layer 2 is shared after a full layer 1, but layer 0 still is not.
    let a = eval(&dsa(("i == 1", "i != 1"), "dsa_topk"), "toy_dsa");
    assert!(codes(&a).contains(&"A006"), "{:?}", a.errors);
}

#[test]
fn a_stream_the_stack_does_not_declare_is_an_error_at_the_reader() {
    let a = eval(&dsa(("i % 2 == 0", "i % 2 == 1"), "other"), "toy_dsa");
    let e = a.errors.iter().find(|e| e.code == "L013").expect("L013");
    assert!(e.message.contains("dsa_topk"), "{}", e.message);
}

#[test]
fn stream_out_of_a_missing_node_is_a_load_error() {
    let mut files = support::library_files();
    files.insert(
        "specs/components/test/toy_res_block.yaml".into(),
        BLOCK.into(),
    );
    files.insert(
        "specs/components/test/toy_dsa_full.yaml".into(),
        FULL.replace(
            "stream_out: { dsa_topk: topk }",
            "stream_out: { dsa_topk: top_k }",
        ),
    );
    files.insert(
        "specs/components/test/toy_dsa_shared.yaml".into(),
        SHARED.into(),
    );
    files.insert(
        "specs/models/toy_dsa.yaml".into(),
        DSA_MODEL
            .replace("FULL", "i % 2 == 0")
            .replace("SHARED", "i % 2 == 1")
            .replace("STREAM", "dsa_topk"),
    );
    let errs = Repo::from_files(files)
        .load_model("toy_dsa")
        .expect_err("fails to load");
    let e = errs.iter().find(|e| e.code == "L007").expect("L007");
    assert!(
        e.message.contains("top_k") && e.hint.as_deref().unwrap_or("").contains("`topk`"),
        "{e:?}"
    );
}

const RES_BLOCK: &str = r#"component: toy_attnres_block
role: block
summary: "toy: merges the residual history before its MLP"
source: "DecoderLayer.forward"
dims: [d_model]
inputs: [hidden]
reads: [history]
graph:
  merged: { op: sum, in: history, args: { axis: 0 } }
  x: { op: add, in: [hidden, merged] }
  norm: { op: rmsnorm, in: x, path: input_layernorm, args: { dim: d_model } }
  mlp: { op: linear, in: norm, path: mlp, args: { in: d_model, out: d_model } }
  out: { op: add, in: [x, mlp] }
outputs: [out]
"#;

const DRAFT_BLOCK: &str = r#"component: toy_draft_block
role: block
summary: "toy: projects the target layers' hidden states and adds them"
source: "DraftLayer.forward"
dims: [d_model]
inputs: [hidden]
reads: [aux]
graph:
  fc: { op: linear, in: aux, args: { in: "2 * d_model", out: d_model } }
  out: { op: add, in: [hidden, fc] }
outputs: [out]
"#;

const HIST_MODEL: &str = r#"model: toy_hist
summary: "toy: a residual history and a draft stack over target hidden states"
architectures: [ToyHist]
dims:
  d_model: 64
  n_vocab: 100
  n_layers: 5
blocks:
  res: { template: toy_attnres_block }
  draft: { template: toy_draft_block }
quant_context: { default: bf16 }
graph:
  embed: { op: embedding, in: input_ids, path: embed, args: { vocab: n_vocab, dim: d_model } }
  layers:
    in: embed
    stack:
      repeat: n_layers
      path: "layers.{i}"
      schedule: [{ block: res }]
      streams:
        hidden: { carries: true }
        history: { from: hidden, before: "i % 2 == 0", read: all, src: "`block_residual = torch.cat(`" }
        aux: { from: hidden, after: "AUX", read: READ, src: "`aux_hidden_states.append(hidden_states)`" }
  draft:
    in: layers
    stack:
      repeat: DRAFTS
      path: "draft.{i}"
      schedule: [{ block: draft }]
      streams:
        hidden: { carries: true }
        aux: { read: READ, src: "`aux_hidden_states.append(hidden_states)`" }
  norm: { op: rmsnorm, in: draft, path: norm, args: { dim: d_model } }
  head: { op: linear, in: norm, path: head, args: { in: d_model, out: n_vocab } }
outputs: [head]
"#;

fn hist(aux: &str, read: &str, drafts: &str) -> Repo {
    let mut files = support::library_files();
    files.insert(
        "specs/components/test/toy_attnres_block.yaml".into(),
        RES_BLOCK.into(),
    );
    let draft = if read == "each" {
        DRAFT_BLOCK.replace("\"2 * d_model\"", "d_model")
    } else {
        DRAFT_BLOCK.into()
    };
    files.insert("specs/components/test/toy_draft_block.yaml".into(), draft);
    files.insert(
        "specs/models/toy_hist.yaml".into(),
        HIST_MODEL
            .replace("AUX", aux)
            .replace("READ", read)
            .replace("DRAFTS", drafts),
    );
    Repo::from_files(files)
}

#[test]
fn a_history_read_whole_splits_a_block_by_the_length_each_layer_sees() {
    let a = eval(&hist("i == 1 || i == 3", "concat", "1"), "toy_hist");
    assert!(a.ok(), "{:?}", a.errors);
    // Saved at the entries of layers 0, 2, 4: layers 0-1 see one element, 2-3 two, 4 three.
    let groups: Vec<(&str, Vec<i128>)> = a
        .groups
        .iter()
        .filter(|g| g.stack == "layers")
        .map(|g| (g.block.as_str(), g.layers.clone()))
        .collect();
    assert_eq!(
        groups,
        [
            ("res@1", vec![0, 1]),
            ("res@2", vec![2, 3]),
            ("res@3", vec![4])
        ]
    );
    for (group, n) in [("res@1", 1), ("res@2", 2), ("res@3", 3)] {
        let merged = row(&a, &format!("layers[{group}].merged"));
        let dims: Vec<i128> = merged
            .shape
            .iter()
            .filter_map(|x| x.dim())
            .map(|q| q.v)
            .collect();
        assert_eq!(dims, [64], "{group}");
        let per_layer = a.node_decode_flops(merged, &Q::lit(1)).v / merged.count.v;
        assert_eq!(
            per_layer,
            (n - 1) * 64,
            "{group}: summing {n} elements of 64"
        );
    }
    // One MLP per layer whatever the grouping: 5 * (64 * 64) + norms.
    let mlp: i128 = a
        .nodes
        .iter()
        .filter(|r| r.id.ends_with(".mlp"))
        .map(|r| r.params.v * r.count.v)
        .sum();
    assert_eq!(mlp, 5 * 64 * 64);
}

#[test]
fn a_later_stack_reads_the_hidden_states_saved_after_chosen_layers() {
    // Concatenated: the draft's projection takes two target layers' hidden states.
    let a = eval(&hist("i == 1 || i == 3", "concat", "1"), "toy_hist");
    assert!(a.ok(), "{:?}", a.errors);
    assert_eq!(row(&a, "draft[draft].fc").params.v, 2 * 64 * 64);
    assert!(a.dead_nodes().is_empty(), "dead: {:?}", a.dead_nodes());
    // One saved layer fewer: the projection no longer fits what it reads.
    let a = eval(&hist("i == 1", "concat", "1"), "toy_hist");
    assert!(codes(&a).contains(&"S002"), "{:?}", a.errors);
    // Read one element per draft layer: two layers for two elements, three is an error.
    let a = eval(&hist("i == 1 || i == 3", "each", "2"), "toy_hist");
    assert!(a.ok(), "{:?}", a.errors);
    let a = eval(&hist("i == 1 || i == 3", "each", "3"), "toy_hist");
    let e = a.errors.iter().find(|e| e.code == "A006").expect("A006");
    assert!(
        e.message.contains("3 layers") && e.message.contains("2 elements"),
        "{}",
        e.message
    );
}

#[test]
fn a_stream_that_mixes_its_forms_is_a_load_error_with_the_forms() {
    for (from, bad) in [
        (
            "{ from: hidden, before: \"i == 0\", read: sometimes }",
            "read: sometimes",
        ),
        (
            "{ from: embed, before: \"i == 0\", read: all }",
            "carried stream",
        ),
        (
            "{ from: hidden, before: \"i == 0\", after: \"i == 1\", read: all }",
            "exactly one",
        ),
        (
            "{ from: hidden, before: \"i == 0\", read: all, axis: 0 }",
            "axis",
        ),
        ("{ from: hidden, read: all }", "exactly one"),
        ("{ after: \"i == 0\", read: all }", "from"),
        ("{ carries: true, read: all }", "carried stream takes"),
    ] {
        let repo = {
            let mut files = support::library_files();
            files.insert(
                "specs/components/test/toy_attnres_block.yaml".into(),
                RES_BLOCK.into(),
            );
            files.insert(
                "specs/components/test/toy_draft_block.yaml".into(),
                DRAFT_BLOCK.into(),
            );
            let model = HIST_MODEL
                .replace("AUX", "i == 1 || i == 3")
                .replace("READ", "concat")
                .replace("DRAFTS", "1")
                .replace(
                    "{ from: hidden, before: \"i % 2 == 0\", read: all, src: \"`block_residual = torch.cat(`\" }",
                    from,
                );
            files.insert("specs/models/toy_hist.yaml".into(), model);
            Repo::from_files(files)
        };
        let errs = repo.load_model("toy_hist").expect_err(from);
        let e = errs
            .iter()
            .find(|e| e.code == "L013")
            .unwrap_or_else(|| panic!("{from}: {errs:?}"));
        assert!(
            e.message.contains(bad) || e.hint.as_deref().unwrap_or("").contains(bad),
            "{from}: {e:?}"
        );
        assert!(e.location.line > 0, "{from}: located");
    }
}

const DEEPSTACK: &str = r#"model: toy_deepstack
summary: "a tiny vision-language model whose tower's hidden states are merged and added to early decoder layers"
architectures: [ToyVL]
dims:
  d_model: 64
  n_vocab: 100
  n_layers: 3
  n_heads: 4
  n_kv_heads: 2
  d_head: 16
  d_ffn: 128
  d_vis: 32
  n_vis_heads: 2
  d_vis_head: 16
  d_vis_ffn: 48
  n_vis_layers: 3
  vis_patch: 4
  vis_merge: 2
  vis_channels: 3
attrs:
  rope_type: "'default'"
blocks:
  decoder:
    template: pre_norm_block
    fill: { attention: gqa_attention, ffn: swiglu_mlp }
  inject:
    template: toy_inject_block
    fill: { attention: gqa_attention, ffn: swiglu_mlp }
  vision:
    template: layernorm_block
    fill: { attention: vision_attention, ffn: gelu_mlp }
    bind: { d_model: d_vis, n_heads: n_vis_heads, d_head: d_vis_head, d_ffn: d_vis_ffn }
  merger:
    template: toy_merger
    bind: { d_model: d_vis }
quant_context: { default: bf16 }
inputs:
  pixel_values: { kind: image, height: 32, width: 16, channels: vis_channels, patch: vis_patch, merge: vis_merge }
graph:
  patch_embed: { op: patch_embed, in: pixel_values, path: visual.patch_embed, args: { channels: vis_channels, out: d_vis, patch: vis_patch } }
  blocks:
    in: patch_embed
    stack:
      repeat: n_vis_layers
      path: "visual.blocks.{i}"
      schedule: [{ block: vision }]
      streams:
        hidden: { carries: true }
        deepstack: { from: hidden, after: "contains(config.vision_config.deepstack_visual_indexes, i)", read: each }
  mergers:
    in: blocks
    stack:
      repeat: "len(config.vision_config.deepstack_visual_indexes)"
      path: "visual.deepstack_merger_list.{i}"
      schedule: [{ block: merger }]
      streams:
        deepstack: { read: each }
        merged: {}
        deepstack_feat: { from: merged, after: "i >= 0", read: each }
  merge: { op: spatial_merge, in: blocks, args: { merge: vis_merge } }
  proj: { op: linear, in: merge, path: visual.proj, args: { in: "vis_merge * vis_merge * d_vis", out: d_model } }
  embed_tokens: { op: embedding, in: input_ids, path: model.embed_tokens, args: { vocab: n_vocab, dim: d_model } }
  joined: { op: masked_scatter, in: [embed_tokens, proj] }
  layers:
    in: joined
    stack:
      repeat: n_layers
      path: "model.layers.{i}"
      schedule:
        - { block: inject, where: "i < INJECTED" }
        - { block: decoder, where: "i >= INJECTED" }
      streams:
        hidden: { carries: true }
        deepstack_feat: { read: each }
  norm: { op: rmsnorm, in: layers, path: model.norm, args: { dim: d_model } }
  lm_head: { op: linear, in: norm, path: lm_head, args: { in: d_model, out: n_vocab } }
outputs: [lm_head]
"#;

const MERGER: &str = r#"component: toy_merger
role: block
summary: "toy: merges a saved hidden state's patches and projects them to the text width"
source: "PatchMerger.forward"
dims: [d_model]
inputs: [x]
reads: [deepstack]
graph:
  merge: { op: spatial_merge, in: deepstack, args: { merge: 2 } }
  norm: { op: layernorm, in: merge, args: { dim: "4 * d_model" } }
  fc1: { op: linear, in: norm, path: linear_fc1, args: { in: "4 * d_model", out: "4 * d_model" } }
  act: { op: gelu, in: fc1 }
  fc2: { op: linear, in: act, path: linear_fc2, args: { in: "4 * d_model", out: 64 } }
outputs: [x]
stream_out: { merged: fc2 }
"#;

const INJECT: &str = r#"component: toy_inject_block
role: block
summary: "toy: a decoder layer, then the j-th merged hidden state added at the image's positions"
source: "TextModel.forward"
dims: [d_model]
slots: [attention, ffn]
inputs: [hidden]
reads: [deepstack_feat]
graph:
  layer: { component: pre_norm_block, in: hidden, path: "." }
  out: { op: masked_add, in: [layer, deepstack_feat] }
outputs: [out]
"#;

fn deepstack(injected: &str) -> Repo {
    let mut files = support::library_files();
    files.insert(
        "specs/components/test/toy_merger.yaml".into(),
        MERGER.into(),
    );
    files.insert(
        "specs/components/test/toy_inject_block.yaml".into(),
        INJECT.into(),
    );
    files.insert(
        "specs/models/toy_deepstack.yaml".into(),
        DEEPSTACK.replace("INJECTED", injected),
    );
    Repo::from_files(files)
}

fn vl_config() -> serde_json::Value {
    json!({ "architectures": ["ToyVL"], "torch_dtype": "bfloat16", "vision_config": { "deepstack_visual_indexes": [0, 2] } })
}

#[test]
fn deepstack_merges_saved_tower_states_per_image_and_adds_them_to_early_layers() {
    let ir = deepstack("2").load_model("toy_deepstack").expect("loads");
    let a = evaluate(&ir, &vl_config(), EvalOptions::default());
    assert!(a.ok(), "{:?}", a.errors);
    assert!(a.dead_nodes().is_empty(), "dead: {:?}", a.dead_nodes());
    // Two mergers, one per saved state: merged 2x2 (8 positions of 128) and projected.
    let merger_params = 2 * (2 * 128 + 128 * 128 + 128 * 64);
    let merger_flops = 2 * 8 * (5 * 128 + 2 * 128 * 128 + 8 * 128 + 2 * 128 * 64);
    let fc2 = row(&a, "mergers[merger].fc2");
    assert!(fc2.per_image.is_some(), "a merger runs per image");
    // The same model without DeepStack: two decoder layers of the three, no mergers.
    let plain = DEEPSTACK
        .replace("INJECTED", "0")
        .replace("        deepstack_feat: { read: each }\n", "");
    let cut: String = plain
        .split("  mergers:\n")
        .next()
        .map(|head| {
            let tail = plain.split("  merge: { op: spatial_merge").nth(1).unwrap();
            format!("{head}  merge: {{ op: spatial_merge{tail}")
        })
        .unwrap()
        .replace(
            "        deepstack: { from: hidden, after: \"contains(config.vision_config.deepstack_visual_indexes, i)\", read: each }\n",
            "",
        );
    let mut files = support::library_files();
    files.insert(
        "specs/components/test/toy_merger.yaml".into(),
        MERGER.into(),
    );
    files.insert(
        "specs/components/test/toy_inject_block.yaml".into(),
        INJECT.into(),
    );
    files.insert("specs/models/toy_deepstack.yaml".into(), cut);
    let b = evaluate(
        &Repo::from_files(files)
            .load_model("toy_deepstack")
            .expect("plain loads"),
        &vl_config(),
        EvalOptions::default(),
    );
    assert!(b.ok(), "{:?}", b.errors);
    assert_eq!(
        a.params_encoder("pixel_values").v - b.params_encoder("pixel_values").v,
        merger_params
    );
    assert_eq!(
        a.encoder_flops_per_image("pixel_values").v - b.encoder_flops_per_image("pixel_values").v,
        merger_flops
    );
    // Per token nothing changes: the adds touch the image's positions only.
    let ctx = Q::lit(512);
    assert_eq!(a.decode_flops(&ctx).v, b.decode_flops(&ctx).v);
    assert_eq!(a.params_active().v, b.params_active().v);
    assert_eq!(a.images[0].tokens, b.images[0].tokens);
    // Three early layers for two saved states: the j-th reads the j-th, and the third none.
    let a = evaluate(
        &ir_of(&deepstack("3")),
        &vl_config(),
        EvalOptions::default(),
    );
    let e = a.errors.iter().find(|e| e.code == "A006").expect("A006");
    assert!(
        e.message.contains("3 layers") && e.message.contains("2 elements"),
        "{}",
        e.message
    );
}

fn ir_of(repo: &Repo) -> harch_engine::ir::ModelIr {
    repo.load_model("toy_deepstack").expect("loads")
}
