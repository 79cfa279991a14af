//! Test support: files of the pinned transformers releases, as `scripts/fetch-transformers-src`
//! extracts them under `.cache/transformers/<version>/models/<model_type>/`.

/// `<prefix>_<model_type>.py` of a pinned release (`prefix`: `modeling` or `configuration`),
/// as (file name, text).
pub fn file(version: &str, model_type: &str, prefix: &str) -> (String, String) {
    let name = format!("{prefix}_{model_type}.py");
    let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../.cache/transformers")
        .join(version)
        .join("models")
        .join(model_type)
        .join(&name);
    let text = std::fs::read_to_string(&path).unwrap_or_else(|e| {
        panic!(
            "{}: {e} (run scripts/fetch-transformers-src)",
            path.display()
        )
    });
    (name, text)
}
