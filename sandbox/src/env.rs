//! Which environment variables may enter a sandbox. The child's environment starts empty; callers
//! add variables one by one and this module refuses the ones that publish or belong to GitHub or
//! the Hub, so a mistake in a backend's configuration cannot leak them.

use crate::SandboxError;

/// Exact names that never enter a sandbox.
const FORBIDDEN_NAMES: &[&str] = &[
    "GITHUB_TOKEN",
    "GH_TOKEN",
    "GITHUB_PAT",
    "GH_ENTERPRISE_TOKEN",
    "GITHUB_ENTERPRISE_TOKEN",
    "HF_TOKEN",
    "HUGGING_FACE_HUB_TOKEN",
    "HUGGINGFACE_TOKEN",
    "SSH_AUTH_SOCK",
    "GIT_ASKPASS",
    "SSH_ASKPASS",
];

/// Prefixes that mark a whole family of publishing credentials or configuration.
const FORBIDDEN_PREFIXES: &[&str] = &["GITHUB_", "GH_", "HARCH_PUBLISH", "HARCH_GITHUB"];

/// Whether `name` may be set in a sandboxed child's environment.
pub fn is_forbidden(name: &str) -> bool {
    let upper = name.to_ascii_uppercase();
    FORBIDDEN_NAMES.contains(&upper.as_str())
        || FORBIDDEN_PREFIXES.iter().any(|p| upper.starts_with(p))
}

pub(crate) fn check(name: &str) -> Result<(), SandboxError> {
    if is_forbidden(name) {
        Err(SandboxError::ForbiddenEnv(name.to_string()))
    } else {
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn publishing_credentials_are_forbidden_and_agent_keys_are_not() {
        for name in [
            "GITHUB_TOKEN",
            "gh_token",
            "GH_HOST",
            "HARCH_PUBLISH_TOKEN",
            "HF_TOKEN",
        ] {
            assert!(is_forbidden(name), "{name}");
        }
        for name in [
            "ANTHROPIC_API_KEY",
            "CODEX_API_KEY",
            "KIMI_API_KEY",
            "PATH",
            "HOME",
        ] {
            assert!(!is_forbidden(name), "{name}");
        }
    }
}
