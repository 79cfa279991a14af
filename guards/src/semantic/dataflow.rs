//! Decode-time dataflow (codes M050–M099): what a layer caches is what its decode step reads
//! from earlier positions, in the dtype the checkpoint and the forward source keep it in, and
//! every node's value reaches an output of the model.
//!
//! - `caches`: declared caches against [`Analysis::decode_reads`] (M050–M054);
//! - `dtypes`: cache and state dtypes against config, checkpoint and source (M060–M062);
//! - `liveness`: nodes whose value reaches no output (M070–M071).

mod caches;
mod dtype_anchor;
mod dtypes;
mod liveness;
mod state_source;

use harch_engine::Analysis;
use harch_engine::diag::Location;
use harch_engine::ir::ModelIr;
use harch_engine::text::group_digits as thousands;

use crate::report::Diagnostic;
use crate::truth::Truth;

pub mod code {
    /// A layer whose decode step reads earlier positions declares no cache at all.
    pub const NO_CACHE: &str = "M050";
    /// A tensor the decode step reads from earlier positions is held by no cache entry.
    pub const CACHE_MISSING: &str = "M051";
    /// A cache entry holds what no decode step reads from earlier positions (or holds it twice).
    pub const CACHE_EXTRA: &str = "M052";
    /// A cache grows differently (per token, window, constant) from how it is read.
    pub const CACHE_GROWTH: &str = "M053";
    /// A cache entry holds a different number of elements than is read from it.
    pub const CACHE_SIZE: &str = "M054";
    /// A cache or state dtype other than the config's, with no source anchor.
    pub const DTYPE_UNANCHORED: &str = "M060";
    /// A dtype anchor that is not in the forward source or does not name the dtype.
    pub const DTYPE_ANCHOR: &str = "M061";
    /// A recurrent state stored in another dtype than the forward source keeps it in.
    pub const STATE_DTYPE: &str = "M062";
    /// A node with weights whose value reaches no output of the model.
    pub const DEAD_WEIGHTS: &str = "M070";
    /// A computation whose value reaches no output of the model.
    pub const DEAD_NODE: &str = "M071";
}

pub fn check(
    ir: &ModelIr,
    a: &Analysis,
    truth: &Truth,
    anchored: &crate::window_anchor::Anchored,
) -> Vec<Diagnostic> {
    let mut out = caches::check(a, truth, anchored);
    out.extend(dtypes::check(ir, a, truth));
    out.extend(liveness::check(a));
    out
}

/// Findings of one kind, one diagnostic per (code, location, message) with every instance it
/// holds for: a component used by several layer groups is reported once, naming the groups.
#[derive(Default)]
struct Findings {
    items: Vec<Finding>,
}

struct Finding {
    code: &'static str,
    loc: Location,
    message: String,
    hint: String,
    instances: Vec<String>,
}

impl Findings {
    fn push(
        &mut self,
        code: &'static str,
        instance: &str,
        loc: &Location,
        message: String,
        hint: String,
    ) {
        let same = |f: &&mut Finding| {
            f.code == code
                && f.message == message
                && (&f.loc.file, f.loc.line, f.loc.column) == (&loc.file, loc.line, loc.column)
        };
        match self.items.iter_mut().find(|f| same(f)) {
            Some(f) => {
                if !f.instances.iter().any(|i| i == instance) {
                    f.instances.push(instance.to_string());
                }
            }
            None => self.items.push(Finding {
                code,
                loc: loc.clone(),
                message,
                hint,
                instances: vec![instance.to_string()],
            }),
        }
    }

    fn finish(self) -> Vec<Diagnostic> {
        self.items
            .into_iter()
            .map(|f| {
                let at = if f.instances.iter().all(|i| i.is_empty()) {
                    String::new()
                } else {
                    format!("{}: ", f.instances.join(", "))
                };
                Diagnostic::new("semantic", f.code, format!("{at}{}", f.message), f.loc)
                    .hint(f.hint)
            })
            .collect()
    }
}

/// The instance a row belongs to (`layers[moe].attention` for `layers[moe].attention.kv_b_proj`),
/// a decode variant's rows counting as their component's.
fn instance_of(id: &str) -> &str {
    let parent = id.rsplit_once('.').map(|(p, _)| p).unwrap_or("");
    parent.strip_suffix(".decode").unwrap_or(parent)
}

/// A row's id inside its instance (`kv_b_proj`, `decode.scores`).
fn local_id<'a>(id: &'a str, instance: &str) -> &'a str {
    id.strip_prefix(instance)
        .and_then(|s| s.strip_prefix('.'))
        .unwrap_or(id)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ids_and_numbers() {
        assert_eq!(thousands(70272), "70,272");
        assert_eq!(thousands(512), "512");
        assert_eq!(thousands(-1000), "-1,000");
        assert_eq!(
            instance_of("layers[moe].attention.decode.scores"),
            "layers[moe].attention"
        );
        assert_eq!(
            instance_of("layers[moe].attention.kv_b_proj"),
            "layers[moe].attention"
        );
        assert_eq!(
            local_id(
                "layers[moe].attention.decode.scores",
                "layers[moe].attention"
            ),
            "decode.scores"
        );
    }
}
