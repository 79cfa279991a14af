//! `model.safetensors.index.json` parsing, and assembling one [`Inventory`] from the index and
//! every shard's header, with the cross-checks that catch a stale index or a missing shard.

use std::collections::{BTreeMap, BTreeSet};

use super::header::Header;
use super::{Inventory, TensorInfo};

/// The sharded checkpoint's index: which file holds which tensor.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Index {
    /// Tensor name → shard file name.
    pub weight_map: BTreeMap<String, String>,
    /// `metadata.total_size`: payload bytes of all tensors.
    pub total_size: Option<u64>,
}

impl Index {
    /// Shard file names, sorted, each once.
    pub fn shard_files(&self) -> Vec<String> {
        let set: BTreeSet<&String> = self.weight_map.values().collect();
        set.into_iter().cloned().collect()
    }

    /// Number of tensors the index assigns to each shard file.
    pub fn tensors_per_shard(&self) -> BTreeMap<&str, usize> {
        let mut counts = BTreeMap::new();
        for file in self.weight_map.values() {
            *counts.entry(file.as_str()).or_insert(0) += 1;
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
    weight_map: BTreeMap<String, String>,
}

#[derive(serde::Deserialize)]
struct TypedMetadata {
    #[serde(default)]
    total_size: Option<u64>,
}

pub fn parse_index(bytes: &[u8]) -> Result<Index, IndexError> {
    if let Ok(typed) = serde_json::from_slice::<TypedIndex>(bytes) {
        return Ok(Index {
            weight_map: typed.weight_map,
            total_size: typed.metadata.and_then(|m| m.total_size),
        });
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
    let weight_map = map
        .iter()
        .map(|(k, v)| match v.as_str() {
            Some(file) => Ok((k.clone(), file.to_string())),
            None => Err(IndexError::BadEntry { tensor: k.clone() }),
        })
        .collect::<Result<_, _>>()?;
    let total_size = match value.get("metadata").and_then(|m| m.get("total_size")) {
        None | Some(serde_json::Value::Null) => None,
        Some(v) => Some(
            v.as_u64()
                .ok_or_else(|| IndexError::BadTotalSize { got: v.to_string() })?,
        ),
    };
    Ok(Index {
        weight_map,
        total_size,
    })
}

/// Joins shard headers (file name, parsed header) into one inventory, checked against the index
/// when there is one. Every tensor records the shard that holds it.
pub fn assemble(
    index: Option<&Index>,
    shards: &[(String, Header)],
) -> Result<Inventory, InventoryError> {
    let mut owner: BTreeMap<&str, &str> = BTreeMap::new();
    let mut tensors: Vec<TensorInfo> = Vec::new();
    for (file, header) in shards {
        for t in &header.tensors {
            if let Some(first) = owner.insert(&t.info.name, file) {
                return Err(InventoryError::ClaimedTwice {
                    tensor: t.info.name.clone(),
                    first: first.to_string(),
                    second: file.clone(),
                });
            }
            let mut info = t.info.clone();
            info.shard = Some(file.clone());
            tensors.push(info);
        }
    }
    if let Some(index) = index {
        for (tensor, index_shard) in &index.weight_map {
            match owner.get(tensor.as_str()) {
                None => {
                    return Err(InventoryError::MissingFromShards {
                        tensor: tensor.clone(),
                        shard: index_shard.clone(),
                    });
                }
                Some(shard) if *shard != index_shard => {
                    return Err(InventoryError::WrongShard {
                        tensor: tensor.clone(),
                        index_shard: index_shard.clone(),
                        shard: shard.to_string(),
                    });
                }
                Some(_) => {}
            }
        }
        if owner.len() != index.weight_map.len()
            && let Some((tensor, shard)) = owner
                .iter()
                .find(|(name, _)| !index.weight_map.contains_key(**name))
        {
            return Err(InventoryError::NotInIndex {
                tensor: tensor.to_string(),
                shard: shard.to_string(),
            });
        }
    }
    tensors.sort_unstable_by(|a, b| a.name.cmp(&b.name));
    let inventory = Inventory {
        tensors,
        total_size: index.and_then(|i| i.total_size),
    };
    if let Some(declared) = inventory.total_size {
        let actual = inventory.total_bytes();
        if actual != declared as u128 {
            return Err(InventoryError::TotalSizeMismatch { declared, actual });
        }
    }
    Ok(inventory)
}

#[cfg(test)]
mod tests {
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

    #[test]
    fn assembles_and_records_placement() {
        let idx = index(
            r#"{"metadata":{"total_size":14},"weight_map":{"x":"a.safetensors","y":"b.safetensors"}}"#,
        );
        assert_eq!(idx.shard_files(), ["a.safetensors", "b.safetensors"]);
        let inv = assemble(Some(&idx), &two_shards()).unwrap();
        assert_eq!(inv.tensors.len(), 2);
        assert_eq!(inv.tensors[1].shard.as_deref(), Some("b.safetensors"));
        assert_eq!(inv.total_bytes(), 14);
    }

    #[test]
    fn disagreements_are_errors() {
        let shards = two_shards();
        let e = assemble(
            Some(&index(r#"{"weight_map":{"x":"a.safetensors"}}"#)),
            &shards,
        );
        assert!(matches!(e, Err(InventoryError::NotInIndex { tensor, .. }) if tensor == "y"));
        let e = assemble(
            Some(&index(
                r#"{"weight_map":{"x":"a.safetensors","y":"b.safetensors","z":"b.safetensors"}}"#,
            )),
            &shards,
        );
        assert!(
            matches!(e, Err(InventoryError::MissingFromShards { tensor, .. }) if tensor == "z")
        );
        let e = assemble(
            Some(&index(
                r#"{"weight_map":{"x":"b.safetensors","y":"b.safetensors"}}"#,
            )),
            &shards,
        );
        assert!(matches!(e, Err(InventoryError::WrongShard { .. })));
        let e = assemble(
            Some(&index(
                r#"{"metadata":{"total_size":15},"weight_map":{"x":"a.safetensors","y":"b.safetensors"}}"#,
            )),
            &shards,
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
            assemble(None, &dup),
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
