//! `model.safetensors.index.json` parsing, and assembling one [`Inventory`] from the index and
//! every shard's header, with the cross-checks that catch a stale index or a missing shard.

use std::borrow::Cow;
use std::collections::BTreeMap;

use rustc_hash::FxHashMap;
use serde::de::{Deserializer, MapAccess, Visitor};

use super::header::Header;
use super::{Inventory, Shape, Tensor};

/// The sharded checkpoint's index: which file holds which tensor.
///
/// Names live back to back in one string and entries are kept sorted by name: a 163-shard
/// index names 92k tensors, and checking it against the headers (sorted by name too) is then
/// one walk in step, with no allocation or hash per name. Shard names are interned.
#[derive(Clone, Debug)]
pub struct Index {
    /// Every tensor name, back to back.
    names: String,
    /// `(start, end)` of a name in `names`, and its file's position in `files`; sorted by name,
    /// each name once. A name written twice keeps its last file, as every JSON reader of this
    /// file does.
    entries: Vec<(usize, usize, u32)>,
    /// Shard file names, each once, in order of first mention.
    files: Vec<String>,
    /// `metadata.total_size`: payload bytes of all tensors.
    pub total_size: Option<u64>,
}

impl PartialEq for Index {
    fn eq(&self, other: &Index) -> bool {
        self.total_size == other.total_size && self.iter().eq(other.iter())
    }
}

impl Eq for Index {}

impl Index {
    /// Number of tensors the index names.
    pub fn len(&self) -> usize {
        self.entries.len()
    }

    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    fn name(&self, e: &(usize, usize, u32)) -> &str {
        &self.names[e.0..e.1]
    }

    /// `(tensor, shard file)` pairs in tensor name order.
    pub fn iter(&self) -> impl Iterator<Item = (&str, &str)> {
        self.entries
            .iter()
            .map(|e| (self.name(e), self.files[e.2 as usize].as_str()))
    }

    /// The shard file the index puts `tensor` in.
    pub fn shard_of(&self, tensor: &str) -> Option<&str> {
        let i = self
            .entries
            .binary_search_by(|e| self.name(e).cmp(tensor))
            .ok()?;
        Some(self.files[self.entries[i].2 as usize].as_str())
    }

    /// Shard file names, sorted, each once.
    pub fn shard_files(&self) -> Vec<String> {
        let mut used = vec![false; self.files.len()];
        for e in &self.entries {
            used[e.2 as usize] = true;
        }
        let mut files: Vec<String> = self
            .files
            .iter()
            .zip(used)
            .filter(|(_, u)| *u)
            .map(|(f, _)| f.clone())
            .collect();
        files.sort();
        files
    }

    /// Number of tensors the index assigns to each shard file.
    pub fn tensors_per_shard(&self) -> BTreeMap<&str, usize> {
        let mut counts = BTreeMap::new();
        for (_, file) in self.iter() {
            *counts.entry(file).or_insert(0) += 1;
        }
        counts
    }
}

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum IndexError {
    #[error("index is not valid JSON at line {line}, column {column}: {message}")]
    InvalidJson {
        line: usize,
        column: usize,
        message: String,
    },
    #[error("index has no `weight_map` object")]
    NoWeightMap,
    #[error("index `weight_map` entry `{tensor}` must name a shard file (a string)")]
    BadEntry { tensor: String },
    #[error("index `metadata.total_size` must be a non-negative integer, got {got}")]
    BadTotalSize { got: String },
}

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum InventoryError {
    #[error("tensor `{tensor}` is in both `{first}` and `{second}`")]
    ClaimedTwice {
        tensor: String,
        first: String,
        second: String,
    },
    #[error("index puts `{tensor}` in `{shard}`, but no shard header holds it")]
    MissingFromShards { tensor: String, shard: String },
    #[error("index puts `{tensor}` in `{index_shard}`, but it is in `{shard}`")]
    WrongShard {
        tensor: String,
        index_shard: String,
        shard: String,
    },
    #[error("shard `{shard}` holds `{tensor}`, which the index does not list")]
    NotInIndex { tensor: String, shard: String },
    #[error(
        "index metadata.total_size is {declared} but the shard headers hold {actual} payload bytes"
    )]
    TotalSizeMismatch { declared: u64, actual: u128 },
}

