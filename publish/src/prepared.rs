//! What the bundle is made of before it meets the spec repository ([`Prepared`]) and what the
//! repository's base already holds of it ([`BaseFacts`]): the bundle builds them, the pull
//! request body and the proposal read them.

use std::collections::BTreeMap;

use super::provenance::Provenance;

/// A validated spec with its provenance and diagrams, before it meets the spec repository.
#[derive(Clone, Debug)]
pub struct Prepared {
    pub model_id: String,
    /// The spec's `model:` name.
    pub spec_name: String,
    pub spec_summary: String,
    /// `specs/models/<file>.yaml`.
    pub spec_key: String,
    /// Draft component name → its path in the spec repository.
    pub drafts: BTreeMap<String, String>,
    /// Every file of the bundle (spec, drafts, provenance) by repository path.
    pub files: BTreeMap<String, Vec<u8>>,
    pub provenance_path: String,
    /// The model's Inspector page in the bundle (`specs/pages/<org>__<name>.html`).
    pub page_path: String,
    pub provenance: Provenance,
    pub model_diagram: String,
    /// Draft component name → its diagram.
    pub component_diagrams: BTreeMap<String, String>,
    /// Where the spec came from: `fix`, `generate` or `library`.
    pub spec_origin: String,
    /// The gap report the spec validates with: its numbers in `affects` are unverified, and
    /// the pull request is a draft.
    pub declared_gap: Option<harch_review::gap::Gap>,
}

/// What the spec repository's base branch already holds of this bundle.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct BaseFacts {
    /// The base has no file at the spec's path: a new architecture.
    pub new_spec: bool,
    /// Draft components the base does not hold yet.
    pub new_drafts: Vec<String>,
}
