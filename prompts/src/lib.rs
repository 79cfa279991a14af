//! harch-prompts: the prompts harch hands to agents (generate, review, fix), rendered from
//! templates (`templates/*.j2`, minijinja) and fragments generated from the engine and the spec
//! library: the op registry, the component manifest, the DSL reference, verified examples chosen
//! close to the target, and this model's config, forward source and range-compressed tensor list.
//!
//! A prompt says how to write a spec right; validate's structured errors say what is wrong, so a
//! retry prompt carries the previous attempt's errors verbatim (code, location, hint).
//!
//! This crate does no I/O: the spec library arrives as a [`harch_engine::Repo`], the truth as a
//! [`harch_guards::truth::Truth`], every text as a value. The DSL reference (`docs/dsl.md`) is
//! compiled in. It must not decide whether a spec is valid, run agents or know the queue.
//!
//! ```
//! use harch_prompts::{GenerateInput, render_generate};
//! let repo = harch_engine::Repo::from_files(Default::default());
//! let truth = harch_guards::truth::Truth::default();
//! let prompt = render_generate(&GenerateInput::new("org/model", &truth, &repo, "specs/models/m.yaml")).unwrap();
//! assert!(prompt.size.bytes > 0);
//! ```

mod errors;
mod examples;
mod generate;
mod manifest;
mod render;
mod review_fix;
mod size;
mod truth_text;

pub use errors::PriorErrors;
pub use examples::{Example, choose_examples};
pub use generate::{GenerateInput, render_generate};
pub use manifest::{ManifestEntry, component_manifest};
pub use render::{Prompt, PromptError, template_source};
pub use review_fix::{FixInput, ReviewInput, STAGED_SOURCE_DIR, render_fix, render_review};
pub use size::{PromptSize, estimate_tokens};
pub use truth_text::{TruthText, truth_text};

/// The DSL reference, compiled in so a deployed worker needs no checkout.
pub const DSL_REFERENCE: &str = include_str!("../../docs/dsl.md");
