//! Embeds every bundled snapshot in `specs/snapshots/*.json.gz` so the binary serves them from
//! any working directory: adding a snapshot file is all it takes to ship one.

use std::fmt::Write as _;
use std::path::Path;

fn main() {
    let manifest = std::env::var("CARGO_MANIFEST_DIR").expect("cargo sets CARGO_MANIFEST_DIR");
    let dir = Path::new(&manifest).join("../specs/snapshots");
    println!("cargo:rerun-if-changed={}", dir.display());
    let mut entries: Vec<(String, String)> = Vec::new();
    if let Ok(read) = std::fs::read_dir(&dir) {
        for entry in read.flatten() {
            let name = entry.file_name().to_string_lossy().into_owned();
            if let Some(stem) = name.strip_suffix(".json.gz") {
                let path = entry.path().canonicalize().expect("snapshot path resolves");
                println!("cargo:rerun-if-changed={}", path.display());
                entries.push((stem.replacen("__", "/", 1), path.display().to_string()));
            }
        }
    }
    entries.sort();
    let mut out = String::from("pub(crate) static BUNDLED: &[(&str, &[u8])] = &[\n");
    for (id, path) in entries {
        writeln!(out, "    ({id:?}, include_bytes!({path:?})),").unwrap();
    }
    out.push_str("];\n");
    let dest =
        Path::new(&std::env::var("OUT_DIR").expect("cargo sets OUT_DIR")).join("snapshots.rs");
    std::fs::write(dest, out).expect("writing snapshots.rs");
}
