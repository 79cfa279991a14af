//! Worker settings: `queue.toml`, then environment overrides, then command-line flags.
//!
//! The repository's `queue.toml` is compiled in as the defaults, so the documented file and the
//! behaviour of a fresh clone cannot drift apart.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::Duration;

use anyhow::{Context, bail};
use serde::Deserialize;

use crate::stage::Stage;

/// The documented defaults (the repository's `queue.toml`).
pub const DEFAULT_TOML: &str = include_str!("../../queue.toml");

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Settings {
    pub queue: QueueSettings,
    pub worker: WorkerSettings,
    pub stages: StageSettings,
    pub retry: RetrySettings,
    pub agent: AgentSettings,
    #[serde(default)]
    pub review: ReviewSettings,
    pub publish: PublishSettings,
    /// Where the data dir was taken from (filled in by [`Settings::load`]).
    #[serde(skip)]
    pub data_dir_origin: DataDirOrigin,
}

/// What chose the data dir, for the commands that say which queue they use.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum DataDirOrigin {
    /// `--data-dir`.
    Flag,
    /// `$HARCH_DATA_DIR`.
    Env,
    /// `worker.data_dir` in a queue.toml.
    File,
    /// The per-user default ([`user_data_dir`]).
    #[default]
    User,
}

impl DataDirOrigin {
    pub fn as_str(self) -> &'static str {
        match self {
            DataDirOrigin::Flag => "--data-dir",
            DataDirOrigin::Env => "HARCH_DATA_DIR",
            DataDirOrigin::File => "queue.toml",
            DataDirOrigin::User => "per-user default",
        }
    }
}

/// The per-user data dir: `$XDG_DATA_HOME/harch`, else `~/.local/share/harch` (the XDG base
/// directory rule: a relative `XDG_DATA_HOME` is ignored). One queue per user wherever a
/// command runs; a project keeps its own (`.harch/`) only when asked.
pub fn user_data_dir() -> anyhow::Result<PathBuf> {
    user_data_dir_from(|k| std::env::var_os(k).filter(|v| !v.is_empty()))
}

fn user_data_dir_from(get: impl Fn(&str) -> Option<std::ffi::OsString>) -> anyhow::Result<PathBuf> {
    if let Some(xdg) = get("XDG_DATA_HOME").map(PathBuf::from)
        && xdg.is_absolute()
    {
        return Ok(xdg.join("harch"));
    }
    match get("HOME").map(PathBuf::from) {
        Some(home) if home.is_absolute() => Ok(home.join(".local/share/harch")),
        _ => bail!(
            "no per-user data dir: neither XDG_DATA_HOME nor HOME is an absolute path; set \
             HARCH_DATA_DIR or pass --data-dir"
        ),
    }
}

/// The review and fix stages.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ReviewSettings {
    /// Fix-and-review rounds after a NO_PASS review: each runs the fix agent on the verified
    /// findings (when there are any) and reviews the spec again.
    pub rounds: u32,
}