/// The common, well-formed case, parsed without building a JSON tree (a 163-shard index is
/// 9 MB); anything it rejects is parsed again by the checking path for a precise error.
#[derive(serde::Deserialize)]
struct TypedIndex {
    #[serde(default)]
    metadata: Option<TypedMetadata>,
    weight_map: WeightMap,
}

#[derive(serde::Deserialize)]
struct TypedMetadata {
    #[serde(default)]
    total_size: Option<u64>,
}

#[derive(Default)]
struct WeightMap {
    names: String,
    entries: Vec<(usize, usize, u32)>,
    files: Vec<String>,
    file_ids: FxHashMap<String, u32>,
    last: u32,
}

impl WeightMap {
    fn insert(&mut self, tensor: &str, file: &str) {
        // Runs of tensors share a shard: try the last file before hashing the name.
        let same = self
            .files
            .get(self.last as usize)
            .is_some_and(|f| f == file);
        if !same {
            self.last = match self.file_ids.get(file) {
                Some(&id) => id,
                None => {
                    self.files.push(file.to_string());
                    let id = (self.files.len() - 1) as u32;
                    self.file_ids.insert(file.to_string(), id);
                    id
                }
            };
        }
        let start = self.names.len();
        self.names.push_str(tensor);
        self.entries.push((start, self.names.len(), self.last));
    }

    fn finish(mut self, total_size: Option<u64>) -> Index {
        let names = &self.names;
        // Every index `save_pretrained` writes is in name order already.
        let sorted = self
            .entries
            .windows(2)
            .all(|w| names[w[0].0..w[0].1] < names[w[1].0..w[1].1]);
        if !sorted {
            // Stable, so that of a name written twice the last mention stays last.
            self.entries
                .sort_by(|x, y| names[x.0..x.1].cmp(&names[y.0..y.1]));
            let mut kept: Vec<(usize, usize, u32)> = Vec::with_capacity(self.entries.len());
            for e in self.entries {
                match kept.last_mut() {
                    Some(k) if names[k.0..k.1] == names[e.0..e.1] => *k = e,
                    _ => kept.push(e),
                }
            }
            self.entries = kept;
        }
        Index {
            names: self.names,
            entries: self.entries,
            files: self.files,
            total_size,
        }
    }
}

/// A JSON string borrowed from the input when it has no escapes (serde's own `Cow<str>`
/// always copies): the index's 92k names cost no allocation each.
struct Text<'de>(Cow<'de, str>);

impl<'de> serde::Deserialize<'de> for Text<'de> {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl<'de> Visitor<'de> for V {
            type Value = Text<'de>;
            fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
                f.write_str("a string")
            }
            fn visit_borrowed_str<E: serde::de::Error>(self, v: &'de str) -> Result<Text<'de>, E> {
                Ok(Text(Cow::Borrowed(v)))
            }
            fn visit_str<E: serde::de::Error>(self, v: &str) -> Result<Text<'de>, E> {
                Ok(Text(Cow::Owned(v.to_string())))
            }
            fn visit_string<E: serde::de::Error>(self, v: String) -> Result<Text<'de>, E> {
                Ok(Text(Cow::Owned(v)))
            }
        }
        d.deserialize_str(V)
    }
}

impl<'de> serde::Deserialize<'de> for WeightMap {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl<'de> Visitor<'de> for V {
            type Value = WeightMap;
            fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
                f.write_str("an object mapping tensor names to shard files")
            }
            fn visit_map<A: MapAccess<'de>>(self, mut m: A) -> Result<WeightMap, A::Error> {
                let mut out = WeightMap::default();
                out.entries.reserve(m.size_hint().unwrap_or(0));
                while let Some(Text(tensor)) = m.next_key::<Text<'de>>()? {
                    let Text(file) = m.next_value()?;
                    out.insert(&tensor, &file);
                }
                Ok(out)
            }
        }
        d.deserialize_map(V)
    }
}

