//! Storage schemes against the checkpoint's own names for their stored tensors. Which schemes
//! a config's `quantization_config` calls for is the packing guard's (harch-guards
//! `quant_config`, P004/P005, from each scheme's `implements:`).

use crate::schema::StoredDef;

/// The checkpoint name of one stored tensor of a leaf named `name` (`layers.0.attn.wkv.weight`):
/// `leaf:` replaces the leaf's own name, the last dotted segment (DeepSeek-V4 stores the scale of
/// `w1.weight` as `w1.scale`); `suffix:` is appended after that (`weight_scale_inv`).
pub fn stored_name(name: &str, s: &StoredDef) -> String {
    let base = match &s.leaf {
        Some(leaf) => match name.rsplit_once('.') {
            Some((head, _)) => format!("{head}.{leaf}"),
            None => leaf.clone(),
        },
        None => name.to_string(),
    };
    format!("{base}{}", s.suffix)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn stored(leaf: Option<&str>, suffix: &str) -> StoredDef {
        StoredDef {
            suffix: suffix.into(),
            leaf: leaf.map(str::to_string),
            dtype: "F8_E8M0".into(),
            shape: None,
            scale: true,
        }
    }

    #[test]
    fn a_scheme_renames_the_leaf_or_appends_to_it() {
        let n = "layers.0.ffn.experts.3.w1.weight";
        assert_eq!(
            stored_name(n, &stored(Some("scale"), "")),
            "layers.0.ffn.experts.3.w1.scale"
        );
        assert_eq!(
            stored_name(n, &stored(None, "_scale_inv")),
            "layers.0.ffn.experts.3.w1.weight_scale_inv"
        );
        assert_eq!(stored_name("weight", &stored(Some("scale"), "")), "scale");
        assert_eq!(stored_name(n, &stored(None, "")), n);
    }
}