impl Default for ReviewSettings {
    fn default() -> Self {
        ReviewSettings { rounds: 2 }
    }
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct QueueSettings {
    pub url: String,
    pub name: String,
    pub heartbeat_ms: u64,
    pub missed_heartbeats: usize,
    pub batch_size: usize,
    pub recover_interval_s: u64,
    /// Redis: seconds the store keeps a finished ticket (its meta hash, data field and set
    /// member) after it finished.
    pub finished_ttl_s: u64,
    /// Redis: seconds the store keeps a dead worker's keys after its lease ran out.
    pub dead_worker_ttl_s: u64,
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct WorkerSettings {
    pub data_dir: PathBuf,
    pub concurrency: usize,
    pub cancel_poll_ms: u64,
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct StageSettings {
    pub default_timeout_s: u64,
    #[serde(default)]
    pub timeout_s: BTreeMap<String, u64>,
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RetrySettings {
    pub max_attempts: u32,
    pub backoff_initial_ms: u64,
    pub backoff_max_ms: u64,
    pub backoff_factor: f64,
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct AgentSettings {
    pub default: String,
    pub guards: String,
    pub max_turns: u32,
    pub max_cost_usd: f64,
    pub timeout_s: u64,
    #[serde(default = "defaults::attempts")]
    pub attempts: u32,
    #[serde(default = "defaults::max_output_mib")]
    pub max_output_mib: u64,
    #[serde(default = "defaults::yes")]
    pub require_landlock: bool,
    #[serde(default)]
    pub sandbox_user: String,
    #[serde(default = "defaults::claude")]
    pub claude_bin: String,
    #[serde(default = "defaults::codex")]
    pub codex_bin: String,
    #[serde(default = "defaults::kimi")]
    pub kimi_bin: String,
    #[serde(default = "defaults::openai_base_url")]
    pub openai_base_url: String,
    #[serde(default = "defaults::openai_model")]
    pub openai_model: String,
    #[serde(default = "defaults::openai_api_key_env")]
    pub openai_api_key_env: String,
    /// The openai backend's list prices (dollars per million tokens); 0: unknown, no cost counted.
    #[serde(default)]
    pub openai_input_usd_per_mtok: f64,
    #[serde(default)]
    pub openai_output_usd_per_mtok: f64,
    #[serde(default)]
    pub prompt_notes: String,
}

/// Defaults of agent settings added after queue.toml files were written.
mod defaults {
    pub fn attempts() -> u32 {
        3
    }
    pub fn max_output_mib() -> u64 {
        64
    }
    pub fn yes() -> bool {
        true
    }
    pub fn claude() -> String {
        "claude".into()
    }
    pub fn codex() -> String {
        "codex".into()
    }
    pub fn kimi() -> String {
        "kimi".into()
    }
    pub fn openai_base_url() -> String {
        "https://api.openai.com/v1".into()
    }
    pub fn openai_model() -> String {
        "gpt-5".into()
    }
    pub fn openai_api_key_env() -> String {
        "OPENAI_API_KEY".into()
    }
    pub fn github_api() -> String {
        "https://api.github.com".into()
    }
    pub fn token_env() -> String {
        "GITHUB_TOKEN".into()
    }
    pub fn author_name() -> String {
        "harch-bot".into()
    }
    pub fn author_email() -> String {
        "harch-bot@users.noreply.github.com".into()
    }
    pub fn max_wait_s() -> u64 {
        60
    }
    pub fn app_key_env() -> String {
        "GITHUB_APP_PRIVATE_KEY".into()
    }
}

/// Where verified specs are proposed. An empty `repo` makes the publish stage a dry run.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PublishSettings {
    /// `owner/name` of the spec repository on GitHub (or GitHub Enterprise).
    pub repo: String,
    pub base_branch: String,
    pub branch_prefix: String,
    /// Git remote; empty: derived from `api_url` and `repo`.
    #[serde(default)]
    pub remote_url: String,
    #[serde(default = "defaults::github_api")]
    pub api_url: String,
    /// The variable holding the token (never the token itself).
    #[serde(default = "defaults::token_env")]
    pub token_env: String,
    #[serde(default = "defaults::author_name")]
    pub author_name: String,
    #[serde(default = "defaults::author_email")]
    pub author_email: String,
    /// The longest rate-limit wait (`Retry-After`, rate-limit reset) honoured inside the stage;
    /// a longer one becomes a transient failure the runner retries later.
    #[serde(default = "defaults::max_wait_s")]
    pub max_wait_s: u64,
    /// Local clone of the spec repository; empty: `<data_dir>/publish/<owner>__<name>.git`.
    #[serde(default)]
    pub clone_dir: String,
    /// A GitHub App to publish as (0: use the token in `token_env`).
    #[serde(default)]
    pub app_id: u64,
    /// The variable holding the app's private key (PEM).
    #[serde(default = "defaults::app_key_env")]
    pub app_key_env: String,
    /// The app's installation on the spec repository (0: looked up).
    #[serde(default)]
    pub installation_id: u64,
}

// Agent stages ([`Stage::is_agent`]) have their timeout derived from the agent settings unless
// `stages.timeout_s` names one, which must then leave room for every run: a stage timeout that
// fires during a run loses it (it is recorded as interrupted instead of checked and re-prompted).
/// Seconds each run may take besides `agent.timeout_s`: rebuilding the workspace, the TERM
/// grace after a timeout, reading back and validating (seconds for the largest models).
pub const AGENT_RUN_OVERHEAD_S: u64 = 60;
/// Seconds an agent stage may take besides its runs: reading the truth and the library.
pub const AGENT_STAGE_MARGIN_S: u64 = 120;

/// Lays `over` onto `base`, table by table: a key `over` has replaces `base`'s.
fn merge(base: &mut toml::Table, over: toml::Table) {
    for (k, v) in over {
        match (base.get_mut(&k), v) {
            (Some(toml::Value::Table(b)), toml::Value::Table(o)) => merge(b, o),
            (_, v) => {
                base.insert(k, v);
            }
        }
    }
}

/// Where jobs wait.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum QueueUrl {
    Sqlite(PathBuf),
    Redis(String),
}

impl QueueUrl {
    /// Parses `sqlite://PATH` or `redis://…` / `rediss://…`.
    pub fn parse(url: &str) -> anyhow::Result<QueueUrl> {
        if let Some(path) = url.strip_prefix("sqlite://") {
            if path.is_empty() {
                bail!("queue URL `{url}` names no file: use sqlite://path/to/queue.sqlite");
            }
            return Ok(QueueUrl::Sqlite(PathBuf::from(path)));
        }
        if url.starts_with("redis://") || url.starts_with("rediss://") {
            return Ok(QueueUrl::Redis(url.to_string()));
        }
        bail!("queue URL `{url}` is neither sqlite://PATH nor redis://HOST:PORT")
    }

    pub fn backend_name(&self) -> &'static str {
        match self {
            QueueUrl::Sqlite(_) => "sqlite",
            QueueUrl::Redis(_) => "redis",
        }
    }
}

impl std::fmt::Display for QueueUrl {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            QueueUrl::Sqlite(p) => write!(f, "sqlite://{}", p.display()),
            QueueUrl::Redis(u) => f.write_str(u),
        }
    }
}