pub fn parse_index(bytes: &[u8]) -> Result<Index, IndexError> {
    if let Ok(typed) = serde_json::from_slice::<TypedIndex>(bytes) {
        return Ok(typed
            .weight_map
            .finish(typed.metadata.and_then(|m| m.total_size)));
    }
    let value: serde_json::Value =
        serde_json::from_slice(bytes).map_err(|e| IndexError::InvalidJson {
            line: e.line(),
            column: e.column(),
            message: e.to_string(),
        })?;
    let Some(map) = value.get("weight_map").and_then(|m| m.as_object()) else {
        return Err(IndexError::NoWeightMap);
    };
    let mut weight_map = WeightMap::default();
    for (k, v) in map {
        match v.as_str() {
            Some(file) => weight_map.insert(k, file),
            None => return Err(IndexError::BadEntry { tensor: k.clone() }),
        }
    }
    let total_size = match value.get("metadata").and_then(|m| m.get("total_size")) {
        None | Some(serde_json::Value::Null) => None,
        Some(v) => Some(
            v.as_u64()
                .ok_or_else(|| IndexError::BadTotalSize { got: v.to_string() })?,
        ),
    };
    Ok(weight_map.finish(total_size))
}

/// Joins shard headers (file name, parsed header) into one inventory, checked against the index
/// when there is one. Every tensor records the shard that holds it.
pub fn assemble(
    index: Option<Index>,
    shards: Vec<(String, Header)>,
) -> Result<Inventory, InventoryError> {
    // Each header's tensors fill its payload exactly (checked when it was parsed): the
    // payloads' sum is the tensors' bytes, without reading 92k shapes.
    let actual: u128 = shards.iter().map(|(_, h)| h.payload_len() as u128).sum();
    let total_size = index.as_ref().and_then(|i| i.total_size);
    let inventory = match index {
        Some(index) => {
            let at = shard_positions(&index, &shards);
            if agrees(&index, &at, &shards) {
                in_index_order(index, &at, &shards)
            } else {
                checked(Some(&index), &shards)?
            }
        }
        None => checked(None, &shards)?,
    };
    if let Some(declared) = total_size
        && actual != declared as u128
    {
        return Err(InventoryError::TotalSizeMismatch { declared, actual });
    }
    Ok(inventory)
}

/// Each shard's position in `shards`, by the index's file id.
fn shard_positions(index: &Index, shards: &[(String, Header)]) -> Vec<Option<usize>> {
    let by_name: FxHashMap<&str, usize> = shards
        .iter()
        .enumerate()
        .map(|(k, (file, _))| (file.as_str(), k))
        .collect();
    index
        .files
        .iter()
        .map(|f| by_name.get(f.as_str()).copied())
        .collect()
}

/// Whether the index and the headers name the same tensors in the same files. Both are in name
/// order (the index's entries, each header's tensors), so one walk in step over the index,
/// with a cursor per shard, checks it without a sort or a hash per name.
fn agrees(index: &Index, at: &[Option<usize>], shards: &[(String, Header)]) -> bool {
    let total: usize = shards.iter().map(|(_, h)| h.len()).sum();
    if total != index.len() {
        return false;
    }
    let mut cursor = vec![0usize; shards.len()];
    index.entries.iter().all(|e| {
        let Some(s) = at[e.2 as usize] else {
            return false;
        };
        let next = shards[s].1.get(cursor[s]);
        cursor[s] += 1;
        next.is_some_and(|t| t.name == index.name(e))
    })
}

/// The tensors of shards that [`agrees`] with the index, in the index's (name) order. The
/// index's names and files become the inventory's: nothing is copied per name.
fn in_index_order(index: Index, at: &[Option<usize>], shards: &[(String, Header)]) -> Inventory {
    let files = index
        .files
        .into_iter()
        .map(String::into_boxed_str)
        .collect();
    let mut inventory = Inventory::from_parts(index.names, files, index.total_size);
    inventory.reserve(index.entries.len());
    let mut cursor = vec![0usize; shards.len()];
    for &(start, end, file) in &index.entries {
        let Some(s) = at[file as usize] else { continue };
        if let Some(t) = shards[s].1.get(cursor[s]) {
            inventory.push_span(
                (start, end),
                t.dtype,
                Shape::from_slice(t.shape),
                Some(file),
            );
        }
        cursor[s] += 1;
    }
    inventory
}

