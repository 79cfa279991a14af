//! An [`Inventory`] as bytes, and back: what a cache keeps of a checkpoint whose headers it has
//! already read and checked. Decoding checks every length, name boundary, dtype and shard id,
//! so damaged bytes give `None`, never a panic or an out-of-range slice.
//!
//! ```text
//! "HARCHINV" u32 version
//! u8 has_total_size, u64 total_size
//! u32 shard count, then each: u32 length, UTF-8 bytes
//! u64 names length, UTF-8 bytes (every name, back to back, in inventory order)
//! u64 tensor count, then each: u32 name length, u32 shard (u32::MAX: none), u8 dtype,
//!     u8 rank, rank × u64 dimension
//! ```
//! Integers are little-endian.

use super::{Dtype, Inventory, Shape};

const MAGIC: &[u8; 8] = b"HARCHINV";
const VERSION: u32 = 1;

/// Every dtype, by its code in the encoding.
const DTYPES: [Dtype; 16] = {
    use Dtype::*;
    [
        BOOL, U8, I8, F8_E4M3, F8_E5M2, F8_E8M0, I16, U16, F16, BF16, I32, U32, F32, I64, U64, F64,
    ]
};

pub fn encode(inventory: &Inventory) -> Vec<u8> {
    let names: usize = inventory.iter().map(|t| t.name.len()).sum();
    let mut out = Vec::with_capacity(64 + names + inventory.len() * 26);
    out.extend_from_slice(MAGIC);
    out.extend_from_slice(&VERSION.to_le_bytes());
    out.push(inventory.total_size.is_some() as u8);
    out.extend_from_slice(&inventory.total_size.unwrap_or(0).to_le_bytes());
    out.extend_from_slice(&(inventory.shards.len() as u32).to_le_bytes());
    for shard in &inventory.shards {
        out.extend_from_slice(&(shard.len() as u32).to_le_bytes());
        out.extend_from_slice(shard.as_bytes());
    }
    out.extend_from_slice(&(names as u64).to_le_bytes());
    for t in inventory.iter() {
        out.extend_from_slice(t.name.as_bytes());
    }
    out.extend_from_slice(&(inventory.len() as u64).to_le_bytes());
    for e in &inventory.entries {
        out.extend_from_slice(&((e.end - e.start) as u32).to_le_bytes());
        out.extend_from_slice(&e.shard.to_le_bytes());
        let dtype = DTYPES.iter().position(|d| *d == e.dtype).unwrap_or(0);
        out.push(dtype as u8);
        out.push(e.shape.len() as u8);
        for d in &e.shape {
            out.extend_from_slice(&d.to_le_bytes());
        }
    }
    out
}

/// The inventory `bytes` encode, or `None` when they are not a whole, well-formed encoding.
pub fn decode(bytes: &[u8]) -> Option<Inventory> {
    let mut r = Reader(bytes);
    if r.take(MAGIC.len())? != MAGIC || r.u32()? != VERSION {
        return None;
    }
    let has_total = r.u8()?;
    let total = r.u64()?;
    let total_size = match has_total {
        0 => None,
        1 => Some(total),
        _ => return None,
    };
    let shard_count = r.u32()?;
    let mut shards = Vec::new();
    for _ in 0..shard_count {
        let len = r.u32()? as usize;
        shards.push(std::str::from_utf8(r.take(len)?).ok()?.into());
    }
    let names_len = usize::try_from(r.u64()?).ok()?;
    let names = std::str::from_utf8(r.take(names_len)?).ok()?.to_string();
    let count = usize::try_from(r.u64()?).ok()?;
    // Each tensor takes at least 10 bytes: a count the rest cannot hold is damage.
    if count > r.0.len() / 10 {
        return None;
    }
    let mut inventory = Inventory::from_parts(names, shards, total_size);
    inventory.reserve(count);
    let mut start = 0usize;
    for _ in 0..count {
        let end = start.checked_add(r.u32()? as usize)?;
        let shard = r.u32()?;
        let dtype = *DTYPES.get(r.u8()? as usize)?;
        let rank = r.u8()?;
        let mut shape = Shape::new();
        for _ in 0..rank {
            shape.push(r.u64()?);
        }
        if end > names_len || !inventory.names.is_char_boundary(end) {
            return None;
        }
        if shard != super::NO_SHARD && shard >= shard_count {
            return None;
        }
        inventory.push_span((start, end), dtype, shape, Some(shard));
        start = end;
    }
    (start == names_len && r.0.is_empty()).then_some(inventory)
}

