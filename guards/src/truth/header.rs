//! Safetensors header parsing: the 8-byte little-endian length, then a JSON object mapping
//! tensor names to `{dtype, shape, data_offsets}` plus an optional `__metadata__` string map.
//!
//! Input is hostile (a truncated download, a hand-edited fixture, a malicious repo), so every
//! rule the safetensors format states is checked and reported with the tensor it concerns.

use std::collections::BTreeMap;

use rustc_hash::FxHashSet;
use serde::de::{Deserializer, MapAccess, Visitor};
use smallvec::SmallVec;

use super::{Dtype, Shape};

mod fast;

/// Largest header we accept. The safetensors reference implementation caps at 100 MB too:
/// a larger "header" is a corrupt length prefix, not a real checkpoint.
pub const MAX_HEADER_LEN: u64 = 100_000_000;

/// Bytes before the JSON header: its length as a little-endian u64.
pub const LEN_PREFIX: u64 = 8;

/// One parsed header: tensors sorted by name, with their payload byte ranges. Names live back
/// to back in one string (a header holds hundreds of tensors, a checkpoint 92k).
#[derive(Clone, Debug, Default)]
pub struct Header {
    names: String,
    entries: Vec<Entry>,
    /// The `__metadata__` map (e.g. `{"format": "pt"}`), when present.
    pub metadata: Option<BTreeMap<String, String>>,
    /// Length of the JSON header in bytes (without the 8-byte prefix).
    pub json_len: u64,
}

#[derive(Clone, Debug)]
struct Entry {
    /// `names[start..end]`; a header is at most [`MAX_HEADER_LEN`] bytes.
    start: u32,
    end: u32,
    dtype: Dtype,
    shape: Shape,
    data_offsets: (u64, u64),
}

/// One tensor of a [`Header`], borrowed from it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct HeaderTensor<'a> {
    pub name: &'a str,
    pub dtype: Dtype,
    pub shape: &'a [u64],
    /// `[begin, end)` relative to the start of the payload.
    pub data_offsets: (u64, u64),
}

impl PartialEq for Header {
    fn eq(&self, other: &Header) -> bool {
        self.json_len == other.json_len
            && self.metadata == other.metadata
            && self.tensors().eq(other.tensors())
    }
}

impl Eq for Header {}

impl Header {
    fn with_capacity(tensors: usize, json_len: u64) -> Header {
        Header {
            entries: Vec::with_capacity(tensors),
            json_len,
            ..Header::default()
        }
    }

    /// Appends a tensor (the caller sorts afterwards).
    fn push(&mut self, name: &str, dtype: Dtype, shape: Shape, data_offsets: (u64, u64)) {
        let start = self.names.len() as u32;
        self.names.push_str(name);
        self.entries.push(Entry {
            start,
            end: self.names.len() as u32,
            dtype,
            shape,
            data_offsets,
        });
    }

    fn name(&self, e: &Entry) -> &str {
        &self.names[e.start as usize..e.end as usize]
    }

    fn view<'a>(&'a self, e: &'a Entry) -> HeaderTensor<'a> {
        HeaderTensor {
            name: self.name(e),
            dtype: e.dtype,
            shape: &e.shape,
            data_offsets: e.data_offsets,
        }
    }

