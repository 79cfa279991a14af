//! `[publish]` resolved into a target: which repository, which remote, which API, which token.
//! Nothing here prints or stores the token; [`Token`]'s `Debug` is redacted.

use std::path::{Path, PathBuf};

use anyhow::bail;

use super::PublishError;
use harch_jobs::config::{AgentSettings, PublishSettings};

/// The publishing token. Only [`Token::expose`] reveals it, and only the git credential
/// helper's environment and the GitHub client's authorization header call it.
#[derive(Clone)]
pub struct Token(String);

impl Token {
    pub fn new(secret: String) -> Token {
        Token(secret)
    }
    pub fn expose(&self) -> &str {
        &self.0
    }
}

impl std::fmt::Debug for Token {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Token(<redacted>)")
    }
}

/// Who publishes.
#[derive(Clone, Debug)]
pub enum Auth {
    /// A token (fine-grained personal access token, or any token minted elsewhere).
    Token(Token),
    /// A GitHub App: an installation token is minted for each publish.
    App {
        app_id: u64,
        /// The app's private key (PEM).
        key: Token,
        /// 0: the app's installation on the repository, looked up.
        installation_id: u64,
        key_env: String,
    },
}

/// Where one publish goes.
#[derive(Clone, Debug)]
pub struct Target {
    pub owner: String,
    pub name: String,
    pub remote_url: String,
    pub base_branch: String,
    pub branch_prefix: String,
    pub api_url: String,
    pub token_env: String,
    pub auth: Auth,
    pub author_name: String,
    pub author_email: String,
    pub max_wait_s: u64,
    pub clone_dir: PathBuf,
}

impl Target {
    /// `owner/name`.
    pub fn repo(&self) -> String {
        format!("{}/{}", self.owner, self.name)
    }

    /// The model's branch: `<prefix><org>__<name>`.
    pub fn branch(&self, model_id: &str) -> String {
        branch_name(&self.branch_prefix, model_id)
    }
}

/// The deterministic branch of a model (`harch/` + `deepseek-ai__DeepSeek-V3`).
pub fn branch_name(prefix: &str, model_id: &str) -> String {
    format!("{prefix}{}", model_slug(model_id))
}

/// Whether git accepts `name` as a reference (the rules of `git check-ref-format`).
pub fn is_valid_ref(name: &str) -> bool {
    let bad_char = |c: char| c.is_ascii_control() || " ~^:?*[\\".contains(c);
    !name.is_empty()
        && name != "@"
        && !name.contains("..")
        && !name.contains("@{")
        && !name.chars().any(bad_char)
        && !name.ends_with('.')
        && name
            .split('/')
            .all(|part| !part.is_empty() && !part.starts_with('.') && !part.ends_with(".lock"))
}

/// `org/name` → `org__name`, the name used for branches and provenance files.
pub fn model_slug(model_id: &str) -> String {
    model_id.replace('/', "__")
}

/// The target `[publish]` selects, or None when publishing is not configured (a dry run).
/// `env` looks up environment variables; `data_dir` holds the default clone.
pub fn resolve(
    s: &PublishSettings,
    data_dir: &Path,
    env: impl Fn(&str) -> Option<String>,
) -> Result<Option<Target>, PublishError> {
    let repo = s.repo.trim();
    if repo.is_empty() {
        return Ok(None);
    }
    let (owner, name) = split_repo(repo).map_err(|e| PublishError::permanent(e.to_string()))?;
    let secret = |var: &str, what: &str| {
        env(var).filter(|t| !t.trim().is_empty()).ok_or_else(|| {
            PublishError::permanent(format!(
                "publish.repo is `{repo}` but ${var} is empty: set it to {what} (docs/publishing.md)"
            ))
        })
    };
    let auth = if s.app_id != 0 {
        Auth::App {
            app_id: s.app_id,
            key: Token::new(secret(
                &s.app_key_env,
                "the GitHub App's private key (PEM)",
            )?),
            installation_id: s.installation_id,
            key_env: s.app_key_env.clone(),
        }
    } else {
        let t = secret(
            &s.token_env,
            &format!("a token that may push to {repo} and open pull requests"),
        )?;
        Auth::Token(Token::new(t.trim().to_string()))
    };
    let remote_url = if s.remote_url.trim().is_empty() {
        default_remote(&s.api_url, owner, name)
    } else {
        s.remote_url.trim().to_string()
    };
    let clone_dir = if s.clone_dir.trim().is_empty() {
        data_dir
            .join("publish")
            .join(format!("{owner}__{name}.git"))
    } else {
        PathBuf::from(s.clone_dir.trim())
    };
    Ok(Some(Target {
        owner: owner.to_string(),
        name: name.to_string(),
        remote_url,
        base_branch: s.base_branch.trim().to_string(),
        branch_prefix: s.branch_prefix.clone(),
        api_url: s.api_url.trim().trim_end_matches('/').to_string(),
        token_env: s.token_env.clone(),
        auth,
        author_name: s.author_name.clone(),
        author_email: s.author_email.clone(),
        max_wait_s: s.max_wait_s,
        clone_dir,
    }))
}

