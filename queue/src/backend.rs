//! The apalis stores behind one type: embedded SQLite or Redis. Only tickets (job ids) travel
//! through the store; everything else about a job is in its record.

use std::collections::HashSet;
use std::time::Duration;

use anyhow::Context;
use apalis_core::backend::TaskSink;
use apalis_core::task::builder::TaskBuilder;
use apalis_core::task::task_id::TaskId;
use apalis_redis::RedisStorage;
use apalis_sqlite::{SqliteConnectOptions, SqlitePoolOptions, SqliteStorage};
use serde::{Deserialize, Serialize};
use ulid::Ulid;

use super::redis_keys::{self, HygienicConnection, KeyLifetimes};
use harch_jobs::config::{QueueUrl, Settings};

/// What the store carries: which job to run.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct JobTicket {
    pub job_id: String,
}

/// Store-side delivery limit. Our own attempt limit (per stage, in the job record) is what
/// normally ends a job; this only bounds redeliveries after checkpoints and crashes (Redis
/// hard-codes 25 anyway).
const STORE_MAX_ATTEMPTS: usize = 25;

/// Tickets moved per promotion round trip: well under Lua's unpack limit (~8,000).
const PROMOTE_CHUNK: u64 = 2000;

/// Promotes up to ARGV[2] tickets due at ARGV[1] (seconds, as apalis-redis scores them) from the
/// scheduled set to the active list, and signals that work is available, as apalis-redis does.
const PROMOTE_DUE: &str = r#"
local ids = redis.call("zrangebyscore", KEYS[1], 0, ARGV[1], "LIMIT", 0, ARGV[2])
if #ids > 0 then
    redis.call("rpush", KEYS[2], unpack(ids))
    redis.call("zrem", KEYS[1], unpack(ids))
    redis.call("del", KEYS[3])
    redis.call("lpush", KEYS[3], 1)
end
return #ids
"#;

/// Of the task ids in ARGV, returns those the store still carries: known (their data is in the
/// task data hash) and neither done nor dead. Anything else was lost (a restart without
/// persistence, a flush, eviction) or used up, and will never be delivered again.
const LIVE_TICKETS: &str = r#"
local live = {}
for _, id in ipairs(ARGV) do
    if redis.call("hexists", KEYS[1], id) == 1
        and redis.call("sismember", KEYS[2], id) == 0
        and redis.call("sismember", KEYS[3], id) == 0 then
        table.insert(live, id)
    end
end
return live
"#;

/// The same for SQLite: a row that is waiting, taken, running, or failed with attempts left.
const LIVE_TICKETS_SQL: &str = "SELECT id FROM Jobs WHERE job_type = ?1 \
    AND id IN (SELECT value FROM json_each(?2)) \
    AND (status IN ('Pending', 'Queued', 'Running') \
         OR (status = 'Failed' AND attempts < max_attempts))";

/// Task ids checked per store round trip.
const LIVE_CHUNK: usize = 1000;

/// Clones share the connection (SQLite pool, Redis connection manager).
#[derive(Clone)]
pub enum QueueBackend {
    Sqlite(SqliteStorage<JobTicket>),
    Redis(RedisStorage<JobTicket, HygienicConnection>),
}

