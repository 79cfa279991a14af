//! The prompts rendered from the project's own spec library and small hand-made truths: every
//! fragment is in, a retry carries the previous errors, examples are chosen by the truth, the
//! source budget holds, and template mistakes are errors rather than silent gaps.

use std::collections::BTreeMap;
use std::path::Path;

use harch_engine::Repo;
use harch_engine::diag::Location;
use harch_guards::Diagnostic;
use harch_guards::truth::{Dtype, Inventory, TensorInfo, Truth};
use harch_prompts::*;

/// The project's spec library, read by the test (the crate itself does no I/O).
fn library(skip_models: &[&str]) -> Repo {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    let mut files = BTreeMap::new();
    let mut stack = vec![root.join("specs")];
    while let Some(dir) = stack.pop() {
        for e in std::fs::read_dir(&dir).unwrap() {
            let p = e.unwrap().path();
            if p.is_dir() {
                stack.push(p);
            } else if p.extension().is_some_and(|x| x == "yaml") {
                let key = p
                    .strip_prefix(&root)
                    .unwrap()
                    .to_string_lossy()
                    .into_owned();
                if skip_models
                    .iter()
                    .any(|m| key == format!("specs/models/{m}.yaml"))
                {
                    continue;
                }
                files.insert(key, std::fs::read_to_string(&p).unwrap());
            }
        }
    }
    Repo::from_files(files)
}

fn tensor(name: &str, shape: &[u64]) -> TensorInfo {
    TensorInfo {
        name: name.into(),
        dtype: Dtype::BF16,
        shape: shape.iter().copied().collect(),
        shard: None,
    }
}

/// A small dense GQA decoder with q/k norms, named like Qwen3.
fn qwen3_like() -> Truth {
    let mut tensors = vec![
        tensor("model.embed_tokens.weight", &[1000, 64]),
        tensor("model.norm.weight", &[64]),
        tensor("lm_head.weight", &[1000, 64]),
    ];
    for i in 0..4 {
        for (n, s) in [
            ("self_attn.q_proj.weight", vec![64, 64]),
            ("self_attn.k_proj.weight", vec![32, 64]),
            ("self_attn.v_proj.weight", vec![32, 64]),
            ("self_attn.o_proj.weight", vec![64, 64]),
            ("self_attn.q_norm.weight", vec![16]),
            ("self_attn.k_norm.weight", vec![16]),
            ("mlp.gate_proj.weight", vec![128, 64]),
            ("mlp.up_proj.weight", vec![128, 64]),
            ("mlp.down_proj.weight", vec![64, 128]),
            ("input_layernorm.weight", vec![64]),
            ("post_attention_layernorm.weight", vec![64]),
        ] {
            tensors.push(tensor(&format!("model.layers.{i}.{n}"), &s));
        }
    }
    Truth {
        config: serde_json::json!({
            "architectures": ["Qwen3ForCausalLM"], "model_type": "qwen3",
            "hidden_size": 64, "num_hidden_layers": 4, "num_attention_heads": 4,
            "num_key_value_heads": 2, "head_dim": 16, "intermediate_size": 128,
            "vocab_size": 1000, "tie_word_embeddings": false, "rope_scaling": null,
            "attention_bias": false, "rms_norm_eps": 1e-6
        }),
        inventory: Inventory::from_tensors(tensors, None),
        sources: BTreeMap::from([
            ("modeling_qwen3.py".to_string(), "class Qwen3Attention:\n    def forward(self):\n        hidden_states = decoder_layer(hidden_states)\n".to_string()),
            ("configuration_qwen3.py".to_string(), "class Qwen3Config: pass\n".to_string()),
        ]),
        ..Truth::default()
    }
}