/// Tensors of every shard in name order, checked against the index when there is one: the
/// path that says how they disagree. When one check fails, the error reported is the first in
/// name order, so the same bad checkpoint always gets the same message.
fn checked(
    index: Option<&Index>,
    shards: &[(String, Header)],
) -> Result<Inventory, InventoryError> {
    let mut inventory = Inventory::from_parts(
        String::new(),
        shards
            .iter()
            .map(|(file, _)| file.as_str().into())
            .collect(),
        index.and_then(|i| i.total_size),
    );
    inventory.reserve(shards.iter().map(|(_, h)| h.len()).sum());
    for (k, (_, header)) in shards.iter().enumerate() {
        for t in header.tensors() {
            inventory.push(t.name, t.dtype, Shape::from_slice(t.shape), Some(k as u32));
        }
    }
    // Stable: each shard's tensors are sorted already, and the sort merges such runs cheaply;
    // equal names stay in shard order for the error below.
    inventory.sort_by_name();
    if let Some(i) = inventory.repeated()
        && let (Some(a), Some(b)) = (inventory.get(i), inventory.get(i + 1))
    {
        return Err(InventoryError::ClaimedTwice {
            tensor: a.name.to_string(),
            first: shard_name(&a),
            second: shard_name(&b),
        });
    }
    if let Some(index) = index
        && let Some(e) = first_disagreement(index, &inventory)
    {
        return Err(e);
    }
    Ok(inventory)
}

/// The file holding `t`, for an error message.
fn shard_name(t: &Tensor) -> String {
    t.shard.unwrap_or_default().to_string()
}

/// The first way (in tensor name order) that the index and the headers (sorted by name, each
/// name once) disagree, if they do.
fn first_disagreement(index: &Index, inventory: &Inventory) -> Option<InventoryError> {
    for (tensor, index_shard) in index.iter() {
        match inventory.find(tensor) {
            None => {
                return Some(InventoryError::MissingFromShards {
                    tensor: tensor.to_string(),
                    shard: index_shard.to_string(),
                });
            }
            Some(t) if t.shard != Some(index_shard) => {
                return Some(InventoryError::WrongShard {
                    tensor: tensor.to_string(),
                    index_shard: index_shard.to_string(),
                    shard: shard_name(&t),
                });
            }
            Some(_) => {}
        }
    }
    let t = inventory
        .iter()
        .find(|t| index.shard_of(t.name).is_none())?;
    Some(InventoryError::NotInIndex {
        tensor: t.name.to_string(),
        shard: shard_name(&t),
    })
}

#[cfg(test)]
mod tests {
    use super::super::Dtype;
    use super::super::header::parse_json;
    use super::*;

    fn shard(json: &str) -> Header {
        parse_json(json.as_bytes(), None).unwrap()
    }

    fn index(json: &str) -> Index {
        parse_index(json.as_bytes()).unwrap()
    }