    /// Number of tensors.
    pub fn len(&self) -> usize {
        self.entries.len()
    }

    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    /// The tensors, in name order.
    pub fn tensors(&self) -> impl ExactSizeIterator<Item = HeaderTensor<'_>> + Clone {
        self.entries.iter().map(|e| self.view(e))
    }

    /// The tensor at position `i` in name order.
    pub fn get(&self, i: usize) -> Option<HeaderTensor<'_>> {
        self.entries.get(i).map(|e| self.view(e))
    }

    /// Bytes of payload the header describes (end of the last tensor).
    pub fn payload_len(&self) -> u64 {
        self.entries
            .iter()
            .map(|t| t.data_offsets.1)
            .max()
            .unwrap_or(0)
    }

    /// Length of the whole file this header belongs to: prefix + header + payload.
    pub fn file_len(&self) -> u64 {
        LEN_PREFIX + self.json_len + self.payload_len()
    }

    /// Headers list tensors in payload order; the inventory wants them by name.
    fn sort_by_name(&mut self) {
        let names = &self.names;
        let name = |e: &Entry| &names[e.start as usize..e.end as usize];
        if !self.entries.is_sorted_by(|a, b| name(a) <= name(b)) {
            self.entries.sort_unstable_by(|a, b| name(a).cmp(name(b)));
        }
    }

    /// The first name that occurs twice (the entries in name order).
    fn repeated_name(&self) -> Option<&str> {
        self.entries
            .windows(2)
            .find(|w| self.name(&w[0]) == self.name(&w[1]))
            .map(|w| self.name(&w[0]))
    }
}

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum HeaderError {
    #[error("file is {len} bytes long; a safetensors file starts with an 8-byte header length")]
    TooShort { len: u64 },
    #[error(
        "header length prefix says {len} bytes, over the {max}-byte cap: not a safetensors file or corrupt"
    )]
    HeaderTooLarge { len: u64, max: u64 },
    #[error(
        "header needs {needed} bytes after the length prefix but only {have} are present (truncated)"
    )]
    Truncated { needed: u64, have: u64 },
    #[error("header is not valid UTF-8 (first bad byte at offset {offset} of the JSON)")]
    NotUtf8 { offset: usize },
    #[error("header is not valid JSON at line {line}, column {column}: {message}")]
    InvalidJson {
        line: usize,
        column: usize,
        message: String,
    },
    #[error("header names tensor `{tensor}` twice")]
    DuplicateTensor { tensor: String },
    #[error("tensor `{tensor}`: {message}")]
    BadEntry { tensor: String, message: String },
    #[error("tensor `{tensor}`: unknown dtype `{dtype}`")]
    UnknownDtype { tensor: String, dtype: String },
    #[error("tensor `{tensor}`: shape {message}")]
    BadShape { tensor: String, message: String },
    #[error("tensor `{tensor}`: data_offsets [{begin}, {end}] run backwards")]
    BackwardOffsets {
        tensor: String,
        begin: u64,
        end: u64,
    },
    #[error("tensor `{tensor}`: {actual} payload bytes but {dtype} {shape:?} needs {expected}")]
    SizeMismatch {
        tensor: String,
        dtype: Dtype,
        shape: Vec<u64>,
        expected: u128,
        actual: u64,
    },
    #[error("tensor `{tensor}` starts at byte {begin}, inside `{other}` which ends at {other_end}")]
    Overlap {
        tensor: String,
        begin: u64,
        other: String,
        other_end: u64,
    },
    #[error(
        "tensor `{tensor}` starts at byte {begin} but the previous tensor ends at {expected}: {gap}-byte gap"
    )]
    Gap {
        tensor: String,
        begin: u64,
        expected: u64,
        gap: u64,
    },
    #[error("tensor `{tensor}` ends at payload byte {end} but the payload is {payload_len} bytes")]
    PastEnd {
        tensor: String,
        end: u64,
        payload_len: u64,
    },
    #[error(
        "tensors end at payload byte {end} but the payload is {payload_len} bytes: trailing bytes no tensor owns"
    )]
    TrailingBytes { end: u64, payload_len: u64 },
    #[error("`__metadata__` must map strings to strings: {message}")]
    BadMetadata { message: String },
}

/// Reads the 8-byte length prefix and applies the size cap.
pub fn json_len(prefix: &[u8]) -> Result<u64, HeaderError> {
    let Some(head) = prefix.get(..LEN_PREFIX as usize) else {
        return Err(HeaderError::TooShort {
            len: prefix.len() as u64,
        });
    };
    let mut le = [0u8; 8];
    le.copy_from_slice(head);
    let len = u64::from_le_bytes(le);
    if len > MAX_HEADER_LEN {
        return Err(HeaderError::HeaderTooLarge {
            len,
            max: MAX_HEADER_LEN,
        });
    }
    Ok(len)
}

/// Parses the start of a `.safetensors` file: the length prefix and the complete JSON header.
/// Extra bytes after the header (payload) are ignored. `file_len`, when known, lets the offsets
/// be checked against the real payload size.
pub fn parse_file_prefix(bytes: &[u8], file_len: Option<u64>) -> Result<Header, HeaderError> {
    let len = json_len(bytes)?;
    let have = bytes.len() as u64 - LEN_PREFIX;
    if have < len {
        return Err(HeaderError::Truncated { needed: len, have });
    }
    let json = &bytes[LEN_PREFIX as usize..(LEN_PREFIX + len) as usize];
    let payload_len = match file_len {
        Some(total) if total < LEN_PREFIX + len => {
            return Err(HeaderError::Truncated {
                needed: len,
                have: total.saturating_sub(LEN_PREFIX),
            });
        }
        Some(total) => Some(total - LEN_PREFIX - len),
        None => None,
    };
    parse_json(json, payload_len)
}

