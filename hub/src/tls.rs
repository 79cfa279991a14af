//! The one TLS crypto provider harch builds: rustls on ring (Rust with a few C and assembly
//! files, where aws-lc-rs is a cmake C build several times longer). reqwest is compiled without
//! a provider of its own, so every client builder in the process calls [`install_provider`]
//! first.

/// Makes ring rustls's process-wide provider, once; a provider already installed is kept.
pub fn install_provider() {
    let _ = rustls::crypto::ring::default_provider().install_default();
}