/// Command-line overrides shared by the queue commands.
#[derive(Debug, Clone, Default, clap::Args)]
pub struct QueueFlags {
    /// Settings file (default: $HARCH_CONFIG, ./queue.toml, or the built-in defaults).
    #[arg(long)]
    pub config: Option<PathBuf>,
    /// Queue URL: sqlite://PATH or redis://HOST:PORT (overrides queue.toml and $HARCH_QUEUE_URL).
    #[arg(long = "queue")]
    pub queue_url: Option<String>,
    /// Directory of job records, artifacts and the SQLite queue (overrides $HARCH_DATA_DIR and
    /// queue.toml's worker.data_dir; default: the per-user $XDG_DATA_HOME/harch, else
    /// ~/.local/share/harch).
    #[arg(long)]
    pub data_dir: Option<PathBuf>,
}

impl Settings {
    /// Parses a settings document; `origin` names it in errors. Keys it leaves out keep the
    /// built-in defaults, so a file may hold only what it changes.
    pub fn parse(text: &str, origin: &str) -> anyhow::Result<Settings> {
        let given: toml::Table =
            toml::from_str(text).with_context(|| format!("invalid settings in {origin}"))?;
        let mut merged: toml::Table =
            toml::from_str(DEFAULT_TOML).context("the built-in queue.toml does not parse")?;
        merge(&mut merged, given);
        toml::Value::Table(merged)
            .try_into()
            .with_context(|| format!("invalid settings in {origin}"))
    }

    /// Reads the settings the flags and environment select.
    pub fn load(flags: &QueueFlags) -> anyhow::Result<Settings> {
        let env = |k: &str| std::env::var(k).ok().filter(|v| !v.is_empty());
        let file = flags
            .config
            .clone()
            .or_else(|| env("HARCH_CONFIG").map(PathBuf::from))
            .or_else(|| Some(PathBuf::from("queue.toml")).filter(|p| p.is_file()));
        let mut settings = match &file {
            Some(path) => {
                let text = std::fs::read_to_string(path)
                    .with_context(|| format!("cannot read settings file {}", path.display()))?;
                Settings::parse(&text, &path.display().to_string())?
            }
            None => Settings::parse(DEFAULT_TOML, "the built-in queue.toml")?,
        };
        settings.data_dir_origin = DataDirOrigin::File;
        settings.apply_env(|k| env(k))?;
        if env("HARCH_DATA_DIR").is_some() {
            settings.data_dir_origin = DataDirOrigin::Env;
        }
        if let Some(url) = &flags.queue_url {
            settings.queue.url = url.clone();
        }
        if let Some(dir) = &flags.data_dir {
            settings.worker.data_dir = dir.clone();
            settings.data_dir_origin = DataDirOrigin::Flag;
        }
        if settings.worker.data_dir.as_os_str().is_empty() {
            settings.worker.data_dir = user_data_dir()?;
            settings.data_dir_origin = DataDirOrigin::User;
        }
        settings.check()?;
        Ok(settings)
    }

