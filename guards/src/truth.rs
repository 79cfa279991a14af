//! Ground-truth types: config, tensor inventory, forward source.
//!
//! Parsers here take bytes and return values or located errors; they never panic on hostile
//! input (see the proptest suite).

use std::collections::BTreeMap;
use std::sync::Arc;

pub mod header;
pub mod index;
pub mod ranges;

/// Storage dtype of a safetensors tensor.
#[derive(
    Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, serde::Serialize, serde::Deserialize,
)]
#[allow(non_camel_case_types)]
pub enum Dtype {
    BOOL,
    U8,
    I8,
    F8_E4M3,
    F8_E5M2,
    F8_E8M0,
    I16,
    U16,
    F16,
    BF16,
    I32,
    U32,
    F32,
    I64,
    U64,
    F64,
}

impl Dtype {
    /// Size of one stored element in bytes.
    pub fn size_bytes(self) -> u64 {
        use Dtype::*;
        match self {
            BOOL | U8 | I8 | F8_E4M3 | F8_E5M2 | F8_E8M0 => 1,
            I16 | U16 | F16 | BF16 => 2,
            I32 | U32 | F32 => 4,
            I64 | U64 | F64 => 8,
        }
    }

    pub fn parse(s: &str) -> Option<Dtype> {
        use Dtype::*;
        Some(match s {
            "BOOL" => BOOL,
            "U8" => U8,
            "I8" => I8,
            "F8_E4M3" => F8_E4M3,
            "F8_E5M2" => F8_E5M2,
            "F8_E8M0" => F8_E8M0,
            "I16" => I16,
            "U16" => U16,
            "F16" => F16,
            "BF16" => BF16,
            "I32" => I32,
            "U32" => U32,
            "F32" => F32,
            "I64" => I64,
            "U64" => U64,
            "F64" => F64,
            _ => return None,
        })
    }

    pub fn as_str(self) -> &'static str {
        use Dtype::*;
        match self {
            BOOL => "BOOL",
            U8 => "U8",
            I8 => "I8",
            F8_E4M3 => "F8_E4M3",
            F8_E5M2 => "F8_E5M2",
            F8_E8M0 => "F8_E8M0",
            I16 => "I16",
            U16 => "U16",
            F16 => "F16",
            BF16 => "BF16",
            I32 => "I32",
            U32 => "U32",
            F32 => "F32",
            I64 => "I64",
            U64 => "U64",
            F64 => "F64",
        }
    }
}

impl std::fmt::Display for Dtype {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A tensor's dimensions, inline up to four (every tensor of the checkpoints we know): a 92k
/// tensor inventory then allocates nothing per shape.
pub type Shape = smallvec::SmallVec<[u64; 4]>;

/// One tensor of the checkpoint, as its safetensors header records it.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct TensorInfo {
    pub name: String,
    pub dtype: Dtype,
    pub shape: Shape,
    /// Shard file that holds it, when known (snapshots drop placement). Shared: 92k tensors
    /// live in 163 files.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub shard: Option<Arc<str>>,
}

impl TensorInfo {
    pub fn numel(&self) -> u128 {
        self.shape.iter().map(|&d| d as u128).product()
    }
    pub fn nbytes(&self) -> u128 {
        self.numel() * self.dtype.size_bytes() as u128
    }
}

/// Every tensor of a checkpoint, sorted by name.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Inventory {
    pub tensors: Vec<TensorInfo>,
    /// `metadata.total_size` of the index, when there is one.
    pub total_size: Option<u64>,
}

impl Inventory {
    pub fn total_bytes(&self) -> u128 {
        self.tensors.iter().map(TensorInfo::nbytes).sum()
    }
}

/// Everything external a spec is checked against.
#[derive(Clone, Debug, Default)]
pub struct Truth {
    /// The checkpoint's config.json.
    pub config: serde_json::Value,
    pub inventory: Inventory,
    /// Forward source files by file name (e.g. `modeling_llama.py`).
    pub sources: BTreeMap<String, String>,
    pub model_id: Option<String>,
    /// Commit sha the truth was fetched at, when known.
    pub revision: Option<String>,
}
