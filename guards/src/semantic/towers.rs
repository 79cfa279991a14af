//! M030: a vision tower is an encoder. The forward source builds a tower from the vision
//! sub-config (`self.visual = AutoModel.from_config(config.vision_config)`); every weight the
//! checkpoint stores under that module must be evaluated as an encoder of an image input (run
//! once per image, over its patches), never as part of the per-token forward pass (an extra
//! output fed from the token embedding) nor as multi-token prediction.

use std::collections::BTreeMap;

use harch_engine::Analysis;

use super::skeleton::Skeleton;
use crate::report::Diagnostic;

pub const TOWER: &str = "M030";

/// `attr` → the source line that builds it, for every `self.<attr> = ...` whose right-hand
/// side reads an encoder's sub-config.
fn towers<'s>(sk: &Skeleton<'s>) -> BTreeMap<String, String> {
    let mut out = BTreeMap::new();
    for c in sk.classes.values() {
        for line in c.body.lines() {
            let t = line.trim();
            let Some(rest) = t.strip_prefix("self.") else {
                continue;
            };
            let attr: String = rest
                .chars()
                .take_while(|c| c.is_ascii_alphanumeric() || *c == '_')
                .collect();
            let Some(rhs) = rest[attr.len()..].trim_start().strip_prefix('=') else {
                continue;
            };
            if rhs.starts_with('=') || attr.is_empty() {
                continue;
            }
            let reads_encoder = crate::config_view::ENCODER_SCOPES
                .iter()
                .any(|s| rhs.contains(&format!("config.{s}")));
            if reads_encoder && rhs.contains('(') {
                out.entry(attr).or_insert_with(|| t.to_string());
            }
        }
    }
    out
}

pub fn check(a: &Analysis, sk: &Skeleton) -> Vec<Diagnostic> {
    let towers = towers(sk);
    if towers.is_empty() {
        return Vec::new();
    }
    // One finding per tower module and way it is misplaced.
    let mut found: BTreeMap<(String, &'static str), (usize, usize)> = BTreeMap::new();
    for (wi, w) in a.weights.iter().enumerate() {
        let n = &a.nodes[w.node];
        let how = if n.top_role.as_deref() == Some("mtp") {
            "as multi-token prediction"
        } else if n.per_image.is_none() {
            "as part of the token stream's per-token forward pass"
        } else {
            continue;
        };
        let Some(attr) = w.name.split('.').find(|seg| towers.contains_key(*seg)) else {
            continue;
        };
        found
            .entry((attr.to_string(), how))
            .and_modify(|e| e.1 += 1)
            .or_insert((wi, 1));
    }
    found
        .into_iter()
        .map(|((attr, how), (wi, n))| {
            let w = &a.weights[wi];
            let node = &a.nodes[w.node];
            Diagnostic::new(
                "semantic",
                TOWER,
                format!(
                    "`{}` (`{}`{}) lies under `{attr}`, the vision tower the source builds from the vision config (`{}`), but the spec evaluates it {how}: a vision tower is an encoder of an image input, run once per image over that image's patches, its features joining the token embeddings where the image's tokens are; it adds nothing to each decoded token's parameters, FLOPs or KV cache",
                    node.id,
                    w.name,
                    if n > 1 { format!(" and {} more weights", n - 1) } else { String::new() },
                    towers[&attr]
                ),
                node.loc.clone(),
            )
            .hint("declare the image under the model's `inputs:` (`pixel_values: { kind: image, ... }`), feed the tower's patch embedding from it, and join its output to the token embeddings with `masked_scatter`; give the tower no `role: mtp`")
        })
        .collect()
}