    /// Applies the `HARCH_*` overrides documented in queue.toml.
    pub fn apply_env(&mut self, get: impl Fn(&str) -> Option<String>) -> anyhow::Result<()> {
        fn num<T: std::str::FromStr>(key: &str, v: String) -> anyhow::Result<T> {
            v.trim()
                .parse()
                .map_err(|_| anyhow::anyhow!("environment variable {key}=`{v}` is not a number"))
        }
        macro_rules! over {
            ($key:literal, $field:expr, text) => {
                if let Some(v) = get($key) {
                    $field = v.into();
                }
            };
            ($key:literal, $field:expr, num) => {
                if let Some(v) = get($key) {
                    $field = num($key, v)?;
                }
            };
        }
        over!("HARCH_QUEUE_URL", self.queue.url, text);
        over!("HARCH_QUEUE_NAME", self.queue.name, text);
        over!("HARCH_HEARTBEAT_MS", self.queue.heartbeat_ms, num);
        over!("HARCH_MISSED_HEARTBEATS", self.queue.missed_heartbeats, num);
        over!("HARCH_BATCH_SIZE", self.queue.batch_size, num);
        over!(
            "HARCH_RECOVER_INTERVAL_S",
            self.queue.recover_interval_s,
            num
        );
        over!("HARCH_FINISHED_TTL_S", self.queue.finished_ttl_s, num);
        over!("HARCH_DEAD_WORKER_TTL_S", self.queue.dead_worker_ttl_s, num);
        over!("HARCH_DATA_DIR", self.worker.data_dir, text);
        over!("HARCH_CONCURRENCY", self.worker.concurrency, num);
        over!("HARCH_CANCEL_POLL_MS", self.worker.cancel_poll_ms, num);
        over!("HARCH_STAGE_TIMEOUT_S", self.stages.default_timeout_s, num);
        over!("HARCH_RETRY_MAX_ATTEMPTS", self.retry.max_attempts, num);
        over!(
            "HARCH_RETRY_BACKOFF_INITIAL_MS",
            self.retry.backoff_initial_ms,
            num
        );
        over!("HARCH_RETRY_BACKOFF_MAX_MS", self.retry.backoff_max_ms, num);
        over!("HARCH_RETRY_BACKOFF_FACTOR", self.retry.backoff_factor, num);
        over!("HARCH_AGENT", self.agent.default, text);
        over!("HARCH_GUARDS", self.agent.guards, text);
        over!("HARCH_AGENT_MAX_TURNS", self.agent.max_turns, num);
        over!("HARCH_AGENT_MAX_COST_USD", self.agent.max_cost_usd, num);
        over!("HARCH_AGENT_TIMEOUT_S", self.agent.timeout_s, num);
        over!("HARCH_AGENT_ATTEMPTS", self.agent.attempts, num);
        over!("HARCH_AGENT_MAX_OUTPUT_MIB", self.agent.max_output_mib, num);
        over!(
            "HARCH_AGENT_REQUIRE_LANDLOCK",
            self.agent.require_landlock,
            num
        );
        over!("HARCH_SANDBOX_USER", self.agent.sandbox_user, text);
        over!("HARCH_REVIEW_ROUNDS", self.review.rounds, num);
        over!("HARCH_CLAUDE_BIN", self.agent.claude_bin, text);
        over!("HARCH_CODEX_BIN", self.agent.codex_bin, text);
        over!("HARCH_KIMI_BIN", self.agent.kimi_bin, text);
        over!("HARCH_OPENAI_BASE_URL", self.agent.openai_base_url, text);
        over!("HARCH_OPENAI_MODEL", self.agent.openai_model, text);
        over!(
            "HARCH_OPENAI_API_KEY_ENV",
            self.agent.openai_api_key_env,
            text
        );
        over!(
            "HARCH_OPENAI_INPUT_USD_PER_MTOK",
            self.agent.openai_input_usd_per_mtok,
            num
        );
        over!(
            "HARCH_OPENAI_OUTPUT_USD_PER_MTOK",
            self.agent.openai_output_usd_per_mtok,
            num
        );
        over!("HARCH_PROMPT_NOTES", self.agent.prompt_notes, text);
        over!("HARCH_PUBLISH_REPO", self.publish.repo, text);
        over!("HARCH_PUBLISH_BASE_BRANCH", self.publish.base_branch, text);
        over!(
            "HARCH_PUBLISH_BRANCH_PREFIX",
            self.publish.branch_prefix,
            text
        );
        over!("HARCH_PUBLISH_REMOTE_URL", self.publish.remote_url, text);
        over!("HARCH_PUBLISH_API_URL", self.publish.api_url, text);
        over!("HARCH_PUBLISH_TOKEN_ENV", self.publish.token_env, text);
        over!("HARCH_PUBLISH_AUTHOR_NAME", self.publish.author_name, text);
        over!(
            "HARCH_PUBLISH_AUTHOR_EMAIL",
            self.publish.author_email,
            text
        );
        over!("HARCH_PUBLISH_MAX_WAIT_S", self.publish.max_wait_s, num);
        over!("HARCH_PUBLISH_CLONE_DIR", self.publish.clone_dir, text);
        over!("HARCH_PUBLISH_APP_ID", self.publish.app_id, num);
        over!("HARCH_PUBLISH_APP_KEY_ENV", self.publish.app_key_env, text);
        over!(
            "HARCH_PUBLISH_INSTALLATION_ID",
            self.publish.installation_id,
            num
        );
        Ok(())
    }