/// Parses a bare JSON header (as in `shards/<file>.header.json`). `payload_len`, when known,
/// is the number of payload bytes after the header.
pub fn parse_json(json: &[u8], payload_len: Option<u64>) -> Result<Header, HeaderError> {
    if json.len() as u64 > MAX_HEADER_LEN {
        return Err(HeaderError::HeaderTooLarge {
            len: json.len() as u64,
            max: MAX_HEADER_LEN,
        });
    }
    match fast::parse(json, payload_len) {
        Some(header) => Ok(header),
        None => parse_json_checked(json, payload_len),
    }
}

/// [`parse_json`] without its fast path: every entry read as whatever kind of JSON it is, so
/// that the error names the first problem precisely. Public for the tests that hold the two
/// paths to one answer.
#[doc(hidden)]
pub fn parse_json_checked(json: &[u8], payload_len: Option<u64>) -> Result<Header, HeaderError> {
    let text = std::str::from_utf8(json).map_err(|e| HeaderError::NotUtf8 {
        offset: e.valid_up_to(),
    })?;
    let mut de = serde_json::Deserializer::from_str(text);
    let invalid = |e: serde_json::Error| HeaderError::InvalidJson {
        line: e.line(),
        column: e.column(),
        message: strip_position(&e.to_string()),
    };
    let raw = de.deserialize_map(RawHeaderVisitor).map_err(invalid)?;
    de.end().map_err(invalid)?;
    let raw = raw?;
    let mut header = Header::with_capacity(raw.entries.len(), json.len() as u64);
    for (name, value) in raw.entries {
        let (dtype, shape, offsets) = entry(&name, value)?;
        header.push(&name, dtype, shape, offsets);
    }
    header.metadata = raw.metadata;
    check_layout(&mut header, payload_len)?;
    header.sort_by_name();
    Ok(header)
}

/// serde_json appends " at line L column C"; we report those as fields.
fn strip_position(message: &str) -> String {
    match message.rfind(" at line ") {
        Some(i) => message[..i].to_string(),
        None => message.to_string(),
    }
}

struct RawHeader {
    entries: Vec<(String, RawEntry)>,
    metadata: Option<BTreeMap<String, String>>,
}

/// Visits the top-level object entry by entry, so duplicate names are caught (a map type would
/// silently keep the last) and each entry's errors can name its tensor.
struct RawHeaderVisitor;

impl<'de> Visitor<'de> for RawHeaderVisitor {
    type Value = Result<RawHeader, HeaderError>;

    fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
        f.write_str("a JSON object mapping tensor names to {dtype, shape, data_offsets}")
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Self::Value, A::Error> {
        let mut entries: Vec<(String, RawEntry)> = Vec::new();
        let mut metadata = None;
        let mut metadata_seen = false;
        // The first problem is kept and the rest of the object still read, so a syntax error
        // further on is reported as what it is.
        let mut first: Option<HeaderError> = None;
        while let Some(key) = map.next_key::<String>()? {
            if key == "__metadata__" && std::mem::replace(&mut metadata_seen, true) {
                map.next_value::<serde::de::IgnoredAny>()?;
                first.get_or_insert(HeaderError::DuplicateTensor { tensor: key });
                continue;
            }
            if key == "__metadata__" {
                let value: serde_json::Value = map.next_value()?;
                match metadata_map(value) {
                    Ok(m) => metadata = Some(m),
                    Err(e) => {
                        first.get_or_insert(e);
                    }
                }
                continue;
            }
            match map.next_value::<EntryOrError>()? {
                EntryOrError::Entry(e) => entries.push((key, e)),
                EntryOrError::Error(message) => {
                    first.get_or_insert(HeaderError::BadEntry {
                        tensor: key,
                        message,
                    });
                }
            }
        }
        // Duplicate names, checked after the fact so the common case copies no names.
        if first.is_none() {
            let mut seen = FxHashSet::default();
            seen.reserve(entries.len());
            if let Some((dup, _)) = entries.iter().find(|(k, _)| !seen.insert(k.as_str())) {
                first = Some(HeaderError::DuplicateTensor {
                    tensor: dup.clone(),
                });
            }
        }
        Ok(match first {
            Some(e) => Err(e),
            None => Ok(RawHeader { entries, metadata }),
        })
    }
}

