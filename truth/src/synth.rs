//! Synthetic shard placement: write a bundled snapshot (which keeps no shard placement) as a
//! sharded truth directory with real safetensors headers, for benchmarks and tests that need the
//! on-disk layout of a large checkpoint.

use std::path::Path;

use anyhow::Context;
use harch_guards::truth::{Tensor, Truth};

/// Layer number used to keep a layer's tensors together (embeddings first, heads last).
fn layer_of(name: &str) -> u64 {
    name.strip_prefix("model.layers.")
        .and_then(|r| r.split('.').next())
        .and_then(|n| n.parse::<u64>().ok())
        .map_or(
            if name.starts_with("model.embed") {
                0
            } else {
                u64::MAX
            },
            |l| l + 1,
        )
}

/// Place tensors in layer order into `shards` files of about equal bytes. Returns
/// `(file name, header JSON, payload bytes)` per shard and the index JSON.
pub fn shard(truth: &Truth, shards: usize) -> (Vec<(String, String, u64)>, serde_json::Value) {
    let shards = shards.max(1);
    let mut tensors: Vec<Tensor> = truth.inventory.iter().collect();
    tensors.sort_by_key(|t| (layer_of(t.name), t.name));
    let total: u128 = tensors.iter().map(|t| t.nbytes()).sum();
    let per_shard = total.div_ceil(shards as u128).max(1);
    let mut groups: Vec<Vec<Tensor>> = vec![Vec::new(); shards];
    let mut acc: u128 = 0;
    for t in tensors {
        let i = ((acc / per_shard) as usize).min(shards - 1);
        groups[i].push(t);
        acc += t.nbytes();
    }
    let mut files = Vec::new();
    let mut weight_map = serde_json::Map::new();
    for (i, group) in groups.iter().enumerate() {
        // Six digits for the total, as DeepSeek-V3 names its shards (`model-00001-of-000163`).
        let file = format!("model-{:05}-of-{shards:06}.safetensors", i + 1);
        let mut header = serde_json::Map::new();
        header.insert("__metadata__".into(), serde_json::json!({"format": "pt"}));
        let mut offset: u64 = 0;
        for t in group {
            let n = t.nbytes() as u64;
            header.insert(t.name.to_string(), serde_json::json!({"dtype": t.dtype.as_str(), "shape": t.shape, "data_offsets": [offset, offset + n]}));
            offset += n;
            weight_map.insert(t.name.to_string(), file.clone().into());
        }
        files.push((file, serde_json::Value::Object(header).to_string(), offset));
    }
    let index =
        serde_json::json!({"metadata": {"total_size": total as u64}, "weight_map": weight_map});
    (files, index)
}

/// Write `truth` as a truth directory with `shards` header files (`shards/<file>.header.json`).
pub fn write_sharded_truth_dir(truth: &Truth, shards: usize, out: &Path) -> anyhow::Result<()> {
    let (files, index) = shard(truth, shards);
    std::fs::create_dir_all(out.join("shards"))
        .with_context(|| format!("creating {}", out.display()))?;
    std::fs::write(
        out.join("config.json"),
        serde_json::to_vec_pretty(&truth.config)?,
    )?;
    std::fs::write(
        out.join("model.safetensors.index.json"),
        serde_json::to_vec_pretty(&index)?,
    )?;
    for (file, header, _) in files {
        std::fs::write(
            out.join("shards").join(format!("{file}.header.json")),
            header,
        )?;
    }
    if !truth.sources.is_empty() {
        std::fs::create_dir_all(out.join("source"))?;
        for (name, text) in &truth.sources {
            std::fs::write(out.join("source").join(name), text)?;
        }
    }
    Ok(())
}
