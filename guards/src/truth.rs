//! Ground-truth types: config, tensor inventory, forward source.
//!
//! Parsers here take bytes and return values or located errors; they never panic on hostile
//! input (see the proptest suite).

use std::collections::BTreeMap;
use std::sync::Arc;

pub mod header;
pub mod index;
pub mod packed;
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

/// One tensor, owned: what tests, generators and reports build an [`Inventory`] from.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct TensorInfo {
    pub name: String,
    pub dtype: Dtype,
    pub shape: Shape,
    /// Shard file that holds it, when known (snapshots drop placement).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub shard: Option<Arc<str>>,
}

impl TensorInfo {
    pub fn as_tensor(&self) -> Tensor<'_> {
        Tensor {
            name: &self.name,
            dtype: self.dtype,
            shape: &self.shape,
            shard: self.shard.as_deref(),
        }
    }
    pub fn numel(&self) -> u128 {
        self.as_tensor().numel()
    }
    pub fn nbytes(&self) -> u128 {
        self.as_tensor().nbytes()
    }
}

/// One tensor of an [`Inventory`], borrowed from it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Tensor<'a> {
    pub name: &'a str,
    pub dtype: Dtype,
    pub shape: &'a [u64],
    /// Shard file that holds it, when known (snapshots drop placement).
    pub shard: Option<&'a str>,
}

impl Tensor<'_> {
    pub fn numel(&self) -> u128 {
        self.shape.iter().map(|&d| d as u128).product()
    }
    pub fn nbytes(&self) -> u128 {
        self.numel() * self.dtype.size_bytes() as u128
    }
    pub fn to_info(&self) -> TensorInfo {
        TensorInfo {
            name: self.name.to_string(),
            dtype: self.dtype,
            shape: Shape::from_slice(self.shape),
            shard: self.shard.map(Arc::from),
        }
    }
}

/// Every tensor of a checkpoint, sorted by name, each name once.
///
/// Names live back to back in one string, shard files once each: DeepSeek-V3 has 92k tensors
/// in 163 files, and an allocation per name was a third of what reading them cost.
#[derive(Clone, Debug, Default)]
pub struct Inventory {
    names: String,
    entries: Vec<Entry>,
    shards: Vec<Box<str>>,
    /// `metadata.total_size` of the index, when there is one.
    pub total_size: Option<u64>,
}

#[derive(Clone, Debug)]
struct Entry {
    /// `names[start..end]`.
    start: usize,
    end: usize,
    /// Position in `shards`, or [`NO_SHARD`].
    shard: u32,
    dtype: Dtype,
    shape: Shape,
}

const NO_SHARD: u32 = u32::MAX;

impl Entry {
    fn name<'a>(&self, names: &'a str) -> &'a str {
        &names[self.start..self.end]
    }
}

impl PartialEq for Inventory {
    fn eq(&self, other: &Inventory) -> bool {
        self.total_size == other.total_size && self.iter().eq(other.iter())
    }
}

impl Eq for Inventory {}

impl Inventory {
    /// The inventory of `tensors`, put in name order (a stable sort: of a name given twice,
    /// both stay, in the order given).
    pub fn from_tensors(
        tensors: impl IntoIterator<Item = TensorInfo>,
        total_size: Option<u64>,
    ) -> Inventory {
        let mut inventory = Inventory {
            total_size,
            ..Inventory::default()
        };
        let mut shards = rustc_hash::FxHashMap::default();
        for t in tensors {
            let shard = t
                .shard
                .as_deref()
                .map(|s| inventory.shard_id(&mut shards, s));
            inventory.push(&t.name, t.dtype, t.shape, shard);
        }
        inventory.sort_by_name();
        inventory
    }

    /// An inventory over `names` (taken whole): each entry names `names[start..end]`, already
    /// in name order; `shards` are the files the entries' shard ids point at.
    pub(crate) fn from_parts(
        names: String,
        shards: Vec<Box<str>>,
        total_size: Option<u64>,
    ) -> Inventory {
        Inventory {
            names,
            entries: Vec::new(),
            shards,
            total_size,
        }
    }

