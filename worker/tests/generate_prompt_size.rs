//! Generate prompts for real checkpoints stay well inside the agents' context windows, and pick
//! the right example when the model's own spec is hidden. Prints each prompt's size (bytes,
//! estimated tokens, largest fragments): `cargo test -p harch-worker --test it generate_prompt_size::
//! -- --nocapture`.
//!
//! Needs the forward source (scripts/fetch-transformers-src, or HARCH_TRANSFORMERS_SRC).

use harch_engine::Repo;
use harch_prompts::{GenerateInput, choose_examples, render_generate};
use harch_worker::{snapshot, source, specs};

/// Half of a 200k-token window: room for the agent's own turns.
const TOKEN_BUDGET: usize = 100_000;

fn prompt_for(model_id: &str, own_spec: &str) -> (harch_prompts::Prompt, String) {
    let mut truth = snapshot::load_snapshot(model_id).expect("bundled snapshot");
    let set = source::resolve_native(&truth.config).unwrap_or_else(|| {
        panic!("no forward source for {model_id}: run scripts/fetch-transformers-src or set HARCH_TRANSFORMERS_SRC")
    });
    truth.sources = set.files;
    let mut files = specs::read_spec_files(&specs::root()).unwrap();
    assert!(
        files
            .remove(&format!("specs/models/{own_spec}.yaml"))
            .is_some()
    );
    let repo = Repo::from_files(files);
    let example = choose_examples(&repo, &truth)[0].name.clone();
    let p = render_generate(&GenerateInput::new(
        model_id,
        &truth,
        &repo,
        &format!("specs/models/{own_spec}.yaml"),
    ))
    .unwrap();
    println!("{model_id}: {} (example: {example})", p.size);
    (p, example)
}

#[test]
fn deepseek_v3_prompt_is_well_inside_a_200k_window() {
    let (p, example) = prompt_for("deepseek-ai/DeepSeek-V3", "deepseek_v3");
    assert!(
        p.size.est_tokens < TOKEN_BUDGET,
        "DeepSeek-V3 generate prompt is {}",
        p.size
    );
    // MLA + MoE: the closest example is another DeepSeek (V3.2 since it is in the library).
    assert!(
        ["deepseek_v2", "deepseek_v32"].contains(&example.as_str()),
        "MLA + MoE: the closest example is a DeepSeek MLA spec, got {example}"
    );
    // 91,991 tensors (layer 61 is the MTP layer) in a few dozen range lines, and the whole
    // forward source inline.
    assert!(
        p.text.contains(
            "model.layers.{3-61}.mlp.experts.{0-255}.down_proj.weight F8_E4M3 [7168, 2048]"
        )
    );
    assert!(p.text.contains("### truth/source/modeling_deepseek_v3.py"));
    assert!(!p.text.contains("not inlined for size"));
}

#[test]
fn library_models_get_a_close_example_when_their_own_spec_is_hidden() {
    for (id, own, want) in [
        ("meta-llama/Llama-3.1-8B", "llama", "qwen3"),
        ("Qwen/Qwen3-8B", "qwen3", "llama"),
        // Same naming and attention; the MoE components are in the manifest.
        ("Qwen/Qwen3-30B-A3B", "qwen3_moe", "qwen3"),
        ("deepseek-ai/DeepSeek-V2-Lite", "deepseek_v2", "deepseek_v3"),
    ] {
        let (p, example) = prompt_for(id, own);
        assert!(p.size.est_tokens < TOKEN_BUDGET, "{id}: {}", p.size);
        assert_eq!(example, want, "{id}");
    }
}