    fn two_shards() -> Vec<(String, Header)> {
        vec![
            (
                "a.safetensors".into(),
                shard(r#"{"x":{"dtype":"F32","shape":[2],"data_offsets":[0,8]}}"#),
            ),
            (
                "b.safetensors".into(),
                shard(r#"{"y":{"dtype":"BF16","shape":[3],"data_offsets":[0,6]}}"#),
            ),
        ]
    }

    /// Names out of order, a name written twice (the last file wins, as for every JSON
    /// reader) and an escaped name: the index reads as the map it stands for, sorted.
    #[test]
    fn unsorted_repeated_and_escaped_names() {
        let idx = index(
            r#"{"weight_map": {"z": "b.safetensors", "a\u0041": "a.safetensors", "m": "a.safetensors", "z": "c.safetensors"}}"#,
        );
        assert_eq!(
            idx.iter().collect::<Vec<_>>(),
            [
                ("aA", "a.safetensors"),
                ("m", "a.safetensors"),
                ("z", "c.safetensors")
            ]
        );
        assert_eq!(idx.len(), 3);
        assert_eq!(idx.shard_of("z"), Some("c.safetensors"));
        assert_eq!(idx.shard_of("aA"), Some("a.safetensors"));
        assert_eq!(idx.shard_of("b"), None);
        assert_eq!(idx.shard_files(), ["a.safetensors", "c.safetensors"]);
        let sorted = index(
            r#"{"weight_map": {"aA": "a.safetensors", "m": "a.safetensors", "z": "c.safetensors"}}"#,
        );
        assert_eq!(idx, sorted);
    }

    #[test]
    fn assembles_and_records_placement() {
        let idx = index(
            r#"{"metadata":{"total_size":14},"weight_map":{"x":"a.safetensors","y":"b.safetensors"}}"#,
        );
        assert_eq!(idx.shard_files(), ["a.safetensors", "b.safetensors"]);
        let inv = assemble(Some(idx), two_shards()).unwrap();
        assert_eq!(inv.len(), 2);
        assert_eq!(inv.get(1).unwrap().shard, Some("b.safetensors"));
        assert_eq!(inv.total_bytes(), 14);
    }

    /// The index's names become the inventory's when it agrees with the headers, even when
    /// the index was out of order and named a tensor twice: the result is what the checking
    /// path builds from the headers alone.
    #[test]
    fn agreeing_index_gives_the_checked_inventory() {
        let idx = index(
            r#"{"weight_map":{"y":"a.safetensors","x":"b.safetensors","y":"b.safetensors","x":"a.safetensors","w":"a.safetensors"}}"#,
        );
        let shards = vec![
            (
                "a.safetensors".to_string(),
                shard(
                    r#"{"x":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},"w":{"dtype":"U8","shape":[1,3],"data_offsets":[8,11]}}"#,
                ),
            ),
            (
                "b.safetensors".to_string(),
                shard(r#"{"y":{"dtype":"BF16","shape":[3],"data_offsets":[0,6]}}"#),
            ),
        ];
        let at = shard_positions(&idx, &shards);
        assert!(agrees(&idx, &at, &shards));
        let fast = assemble(Some(idx.clone()), shards.clone()).unwrap();
        let slow = checked(Some(&idx), &shards).unwrap();
        assert_eq!(fast, slow);
        let names: Vec<(&str, Option<&str>, &[u64])> =
            fast.iter().map(|t| (t.name, t.shard, t.shape)).collect();
        assert_eq!(
            names,
            [
                ("w", Some("a.safetensors"), &[1u64, 3][..]),
                ("x", Some("a.safetensors"), &[2][..]),
                ("y", Some("b.safetensors"), &[3][..]),
            ]
        );
        assert_eq!(fast.find("x").map(|t| t.dtype), Some(Dtype::F32));
        assert_eq!(fast.find("v"), None);
    }

    #[test]
    fn disagreements_are_errors() {
        let shards = two_shards();
        let e = assemble(
            Some(index(r#"{"weight_map":{"x":"a.safetensors"}}"#)),
            shards.clone(),
        );
        assert!(matches!(e, Err(InventoryError::NotInIndex { tensor, .. }) if tensor == "y"));
        let e = assemble(
            Some(index(
                r#"{"weight_map":{"x":"a.safetensors","y":"b.safetensors","z":"b.safetensors"}}"#,
            )),
            shards.clone(),
        );
        assert!(
            matches!(e, Err(InventoryError::MissingFromShards { tensor, .. }) if tensor == "z")
        );
        let e = assemble(
            Some(index(
                r#"{"weight_map":{"x":"b.safetensors","y":"b.safetensors"}}"#,
            )),
            shards.clone(),
        );
        assert!(matches!(e, Err(InventoryError::WrongShard { .. })));
        let e = assemble(
            Some(index(
                r#"{"metadata":{"total_size":15},"weight_map":{"x":"a.safetensors","y":"b.safetensors"}}"#,
            )),
            shards.clone(),
        );
        assert!(matches!(
            e,
            Err(InventoryError::TotalSizeMismatch {
                declared: 15,
                actual: 14
            })
        ));
        let mut dup = shards.clone();
        dup[1].1 = shard(r#"{"x":{"dtype":"F32","shape":[2],"data_offsets":[0,8]}}"#);
        assert!(matches!(
            assemble(None, dup),
            Err(InventoryError::ClaimedTwice { .. })
        ));
    }

    #[test]
    fn index_errors() {
        assert!(matches!(
            parse_index(b"{"),
            Err(IndexError::InvalidJson { .. })
        ));
        assert_eq!(parse_index(b"{}"), Err(IndexError::NoWeightMap));
        assert!(matches!(
            parse_index(br#"{"weight_map":{"x":1}}"#),
            Err(IndexError::BadEntry { .. })
        ));
        assert!(matches!(
            parse_index(br#"{"metadata":{"total_size":-1},"weight_map":{}}"#),
            Err(IndexError::BadTotalSize { .. })
        ));
    }
}