fn metadata_map(value: serde_json::Value) -> Result<BTreeMap<String, String>, HeaderError> {
    let serde_json::Value::Object(obj) = value else {
        return Err(HeaderError::BadMetadata {
            message: format!("got {}", kind(&value)),
        });
    };
    obj.into_iter()
        .map(|(k, v)| match v {
            serde_json::Value::String(s) => Ok((k, s)),
            other => Err(HeaderError::BadMetadata {
                message: format!("key `{k}` holds {}", kind(&other)),
            }),
        })
        .collect()
}

fn kind(v: &serde_json::Value) -> &'static str {
    match v {
        serde_json::Value::Null => "null",
        serde_json::Value::Bool(_) => "a boolean",
        serde_json::Value::Number(_) => "a number",
        serde_json::Value::String(_) => "a string",
        serde_json::Value::Array(_) => "an array",
        serde_json::Value::Object(_) => "an object",
    }
}

/// A tensor entry as written. Values of the wrong kind were turned into a problem message by
/// the visitor; what remains may still be wrong (an unknown dtype, a negative dimension), and
/// [`entry`] says so with the tensor's name.
struct RawEntry {
    /// A known dtype, or the unknown name.
    dtype: Result<Dtype, String>,
    shape: Result<Ints, BadInt>,
    data_offsets: Result<Ints, BadInt>,
}

type Ints = SmallVec<[u64; 4]>;

/// The first element of an integer array that is not a non-negative integer.
struct BadInt {
    len: usize,
    at: usize,
    why: String,
}

/// A tensor entry, or why its (syntactically valid) JSON is not one. Visiting the fields
/// directly, without a JSON tree, keeps the 92k entries of a large checkpoint cheap, and errors
/// still name their tensor.
enum EntryOrError {
    Entry(RawEntry),
    Error(String),
}

impl<'de> serde::Deserialize<'de> for EntryOrError {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        d.deserialize_any(EntryVisitor)
    }
}

/// Visitor methods for the JSON kinds a field does not accept: each answers `$wrap(kind)`, with
/// the kind named for the message ("a string", "an array").
macro_rules! other_kind {
    ($out:ty, $wrap:expr, bool) => {
        fn visit_bool<E: serde::de::Error>(self, _: bool) -> Result<$out, E> {
            Ok($wrap("a boolean"))
        }
    };
    ($out:ty, $wrap:expr, i64) => {
        fn visit_i64<E: serde::de::Error>(self, _: i64) -> Result<$out, E> {
            Ok($wrap("a number"))
        }
    };
    ($out:ty, $wrap:expr, u64) => {
        fn visit_u64<E: serde::de::Error>(self, _: u64) -> Result<$out, E> {
            Ok($wrap("a number"))
        }
    };
    ($out:ty, $wrap:expr, f64) => {
        fn visit_f64<E: serde::de::Error>(self, _: f64) -> Result<$out, E> {
            Ok($wrap("a number"))
        }
    };
    ($out:ty, $wrap:expr, str) => {
        fn visit_str<E: serde::de::Error>(self, _: &str) -> Result<$out, E> {
            Ok($wrap("a string"))
        }
    };
    ($out:ty, $wrap:expr, unit) => {
        fn visit_unit<E: serde::de::Error>(self) -> Result<$out, E> {
            Ok($wrap("null"))
        }
    };
    ($out:ty, $wrap:expr, seq) => {
        fn visit_seq<A: serde::de::SeqAccess<'de>>(self, mut seq: A) -> Result<$out, A::Error> {
            while seq.next_element::<serde::de::IgnoredAny>()?.is_some() {}
            Ok($wrap("an array"))
        }
    };
    ($out:ty, $wrap:expr, map) => {
        fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<$out, A::Error> {
            while map
                .next_entry::<serde::de::IgnoredAny, serde::de::IgnoredAny>()?
                .is_some()
            {}
            Ok($wrap("an object"))
        }
    };
}