#[test]
fn generate_prompt_holds_every_fragment() {
    let repo = library(&["qwen3"]);
    let truth = qwen3_like();
    let p = render_generate(&GenerateInput::new(
        "Qwen/Qwen3-tiny",
        &truth,
        &repo,
        "specs/models/qwen3.yaml",
    ))
    .unwrap();
    let t = &p.text;
    for needle in [
        "# Task: write the harch spec of Qwen/Qwen3-tiny",
        "specs/models/qwen3.yaml",
        // op registry
        "Primitive ops",
        "attention_score",
        // component manifest: name, role, dims, summary
        "- gqa_attention [role: attention] dims: d_model, n_heads",
        "- swiglu_mlp [role:",
        // DSL reference
        "# The spec DSL",
        // this model's truth
        "\"num_key_value_heads\": 2",
        "model.layers.{0-3}.self_attn.k_proj.weight BF16 [32, 64]",
        "### truth/source/modeling_qwen3.py",
        "class Qwen3Attention",
        "### truth/source/configuration_qwen3.py",
    ] {
        assert!(t.contains(needle), "prompt lacks {needle:?}");
    }
    assert!(
        !t.contains("was rejected"),
        "a first attempt has no previous errors"
    );
    // Modeling source comes before configuration source.
    assert!(t.find("modeling_qwen3.py").unwrap() < t.find("configuration_qwen3.py").unwrap());
    assert_eq!(p.size.bytes, t.len());
    assert_eq!(p.size.est_tokens, estimate_tokens(t.len()));
    assert!(
        p.size
            .fragments
            .iter()
            .any(|(n, b)| n == "dsl reference" && *b == DSL_REFERENCE.len())
    );
}

#[test]
fn examples_are_the_closest_library_spec_and_its_components() {
    let truth = qwen3_like();
    // With its own spec hidden, a dense GQA model is closest to the other dense GQA spec, not
    // to an MoE or MLA one.
    let ex = choose_examples(&library(&["qwen3"]), &truth);
    assert_eq!(ex[0].kind, "model");
    assert_eq!(
        ex[0].name,
        "llama",
        "{:?}",
        ex.iter().map(|e| &e.name).collect::<Vec<_>>()
    );
    let comps: Vec<&str> = ex[1..].iter().map(|e| e.name.as_str()).collect();
    assert_eq!(comps, ["gqa_attention", "swiglu_mlp"]);
    assert!(ex[1].text.contains("component: gqa_attention"));
    // With it present, its own spec is the closest.
    assert_eq!(choose_examples(&library(&[]), &truth)[0].name, "qwen3");
    // The hidden spec never reaches the prompt.
    let repo = library(&["qwen3"]);
    let p = render_generate(&GenerateInput::new(
        "Qwen/Qwen3-tiny",
        &truth,
        &repo,
        "specs/models/qwen3.yaml",
    ))
    .unwrap();
    assert!(!p.text.contains("model: qwen3\n"));
    assert!(p.text.contains("model: llama\n"));
}

#[test]
fn a_retry_carries_the_previous_attempts_errors() {
    let repo = library(&["qwen3"]);
    let truth = qwen3_like();
    let diag = Diagnostic::new(
        "weight",
        "W003",
        "tensor model.layers.0.self_attn.k_proj.weight has shape [64, 64] in the spec but [32, 64] in the checkpoint",
        Location {
            file: Some("specs/models/qwen3.yaml".into()),
            line: 9,
            column: 3,
            node: Some("k_proj".into()),
        },
    )
    .hint("bind n_kv_heads to config.num_key_value_heads");
    let prior = PriorErrors::from_diagnostics(1, &[diag]);
    let mut input = GenerateInput::new("Qwen/Qwen3-tiny", &truth, &repo, "specs/models/qwen3.yaml");
    input.previous = Some(&prior);
    let p = render_generate(&input).unwrap();
    assert!(
        p.text
            .contains("## The previous attempt (attempt 1) was rejected")
    );
    assert!(p.text.contains(
        "- W003 [weight] specs/models/qwen3.yaml:9:3 (node k_proj): tensor model.layers.0.self_attn.k_proj.weight has shape [64, 64] in the spec but [32, 64] in the checkpoint — hint: bind n_kv_heads to config.num_key_value_heads"
    ));
    assert!(p.text.contains("Start from the errors of attempt 1 above."));

    let many: Vec<Diagnostic> = (0..50)
        .map(|i| {
            Diagnostic::new(
                "weight",
                "W001",
                format!("tensor t{i} is claimed by no op"),
                Location::default(),
            )
        })
        .collect();
    let prior = PriorErrors::from_diagnostics(2, &many);
    assert_eq!(prior.lines.len(), 40);
    input.previous = Some(&prior);
    let p = render_generate(&input).unwrap();
    assert!(
        p.text
            .contains("- … and 10 more (run `validate` for the full list)")
    );

    let note = PriorErrors::note(3, "No spec was written at `specs/models/qwen3.yaml`.");
    input.previous = Some(&note);
    let p = render_generate(&input).unwrap();
    assert!(
        p.text
            .contains("(attempt 3) was rejected\n\nNo spec was written")
    );
}

