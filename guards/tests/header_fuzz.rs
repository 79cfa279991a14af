//! Property tests: the truth parsers never panic on hostile bytes, and what `compress` writes
//! `expand` reads back exactly. Failing cases proptest finds are kept under
//! `proptest-regressions/` and replayed on every run.

use harch_guards::truth::header::{parse_file_prefix, parse_json, parse_json_checked};
use harch_guards::truth::index::parse_index;
use harch_guards::truth::ranges::{compress, expand};
use harch_guards::truth::{Dtype, Inventory, TensorInfo};
use proptest::prelude::*;

const DTYPES: [&str; 6] = ["F32", "BF16", "F8_E4M3", "U8", "I64", "F99"];

/// Headers that are nearly valid: real structure with random dims, offsets and dtypes, so the
/// fuzzer spends its time in the semantic checks rather than in the JSON tokenizer.
fn near_valid_header() -> impl Strategy<Value = String> {
    let entry = (
        "[a-c.]{1,4}",
        0usize..DTYPES.len(),
        prop::collection::vec(-2i64..6, 0..3),
        0u64..40,
        0u64..40,
    );
    prop::collection::vec(entry, 0..6).prop_map(|entries| {
        let body: Vec<String> = entries
            .iter()
            .map(|(name, dt, shape, a, b)| {
                format!(
                    r#""{name}":{{"dtype":"{}","shape":{shape:?},"data_offsets":[{a},{b}]}}"#,
                    DTYPES[*dt]
                )
            })
            .collect();
        format!("{{{}}}", body.join(","))
    })
}

/// Valid headers, in payload order or shuffled, with or without metadata: what the fast path
/// is for.
fn valid_header() -> impl Strategy<Value = String> {
    let entries = prop::collection::btree_map(
        "[a-c.]{1,4}",
        (0usize..5, prop::collection::vec(0u64..4, 0..3)),
        0..12,
    );
    (entries, any::<bool>(), any::<bool>()).prop_map(|(entries, shuffle, metadata)| {
        let mut at = 0u64;
        let mut body: Vec<String> = entries
            .iter()
            .map(|(name, (dt, shape))| {
                let dtype = Dtype::parse(DTYPES[*dt]).unwrap();
                let end = at + dtype.size_bytes() * shape.iter().product::<u64>();
                let e = format!(
                    r#""{name}":{{"dtype":"{dtype}","shape":{shape:?},"data_offsets":[{at},{end}]}}"#
                );
                at = end;
                e
            })
            .collect();
        if shuffle {
            body.reverse();
        }
        if metadata {
            body.insert(0, r#""__metadata__":{"format":"pt"}"#.to_string());
        }
        format!("{{{}}}", body.join(","))
    })
}

/// Headers with the odd things the fast path must hand over to the checked one: escaped keys,
/// repeated fields and names, other kinds of values, metadata, arrays for objects, invalid
/// UTF-8 in a skipped value.
fn odd_header() -> impl Strategy<Value = String> {
    let name = prop_oneof![
        Just("a".to_string()),
        Just("b".to_string()),
        Just("__metadata__".to_string()),
        Just("\\u0061".to_string()),
    ];
    let field = prop_oneof![
        Just(r#""dtype":"F32""#.to_string()),
        Just(r#""dtype":"BF16""#.to_string()),
        Just(r#""dtype":7"#.to_string()),
        Just(r#""dt\u0079pe":"F32""#.to_string()),
        Just(r#""shape":[1]"#.to_string()),
        Just(r#""shape":[2.0]"#.to_string()),
        Just(r#""shape":[-0]"#.to_string()),
        Just(r#""shape":{}"#.to_string()),
        Just(r#""data_offsets":[0,4]"#.to_string()),
        Just(r#""data_offsets":[4,8]"#.to_string()),
        Just(r#""data_offsets":[0,4,8]"#.to_string()),
        Just(r#""data_offsets":[0,1e1]"#.to_string()),
        Just(r#""extra":{"x":[1,"y",null]}"#.to_string()),
        Just(r#""format":"pt""#.to_string()),
    ];
    let value = prop_oneof![
        4 => prop::collection::vec(field, 0..5).prop_map(|f| format!("{{{}}}", f.join(","))),
        1 => Just(r#"["F32",[1],[0,4]]"#.to_string()),
        1 => Just("null".to_string()),
    ];
    prop::collection::vec((name, value), 0..4).prop_map(|entries| {
        let body: Vec<String> = entries
            .iter()
            .map(|(n, v)| format!(r#""{n}":{v}"#))
            .collect();
        format!("{{{}}}", body.join(","))
    })
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(1000))]

    #[test]
    fn arbitrary_bytes_never_panic(bytes in prop::collection::vec(any::<u8>(), 0..256), size in prop::option::of(0u64..512)) {
        let _ = parse_file_prefix(&bytes, size);
        let _ = parse_json(&bytes, size);
        let _ = parse_index(&bytes);
        let _ = expand(&String::from_utf8_lossy(&bytes));
    }

    #[test]
    fn near_valid_headers_never_panic(json in near_valid_header(), payload in prop::option::of(0u64..64)) {
        let mut file = (json.len() as u64).to_le_bytes().to_vec();
        file.extend_from_slice(json.as_bytes());
        let whole = payload.map(|p| file.len() as u64 + p);
        let a = parse_file_prefix(&file, whole);
        let b = parse_json(json.as_bytes(), payload);
        // The prefix only frames the JSON: both entry points must agree.
        prop_assert_eq!(a.is_ok(), b.is_ok());
        if let Ok(h) = b {
            let total: u64 = h.tensors().map(|t| t.data_offsets.1 - t.data_offsets.0).sum();
            prop_assert_eq!(total, h.payload_len());
        }
    }

    #[test]
    fn fast_and_checked_paths_agree(json in near_valid_header(), payload in prop::option::of(0u64..64)) {
        prop_assert_eq!(parse_json(json.as_bytes(), payload), parse_json_checked(json.as_bytes(), payload));
    }

    #[test]
    fn fast_and_checked_paths_agree_on_valid_headers(json in valid_header()) {
        let fast = parse_json(json.as_bytes(), None);
        prop_assert!(fast.is_ok(), "{json}: {fast:?}");
        prop_assert_eq!(fast, parse_json_checked(json.as_bytes(), None));
    }

    #[test]
    fn fast_and_checked_paths_agree_on_odd_json(json in odd_header()) {
        prop_assert_eq!(parse_json(json.as_bytes(), None), parse_json_checked(json.as_bytes(), None));
    }

    #[test]
    fn compress_then_expand_is_identity(
        names in prop::collection::btree_set("[a-c]{1,2}(\\.[0-9]{1,2}){0,3}(\\.[a-z ]{0,2})?", 0..60),
        dt in 0usize..5,
    ) {
        let tensors: Vec<TensorInfo> = names
            .into_iter()
            .enumerate()
            .map(|(i, name)| TensorInfo {
                name,
                dtype: Dtype::parse(DTYPES[dt]).unwrap(),
                shape: [(i % 3) as u64].into_iter().collect(),
                shard: None,
            })
            .collect();
        let text = compress(tensors.iter().map(TensorInfo::as_tensor));
        prop_assert_eq!(expand(&text).unwrap(), Inventory::from_tensors(tensors, None));
    }
}
