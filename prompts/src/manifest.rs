//! The component manifest: one entry per library component (name, role, dims, one line saying
//! what it is), so an agent picks components instead of re-inventing them.

use harch_engine::Repo;
use serde::Serialize;

#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct ManifestEntry {
    pub name: String,
    pub role: String,
    pub dims: Vec<String>,
    /// Slots a block template offers (empty for plain components).
    pub slots: Vec<String>,
    pub summary: String,
    /// The forward-source class it renders, when its author named one.
    pub source: Option<String>,
}

/// Every library (non-draft) component, sorted by role then name.
pub fn component_manifest(repo: &Repo) -> Vec<ManifestEntry> {
    let mut out: Vec<ManifestEntry> = repo
        .library_components()
        .into_iter()
        .filter_map(|(name, role, summary)| {
            let (def, _) = repo.component_def(name)?;
            Some(ManifestEntry {
                name: name.to_string(),
                role: role.to_string(),
                dims: def.dims.clone(),
                slots: def.slots.clone(),
                summary: one_line(summary),
                source: def.source.clone(),
            })
        })
        .collect();
    out.sort_by(|a, b| a.role.cmp(&b.role).then_with(|| a.name.cmp(&b.name)));
    out
}

/// The manifest as prompt text: `name [role] dims: … slots: …` then the summary.
pub(crate) fn manifest_text(entries: &[ManifestEntry]) -> String {
    let mut s = String::new();
    for e in entries {
        s.push_str(&format!("- {} [role: {}]", e.name, e.role));
        if !e.dims.is_empty() {
            s.push_str(&format!(" dims: {}", e.dims.join(", ")));
        }
        if !e.slots.is_empty() {
            s.push_str(&format!(" slots: {}", e.slots.join(", ")));
        }
        s.push_str(&format!("\n  {}", e.summary));
        if let Some(src) = &e.source {
            s.push_str(&format!(" (source: {src})"));
        }
        s.push('\n');
    }
    s
}

fn one_line(s: &str) -> String {
    s.split_whitespace().collect::<Vec<_>>().join(" ")
}