#[test]
fn forward_source_over_the_budget_stays_in_the_workspace() {
    let repo = library(&[]);
    let mut truth = qwen3_like();
    truth
        .sources
        .insert("modeling_huge.py".into(), "x = 1\n".repeat(100_000));
    let mut input = GenerateInput::new("org/huge", &truth, &repo, "specs/models/huge.yaml");
    input.source_budget = 10_000;
    let p = render_generate(&input).unwrap();
    assert!(!p.text.contains("x = 1\nx = 1"));
    assert!(
        p.text
            .contains("Also in truth/source/ (not inlined for size): modeling_huge.py")
    );
    assert!(
        p.text.contains("class Qwen3Attention"),
        "small files still fit"
    );
    assert!(p.size.bytes < 200_000, "{}", p.size);
}

/// A checked review of the tiny Qwen3 truth: one verified row, one contradicted row, a
/// verified defect, an unverified one whose fix must never reach the fix prompt, and a
/// contradicted one.
fn checked_review(truth: &Truth) -> harch_review::Checked {
    let yaml = r#"verdict: NO_PASS
mapping:
  - step: "q and k are normalised per head before rope"
    node: "layers[dense].attention.q_norm"
    status: consistent
    evidence:
      - 'src: modeling_qwen3.py:3 "hidden_states = decoder_layer(hidden_states)"'
      - "ckpt: model.layers.X.self_attn.q_norm.weight = [16]"
  - step: "four decoder layers"
    node: "layers"
    status: consistent
    evidence: ["count: model.layers = 5"]
defects:
  - title: "k_norm is missing"
    where: "layers[dense].attention"
    fix: "add an rmsnorm over head_dim on k before rope"
    evidence: ["ckpt: model.layers.X.self_attn.k_norm.weight = [16]"]
  - title: "the rope theta is 500000"
    where: "layers[dense].attention.rope"
    fix: "SECRET-UNVERIFIED-FIX"
    evidence: ["cfg: rms_norm_eps = 1e-6"]
  - title: "SECRET-CONTRADICTED-TITLE"
    where: "layers[dense].ffn"
    fix: "SECRET-CONTRADICTED-FIX"
    evidence: ["cfg: intermediate_size = 4096"]
"#;
    let nodes =
        harch_review::SpecNodes::new(["layers[dense].attention.q_norm", "layers[dense].ffn"]);
    let report = harch_review::parse_report("review.yaml", yaml, &nodes).unwrap();
    harch_review::check(&report, &harch_review::Facts::from_truth(truth))
}