struct Reader<'a>(&'a [u8]);

impl<'a> Reader<'a> {
    fn take(&mut self, n: usize) -> Option<&'a [u8]> {
        if n > self.0.len() {
            return None;
        }
        let (head, rest) = self.0.split_at(n);
        self.0 = rest;
        Some(head)
    }
    fn u8(&mut self) -> Option<u8> {
        Some(self.take(1)?[0])
    }
    fn u32(&mut self) -> Option<u32> {
        Some(u32::from_le_bytes(self.take(4)?.try_into().ok()?))
    }
    fn u64(&mut self) -> Option<u64> {
        Some(u64::from_le_bytes(self.take(8)?.try_into().ok()?))
    }
}

#[cfg(test)]
mod tests {
    use super::super::TensorInfo;
    use super::*;
    use proptest::prelude::*;

    fn inventory() -> impl Strategy<Value = Inventory> {
        let tensor = (
            "[a-c.é]{0,6}",
            0usize..16,
            prop::collection::vec(any::<u64>(), 0..6),
            prop::option::of(prop::sample::select(vec!["a.safetensors", "b.safetensors"])),
        )
            .prop_map(|(name, dtype, shape, shard)| TensorInfo {
                name,
                dtype: DTYPES[dtype],
                shape: shape.into_iter().collect(),
                shard: shard.map(Into::into),
            });
        (
            prop::collection::vec(tensor, 0..40),
            prop::option::of(any::<u64>()),
        )
            .prop_map(|(tensors, total)| Inventory::from_tensors(tensors, total))
    }

    proptest! {
        #[test]
        fn decode_undoes_encode(inv in inventory()) {
            let bytes = encode(&inv);
            prop_assert_eq!(decode(&bytes), Some(inv));
        }

        /// Cut short or with a byte changed, an encoding decodes to `None` or to some
        /// inventory, never a panic; cut short, always `None`.
        #[test]
        fn damaged_bytes_never_panic(inv in inventory(), at in any::<prop::sample::Index>(), to in any::<u8>()) {
            let bytes = encode(&inv);
            let cut = at.index(bytes.len());
            prop_assert_eq!(decode(&bytes[..cut]), None);
            let mut flipped = bytes.clone();
            flipped[cut] = to;
            let _ = decode(&flipped);
        }
    }

    #[test]
    fn a_real_inventory_round_trips_with_its_shards() {
        let inv = Inventory::from_tensors(
            [
                TensorInfo {
                    name: "model.layers.0.w".into(),
                    dtype: Dtype::F8_E4M3,
                    shape: [7168, 2048].into_iter().collect(),
                    shard: Some("model-00001-of-000163.safetensors".into()),
                },
                TensorInfo {
                    name: "lm_head.weight".into(),
                    dtype: Dtype::BF16,
                    shape: [129280, 7168].into_iter().collect(),
                    shard: None,
                },
            ],
            Some(42),
        );
        let back = decode(&encode(&inv)).unwrap();
        assert_eq!(back, inv);
        assert_eq!(
            back.find("model.layers.0.w").unwrap().shard,
            Some("model-00001-of-000163.safetensors")
        );
        assert_eq!(back.get(0).unwrap().name, "lm_head.weight");
        assert_eq!(decode(b"HARCHINV\x02\0\0\0"), None);
    }
}
