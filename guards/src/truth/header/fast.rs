//! The well-formed header, read straight into its tensors: each entry's fields by their
//! expected types, nothing kept per entry but the tensor. Anything unusual (a field of another
//! kind, an escaped key, a repeated field or name, a check that fails) gives up, and the
//! checked path reads the header again to say precisely what is wrong. The two paths agree on
//! every header the fast one accepts (`header_fuzz::fast_and_checked_paths_agree`).

use std::fmt;

use serde::de::{Deserializer, Error, IgnoredAny, MapAccess, Visitor};

use super::{Dtype, Header, Shape, check_layout, check_tensor};

/// The header, or `None` for the checked path to explain.
pub(super) fn parse(json: &[u8], payload_len: Option<u64>) -> Option<Header> {
    // serde_json skips unknown values without checking their UTF-8; the checked path
    // rejects any invalid byte, so check it here too.
    let text = std::str::from_utf8(json).ok()?;
    let mut de = serde_json::Deserializer::from_str(text);
    let mut header = de.deserialize_map(Entries { len: json.len() }).ok()?;
    de.end().ok()?;
    check_layout(&mut header, payload_len).ok()?;
    header.sort_by_name();
    if header.repeated_name().is_some() {
        return None;
    }
    Some(header)
}

/// The top-level object: tensor entries and at most one `__metadata__`.
struct Entries {
    /// Bytes of JSON, to size the tensor list once.
    len: usize,
}

impl<'de> Visitor<'de> for Entries {
    type Value = Header;

    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("a safetensors header")
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Header, A::Error> {
        // No entry is shorter than 50 bytes; unused capacity is never touched.
        let mut header = Header::with_capacity(self.len / 50, self.len as u64);
        // Borrowed: a name with an escape is not borrowable and goes to the checked path.
        while let Some(name) = map.next_key::<&str>()? {
            if name == "__metadata__" {
                if header.metadata.is_some() {
                    return Err(A::Error::custom("two __metadata__"));
                }
                header.metadata = Some(map.next_value()?);
                continue;
            }
            let Entry {
                dtype,
                shape,
                offsets,
            } = map.next_value()?;
            check_tensor(name, dtype, &shape, offsets).map_err(A::Error::custom)?;
            header.push(name, dtype, shape, offsets);
        }
        Ok(header)
    }
}

struct Entry {
    dtype: Dtype,
    shape: Shape,
    offsets: (u64, u64),
}

impl<'de> serde::Deserialize<'de> for Entry {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        // An object only: a derived struct would also take an array.
        d.deserialize_map(EntryVisitor)
    }
}

struct EntryVisitor;

impl<'de> Visitor<'de> for EntryVisitor {
    type Value = Entry;

    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("a tensor entry")
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Entry, A::Error> {
        let (mut dtype, mut shape, mut offsets) = (None, None, None);
        while let Some(field) = map.next_key::<&str>()? {
            let fresh = match field {
                "dtype" => {
                    let name: &str = map.next_value()?;
                    let d = Dtype::parse(name).ok_or_else(|| A::Error::custom("dtype"))?;
                    dtype.replace(d).is_none()
                }
                "shape" => shape.replace(map.next_value::<Shape>()?).is_none(),
                "data_offsets" => offsets.replace(map.next_value::<[u64; 2]>()?).is_none(),
                _ => {
                    map.next_value::<IgnoredAny>()?;
                    true
                }
            };
            if !fresh {
                return Err(A::Error::custom("a field twice"));
            }
        }
        match (dtype, shape, offsets) {
            (Some(dtype), Some(shape), Some([begin, end])) => Ok(Entry {
                dtype,
                shape,
                offsets: (begin, end),
            }),
            _ => Err(A::Error::custom("a field missing")),
        }
    }
}