#[test]
fn review_and_fix_prompts_render() {
    let truth = qwen3_like();
    let nodes = vec![
        "layers[dense].attention.q_norm".to_string(),
        "layers[dense].ffn".to_string(),
    ];
    let first = render_review(&ReviewInput {
        model_id: "Qwen/Qwen3-tiny",
        spec_path: "specs/models/qwen3.yaml",
        spec_text: "model: qwen3\n",
        drafts: &[("x.yaml".into(), "component: x\n".into())],
        truth: &truth,
        report_path: "review.yaml",
        node_paths: &nodes,
        previous: None,
        report_errors: None,
        notes: None,
        unverified: &[],
    })
    .unwrap();
    for needle in [
        "verdict: PASS",
        harch_review::GRAMMAR,
        harch_review::EXAMPLES,
        "- `truth/source/modeling_qwen3.py` (3 lines)",
        "- `truth/source/configuration_qwen3.py` (1 line)",
        "layers[dense].attention.q_norm\nlayers[dense].ffn",
        "model: qwen3",
        "### draft x.yaml",
        // The source is numbered so citations can be exact.
        "1 | class Qwen3Attention:\n2 |     def forward(self):\n3 |         hidden_states",
        "`review.yaml`",
    ] {
        assert!(
            first.text.contains(needle),
            "review prompt lacks {needle:?}"
        );
    }
    assert!(!first.text.contains("previous review round"));
    assert!(!first.text.contains("malformed"));

    // A re-review carries the last round's verdicts and the facts its false claims missed, and
    // a retry after a malformed report carries the report's errors.
    let c = checked_review(&truth);
    let errors = PriorErrors::from_diagnostics(
        2,
        &[Diagnostic::new(
            "review",
            "E002",
            "unknown verdict `LGTM`",
            Location::at("review.yaml", 1, 10),
        )
        .hint("write `verdict: PASS` or `verdict: NO_PASS`")],
    );
    let again = render_review(&ReviewInput {
        model_id: "Qwen/Qwen3-tiny",
        spec_path: "specs/models/qwen3.yaml",
        spec_text: "model: qwen3\n",
        drafts: &[],
        truth: &truth,
        report_path: "review.yaml",
        node_paths: &nodes,
        previous: Some(&c),
        report_errors: Some(&errors),
        notes: None,
        unverified: &[],
    })
    .unwrap();
    for needle in [
        "The agent said NO_PASS; the worker recorded NO_PASS",
        "Rows:\n1 verified, 0 unverified,\n1 contradicted",
        "- verified: row `q and k are normalised per head before rope` → layers[dense].attention.q_norm (consistent)",
        "- contradicted: row `four decoder layers` → layers (consistent)\n  - false: `count: model.layers = 5`; the facts: model.layers has 4 distinct indices\n",
        "- unverified: defect `the rope theta is 500000` at layers[dense].attention.rope — no holding claim states `500000`",
        "## Your previous report was malformed (attempt 2)",
        "- E002 [review] review.yaml:1:10: unknown verdict `LGTM` — hint: write `verdict: PASS` or `verdict: NO_PASS`",
    ] {
        assert!(
            again.text.contains(needle),
            "re-review prompt lacks {needle:?}"
        );
    }
    assert!(
        !again.text.contains("SECRET-UNVERIFIED-FIX"),
        "a re-review repeats no suggested fix"
    );

    let fresh = Diagnostic::new(
        "load",
        "L001",
        "unknown field `atention`",
        Location::in_file("specs/models/qwen3.yaml"),
    );
    let orders = harch_review::work_orders(Some(&c), &[fresh]);
    let previous_attempt = PriorErrors::from_diagnostics(
        1,
        &[Diagnostic::new(
            "weight",
            "W001",
            "checkpoint tensor lm_head.weight is claimed by no spec node",
            Location::in_file("specs/models/qwen3.yaml"),
        )],
    );
    let fix = render_fix(&FixInput {
        model_id: "Qwen/Qwen3-tiny",
        spec_path: "specs/models/qwen3.yaml",
        spec_text: "model: qwen3\n",
        work_orders: &orders,
        review: Some(&c),
        errors: Some(&previous_attempt),
        truth: &truth,
        notes: Some("SCENARIO: fix-note"),
    })
    .unwrap();
    for needle in [
        "1. The spec does not load: L001 [load] specs/models/qwen3.yaml: unknown field `atention`",
        "2. Verified defect at `layers[dense].attention`: k_norm is missing\n   Fix: add an rmsnorm over head_dim on k before rope\n   Evidence (checked, it holds):\n   - ckpt: model.layers.X.self_attn.k_norm.weight = [16]",
        "3. Unverified finding (its evidence does not cover it; no fix is given): the rope theta is 500000. Look at `layers[dense].attention.rope`",
        "4. A finding about `layers[dense].ffn` cited evidence that disagrees with the facts. Do not act on it.\n\n",
        "The review was recorded NO_PASS: mapping rows 1\nverified, 0 unverified, 1\ncontradicted; defects 1 verified, 1\nunverified, 1 contradicted.",
        "## Your previous attempt did not validate (attempt 1)",
        "## Operator notes\n\nSCENARIO: fix-note\n\nFix `specs/models/qwen3.yaml` now",
        "W001 [weight] specs/models/qwen3.yaml: checkpoint tensor lm_head.weight",
        harch_review::GRAMMAR,
        "- `truth/source/modeling_qwen3.py` (3 lines)",
        "Primitive ops",
    ] {
        assert!(
            fix.text.contains(needle),
            "fix prompt lacks {needle:?}\n{}",
            fix.text
        );
    }
    for secret in [
        "SECRET-UNVERIFIED-FIX",
        "SECRET-CONTRADICTED-TITLE",
        "SECRET-CONTRADICTED-FIX",
    ] {
        assert!(!fix.text.contains(secret), "the fix prompt leaks {secret}");
    }
    assert!(
        !fix.text.contains("class Qwen3Attention"),
        "fix does not inline the source"
    );
}
