//! The semantic guard: the numbers a spec publishes per token (active experts, what a cache
//! holds and in which dtype, norm/activation/RoPE kinds, liveness) are anchored in external facts
//! (config.json, the checkpoint, the forward source), never only in something the same spec
//! author wrote elsewhere.
//!
//! Codes M001–M049 are config bindings, kinds from source and truth identity (`bindings`,
//! `kinds`); M050–M099 are decode-time dataflow, cache/state dtypes and liveness (`dataflow`).

pub mod bindings;
mod compression;
mod constants;
mod count_anchor;
mod dataflow;
mod deployment;
mod glu_layout;
mod kinds;
mod mrope;
mod parts;
mod router_scale;
mod router_source;
mod selection;
mod skeleton;
mod towers;

use harch_engine::Analysis;
use harch_engine::ir::ModelIr;
use harch_engine::load::ConfigKeys;

use crate::report::Diagnostic;
use crate::truth::Truth;

/// Every semantic check over one evaluation.
pub fn check(
    ir: &ModelIr,
    a: &Analysis,
    truth: &Truth,
    keys: &ConfigKeys,
    anchored: &crate::window_anchor::Anchored,
    renames: &crate::conversion::Renames,
) -> Vec<Diagnostic> {
    let mut out = bindings::check(ir, a, truth, keys);
    out.extend(kinds::check(ir, a, truth, renames));
    // One reading of the forward source for the checks that read it where config is silent.
    let forward = crate::source::Forward::new(ir, &truth.sources);
    out.extend(router_source::check(a, truth, &forward));
    out.extend(router_scale::check(a, truth, &forward));
    out.extend(constants::check(a, truth, &forward));
    out.extend(glu_layout::check(a, &forward));
    out.extend(deployment::check(ir));
    out.extend(dataflow::check(ir, a, truth, anchored));
    out.extend(selection::check(a, truth, keys));
    out.extend(compression::check(a, truth));
    out
}