fn split_repo(repo: &str) -> anyhow::Result<(&str, &str)> {
    let ok = |p: &str| {
        !p.is_empty()
            && p != "."
            && p != ".."
            && p.chars()
                .all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.'))
    };
    match repo.split_once('/') {
        Some((o, n)) if ok(o) && ok(n) => Ok((o, n)),
        _ => bail!("publish.repo `{repo}` is not `owner/name`"),
    }
}

/// `https://github.com/o/n.git` for github.com; for GitHub Enterprise the API's host.
fn default_remote(api_url: &str, owner: &str, name: &str) -> String {
    let api = api_url.trim().trim_end_matches('/');
    let host = api
        .strip_prefix("https://")
        .or_else(|| api.strip_prefix("http://"))
        .unwrap_or(api)
        .split('/')
        .next()
        .unwrap_or("");
    let scheme = if api.starts_with("http://") {
        "http"
    } else {
        "https"
    };
    let host = if host == "api.github.com" || host.is_empty() {
        "github.com"
    } else {
        host
    };
    format!("{scheme}://{host}/{owner}/{name}.git")
}

/// Rejects settings that would leak the token or push where nothing should go. Checked when the
/// settings load, so a worker never starts with them.
pub fn check(s: &PublishSettings, agent: &AgentSettings) -> anyhow::Result<()> {
    if s.repo.trim().is_empty() {
        return Ok(());
    }
    split_repo(s.repo.trim())?;
    let var = s.token_env.trim();
    for (key, name) in [("token_env", var), ("app_key_env", s.app_key_env.trim())] {
        if name.is_empty() {
            bail!("publish.{key} is empty: name the variable that holds the secret");
        }
        if !harch_sandbox::is_forbidden_env(name) {
            bail!(
                "publish.{key} `{name}` is a name the agent sandbox would accept: use one it refuses (GITHUB_TOKEN, GH_TOKEN, HARCH_PUBLISH_TOKEN, or any GITHUB_*, GH_*, HARCH_PUBLISH*, HARCH_GITHUB* name)"
            );
        }
        if name.eq_ignore_ascii_case(agent.openai_api_key_env.trim()) {
            bail!("publish.{key} `{name}` is also agent.openai_api_key_env");
        }
    }
    if has_userinfo(&s.remote_url) {
        bail!(
            "publish.remote_url carries credentials: put the token in ${var}, never in the URL (it would end up in logs and .git/config)"
        );
    }
    let base = s.base_branch.trim();
    if base.is_empty() || !is_valid_ref(&format!("refs/heads/{base}")) {
        bail!("publish.base_branch `{base}` is not a branch name");
    }
    let probe = branch_name(&s.branch_prefix, "org/name");
    if !is_valid_ref(&format!("refs/heads/{probe}")) {
        bail!(
            "publish.branch_prefix `{}` does not make valid branch names",
            s.branch_prefix
        );
    }
    if s.branch_prefix.is_empty() {
        bail!(
            "publish.branch_prefix is empty: the bot's branches need a prefix of their own (e.g. `harch/`)"
        );
    }
    if !(s.api_url.starts_with("https://") || s.api_url.starts_with("http://")) {
        bail!("publish.api_url `{}` is not an http(s) URL", s.api_url);
    }
    Ok(())
}

/// `https://user:secret@host/…` or `https://token@host/…`.
fn has_userinfo(url: &str) -> bool {
    let Some((_, rest)) = url.split_once("://") else {
        return false;
    };
    let authority = rest.split('/').next().unwrap_or("");
    authority.contains('@')
}

