//! The JSON web token a GitHub App authenticates with (RS256, `iss` = the app id), signed with
//! ring, the crypto rustls already builds. GitHub hands out PKCS#1 keys
//! (`BEGIN RSA PRIVATE KEY`); `openssl genrsa` writes PKCS#8: both are read.

use base64::Engine;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use ring::rand::SystemRandom;
use ring::signature::{RSA_PKCS1_SHA256, RsaKeyPair};
use rustls_pki_types::PrivateKeyDer;
use rustls_pki_types::pem::PemObject;
use serde_json::json;

/// GitHub accepts app JWTs that expire at most ten minutes after they were issued; the issue
/// time is set a minute back for clock drift, as GitHub advises.
const DRIFT_S: u64 = 60;
const LIFETIME_S: u64 = 9 * 60;

/// A JWT for app `app_id`, valid from a minute ago for nine minutes, signed with `pem`. The
/// error says what is wrong with the key, never what it holds.
pub fn app_jwt(app_id: u64, pem: &str) -> Result<String, String> {
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or(0);
    jwt_at(app_id, pem, now)
}

fn jwt_at(app_id: u64, pem: &str, now: u64) -> Result<String, String> {
    let key = key_pair(pem)?;
    let header = json!({"alg": "RS256", "typ": "JWT"});
    let claims = json!({
        "iat": now.saturating_sub(DRIFT_S),
        "exp": now.saturating_sub(DRIFT_S) + LIFETIME_S,
        "iss": app_id.to_string(),
    });
    let input = format!(
        "{}.{}",
        URL_SAFE_NO_PAD.encode(header.to_string()),
        URL_SAFE_NO_PAD.encode(claims.to_string())
    );
    let mut sig = vec![0; key.public().modulus_len()];
    key.sign(
        &RSA_PKCS1_SHA256,
        &SystemRandom::new(),
        input.as_bytes(),
        &mut sig,
    )
    .map_err(|_| "signing with it failed".to_string())?;
    Ok(format!("{input}.{}", URL_SAFE_NO_PAD.encode(sig)))
}

fn key_pair(pem: &str) -> Result<RsaKeyPair, String> {
    let der = PrivateKeyDer::from_pem_slice(pem.as_bytes())
        .map_err(|_| "no PEM private key in it".to_string())?;
    let parsed = match &der {
        PrivateKeyDer::Pkcs1(k) => RsaKeyPair::from_der(k.secret_pkcs1_der()),
        PrivateKeyDer::Pkcs8(k) => RsaKeyPair::from_pkcs8(k.secret_pkcs8_der()),
        _ => return Err("the key is not an RSA key".to_string()),
    };
    parsed.map_err(|e| format!("the RSA key is refused ({e})"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn what_is_not_a_key_is_refused_without_echoing_it() {
        let e = app_jwt(1, "secret-but-not-a-key").unwrap_err();
        assert!(!e.contains("secret"), "{e}");
        let e = app_jwt(
            1,
            "-----BEGIN PRIVATE KEY-----\nAAAA\n-----END PRIVATE KEY-----\n",
        )
        .unwrap_err();
        assert!(e.contains("refused"), "{e}");
    }
}
