//! Bundled offline snapshots: config.json plus the range-compressed tensor inventory of every
//! library model, gzip-compressed JSON under `specs/snapshots/<org>__<name>.json.gz` and
//! embedded in the binary (see build.rs), so `show`, `validate` and re-validation run on a fresh
//! clone with no network. They carry no forward source (third-party code is not committed).

use std::io::{Read, Write};

use anyhow::{Context, bail};
use flate2::Compression;
use flate2::read::GzDecoder;
use flate2::write::GzEncoder;
use harch_guards::truth::{Inventory, Truth, ranges};

use crate::inventory_cache::{self, InventoryCache};
use serde::{Deserialize, Serialize};

include!(concat!(env!("OUT_DIR"), "/snapshots.rs"));

pub const FORMAT: &str = "harch-snapshot/1";

/// A snapshot decompresses to at most this: a hostile gzip bomb fails instead of eating memory.
const MAX_DECOMPRESSED: u64 = 64 << 20;

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Snapshot {
    pub format: String,
    pub model_id: String,
    /// Commit sha of the truth it was made from, when known.
    #[serde(default)]
    pub revision: Option<String>,
    pub config: serde_json::Value,
    /// The index's `metadata.total_size`, when the checkpoint has an index.
    #[serde(default)]
    pub total_size: Option<u64>,
    /// Recorded so decoding can prove the expansion reproduced the inventory.
    pub tensor_count: usize,
    pub total_bytes: u64,
    /// Range-compressed tensor lines (see `harch_guards::truth::ranges`).
    pub inventory: Vec<String>,
}

/// Model ids of the bundled snapshots, sorted.
pub fn snapshot_ids() -> Vec<&'static str> {
    BUNDLED.iter().map(|(id, _)| *id).collect()
}

/// The bundled snapshot of `model_id` as a [`Truth`] (no sources), if one is bundled.
pub fn load_snapshot(model_id: &str) -> Option<Truth> {
    try_load_snapshot(model_id).ok().flatten()
}

/// Like [`load_snapshot`], but says why a bundled snapshot could not be read.
pub fn try_load_snapshot(model_id: &str) -> anyhow::Result<Option<Truth>> {
    try_load_snapshot_cached(model_id, None)
}

/// [`try_load_snapshot`], taking the expanded inventory from `cache` when these lines were
/// expanded and checked before (DeepSeek-V3's 43 lines are 91,991 tensors).
pub fn try_load_snapshot_cached(
    model_id: &str,
    cache: Option<&InventoryCache>,
) -> anyhow::Result<Option<Truth>> {
    let Some(snap) = bundled(model_id)? else {
        return Ok(None);
    };
    let key = cache.and_then(|_| {
        let recorded = format!(
            "{:?} {:?} {} {}",
            snap.inventory, snap.total_size, snap.tensor_count, snap.total_bytes
        );
        inventory_cache::key([("snapshot", inventory_cache::digest(recorded.as_bytes()))])
    });
    if let (Some(cache), Some(key)) = (cache, &key)
        && let Some(inventory) = cache.get(key)
    {
        return Ok(Some(truth_of(&snap, inventory)));
    }
    let truth = to_truth(&snap)?;
    if let (Some(cache), Some(key)) = (cache, &key)
        && let Err(e) = cache.put(key, &truth.inventory)
    {
        tracing::debug!("keeping the inventory of the {model_id} snapshot: {e}");
    }
    Ok(Some(truth))
}

/// The bundled snapshot of `model_id`, decoded but not expanded.
fn bundled(model_id: &str) -> anyhow::Result<Option<Snapshot>> {
    let Some((_, bytes)) = BUNDLED.iter().find(|(id, _)| *id == model_id) else {
        return Ok(None);
    };
    decode(bytes)
        .with_context(|| format!("bundled snapshot of {model_id}"))
        .map(Some)
}

/// The config.json of the bundled snapshot of `model_id`, without expanding its inventory
/// (identity checks need only the architectures; expanding DeepSeek-V3's 91,991 tensors costs
/// most of a validate).
pub fn snapshot_config(model_id: &str) -> anyhow::Result<Option<serde_json::Value>> {
    Ok(bundled(model_id)?.map(|snap| snap.config))
}

/// Builds a snapshot from a truth (drops shard placement and sources).
pub fn from_truth(model_id: &str, truth: &Truth) -> anyhow::Result<Snapshot> {
    let total = truth.inventory.total_bytes();
    Ok(Snapshot {
        format: FORMAT.into(),
        model_id: model_id.into(),
        revision: truth.revision.clone(),
        config: truth.config.clone(),
        total_size: truth.inventory.total_size,
        tensor_count: truth.inventory.len(),
        total_bytes: u64::try_from(total).context("checkpoint over 2^64 bytes")?,
        inventory: ranges::compress(truth.inventory.iter())
            .lines()
            .map(str::to_string)
            .collect(),
    })
}

pub fn encode(snap: &Snapshot) -> anyhow::Result<Vec<u8>> {
    let json = serde_json::to_vec(snap)?;
    let mut enc = GzEncoder::new(Vec::new(), Compression::best());
    enc.write_all(&json)?;
    Ok(enc.finish()?)
}

pub fn decode(gz: &[u8]) -> anyhow::Result<Snapshot> {
    let mut json = Vec::new();
    GzDecoder::new(gz)
        .take(MAX_DECOMPRESSED + 1)
        .read_to_end(&mut json)
        .context("not valid gzip")?;
    if json.len() as u64 > MAX_DECOMPRESSED {
        bail!("decompresses to more than {MAX_DECOMPRESSED} bytes");
    }
    let snap: Snapshot = serde_json::from_slice(&json).context("not a snapshot JSON document")?;
    if snap.format != FORMAT {
        bail!("format `{}`, expected `{FORMAT}`", snap.format);
    }
    Ok(snap)
}

/// Expands a snapshot, checking it reproduces the tensor count and bytes it records.
pub fn to_truth(snap: &Snapshot) -> anyhow::Result<Truth> {
    let mut inventory = ranges::expand(&snap.inventory.join("\n"))?;
    inventory.total_size = snap.total_size;
    if inventory.len() != snap.tensor_count {
        bail!(
            "inventory expands to {} tensors, snapshot records {}",
            inventory.len(),
            snap.tensor_count
        );
    }
    if inventory.total_bytes() != snap.total_bytes as u128 {
        bail!(
            "inventory holds {} bytes, snapshot records {}",
            inventory.total_bytes(),
            snap.total_bytes
        );
    }
    if let Some(declared) = snap.total_size
        && declared != snap.total_bytes
    {
        bail!(
            "index total_size {declared} differs from the tensors' {} bytes",
            snap.total_bytes
        );
    }
    Ok(truth_of(snap, inventory))
}

fn truth_of(snap: &Snapshot, inventory: Inventory) -> Truth {
    Truth {
        config: snap.config.clone(),
        inventory,
        sources: Default::default(),
        model_id: Some(snap.model_id.clone()),
        revision: snap.revision.clone(),
    }
}