macro_rules! other_kinds {
    ($out:ty, $wrap:expr; $($kind:ident),*) => {
        $(other_kind!($out, $wrap, $kind);)*
    };
}

struct EntryVisitor;

fn not_an_object(got: &str) -> EntryOrError {
    EntryOrError::Error(format!(
        "expected an object {{dtype, shape, data_offsets}}, got {got}"
    ))
}

impl<'de> Visitor<'de> for EntryVisitor {
    type Value = EntryOrError;

    fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
        f.write_str("a tensor entry {dtype, shape, data_offsets}")
    }

    other_kinds!(EntryOrError, not_an_object; bool, i64, u64, f64, str, unit, seq);

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<EntryOrError, A::Error> {
        let (mut dtype, mut shape, mut offsets) = (None, None, None);
        let mut problem: Option<String> = None;
        while let Some(field) = map.next_key::<Field>()? {
            match field {
                Field::Other => {
                    map.next_value::<serde::de::IgnoredAny>()?;
                }
                Field::Dtype => match map.next_value::<DtypeValue>()? {
                    DtypeValue::Name(d) => dtype = Some(d),
                    DtypeValue::Not(got) => {
                        problem.get_or_insert(format!("dtype must be a string, got {got}"));
                    }
                },
                Field::Shape | Field::Offsets => {
                    let name = if field == Field::Shape {
                        "shape"
                    } else {
                        "data_offsets"
                    };
                    match map.next_value::<IntsValue>()? {
                        IntsValue::Ints(v) if field == Field::Shape => shape = Some(v),
                        IntsValue::Ints(v) => offsets = Some(v),
                        IntsValue::Not(got) => {
                            problem.get_or_insert(format!(
                                "{name} must be an array of integers, got {got}"
                            ));
                        }
                    }
                }
            }
        }
        if let Some(p) = problem {
            return Ok(EntryOrError::Error(p));
        }
        Ok(match (dtype, shape, offsets) {
            (Some(dtype), Some(shape), Some(data_offsets)) => EntryOrError::Entry(RawEntry {
                dtype,
                shape,
                data_offsets,
            }),
            (None, _, _) => EntryOrError::Error("missing `dtype`".into()),
            (_, None, _) => EntryOrError::Error("missing `shape`".into()),
            (_, _, None) => EntryOrError::Error("missing `data_offsets`".into()),
        })
    }
}

/// `dtype`: a string (parsed to a known dtype or kept as the unknown name), or the kind of
/// value it was instead.
enum DtypeValue {
    Name(Result<Dtype, String>),
    Not(&'static str),
}

impl<'de> serde::Deserialize<'de> for DtypeValue {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl<'de> Visitor<'de> for V {
            type Value = DtypeValue;
            fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
                f.write_str("a dtype name")
            }
            other_kinds!(DtypeValue, DtypeValue::Not; bool, i64, u64, f64, unit, seq, map);
            fn visit_str<E: serde::de::Error>(self, v: &str) -> Result<DtypeValue, E> {
                Ok(DtypeValue::Name(
                    Dtype::parse(v).ok_or_else(|| v.to_string()),
                ))
            }
        }
        d.deserialize_any(V)
    }
}

/// `shape` or `data_offsets`: an array of numbers (each checked to be a non-negative integer),
/// or what it was instead ("a string", "an array holding null").
enum IntsValue {
    Ints(Result<Ints, BadInt>),
    Not(String),
}

impl<'de> serde::Deserialize<'de> for IntsValue {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl<'de> Visitor<'de> for V {
            type Value = IntsValue;
            fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
                f.write_str("an array of integers")
            }
            other_kinds!(IntsValue, |k: &str| IntsValue::Not(k.to_string()); bool, i64, u64, f64, str, unit, map);
            fn visit_seq<A: serde::de::SeqAccess<'de>>(
                self,
                mut seq: A,
            ) -> Result<IntsValue, A::Error> {
                let mut ints = Ints::new();
                let mut bad: Option<(usize, String)> = None;
                let mut holding: Option<&'static str> = None;
                let mut len = 0;
                while let Some(n) = seq.next_element::<NumValue>()? {
                    match n {
                        NumValue::Int(v) => ints.push(v),
                        NumValue::Bad(why) => {
                            bad.get_or_insert((len, why));
                        }
                        NumValue::Not(k) => {
                            holding.get_or_insert(k);
                        }
                    }
                    len += 1;
                }
                Ok(match (holding, bad) {
                    (Some(k), _) => IntsValue::Not(format!("an array holding {k}")),
                    (None, Some((at, why))) => IntsValue::Ints(Err(BadInt { len, at, why })),
                    (None, None) => IntsValue::Ints(Ok(ints)),
                })
            }
        }
        d.deserialize_any(V)
    }
}

