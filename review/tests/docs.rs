//! docs/review.md documents what the crate does: every report error code has a section, and the
//! grammar and its examples appear exactly as the prompts show them.

use std::path::Path;

#[test]
fn every_report_code_and_the_grammar_are_documented() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    let docs = std::fs::read_to_string(root.join("docs/review.md")).unwrap();
    let src = std::fs::read_to_string(root.join("review/src/report.rs")).unwrap();
    let codes: Vec<&str> = src
        .lines()
        .filter(|l| l.trim_start().starts_with("pub const") && l.contains(": &str = \"E"))
        .filter_map(|l| l.split('"').nth(1))
        .collect();
    assert_eq!(codes.len(), 9, "{codes:?}");
    for c in codes {
        assert!(
            docs.contains(&format!("\n## {c}\n")),
            "docs/review.md has no section for {c}"
        );
    }
    assert!(docs.contains(harch_review::GRAMMAR));
    assert!(docs.contains(harch_review::EXAMPLES));
}
