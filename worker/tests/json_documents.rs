//! Every field docs/cli.md names for the answering commands' `--json` documents is in the
//! document the command prints (and the document is one JSON value), so the reference and the
//! output cannot drift apart.

use std::collections::BTreeMap;

use crate::harch_cli;

use harch_cli::root;

fn run(args: &[&str]) -> serde_json::Value {
    let (_, out, err) = harch_cli::run(args);
    serde_json::from_str(&out).unwrap_or_else(|e| panic!("{args:?}: {e}: {out}{err}"))
}

/// Every key anywhere in a document.
fn keys(v: &serde_json::Value, out: &mut Vec<String>) {
    match v {
        serde_json::Value::Object(m) => {
            for (k, x) in m {
                out.push(k.clone());
                keys(x, out);
            }
        }
        serde_json::Value::Array(a) => a.iter().for_each(|x| keys(x, out)),
        _ => {}
    }
}

/// The backticked snake_case names after `--json` in a command's section of docs/cli.md.
fn documented(command: &str) -> Vec<String> {
    let doc = std::fs::read_to_string(root().join("docs/cli.md")).unwrap();
    let head = format!("### `{command}`\n");
    let section = doc
        .split_once(&head)
        .map(|(_, rest)| rest.split("\n### ").next().unwrap().to_string())
        .unwrap_or_else(|| panic!("no section for {command}"));
    let after = section.split("`--json`").nth(1).unwrap_or_default();
    after
        .split('`')
        .skip(1)
        .step_by(2)
        .filter(|w| {
            // A field name starts with a letter (`16x448x448` is an example value).
            w.starts_with(|c: char| c.is_ascii_lowercase())
                && w.chars()
                    .all(|c| c.is_ascii_lowercase() || c == '_' || c.is_ascii_digit())
        })
        .map(str::to_string)
        .collect()
}

#[test]
fn the_documented_fields_are_in_each_document() {
    let cases: &[(&str, &[&str])] = &[
        // A vision-language model: its summary has every text field and the encoders'.
        ("show", &["show", "Qwen/Qwen3.5-35B-A3B", "--json"]),
        ("models", &["models", "--json"]),
        (
            "plan",
            &[
                "plan",
                "Qwen/Qwen3-8B",
                "--gpu",
                "h100",
                "--max-gpus",
                "2",
                "--price",
                "2",
                "--all",
                "--json",
            ],
        ),
        (
            "compare",
            &[
                "compare",
                "Llama-3.1-8B",
                "Qwen3-8B",
                "--gpu",
                "h100",
                "--kv-dtype",
                "fp8",
                "--json",
            ],
        ),
        (
            "compare --slot",
            &[
                "compare",
                "--slot",
                "attention",
                "deepseek-ai/DeepSeek-V3",
                "Qwen/Qwen3-Next-80B-A3B",
                "--hidden",
                "7168",
                "--gpu",
                "b200",
                "--json",
            ],
        ),
        (
            "analyze",
            // Does not fit one H200: the overflows.
            &[
                "analyze",
                "Qwen/Qwen3-Next-80B-A3B",
                "--gpu",
                "H200",
                "--json",
            ],
        ),
        (
            "analyze",
            // A vision-language model that fits, with an image per request: its encoding.
            &[
                "analyze",
                "Qwen/Qwen3.5-35B-A3B",
                "--gpu",
                "H200",
                "--images",
                "1",
                "--json",
            ],
        ),
    ];
    // Words the prose uses as values, not field names.
    let values = [
        "ok",
        "failed",
        "usage",
        "retry",
        "last",
        "all",
        "weights",
        "bytes",
        "requests",
        "exact",
        "unverified",
        "does_not_fit",
    ];
    // A command's fields are those of all its cases together (a field may need a model that
    // does not fit, or one with an image input).
    let mut docs: BTreeMap<&str, (Vec<String>, Vec<String>)> = BTreeMap::new();
    for (command, args) in cases {
        let doc = run(args);
        let (have, texts) = docs.entry(command).or_default();
        keys(&doc, have);
        texts.push(doc.to_string());
    }
    for (command, (have, texts)) in docs {
        let names = documented(command);
        assert!(
            names.len() >= 4,
            "{command}: docs/cli.md names too few fields: {names:?}"
        );
        let missing: Vec<String> = names
            .into_iter()
            .filter(|f| !values.contains(&f.as_str()) && !have.contains(f))
            .collect();
        assert!(
            missing.is_empty(),
            "{command}: documented but not in its JSON: {missing:?}\n{}",
            texts.join("\n")
        );
    }
}