/// One array element: a non-negative integer, a number that is not one, or not a number.
enum NumValue {
    Int(u64),
    Bad(String),
    Not(&'static str),
}

impl<'de> serde::Deserialize<'de> for NumValue {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl<'de> Visitor<'de> for V {
            type Value = NumValue;
            fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
                f.write_str("an integer")
            }
            other_kinds!(NumValue, NumValue::Not; bool, str, unit, seq, map);
            fn visit_u64<E: serde::de::Error>(self, v: u64) -> Result<NumValue, E> {
                Ok(NumValue::Int(v))
            }
            fn visit_i64<E: serde::de::Error>(self, v: i64) -> Result<NumValue, E> {
                Ok(match u64::try_from(v) {
                    Ok(u) => NumValue::Int(u),
                    Err(_) => NumValue::Bad(format!("negative ({v})")),
                })
            }
            fn visit_f64<E: serde::de::Error>(self, v: f64) -> Result<NumValue, E> {
                let shown = serde_json::Number::from_f64(v)
                    .map(|n| n.to_string())
                    .unwrap_or_else(|| v.to_string());
                Ok(NumValue::Bad(format!("not an integer ({shown})")))
            }
        }
        d.deserialize_any(V)
    }
}

#[derive(PartialEq, Eq)]
enum Field {
    Dtype,
    Shape,
    Offsets,
    Other,
}

impl<'de> serde::Deserialize<'de> for Field {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct FieldVisitor;
        impl Visitor<'_> for FieldVisitor {
            type Value = Field;
            fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
                f.write_str("a field name")
            }
            fn visit_str<E: serde::de::Error>(self, v: &str) -> Result<Field, E> {
                Ok(match v {
                    "dtype" => Field::Dtype,
                    "shape" => Field::Shape,
                    "data_offsets" => Field::Offsets,
                    _ => Field::Other,
                })
            }
        }
        d.deserialize_identifier(FieldVisitor)
    }
}

fn entry(name: &str, raw: RawEntry) -> Result<(Dtype, Shape, (u64, u64)), HeaderError> {
    let bad = |message: String| HeaderError::BadEntry {
        tensor: name.to_string(),
        message,
    };
    let dtype = match raw.dtype {
        Ok(d) => d,
        Err(dtype) => {
            return Err(HeaderError::UnknownDtype {
                tensor: name.to_string(),
                dtype,
            });
        }
    };
    let shape = match raw.shape {
        Ok(dims) => dims,
        Err(b) => {
            return Err(HeaderError::BadShape {
                tensor: name.to_string(),
                message: format!("dimension {} is {}", b.at, b.why),
            });
        }
    };
    let offsets = match raw.data_offsets {
        Ok(o) if o.len() == 2 => (o[0], o[1]),
        Err(b) if b.len == 2 => {
            let which = if b.at == 0 { "begin" } else { "end" };
            return Err(bad(format!("data_offsets {which} is {}", b.why)));
        }
        _ => return Err(bad("data_offsets must be [begin, end]".into())),
    };
    check_tensor(name, dtype, &shape, offsets)?;
    Ok((dtype, shape, offsets))
}

/// A tensor entry whose fields have the right kinds: its offsets must run forward and span
/// exactly the bytes its dtype and shape need.
fn check_tensor(
    name: &str,
    dtype: Dtype,
    shape: &[u64],
    offsets: (u64, u64),
) -> Result<(), HeaderError> {
    if offsets.1 < offsets.0 {
        return Err(HeaderError::BackwardOffsets {
            tensor: name.to_string(),
            begin: offsets.0,
            end: offsets.1,
        });
    }
    let actual = offsets.1 - offsets.0;
    // numel can exceed u64 for hostile shapes; u128 products of u64 dims can overflow too.
    let expected = shape
        .iter()
        .try_fold(dtype.size_bytes() as u128, |acc, &d| {
            acc.checked_mul(d as u128)
        });
    if expected != Some(actual as u128) {
        return Err(HeaderError::SizeMismatch {
            expected: expected.unwrap_or(u128::MAX),
            actual,
            dtype,
            shape: shape.to_vec(),
            tensor: name.to_string(),
        });
    }
    Ok(())
}

