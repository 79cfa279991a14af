//! Every error code defined in the engine and the guards has a section in docs/guards.md.

use std::path::Path;

fn codes_in(src: &str) -> Vec<String> {
    src.lines()
        .filter(|l| l.trim_start().starts_with("pub const") && l.contains(": &str = \""))
        .filter_map(|l| l.split('"').nth(1).map(str::to_string))
        .filter(|c| c.len() == 4 && c.chars().skip(1).all(|d| d.is_ascii_digit()))
        .collect()
}

#[test]
fn every_code_has_a_doc_section() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    let docs = std::fs::read_to_string(root.join("docs/guards.md")).unwrap();
    let mut files = vec![
        root.join("engine/src/diag.rs"),
        root.join("guards/src/lib.rs"),
    ];
    // Every source file of the guards, nested modules (semantic/…) included.
    let mut dirs = vec![root.join("guards/src")];
    while let Some(d) = dirs.pop() {
        for e in std::fs::read_dir(d).unwrap() {
            let p = e.unwrap().path();
            if p.is_dir() {
                dirs.push(p);
            } else {
                files.push(p);
            }
        }
    }
    let mut all = Vec::new();
    for f in files
        .iter()
        .filter(|f| f.extension().is_some_and(|x| x == "rs"))
    {
        all.extend(codes_in(&std::fs::read_to_string(f).unwrap()));
    }
    all.sort();
    all.dedup();
    assert!(all.len() > 40, "found {} codes", all.len());
    let missing: Vec<&String> = all
        .iter()
        .filter(|c| !docs.contains(&format!("\n## {c}\n")))
        .collect();
    assert!(
        missing.is_empty(),
        "codes without a section in docs/guards.md: {missing:?}"
    );
}
