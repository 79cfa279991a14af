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
    out.extend(router_source::check(ir, a, truth));
    out.extend(router_scale::check(ir, a, truth));
    out.extend(constants::check(ir, a, truth));
    out.extend(deployment::check(ir));
    out.extend(dataflow::check(ir, a, truth, anchored));
    out.extend(selection::check(a, truth, keys));
    out.extend(compression::check(a, truth));
    out
}
