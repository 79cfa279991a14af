//! The config a guard reads: a composite checkpoint (a vision-language model) nests its text
//! model's settings under `text_config` (and its towers' under `vision_config`), so every guard
//! that holds the text model to config reads the nested keys as it reads a flat config, and
//! counts a spec's `config.text_config.<key>` as a read of `<key>`.

use std::borrow::Cow;

use harch_engine::Analysis;

/// The sub-configs that hold the text model's settings in a composite config, in the order
/// they are looked in.
pub const TEXT_SCOPES: &[&str] = &["text_config"];

/// The sub-configs that hold an encoder tower's settings.
pub const ENCODER_SCOPES: &[&str] = &["vision_config", "audio_config"];

/// The text model's config as one flat object: the top level's keys, then every key of a text
/// scope the top level lacks (the top level is the class the checkpoint loads as: its
/// `architectures` and `tie_word_embeddings` are the ones that hold). A flat config comes
/// back borrowed.
pub fn text(config: &serde_json::Value) -> Cow<'_, serde_json::Value> {
    let Some(top) = config.as_object() else {
        return Cow::Borrowed(config);
    };
    let nested: Vec<&serde_json::Map<String, serde_json::Value>> = TEXT_SCOPES
        .iter()
        .filter_map(|s| top.get(*s).and_then(|v| v.as_object()))
        .collect();
    if nested.is_empty() {
        return Cow::Borrowed(config);
    }
    let mut flat = top.clone();
    for scope in nested {
        for (k, v) in scope {
            let absent = flat.get(k).is_none_or(|t| t.is_null());
            if absent {
                flat.insert(k.clone(), v.clone());
            }
        }
    }
    Cow::Owned(serde_json::Value::Object(flat))
}

/// A config path the spec read, with a text scope's prefix taken off (`config.text_config.x`
/// reads `config.x`).
pub fn text_path(read: &str) -> &str {
    for s in TEXT_SCOPES {
        if let Some(rest) = read
            .strip_prefix("config.")
            .and_then(|r| r.strip_prefix(*s))
            .and_then(|r| r.strip_prefix('.'))
        {
            // `config.` and the scope are both in `read`; give back `config.<rest>` as a slice
            // of it.
            let start = read.len() - rest.len() - "config.".len();
            return &read[start..];
        }
    }
    read
}

/// Whether `read` (a path as the analysis records it) reads `key` of the text model, directly
/// or below it (`config.key`, `config.key.x`, `config.key[i]`, or the same under a text scope).
fn path_reads(read: &str, key: &str) -> bool {
    let r = text_path(read);
    let Some(rest) = r.strip_prefix("config.").and_then(|r| r.strip_prefix(key)) else {
        return false;
    };
    rest.is_empty() || rest.starts_with('.') || rest.starts_with('[')
}

/// Whether the spec reads the text model's config key `key` in some binding.
pub fn reads_key(a: &Analysis, key: &str) -> bool {
    a.config_reads.iter().any(|r| path_reads(r, key))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn a_flat_config_is_borrowed_and_a_nested_one_flattened() {
        let flat = json!({ "hidden_size": 8 });
        assert!(matches!(text(&flat), Cow::Borrowed(_)));
        let nested = json!({
            "architectures": ["Outer"],
            "tie_word_embeddings": false,
            "text_config": { "architectures": ["Inner"], "num_experts_per_tok": 8, "tie_word_embeddings": true },
            "vision_config": { "hidden_size": 1152 }
        });
        let v = text(&nested);
        assert_eq!(v["num_experts_per_tok"], 8);
        assert_eq!(v["architectures"], json!(["Outer"]));
        assert_eq!(v["tie_word_embeddings"], false);
        // A tower's settings are not the text model's.
        assert!(v.get("hidden_size").is_none());
    }

    #[test]
    fn a_nested_read_reads_the_key() {
        assert_eq!(text_path("config.text_config.head_dim"), "config.head_dim");
        assert_eq!(
            text_path("config.vision_config.depth"),
            "config.vision_config.depth"
        );
        assert!(path_reads(
            "config.text_config.layer_types[3]",
            "layer_types"
        ));
        assert!(path_reads("config.head_dim", "head_dim"));
        assert!(!path_reads("config.text_config.head_dim_x", "head_dim"));
        assert!(!path_reads(
            "config.vision_config.hidden_size",
            "hidden_size"
        ));
    }
}