/// Tensors must tile the payload: starting at 0, each beginning where the previous ended, the
/// last ending at the payload's end (when its length is known). Zero-byte tensors may share an
/// offset.
fn check_layout(header: &mut Header, payload_len: Option<u64>) -> Result<(), HeaderError> {
    // Writers put tensors in payload order: sort only a header that is not.
    let names = &header.names;
    let key = |t: &Entry| (t.data_offsets, &names[t.start as usize..t.end as usize]);
    if !header.entries.is_sorted_by(|a, b| key(a) <= key(b)) {
        header.entries.sort_unstable_by(|a, b| key(a).cmp(&key(b)));
    }
    let mut cursor = 0u64;
    let mut prev: Option<HeaderTensor> = None;
    for t in header.tensors() {
        let (begin, end) = t.data_offsets;
        if begin < cursor {
            let other = prev.map(|p| p.name.to_string()).unwrap_or_default();
            return Err(HeaderError::Overlap {
                tensor: t.name.to_string(),
                begin,
                other,
                other_end: cursor,
            });
        }
        if begin > cursor {
            return Err(HeaderError::Gap {
                tensor: t.name.to_string(),
                begin,
                expected: cursor,
                gap: begin - cursor,
            });
        }
        if let Some(len) = payload_len
            && end > len
        {
            return Err(HeaderError::PastEnd {
                tensor: t.name.to_string(),
                end,
                payload_len: len,
            });
        }
        cursor = end;
        prev = Some(t);
    }
    match payload_len {
        Some(len) if cursor < len => Err(HeaderError::TrailingBytes {
            end: cursor,
            payload_len: len,
        }),
        _ => Ok(()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn file(json: &str) -> Vec<u8> {
        let mut v = (json.len() as u64).to_le_bytes().to_vec();
        v.extend_from_slice(json.as_bytes());
        v
    }

    #[test]
    fn parses_a_minimal_file_and_sorts_by_name() {
        let h = parse_file_prefix(
            &file(r#"{"b":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},"a":{"dtype":"BF16","shape":[],"data_offsets":[8,10]},"__metadata__":{"format":"pt"}}"#),
            None,
        )
        .unwrap();
        assert_eq!(h.get(0).unwrap().name, "a");
        assert_eq!(h.get(1).unwrap().data_offsets, (0, 8));
        assert_eq!(h.payload_len(), 10);
        assert_eq!(h.metadata.unwrap()["format"], "pt");
    }

    #[test]
    fn each_defect_has_its_own_error() {
        type Case = (&'static str, fn(&HeaderError) -> bool);
        let cases: &[Case] = &[
            (
                r#"{"t":{"dtype":"F33","shape":[1],"data_offsets":[0,4]}}"#,
                |e| matches!(e, HeaderError::UnknownDtype { tensor, dtype } if tensor == "t" && dtype == "F33"),
            ),
            (
                r#"{"t":{"dtype":"F32","shape":[-1],"data_offsets":[0,4]}}"#,
                |e| matches!(e, HeaderError::BadShape { message, .. } if message.contains("negative")),
            ),
            (
                r#"{"t":{"dtype":"F32","shape":[1.5],"data_offsets":[0,4]}}"#,
                |e| matches!(e, HeaderError::BadShape { message, .. } if message.contains("not an integer")),
            ),
            (
                r#"{"t":{"dtype":"F32","shape":[2],"data_offsets":[0,4]}}"#,
                |e| {
                    matches!(
                        e,
                        HeaderError::SizeMismatch {
                            expected: 8,
                            actual: 4,
                            ..
                        }
                    )
                },
            ),
            (
                r#"{"a":{"dtype":"U8","shape":[4],"data_offsets":[0,4]},"b":{"dtype":"U8","shape":[4],"data_offsets":[2,6]}}"#,
                |e| matches!(e, HeaderError::Overlap { tensor, other, .. } if tensor == "b" && other == "a"),
            ),
            (
                r#"{"a":{"dtype":"U8","shape":[4],"data_offsets":[1,5]}}"#,
                |e| matches!(e, HeaderError::Gap { gap: 1, .. }),
            ),
            (
                r#"{"a":{"dtype":"U8","shape":[4],"data_offsets":[4,0]}}"#,
                |e| matches!(e, HeaderError::BackwardOffsets { .. }),
            ),
            (
                r#"{"a":{"dtype":"U8","shape":[1],"data_offsets":[0,1]},"a":{"dtype":"U8","shape":[1],"data_offsets":[1,2]}}"#,
                |e| matches!(e, HeaderError::DuplicateTensor { tensor } if tensor == "a"),
            ),
            (r#"{"__metadata__":{"format":1}}"#, |e| {
                matches!(e, HeaderError::BadMetadata { .. })
            }),
            (r#"{"a":{"dtype":"U8","shape":[1]}}"#, |e| {
                matches!(e, HeaderError::BadEntry { .. })
            }),
            (r#"{"a": 3}"#, |e| matches!(e, HeaderError::BadEntry { .. })),
            (r#"[1,2]"#, |e| matches!(e, HeaderError::InvalidJson { .. })),
            (
                r#"{"a":{"dtype":"U8","shape":[1],"data_offsets":[0,1]}} x"#,
                |e| matches!(e, HeaderError::InvalidJson { line: 1, .. }),
            ),
        ];
        for (json, ok) in cases {
            let err = parse_json(json.as_bytes(), None).unwrap_err();
            assert!(ok(&err), "{json}: got {err:?}");
            assert!(!err.to_string().is_empty());
        }
    }

    #[test]
    fn payload_length_is_enforced_both_ways() {
        let json = r#"{"a":{"dtype":"U8","shape":[4],"data_offsets":[0,4]}}"#;
        assert!(parse_json(json.as_bytes(), Some(4)).is_ok());
        assert!(matches!(
            parse_json(json.as_bytes(), Some(3)),
            Err(HeaderError::PastEnd {
                end: 4,
                payload_len: 3,
                ..
            })
        ));
        assert!(matches!(
            parse_json(json.as_bytes(), Some(5)),
            Err(HeaderError::TrailingBytes {
                end: 4,
                payload_len: 5
            })
        ));
        let f = file(json);
        let total = f.len() as u64 + 4;
        assert!(parse_file_prefix(&f, Some(total)).is_ok());
    }

    #[test]
    fn prefix_errors() {
        assert_eq!(json_len(&[1, 2]), Err(HeaderError::TooShort { len: 2 }));
        let big = (MAX_HEADER_LEN + 1).to_le_bytes();
        assert!(matches!(
            json_len(&big),
            Err(HeaderError::HeaderTooLarge { .. })
        ));
        let mut f = file(r#"{"a":{"dtype":"U8","shape":[4],"data_offsets":[0,4]}}"#);
        f.truncate(20);
        assert!(matches!(
            parse_file_prefix(&f, None),
            Err(HeaderError::Truncated { have: 12, .. })
        ));
        let mut raw = file(r#"{"ab":1}"#);
        raw[10] = 0xff;
        assert!(matches!(
            parse_file_prefix(&raw, None),
            Err(HeaderError::NotUtf8 { .. })
        ));
    }

    #[test]
    fn zero_sized_tensors_may_share_an_offset() {
        let json = r#"{"a":{"dtype":"U8","shape":[0],"data_offsets":[0,0]},"b":{"dtype":"U8","shape":[0,3],"data_offsets":[0,0]},"c":{"dtype":"U8","shape":[1],"data_offsets":[0,1]}}"#;
        assert_eq!(parse_json(json.as_bytes(), Some(1)).unwrap().len(), 3);
    }

    #[test]
    fn shape_overflow_is_a_size_mismatch_not_a_panic() {
        let json = r#"{"a":{"dtype":"F64","shape":[18446744073709551615,18446744073709551615,18446744073709551615],"data_offsets":[0,1]}}"#;
        assert!(matches!(
            parse_json(json.as_bytes(), None),
            Err(HeaderError::SizeMismatch { .. })
        ));
    }
}