    /// Rejects values that would make the worker spin or never run.
    pub fn check(&self) -> anyhow::Result<()> {
        if self.worker.concurrency == 0 {
            bail!("worker.concurrency must be at least 1");
        }
        if self.queue.batch_size == 0 {
            bail!("queue.batch_size must be at least 1");
        }
        if self.queue.heartbeat_ms < 1000 {
            bail!(
                "queue.heartbeat_ms must be at least 1000: the stores count leases in whole seconds"
            );
        }
        if self.queue.missed_heartbeats == 0 {
            bail!("queue.missed_heartbeats must be at least 1");
        }
        if self.agent.attempts == 0 {
            bail!("agent.attempts must be at least 1");
        }
        if self.agent.timeout_s == 0 {
            bail!("agent.timeout_s must be at least 1");
        }
        for stage in Stage::AGENT {
            let need = self.agent_stage_need_s(stage);
            if let Some(&set) = self.stages.timeout_s.get(stage.name())
                && set < need
            {
                bail!(
                    "stages.timeout_s.{stage} = {set} s cannot hold its agent runs: it must be at least \
                     {} × agent.attempts ({}) × (agent.timeout_s ({}) + {AGENT_RUN_OVERHEAD_S}) + {AGENT_STAGE_MARGIN_S} = {need} s, \
                     or the stage times out during a run and the run is lost; raise it, or remove it \
                     to have it derived",
                    self.agent_loops(stage),
                    self.agent.attempts,
                    self.agent.timeout_s
                );
            }
        }
        if self.retry.max_attempts == 0 {
            bail!("retry.max_attempts must be at least 1");
        }
        if self.retry.backoff_factor.is_nan() || self.retry.backoff_factor < 1.0 {
            bail!("retry.backoff_factor must be at least 1.0");
        }
        if self.queue.finished_ttl_s == 0 || self.queue.dead_worker_ttl_s == 0 {
            bail!("queue.finished_ttl_s and queue.dead_worker_ttl_s must be at least 1");
        }
        if self.queue.name.trim().is_empty() {
            bail!("queue.name must not be empty");
        }
        self.queue_url()?;
        Ok(())
    }

