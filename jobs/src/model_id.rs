//! Checks model ids and revisions before anything is queued.
//!
//! Ids become directory names and URL path segments, so anything outside the Hub's rules (and
//! every path trick) is refused here, with the reason.

use anyhow::bail;

/// The Hub caps a repository name at 96 characters; namespaces are shorter in practice.
const MAX_PART: usize = 96;
const MAX_REVISION: usize = 255;

/// Accepts `org/name` where both parts use the Hub's characters `[A-Za-z0-9._-]`.
pub fn check_model_id(id: &str) -> anyhow::Result<()> {
    let Some((org, name)) = id.split_once('/') else {
        bail!("model id `{id}` must have the form org/name");
    };
    if name.contains('/') {
        bail!("model id `{id}` must have exactly one `/` (org/name)");
    }
    for (what, part) in [("organisation", org), ("name", name)] {
        if part.is_empty() {
            bail!("model id `{id}`: the {what} is empty");
        }
        if part.len() > MAX_PART {
            bail!("model id `{id}`: the {what} is longer than {MAX_PART} characters");
        }
        if let Some(c) = part
            .chars()
            .find(|c| !(c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-')))
        {
            bail!(
                "model id `{id}`: character {c:?} is not allowed (use letters, digits, `.`, `_`, `-`)"
            );
        }
        if part.starts_with(['-', '.']) || part.ends_with(['-', '.']) {
            bail!("model id `{id}`: the {what} must not start or end with `-` or `.`");
        }
        if part.contains("..") || part.contains("--") {
            bail!("model id `{id}`: `..` and `--` are not allowed");
        }
    }
    if name.ends_with(".git") {
        bail!("model id `{id}`: a name must not end with .git");
    }
    Ok(())
}

/// Accepts a branch, tag or commit: `[A-Za-z0-9._/-]`, no `..`, no leading `-`, `.` or `/`.
pub fn check_revision(rev: &str) -> anyhow::Result<()> {
    if rev.is_empty() || rev.len() > MAX_REVISION {
        bail!("revision `{rev}` must have 1 to {MAX_REVISION} characters");
    }
    if let Some(c) = rev
        .chars()
        .find(|c| !(c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-' | '/')))
    {
        bail!("revision `{rev}`: character {c:?} is not allowed");
    }
    if rev.starts_with(['-', '.', '/']) || rev.contains("..") || rev.contains("//") {
        bail!("revision `{rev}`: no leading `-`, `.` or `/`, and no `..` or `//`");
    }
    Ok(())
}

/// A file-name-safe key for one model revision (used by the dedupe index).
pub fn revision_key(model_id: &str, revision: &str) -> String {
    format!(
        "{}@{}",
        model_id.replace('/', "__"),
        revision.replace('/', "%2F")
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn accepts_real_ids() {
        for id in [
            "Qwen/Qwen3-8B",
            "meta-llama/Llama-3.1-8B",
            "deepseek-ai/DeepSeek-V2-Lite",
            "openai/gpt-oss-20b",
            "a/b",
        ] {
            check_model_id(id).unwrap();
        }
    }

    #[test]
    fn refuses_path_tricks_and_bad_characters() {
        for id in [
            "Qwen3-8B",
            "../etc/passwd",
            "org/../x",
            "org/..",
            "org/.hidden",
            "-org/name",
            "org/-name",
            "org/name/extra",
            "org/na me",
            "org/na%2Fme",
            "/name",
            "org/",
            "org\\name/x",
            "org/name.git",
            "org/a--b",
            "",
        ] {
            assert!(check_model_id(id).is_err(), "{id} accepted");
        }
        let long = format!("org/{}", "a".repeat(97));
        assert!(check_model_id(&long).is_err());
    }

    #[test]
    fn revisions() {
        for r in ["main", "v1.0", "refs/pr/3", "0123abcd"] {
            check_revision(r).unwrap();
        }
        for r in ["", "../x", "-x", "a b", "/abs", "a//b"] {
            assert!(check_revision(r).is_err(), "{r} accepted");
        }
        assert_eq!(
            revision_key("Qwen/Qwen3-8B", "refs/pr/3"),
            "Qwen__Qwen3-8B@refs%2Fpr%2F3"
        );
    }
}
