//! Deployment declarations against the op semantics (codes M080–M081). Attention tensor
//! parallelism gives each GPU whole heads, so an axis may be split by it only if it carries a
//! head count: a width without a head axis (an MLA latent, a head's own width) is replicated on
//! every GPU, and a head count that is not declared splittable leaves each GPU holding every
//! head. `analyze` divides KV and attention weights by what `shardable_by` says, so a wrong
//! declaration understates (a latent split 8 ways) or overstates (unsplit KV heads) memory per
//! GPU.

use harch_engine::diag::Location;
use harch_engine::ir::ModelIr;

use crate::report::Diagnostic;

pub mod code {
    /// A dim that carries no heads is declared shardable by attention TP.
    pub const NOT_HEADS: &str = "M080";
    /// A head count is not declared shardable by attention TP.
    pub const HEADS_UNSPLIT: &str = "M081";
}

/// The dim table the model's dims come from.
const DIMS_FILE: &str = "specs/arch/dims.yaml";

pub fn check(ir: &ModelIr) -> Vec<Diagnostic> {
    let mut out = Vec::new();
    for (name, def) in &ir.dim_table {
        let by_attention = def.shardable_by.iter().any(|s| s == "attention");
        let heads = def.kind == "head_count";
        let loc = Location::in_file(DIMS_FILE);
        if by_attention && !heads {
            out.push(
                Diagnostic::new(
                    "semantic",
                    code::NOT_HEADS,
                    format!(
                        "dim `{name}` ({}) is declared `shardable_by: [attention]`, but attention tensor parallelism splits whole heads and `{name}` carries none: every GPU holds all of it",
                        def.kind
                    ),
                    loc,
                )
                .hint("drop `attention` from its `shardable_by` (a latent or a head's width is replicated under attention TP)"),
            );
        } else if heads && !by_attention {
            out.push(
                Diagnostic::new(
                    "semantic",
                    code::HEADS_UNSPLIT,
                    format!(
                        "head count `{name}` is not declared shardable by attention tensor parallelism: each GPU would hold every head"
                    ),
                    loc,
                )
                .hint("add `attention` to its `shardable_by`"),
            );
        }
    }
    out
}