    /// `queue sqlite://… (data dir …, from …)`: the line commands print to say which queue
    /// they used.
    pub fn describe_queue(&self) -> String {
        let url = self
            .queue_url()
            .map_or_else(|_| self.queue.url.clone(), |u| u.to_string());
        format!(
            "queue {url}, data dir {} ({})",
            self.worker.data_dir.display(),
            self.data_dir_origin.as_str()
        )
    }

    /// The queue the settings select; empty means SQLite inside the data dir.
    pub fn queue_url(&self) -> anyhow::Result<QueueUrl> {
        if self.queue.url.trim().is_empty() {
            return Ok(QueueUrl::Sqlite(self.worker.data_dir.join("queue.sqlite")));
        }
        QueueUrl::parse(self.queue.url.trim())
    }

    pub fn data_dir(&self) -> &Path {
        &self.worker.data_dir
    }

    pub fn heartbeat(&self) -> Duration {
        Duration::from_millis(self.queue.heartbeat_ms)
    }

    /// How long the store waits for a silent worker before handing its jobs on.
    pub fn lease(&self) -> Duration {
        self.heartbeat() * self.queue.missed_heartbeats as u32
    }

    pub fn recover_interval(&self) -> Duration {
        Duration::from_secs(self.queue.recover_interval_s.max(1))
    }

    /// A stage's timeout ([`StageSettings::timeout`]).
    pub fn stage_timeout(&self, stage: Stage) -> Duration {
        self.stages.timeout(stage, &self.agent, &self.review)
    }

    /// The least timeout an agent loop needs ([`AgentSettings::loop_timeout_s`]).
    pub fn agent_stage_timeout_s(&self) -> u64 {
        self.agent.loop_timeout_s()
    }

    /// Agent loops one run of `stage` may go through ([`ReviewSettings::agent_loops`]).
    pub fn agent_loops(&self, stage: Stage) -> u64 {
        self.review.agent_loops(stage)
    }

    /// The least timeout an agent stage needs: every loop it runs at its full budget.
    pub fn agent_stage_need_s(&self, stage: Stage) -> u64 {
        agent_stage_need_s(stage, &self.agent, &self.review)
    }

    /// Backoff before attempt `attempt + 1` ([`RetrySettings::backoff`]).
    pub fn backoff(&self, attempt: u32) -> Duration {
        self.retry.backoff(attempt)
    }

    /// The sections the pipeline reads: its stages, their retries and agents, review and
    /// publishing, never the queue's own.
    pub fn pipeline(&self) -> PipelineSettings {
        PipelineSettings {
            data_dir: self.worker.data_dir.clone(),
            cancel_poll_ms: self.worker.cancel_poll_ms,
            stages: self.stages.clone(),
            retry: self.retry.clone(),
            agent: self.agent.clone(),
            review: self.review.clone(),
            publish: self.publish.clone(),
        }
    }
}

/// What the pipeline reads of the settings ([`Settings::pipeline`]). The runner reads the
/// timeouts, retries and cancel poll; each stage gets only its own sections from the dispatch
/// (an agent stage `agent`, fix also `review`, publish `publish`), never this whole struct.
#[derive(Debug, Clone)]
pub struct PipelineSettings {
    /// Where the job records are (the publish stage's clone defaults to a directory in it).
    pub data_dir: PathBuf,
    /// How often a running stage looks for a `cancel` (`worker.cancel_poll_ms`).
    pub cancel_poll_ms: u64,
    pub stages: StageSettings,
    pub retry: RetrySettings,
    pub agent: AgentSettings,
    pub review: ReviewSettings,
    pub publish: PublishSettings,
}

impl PipelineSettings {
    /// A stage's timeout ([`StageSettings::timeout`]).
    pub fn stage_timeout(&self, stage: Stage) -> Duration {
        self.stages.timeout(stage, &self.agent, &self.review)
    }
}

impl StageSettings {
    /// A stage's timeout: `stages.timeout_s.<stage>`, else for agent stages room for every run
    /// ([`agent_stage_need_s`]), else `stages.default_timeout_s`.
    pub fn timeout(
        &self,
        stage: Stage,
        agent: &AgentSettings,
        review: &ReviewSettings,
    ) -> Duration {
        let secs = match self.timeout_s.get(stage.name()) {
            Some(&s) => s,
            None if stage.is_agent() => agent_stage_need_s(stage, agent, review),
            None => self.default_timeout_s,
        };
        Duration::from_secs(secs)
    }
}