    /// Appends a tensor whose name is `names[start..end]` of the string given to
    /// [`Inventory::from_parts`].
    pub(crate) fn push_span(
        &mut self,
        (start, end): (usize, usize),
        dtype: Dtype,
        shape: Shape,
        shard: Option<u32>,
    ) {
        self.entries.push(Entry {
            start,
            end,
            shard: shard.unwrap_or(NO_SHARD),
            dtype,
            shape,
        });
    }

    /// Appends a tensor; the caller puts the whole in name order ([`Inventory::sort_by_name`]).
    pub(crate) fn push(&mut self, name: &str, dtype: Dtype, shape: Shape, shard: Option<u32>) {
        let start = self.names.len();
        self.names.push_str(name);
        self.push_span((start, self.names.len()), dtype, shape, shard);
    }

    /// The id of shard file `file`, added when new.
    fn shard_id(&mut self, ids: &mut rustc_hash::FxHashMap<Box<str>, u32>, file: &str) -> u32 {
        if let Some(&id) = ids.get(file) {
            return id;
        }
        let id = self.shards.len() as u32;
        self.shards.push(file.into());
        ids.insert(file.into(), id);
        id
    }

    pub(crate) fn reserve(&mut self, tensors: usize) {
        self.entries.reserve(tensors);
    }

    /// Stable: entries of one name keep their order.
    pub(crate) fn sort_by_name(&mut self) {
        let names = &self.names;
        if !self
            .entries
            .is_sorted_by(|a, b| a.name(names) <= b.name(names))
        {
            self.entries
                .sort_by(|a, b| a.name(names).cmp(b.name(names)));
        }
    }

    /// Position of the first of two tensors with one name (in an inventory sorted by name).
    pub(crate) fn repeated(&self) -> Option<usize> {
        self.entries
            .windows(2)
            .position(|w| w[0].name(&self.names) == w[1].name(&self.names))
    }

    pub fn len(&self) -> usize {
        self.entries.len()
    }

    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    fn view<'a>(&'a self, e: &'a Entry) -> Tensor<'a> {
        Tensor {
            name: e.name(&self.names),
            dtype: e.dtype,
            shape: &e.shape,
            shard: self.shards.get(e.shard as usize).map(|s| &**s),
        }
    }

    /// The tensor at position `i` in name order.
    pub fn get(&self, i: usize) -> Option<Tensor<'_>> {
        self.entries.get(i).map(|e| self.view(e))
    }

    /// Tensors in name order.
    pub fn iter(&self) -> impl ExactSizeIterator<Item = Tensor<'_>> + DoubleEndedIterator + Clone {
        self.entries.iter().map(|e| self.view(e))
    }

    /// Tensors at positions `range`, in name order.
    pub fn range(
        &self,
        range: std::ops::Range<usize>,
    ) -> impl ExactSizeIterator<Item = Tensor<'_>> + Clone {
        self.entries[range].iter().map(|e| self.view(e))
    }

    /// Positions of the tensors whose names start with `prefix` (the empty prefix: all).
    pub fn with_prefix(&self, prefix: &str) -> std::ops::Range<usize> {
        let names = &self.names;
        let lo = self.entries.partition_point(|e| e.name(names) < prefix);
        let hi = lo + self.entries[lo..].partition_point(|e| e.name(names).starts_with(prefix));
        lo..hi
    }

    /// The tensor named `name`.
    pub fn find(&self, name: &str) -> Option<Tensor<'_>> {
        let i = self
            .entries
            .binary_search_by(|e| e.name(&self.names).cmp(name))
            .ok()?;
        self.get(i)
    }

    pub fn total_bytes(&self) -> u128 {
        self.iter().map(|t| t.nbytes()).sum()
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
