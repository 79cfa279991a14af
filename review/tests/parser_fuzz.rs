//! The report parser and the checker take hostile input (whatever a review agent wrote): they
//! return a report or located errors, and never panic, whatever the bytes.

use std::collections::BTreeMap;

use harch_guards::truth::{Dtype, Inventory, TensorInfo};
use harch_review::{Facts, SpecNodes, check, parse_claim, parse_report};
use proptest::prelude::*;

fn facts_parts() -> (serde_json::Value, Inventory, BTreeMap<String, String>) {
    let config = serde_json::json!({
        "hidden_size": 64, "num_hidden_layers": 2, "rms_norm_eps": 1e-6,
        "layer_types": ["linear_attention", "full_attention"],
        "rope_scaling": {"rope_type": "yarn", "factor": 4.0}, "nested": [[1, 2], {"a": null}]
    });
    let mut tensors = Vec::new();
    for i in 0..2 {
        for e in 0..3 {
            tensors.push(TensorInfo {
                name: format!("model.layers.{i}.mlp.experts.{e}.w"),
                dtype: Dtype::BF16,
                shape: [8, 64].into_iter().collect(),
                shard: None,
            });
        }
    }
    tensors.push(TensorInfo {
        name: "X.weird.X".into(),
        dtype: Dtype::F32,
        shape: Default::default(),
        shard: None,
    });
    let sources = BTreeMap::from([(
        "modeling_x.py".to_string(),
        "def f(x):\n    y = g(\n        x, 1)\n\n    return  y * 0.5\n".to_string(),
    )]);
    (config, Inventory::from_tensors(tensors, None), sources)
}

/// Evidence lines built from the grammar's pieces, well-formed or not.
fn claim_line() -> impl Strategy<Value = String> {
    let kind = prop_oneof![
        Just("src".to_string()),
        Just("cfg".to_string()),
        Just("ckpt".to_string()),
        Just("count".to_string()),
        "[a-z]{0,5}"
    ];
    let piece = prop_oneof![
        Just("modeling_x.py:".to_string()),
        Just("truth/source/modeling_x.py:".to_string()),
        "[0-9]{1,12}",
        Just("-".to_string()),
        Just(" \"".to_string()),
        Just("\"".to_string()),
        Just(" = ".to_string()),
        Just("[".to_string()),
        Just("]".to_string()),
        Just(", ".to_string()),
        Just("model.layers.X.mlp.experts".to_string()),
        Just(".X".to_string()),
        Just(".w".to_string()),
        Just("rope_scaling.factor".to_string()),
        Just("nested[0][1]".to_string()),
        Just("layer_types[9]".to_string()),
        Just(" BF16".to_string()),
        "\\PC{0,6}",
    ];
    (kind, prop::collection::vec(piece, 0..8)).prop_map(|(k, p)| format!("{k}: {}", p.concat()))
}

fn yaml_quote(s: &str) -> String {
    format!("'{}'", s.replace('\'', "''"))
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 2000, .. ProptestConfig::default() })]

    #[test]
    fn arbitrary_text_never_panics(text in "\\PC{0,400}") {
        let _ = parse_report("review.yaml", &text, &SpecNodes::new(["norm", "layers[a].attention"]));
        let _ = parse_claim(&text);
    }

    #[test]
    fn arbitrary_claims_parse_or_fail_cleanly_and_check_without_panicking(
        lines in prop::collection::vec(claim_line(), 1..6),
        verdict in prop_oneof![Just("PASS".to_string()), Just("NO_PASS".to_string()), "[A-Z_]{0,6}"],
        node in prop_oneof![
            Just("norm".to_string()),
            Just("null".to_string()),
            Just("layers[a]".to_string()),
            "[a-z\\[\\]._]{0,12}"
        ],
        status in prop_oneof![Just("consistent".to_string()), Just("missing".to_string()), "[a-z]{0,8}"],
    ) {
        let (config, inventory, sources) = facts_parts();
        let facts = Facts::new(&config, &inventory, &sources);
        let evidence: Vec<String> = lines.iter().map(|l| format!("      - {}\n", yaml_quote(l))).collect();
        let yaml = format!(
            "verdict: {verdict}\nmapping:\n  - step: \"step 1 of 0.5\"\n    node: {node}\n    status: {status}\n    evidence:\n{}defects:\n  - title: t 2\n    where: w\n    fix: f 3\n    evidence:\n{}",
            evidence.concat(),
            evidence.concat()
        );
        let nodes = SpecNodes::new(["norm", "layers[a].attention"]);
        match parse_report("review.yaml", &yaml, &nodes) {
            Ok(r) => {
                let c = check(&r, &facts);
                prop_assert_eq!(c.claims, 2 * lines.len());
            }
            Err(errs) => {
                prop_assert!(!errs.is_empty());
                for e in errs {
                    prop_assert_eq!(e.guard, "review");
                    prop_assert!(e.hint.is_some());
                }
            }
        }
        for l in &lines {
            if let Ok(c) = parse_claim(l) {
                let _ = facts.check(&c);
                let _ = c.numbers();
                // The canonical form parses back to the same claim.
                prop_assert_eq!(parse_claim(&c.to_string()).ok(), Some(c));
            }
        }
    }

    #[test]
    fn yaml_shaped_noise_never_panics(
        parts in prop::collection::vec(prop_oneof![
            Just("verdict: PASS\n"), Just("mapping:\n"), Just("defects: []\n"), Just("  - step: x\n"),
            Just("    node: norm\n"), Just("    status: consistent\n"), Just("    evidence: []\n"),
            Just("    evidence:\n      - cfg: hidden_size = 64\n"), Just("&a [*a]\n"), Just("  - *a\n"),
            Just("!!binary AAAA\n"), Just("? [1]\n: 2\n"), Just("\t"), Just("---\n"), Just("{"),
        ], 0..20)
    ) {
        let text = parts.concat();
        let _ = parse_report("review.yaml", &text, &SpecNodes::unchecked());
    }
}