impl AgentSettings {
    /// The least timeout an agent loop needs: every run of its budget at its time limit.
    pub fn loop_timeout_s(&self) -> u64 {
        u64::from(self.attempts)
            .saturating_mul(self.timeout_s.saturating_add(AGENT_RUN_OVERHEAD_S))
            .saturating_add(AGENT_STAGE_MARGIN_S)
    }
}

impl ReviewSettings {
    /// Agent loops one run of `stage` may go through: one, except fix, whose every review
    /// round is a fix loop and a review loop.
    pub fn agent_loops(&self, stage: Stage) -> u64 {
        match stage {
            Stage::Fix => 2 * u64::from(self.rounds.max(1)),
            _ => 1,
        }
    }
}

/// The least timeout an agent stage needs: every loop it runs at its full budget.
pub fn agent_stage_need_s(stage: Stage, agent: &AgentSettings, review: &ReviewSettings) -> u64 {
    review
        .agent_loops(stage)
        .saturating_mul(agent.loop_timeout_s())
}

impl RetrySettings {
    /// Backoff before attempt `attempt + 1`, after `attempt` failures (1-based).
    pub fn backoff(&self, attempt: u32) -> Duration {
        let exp = self.backoff_factor.powi(attempt.saturating_sub(1) as i32);
        let ms = (self.backoff_initial_ms as f64 * exp).min(self.backoff_max_ms as f64);
        Duration::from_millis(ms as u64)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn built_in_defaults_parse_and_select_embedded_sqlite() {
        let s = Settings::parse(DEFAULT_TOML, "default").unwrap();
        s.check().unwrap();
        // An empty data_dir is the per-user one, chosen by `load`.
        assert_eq!(s.worker.data_dir, PathBuf::new());
        assert_eq!(
            s.queue_url().unwrap(),
            QueueUrl::Sqlite(PathBuf::from("queue.sqlite"))
        );
        assert_eq!(s.stage_timeout(Stage::Fetch), Duration::from_secs(300));
        assert_eq!(s.stage_timeout(Stage::Noop), Duration::from_secs(600));
    }

    #[test]
    fn the_per_user_data_dir_follows_xdg() {
        use std::ffi::OsString;
        let env = |pairs: &'static [(&'static str, &'static str)]| {
            move |k: &str| {
                pairs
                    .iter()
                    .find(|(key, _)| *key == k)
                    .map(|(_, v)| OsString::from(v))
            }
        };
        assert_eq!(
            user_data_dir_from(env(&[("XDG_DATA_HOME", "/x/data"), ("HOME", "/h")])).unwrap(),
            PathBuf::from("/x/data/harch")
        );
        assert_eq!(
            user_data_dir_from(env(&[("XDG_DATA_HOME", "rel"), ("HOME", "/h")])).unwrap(),
            PathBuf::from("/h/.local/share/harch")
        );
        let err = user_data_dir_from(env(&[])).unwrap_err().to_string();
        assert!(err.contains("HARCH_DATA_DIR"), "{err}");
    }

    #[test]
    fn environment_overrides_the_file() {
        let mut s = Settings::parse(DEFAULT_TOML, "default").unwrap();
        s.apply_env(|k| match k {
            "HARCH_QUEUE_URL" => Some("redis://127.0.0.1:6379".into()),
            "HARCH_CONCURRENCY" => Some("7".into()),
            _ => None,
        })
        .unwrap();
        assert_eq!(s.worker.concurrency, 7);
        assert_eq!(s.queue_url().unwrap().backend_name(), "redis");
        let err = s
            .apply_env(|k| (k == "HARCH_CONCURRENCY").then(|| "many".into()))
            .unwrap_err();
        assert!(err.to_string().contains("HARCH_CONCURRENCY"), "{err}");
    }

