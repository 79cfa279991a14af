//! Where harch's caches live (the Hub cache and the inventory cache) when no variable names one.

use std::path::PathBuf;

/// `$XDG_CACHE_HOME/harch/<name>`, else `~/.cache/harch/<name>`: where harch's caches live
/// when no variable names one.
pub fn harch_cache_dir(name: &str) -> Option<PathBuf> {
    let base = std::env::var_os("XDG_CACHE_HOME")
        .map(PathBuf::from)
        .or_else(|| std::env::var_os("HOME").map(|h| PathBuf::from(h).join(".cache")))?;
    Some(base.join("harch").join(name))
}
