//! A cache dtype's anchor is the statement that writes or casts what that cache holds (M061):
//! a quote of the softmax's float32 upcast or of a norm's internal upcast occurs in the source
//! but produces nothing the cache keeps.
//!
//! The statements that produce a cache's contents are read by [`crate::pysrc::flow`]: every
//! write of that kind of cache (`past_key_values.update(k, v, …)`, a state store or update
//! call) and, backwards from it, the statements that bind what it writes. Where the source
//! has no write of that kind the reader cannot follow, nothing is concluded here (the other
//! checks of the anchor still hold it to the source's text).

use std::collections::{BTreeMap, BTreeSet};

use crate::pysrc::flow::{CacheKind, Write, cache_writes, producers};
use crate::pysrc::{At, Sources};

pub struct Producers<'s> {
    src: Sources<'s>,
    by_kind: BTreeMap<CacheKind, (Vec<Write>, BTreeSet<At>)>,
}

impl<'s> Producers<'s> {
    pub fn read(files: &[(&'s String, &'s String)]) -> Producers<'s> {
        let src = Sources::read(files);
        let mut by_kind: BTreeMap<CacheKind, (Vec<Write>, BTreeSet<At>)> = BTreeMap::new();
        for w in cache_writes(&src) {
            let p = producers(&src, &w);
            let e = by_kind.entry(w.kind).or_default();
            e.1.extend(p);
            e.0.push(w);
        }
        Producers { src, by_kind }
    }

    /// Why no snippet is a statement that produces what a `kind` cache holds and names the
    /// dtype (`words`); `None` when one is, or when the source shows no write of that kind.
    pub fn fault(&self, kind: CacheKind, snippets: &[String], words: &[&str]) -> Option<String> {
        let (writes, made) = self.by_kind.get(&kind)?;
        let names = |at: At| {
            let t = self.src.modules[at.0].stmt_text(at.1).to_ascii_lowercase();
            words.iter().any(|w| t.contains(w))
        };
        let mut seen_in: Vec<At> = Vec::new();
        for s in snippets {
            for occ in self.src.locate(s) {
                if occ.iter().any(|at| made.contains(at) && names(*at)) {
                    return None;
                }
                seen_in.extend(occ.first().copied());
            }
        }
        let what = match kind {
            CacheKind::Kv => "the keys and values the cache stores",
            CacheKind::State => "the recurrent state the cache stores",
            CacheKind::Conv => "the convolution window the cache stores",
        };
        let quoted = match seen_in.first() {
            Some(at) => format!(
                "the quote is in {}, which does not write or cast {what}",
                self.src.describe(*at)
            ),
            None => "the quote lies in no statement (a comment or docstring)".to_string(),
        };
        let write = self.src.describe(writes[0].at);
        let casting: Vec<String> = made
            .iter()
            .filter(|at| names(**at))
            .take(3)
            .map(|at| self.src.describe(*at))
            .collect();
        let expected = if casting.is_empty() {
            format!(
                "the statement that casts what {write} stores; no statement producing it names this dtype"
            )
        } else {
            format!(
                "a statement that produces what {write} stores in this dtype: {}",
                casting.join(", ")
            )
        };
        Some(format!("{quoted}; the guard expected {expected}"))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A modeling file of the pinned transformers releases (scripts/fetch-transformers-src).
    fn modeling(version: &str, model_type: &str) -> (String, String) {
        crate::pinned::file(version, model_type, "modeling")
    }

    fn fault(file: &(String, String), kind: CacheKind, quote: &str) -> Option<String> {
        let p = Producers::read(&[(&file.0, &file.1)]);
        p.fault(kind, &[quote.to_string()], &["float32", ".float()"])
    }

    #[test]
    fn an_upcast_that_the_cache_does_not_keep_is_no_anchor() {
        // GLM-4.5's attention: the softmax's upcast occurs, but the keys the cache stores
        // are never cast.
        let glm = modeling("4.57.6", "glm4_moe");
        let why = fault(
            &glm,
            CacheKind::Kv,
            "nn.functional.softmax(attn_weights, dim=-1, dtype=torch.float32)",
        )
        .expect("the softmax is not what the cache keeps");
        assert!(why.contains("does not write or cast"), "{why}");
        assert!(why.contains("past_key_values.update("), "{why}");
        // DeepSeek-V3's latent: the RMSNorm's internal upcast.
        let ds = modeling("4.57.6", "deepseek_v3");
        let why = fault(
            &ds,
            CacheKind::Kv,
            "hidden_states = hidden_states.to(torch.float32)",
        )
        .expect("the norm's upcast is not what the cache keeps");
        assert!(
            why.contains("DeepseekV3") || why.contains("modeling_deepseek_v3.py"),
            "{why}"
        );
    }

    #[test]
    fn the_statement_that_produces_the_state_is_an_anchor() {
        // Qwen3-Next: the delta rule's float32 inputs build the state it returns.
        let next = modeling("4.57.6", "qwen3_next");
        let q = "x.transpose(1, 2).contiguous().to(torch.float32) for x in (query, key, value, beta, g)";
        assert_eq!(fault(&next, CacheKind::State, q), None);
        // Kimi-Linear casts the state as it stores it.
        let kimi = modeling("5.23.0", "kimi_linear");
        let store = "cache_params.update_recurrent_state(last_recurrent_state.to(torch.float32), self.layer_idx)";
        assert_eq!(fault(&kimi, CacheKind::State, store), None);
        // The same file's softmax upcast is no anchor for its state.
        let why = fault(
            &kimi,
            CacheKind::State,
            "attn_weights = nn.functional.softmax(attn_weights, dim=-1, dtype=torch.float32)",
        )
        .expect("not the state");
        assert!(why.contains("update_recurrent_state"), "{why}");
    }
}