    #[test]
    fn backoff_grows_and_is_capped() {
        let s = Settings::parse(DEFAULT_TOML, "default").unwrap();
        assert_eq!(s.backoff(1), Duration::from_millis(2000));
        assert_eq!(s.backoff(2), Duration::from_millis(4000));
        assert_eq!(s.backoff(30), Duration::from_millis(120_000));
    }

    #[test]
    fn agent_stage_timeouts_hold_every_run() {
        let mut s = Settings::parse(DEFAULT_TOML, "default").unwrap();
        s.check().unwrap();
        // 3 × (3600 + 60) + 120: a hanging agent is killed at its own limit, recorded and
        // re-prompted long before the stage's timeout.
        assert_eq!(
            s.stage_timeout(Stage::Generate),
            Duration::from_secs(11_100)
        );
        assert_eq!(
            s.stage_timeout(Stage::Review),
            s.stage_timeout(Stage::Generate)
        );
        // Fix runs a fix loop and a review loop in each of review.rounds (2) rounds.
        assert_eq!(
            s.stage_timeout(Stage::Fix),
            s.stage_timeout(Stage::Generate) * 4
        );
        assert!(s.stage_timeout(Stage::Generate).as_secs() >= 3 * s.agent.timeout_s);
        s.apply_env(|k| match k {
            "HARCH_AGENT_TIMEOUT_S" => Some("2".into()),
            "HARCH_AGENT_ATTEMPTS" => Some("2".into()),
            _ => None,
        })
        .unwrap();
        assert_eq!(s.stage_timeout(Stage::Generate), Duration::from_secs(244));
        s.apply_env(|k| (k == "HARCH_REVIEW_ROUNDS").then(|| "3".into()))
            .unwrap();
        assert_eq!(s.review.rounds, 3);
        assert_eq!(s.stage_timeout(Stage::Fix), Duration::from_secs(6 * 244));
        // The pipeline's view carries the sections the timeout is derived from.
        let p = s.pipeline();
        assert_eq!(p.stage_timeout(Stage::Fix), Duration::from_secs(6 * 244));
        assert_eq!(p.retry.backoff(2), s.backoff(2));
        s.stages.timeout_s.insert("fix".into(), 244);
        let err = s.check().unwrap_err().to_string();
        assert!(err.contains("stages.timeout_s.fix = 244 s"), "{err}");
        s.stages.timeout_s.remove("fix");
        // An explicit timeout that cannot hold the runs is refused at start-up, saying why.
        s.stages.timeout_s.insert("generate".into(), 200);
        let err = s.check().unwrap_err().to_string();
        assert!(
            err.contains("stages.timeout_s.generate = 200 s cannot hold its agent runs")
                && err.contains("= 244 s"),
            "{err}"
        );
        s.stages.timeout_s.insert("generate".into(), 244);
        s.check().unwrap();
        assert_eq!(s.stage_timeout(Stage::Generate), Duration::from_secs(244));
        s.agent.timeout_s = 0;
        assert!(
            s.check()
                .unwrap_err()
                .to_string()
                .contains("agent.timeout_s")
        );
    }

    #[test]
    fn bad_urls_and_unknown_keys_are_rejected() {
        assert!(QueueUrl::parse("postgres://x").is_err());
        assert!(QueueUrl::parse("sqlite://").is_err());
        let err = Settings::parse("[queue]\nurl = 1\n", "x.toml").unwrap_err();
        assert!(format!("{err:#}").contains("x.toml"));
        let err = Settings::parse("[queue]\nulr = \"\"\n", "x.toml").unwrap_err();
        assert!(format!("{err:#}").contains("ulr"), "{err:#}");
    }

    #[test]
    fn a_partial_file_keeps_every_other_default() {
        let s = Settings::parse("[worker]\nconcurrency = 5\n", "x.toml").unwrap();
        s.check().unwrap();
        assert_eq!(s.worker.concurrency, 5);
        assert_eq!(s.worker.data_dir, PathBuf::new());
        assert_eq!(s.queue.name, "harch-jobs");
        assert_eq!(s.retry.max_attempts, 5);
        assert_eq!(
            (s.queue.finished_ttl_s, s.queue.dead_worker_ttl_s),
            (604_800, 86_400)
        );
        Settings::parse("", "empty.toml").unwrap().check().unwrap();
    }
}
