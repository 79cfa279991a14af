//! This crate's integration tests as one test binary: each file beside this one is a module of
//! it (`cargo test -p harch-worker --test it FILE::` runs one file's). One binary links the crate's
//! dependency graph once instead of once per file. `autotests = false` in Cargo.toml, so a file
//! must be declared here to be built: the `architecture` test fails on one that is not.

mod agent_env;
mod fake_github;
mod harch_cli;
mod support;

#[path = "ablation_e2e.rs"]
mod ablation_e2e;
#[path = "ablation_sandbox.rs"]
mod ablation_sandbox;
#[path = "agent_stage.rs"]
mod agent_stage;
#[path = "analyze_cli.rs"]
mod analyze_cli;
#[path = "answers_cli.rs"]
mod answers_cli;
#[path = "architecture.rs"]
mod architecture;
#[path = "cli.rs"]
mod cli;
#[path = "declared_gap.rs"]
mod declared_gap;
#[path = "docs_figures.rs"]
mod docs_figures;
#[path = "evidence.rs"]
mod evidence;
#[path = "generate_e2e.rs"]
mod generate_e2e;
#[path = "generate_prompt_size.rs"]
mod generate_prompt_size;
#[path = "hostile_agents.rs"]
mod hostile_agents;
#[path = "hub_cli.rs"]
mod hub_cli;
#[path = "hub_errors.rs"]
mod hub_errors;
#[path = "hub_fetch.rs"]
mod hub_fetch;
#[path = "hub_hostile.rs"]
mod hub_hostile;
#[path = "hub_library.rs"]
mod hub_library;
#[path = "inspect_cli.rs"]
mod inspect_cli;
#[path = "json_documents.rs"]
mod json_documents;
#[path = "maintainers.rs"]
mod maintainers;
#[path = "minimax_m3.rs"]
mod minimax_m3;
#[path = "multimodal.rs"]
mod multimodal;
#[path = "multimodal_cli.rs"]
mod multimodal_cli;
#[path = "nested_config.rs"]
mod nested_config;
#[path = "operating.rs"]
mod operating;
#[path = "publish.rs"]
mod publish;
#[path = "publish_e2e.rs"]
mod publish_e2e;
#[path = "queue_backends.rs"]
mod queue_backends;
#[path = "real_clis.rs"]
mod real_clis;
#[path = "review_e2e.rs"]
mod review_e2e;
#[path = "source_statements.rs"]
mod source_statements;
#[path = "sparse_attention.rs"]
mod sparse_attention;
#[path = "truth_dir_and_snapshots.rs"]
mod truth_dir_and_snapshots;
#[path = "validate_cli.rs"]
mod validate_cli;
#[path = "what_if_swap.rs"]
mod what_if_swap;
