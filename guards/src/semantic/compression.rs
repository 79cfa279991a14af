//! Compression ratios (code M011): a compressor pools as many tokens per entry as config states
//! for its layer (`compress_ratios[i]`, DeepSeek-V4: 4 for CSA layers, 128 for HCA, 0 for none),
//! at every layer its block runs on. A literal, or a ratio bound for the wrong kind of layer,
//! counts a cache that is 32 times too large or too small and still evaluates.

use harch_engine::Analysis;

use crate::config_view;
use crate::report::Diagnostic;
use crate::truth::Truth;

pub mod code {
    /// A compressor's ratio is not the config's for one of its layers.
    pub const COMPRESSION: &str = "M011";
}

/// Config keys that state a compression ratio per layer.
const PER_LAYER: &[&str] = &["compress_ratios"];

pub fn check(a: &Analysis, truth: &Truth) -> Vec<Diagnostic> {
    let config = config_view::text(&truth.config);
    let stated = PER_LAYER.iter().find_map(|k| {
        config
            .get(*k)
            .and_then(|v| v.as_array())
            .map(|v| (*k, v.clone()))
    });
    let mut out = Vec::new();
    for (r, n) in a.nodes.iter().enumerate() {
        if n.op != "compress" {
            continue;
        }
        let Some(got) = n.args.get("ratio").and_then(|v| v.int) else {
            continue;
        };
        let Some((key, list)) = &stated else {
            out.push(
                Diagnostic::new(
                    "semantic",
                    code::COMPRESSION,
                    format!(
                        "{}: compresses {got} tokens per entry, but config states no compression ratio (`compress_ratios`)",
                        n.id
                    ),
                    n.loc.clone(),
                )
                .hint("a compressor's ratio comes from config; a model without one has no compressor"),
            );
            continue;
        };
        let Some(group) = a.group_of(r) else {
            continue;
        };
        let wrong: Vec<(i128, Option<i64>)> = group
            .layers
            .iter()
            .map(|&l| {
                (
                    l,
                    usize::try_from(l)
                        .ok()
                        .and_then(|i| list.get(i))
                        .and_then(|v| v.as_i64()),
                )
            })
            .filter(|(_, want)| *want != i64::try_from(got).ok())
            .collect();
        if let Some((layer, want)) = wrong.first() {
            let want = want.map_or("nothing".to_string(), |w| w.to_string());
            out.push(
                Diagnostic::new(
                    "semantic",
                    code::COMPRESSION,
                    format!(
                        "{}: compresses {got} tokens per entry at layer {layer}, but config `{key}[{layer}]` is {want} ({} of its {} layers differ)",
                        n.id,
                        wrong.len(),
                        group.layers.len()
                    ),
                    n.loc.clone(),
                )
                .hint(format!("bind the ratio to `config.{key}[i]` in a block the schedule gives only layers of one ratio")),
            );
        }
    }
    out
}
