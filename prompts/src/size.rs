//! How big a prompt is, in bytes and estimated tokens.

use serde::Serialize;

/// Bytes per token the estimate assumes. BPE tokenizers of the agents' models average about 4
/// bytes per token on English prose and 3–3.5 on code, JSON and tensor lists, which make up most
/// of a generate prompt; 3 keeps the estimate on the safe (high) side.
pub const BYTES_PER_TOKEN: f64 = 3.0;

/// Size of a rendered prompt and of its larger parts.
#[derive(Clone, Debug, Default, PartialEq, Serialize)]
pub struct PromptSize {
    pub bytes: usize,
    pub est_tokens: usize,
    /// (fragment, bytes) for the fragments the prompt was built from, largest first.
    pub fragments: Vec<(String, usize)>,
}

pub fn estimate_tokens(bytes: usize) -> usize {
    (bytes as f64 / BYTES_PER_TOKEN).ceil() as usize
}

impl PromptSize {
    pub fn of(text: &str, mut fragments: Vec<(String, usize)>) -> PromptSize {
        fragments.sort_by(|a, b| b.1.cmp(&a.1).then_with(|| a.0.cmp(&b.0)));
        PromptSize {
            bytes: text.len(),
            est_tokens: estimate_tokens(text.len()),
            fragments,
        }
    }
}

impl std::fmt::Display for PromptSize {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{} bytes, ~{} tokens", self.bytes, self.est_tokens)?;
        let parts: Vec<String> = self
            .fragments
            .iter()
            .take(4)
            .map(|(n, b)| format!("{n} {b}"))
            .collect();
        if !parts.is_empty() {
            write!(f, " (largest: {})", parts.join(", "))?;
        }
        Ok(())
    }
}
