//! The Inspector: a model as one self-contained HTML page — overview, architecture graph opened
//! layer by layer, weight and cost breakdown, a second model to compare, deployment figures.
//!
//! Every figure on the page is copied from the engine's one evaluation (the same `Summary`
//! `show --json` prints, the per-node `params:`/`flops:` quantities `explain` prints, with their
//! formulas); the page computes nothing but the context slider, and that by evaluating the
//! formula text the engine wrote ([`formula`] is the same evaluator in Rust, for tests).
//!
//! ```text
//! Subject ─► model::collect (validate + symbolic evaluation) ─► ModelData ─► html::render
//!                               graph::scopes + layout::layered (positions computed here)
//! ```

pub mod formula;
pub mod graph;
pub mod html;
pub mod layout;
pub mod model;
pub mod site;

pub use model::{ModelData, collect, collect_from};

/// Where a model's page sits in the spec repository (`specs/pages/<org>__<name>.html`): the
/// publish stage commits it with the bundle.
pub fn page_path_for(model_id: &str) -> String {
    format!("specs/pages/{}", site::page_file(model_id))
}

/// What a page shows besides the model itself.
#[derive(Default)]
pub struct PageOptions {
    /// A second model, compared block by block.
    pub compare: Option<ModelData>,
    /// `analyze`'s report (its `--json` document) for the deployment panel.
    pub deployment: Option<serde_json::Value>,
}

/// The page of one model: HTML with its styles, script and data inline.
pub fn page(model: &ModelData, opts: &PageOptions) -> anyhow::Result<String> {
    html::render(model, opts)
}