#[cfg(test)]
mod tests {
    use super::*;
    use harch_jobs::config::{DEFAULT_TOML, Settings};

    fn settings() -> Settings {
        Settings::parse(DEFAULT_TOML, "default").unwrap()
    }

    #[test]
    fn unconfigured_is_a_dry_run_and_configured_needs_the_token() {
        let s = settings();
        assert!(
            resolve(&s.publish, Path::new("/d"), |_| None)
                .unwrap()
                .is_none()
        );
        let mut p = s.publish.clone();
        p.repo = "acme/specs".into();
        let err = resolve(&p, Path::new("/d"), |_| None).unwrap_err();
        assert!(!err.is_transient());
        assert!(err.to_string().contains("$GITHUB_TOKEN"), "{err}");
        let t = resolve(&p, Path::new("/d"), |k| {
            (k == "GITHUB_TOKEN").then(|| "ghs_secret".to_string())
        })
        .unwrap()
        .unwrap();
        assert!(matches!(&t.auth, Auth::Token(x) if x.expose() == "ghs_secret"));
        assert_eq!(t.remote_url, "https://github.com/acme/specs.git");
        assert_eq!(t.clone_dir, Path::new("/d/publish/acme__specs.git"));
        assert_eq!(
            t.branch("deepseek-ai/DeepSeek-V3"),
            "harch/deepseek-ai__DeepSeek-V3"
        );
        assert!(!format!("{t:?}").contains("ghs_secret"));
        p.app_id = 7;
        let err = resolve(&p, Path::new("/d"), |_| None).unwrap_err();
        assert!(err.to_string().contains("$GITHUB_APP_PRIVATE_KEY"), "{err}");
        let t = resolve(&p, Path::new("/d"), |k| {
            (k == "GITHUB_APP_PRIVATE_KEY").then(|| "-----BEGIN".to_string())
        })
        .unwrap()
        .unwrap();
        assert!(matches!(t.auth, Auth::App { app_id: 7, .. }));
        assert!(!format!("{t:?}").contains("BEGIN"));
    }

    #[test]
    fn enterprise_remotes_follow_the_api_host() {
        assert_eq!(
            default_remote("https://ghe.example.com/api/v3", "o", "n"),
            "https://ghe.example.com/o/n.git"
        );
    }

    #[test]
    fn settings_that_would_leak_the_token_are_rejected() {
        let s = settings();
        let mut p = s.publish.clone();
        p.repo = "acme/specs".into();
        check(&p, &s.agent).unwrap();
        for (field, value, needle) in [
            ("token_env", "MY_TOKEN", "sandbox would accept"),
            ("token_env", "OPENAI_API_KEY", "sandbox would accept"),
            ("app_key_env", "APP_KEY", "sandbox would accept"),
            (
                "remote_url",
                "https://x-access-token:ghp_1@github.com/a/b.git",
                "credentials",
            ),
            ("repo", "acme", "owner/name"),
            ("repo", "acme/../x", "owner/name"),
            ("base_branch", "a..b", "branch name"),
            ("branch_prefix", "", "prefix"),
        ] {
            let mut bad = p.clone();
            match field {
                "token_env" => bad.token_env = value.into(),
                "remote_url" => bad.remote_url = value.into(),
                "app_key_env" => bad.app_key_env = value.into(),
                "repo" => bad.repo = value.into(),
                "base_branch" => bad.base_branch = value.into(),
                _ => bad.branch_prefix = value.into(),
            }
            let err = check(&bad, &s.agent).unwrap_err().to_string();
            assert!(err.contains(needle), "{field}={value}: {err}");
        }
    }

    #[test]
    fn ref_names_follow_git_check_ref_format() {
        for good in [
            "refs/heads/main",
            "refs/heads/harch/org__name",
            "refs/heads/v1.2",
        ] {
            assert!(is_valid_ref(good), "{good}");
        }
        for bad in [
            "refs/heads/a..b",
            "refs/heads/a b",
            "refs/heads/.hidden",
            "refs/heads/x.lock",
            "refs/heads/",
            "refs/heads//x",
            "refs/heads/x.",
            "refs/heads/a@{1}",
            "refs/heads/a:b",
            "refs/heads/a~1",
        ] {
            assert!(!is_valid_ref(bad), "{bad}");
        }
    }
}