impl QueueBackend {
    /// Connects to the queue the settings select (creating the SQLite file if needed).
    pub async fn connect(settings: &Settings) -> anyhow::Result<QueueBackend> {
        let url = settings.queue_url()?;
        let q = &settings.queue;
        match &url {
            QueueUrl::Sqlite(path) => {
                if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
                    std::fs::create_dir_all(dir)
                        .with_context(|| format!("cannot create {}", dir.display()))?;
                }
                let opts = SqliteConnectOptions::new()
                    .filename(path)
                    .create_if_missing(true)
                    .busy_timeout(Duration::from_secs(30));
                let pool = SqlitePoolOptions::new()
                    .connect_with(opts)
                    .await
                    .with_context(|| format!("cannot open the queue {url}"))?;
                SqliteStorage::setup(&pool)
                    .await
                    .with_context(|| format!("cannot prepare the queue {url}"))?;
                let config = apalis_sqlite::Config::default()
                    .queue(&q.name)
                    .heartbeat_interval(settings.heartbeat())
                    .missed_heartbeats(q.missed_heartbeats)
                    .batch_size(q.batch_size);
                Ok(QueueBackend::Sqlite(
                    SqliteStorage::new(&pool).with_config(config),
                ))
            }
            QueueUrl::Redis(u) => {
                let conn = tokio::time::timeout(
                    Duration::from_secs(10),
                    apalis_redis::connect(u.as_str()),
                )
                .await
                .map_err(|_| anyhow::anyhow!("timed out"))
                .and_then(|r| r.map_err(anyhow::Error::from))
                .with_context(|| format!("cannot reach the Redis queue at {u}"))?;
                let config = apalis_redis::Config::default()
                    .queue(&q.name)
                    .heartbeat_interval(settings.heartbeat())
                    .missed_heartbeats(q.missed_heartbeats)
                    .batch_size(q.batch_size);
                let conn = HygienicConnection::new(conn, KeyLifetimes::of(settings));
                Ok(QueueBackend::Redis(
                    RedisStorage::new(conn).with_config(config),
                ))
            }
        }
    }

    pub fn name(&self) -> &'static str {
        match self {
            QueueBackend::Sqlite(_) => "sqlite",
            QueueBackend::Redis(_) => "redis",
        }
    }

    /// Moves tickets that are due from the Redis store's scheduled set to its active list, at
    /// most `PROMOTE_CHUNK` per round trip. apalis-redis puts every ticket in the scheduled set
    /// and promotes all due ones inside its fetch script with one Lua `unpack`, which fails once
    /// about 8,000 are due at the same time (e.g. 10,000 enqueued before a worker starts); the
    /// worker then cannot fetch at all. Promoting in chunks first keeps that list short.
    /// A no-op on SQLite.
    pub async fn promote_due(&mut self) -> anyhow::Result<u64> {
        let QueueBackend::Redis(storage) = self else {
            return Ok(0);
        };
        let config = storage.get_config().clone();
        let conn = storage.get_connection();
        let script = redis::Script::new(PROMOTE_DUE);
        let now = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_secs())
            .unwrap_or(0);
        let mut total = 0u64;
        loop {
            let moved: u64 = script
                .key(config.scheduled_jobs_set())
                .key(config.active_jobs_list())
                .key(config.signal_list())
                .arg(now)
                .arg(PROMOTE_CHUNK)
                .invoke_async(conn)
                .await
                .context("cannot promote due tickets in Redis")?;
            total += moved;
            if moved < PROMOTE_CHUNK {
                return Ok(total);
            }
        }
    }

    /// Redis housekeeping ([`redis_keys::sweep`]): finished tickets get their lifetime, what
    /// expired ones left is removed, dead workers are dropped. A no-op on SQLite.
    pub async fn sweep(&mut self, lifetimes: KeyLifetimes) -> anyhow::Result<(u64, u64)> {
        let QueueBackend::Redis(storage) = self else {
            return Ok((0, 0));
        };
        let config = storage.get_config().clone();
        redis_keys::sweep(storage.get_connection(), &config, lifetimes).await
    }

    /// Renews a live worker's keys in Redis (every heartbeat). A no-op on SQLite.
    pub async fn renew_worker(&mut self, name: &str) -> anyhow::Result<()> {
        let QueueBackend::Redis(storage) = self else {
            return Ok(());
        };
        let config = storage.get_config().clone();
        redis_keys::renew_worker(storage.get_connection(), &config, name).await
    }

    /// Removes a stopped worker's keys from Redis. A no-op on SQLite.
    pub async fn deregister_worker(&mut self, name: &str) -> anyhow::Result<()> {
        let QueueBackend::Redis(storage) = self else {
            return Ok(());
        };
        let config = storage.get_config().clone();
        redis_keys::deregister_worker(storage.get_connection(), &config, name).await
    }

    /// Which of `task_ids` the store will still deliver (waiting, running, or due for a retry).
    /// A ticket the store no longer has (Redis restarted without persistence, its keys were
    /// flushed, the SQLite file was replaced) or has given up on is absent from the answer.
    pub async fn live_tickets(&mut self, task_ids: &[String]) -> anyhow::Result<HashSet<String>> {
        let mut live = HashSet::new();
        for chunk in task_ids.chunks(LIVE_CHUNK) {
            let found: Vec<String> = match self {
                QueueBackend::Sqlite(s) => {
                    let queue = apalis_core::backend::BackendConfig::config(s)
                        .queue
                        .to_string();
                    let ids = serde_json::to_string(chunk)?;
                    sqlx::query_scalar(LIVE_TICKETS_SQL)
                        .bind(queue)
                        .bind(ids)
                        .fetch_all(s.pool())
                        .await
                        .context("cannot read tickets from the SQLite queue")?
                }
                QueueBackend::Redis(s) => {
                    let config = s.get_config().clone();
                    let script = redis::Script::new(LIVE_TICKETS);
                    let mut script = script.prepare_invoke();
                    script
                        .key(config.job_data_hash())
                        .key(config.done_jobs_set())
                        .key(config.dead_jobs_set());
                    for id in chunk {
                        script.arg(id);
                    }
                    script
                        .invoke_async(s.get_connection())
                        .await
                        .context("cannot read tickets from Redis")?
                }
            };
            live.extend(found);
        }
        Ok(live)
    }

    /// A fresh store task id, chosen by us because the stores' push returns none.
    pub fn new_task_id() -> String {
        Ulid::generate().to_string()
    }

    /// Queues one delivery of each `(job_id, priority, task_id)`, in one store round trip.
    pub async fn push_many(&mut self, tickets: &[(String, u32, String)]) -> anyhow::Result<()> {
        let mut tasks = Vec::with_capacity(tickets.len());
        for (job_id, priority, task_id) in tickets {
            let task_id = Ulid::from_string(task_id)
                .map_err(|e| anyhow::anyhow!("bad task id {task_id}: {e}"))?;
            tasks.push(
                TaskBuilder::new(JobTicket {
                    job_id: job_id.clone(),
                })
                .task_id(TaskId::from_ulid(task_id))
                .priority(*priority as usize)
                .max_attempts(STORE_MAX_ATTEMPTS)
                .build(),
            );
        }
        let mut stream = futures_util::stream::iter(tasks);
        let pushed = match self {
            QueueBackend::Sqlite(s) => s
                .push_all(&mut stream)
                .await
                .map_err(|e| anyhow::anyhow!("{e}")),
            QueueBackend::Redis(s) => s
                .push_all(&mut stream)
                .await
                .map_err(|e| anyhow::anyhow!("{e}")),
        };
        pushed.with_context(|| format!("cannot queue {} job(s)", tickets.len()))
    }
}
