//! What the Redis store keeps, and for how long. apalis-redis never expires anything: every
//! finished ticket keeps its `<queue>:meta:<task>` hash, its field in `<queue>:data` and its
//! member of `<queue>:done` (or `:dead`), and every worker that ever ran keeps its
//! `<queue>:workers:metadata:<name>` hash and, when it dies (or even when it stops: its close
//! removes the wrong member), its entry in `<queue>:workers`. Its worker registration also adds
//! the queue to `core:apalis:queues:list`, the one key outside the queue's prefix.
//!
//! Here:
//! - [`HygienicConnection`] wraps the store's connection and runs the registration without the
//!   global key, giving the worker's metadata hash a lifetime (`dead_worker_ttl_s` past the
//!   lease) that each live worker renews ([`renew_worker`]); every key stays under `<queue>:`.
//! - [`sweep`] gives each finished ticket's meta hash `finished_ttl_s`, removes the data field
//!   and set member of tickets whose meta hash has expired, and drops workers silent for longer
//!   than the lease plus `dead_worker_ttl_s` that hold no ticket.
//!
//! Job records live in the data dir, not in Redis: nothing here loses what `status` shows.

use std::time::Duration;

use anyhow::Context;
use redis::aio::{ConnectionLike, ConnectionManager};
use redis::{Arg, Cmd, RedisFuture, Value};

/// apalis-redis's worker registration (`lua/register_worker.lua` of apalis-redis 1.0), less its
/// `zadd core:apalis:queues:list` (the queue list of apalis-board, which works only with SQLite
/// here), plus a lifetime for the worker's metadata hash (ARGV[6], seconds).
const REGISTER_WORKER: &str = r#"
local now = tonumber(ARGV[1])
local worker_name = ARGV[2]
local threshold = tonumber(ARGV[3])
local last_seen = redis.call("zscore", KEYS[1], worker_name)
if last_seen then
    if now - tonumber(last_seen) < threshold then
        error("worker is still active within threshold")
    end
end
redis.call("zadd", KEYS[1], now, worker_name)
redis.call("hmset", KEYS[2], "backend_name", ARGV[4], "service", ARGV[5])
redis.call("expire", KEYS[2], ARGV[6])
return true
"#;

/// KEYS: done set, dead set, data hash. ARGV[1]: the meta hash prefix (`<queue>:meta`),
/// ARGV[2]: finished_ttl_s, ARGV[3..]: task ids from the done or dead set. A finished ticket's
/// meta hash gets the TTL; a ticket whose meta hash has expired leaves the sets and the data
/// hash. Returns how many left.
const SWEEP_FINISHED: &str = r#"
local removed = 0
for i = 3, #ARGV do
    local id = ARGV[i]
    local meta = ARGV[1] .. ":" .. id
    local ttl = redis.call("ttl", meta)
    if ttl == -1 then
        redis.call("expire", meta, ARGV[2])
    elseif ttl == -2 then
        redis.call("srem", KEYS[1], id)
        redis.call("srem", KEYS[2], id)
        redis.call("hdel", KEYS[3], id)
        removed = removed + 1
    end
end
return removed
"#;

/// KEYS[1]: the workers set. ARGV[1]: the latest last-seen time (seconds) of a worker to drop,
/// ARGV[2]: the inflight set prefix (`<queue>:inflight`). A worker still holding tickets is left
/// for apalis's orphan recovery, which moves them back to the queue first.
const SWEEP_WORKERS: &str = r#"
local gone = 0
for _, w in ipairs(redis.call("zrangebyscore", KEYS[1], 0, ARGV[1])) do
    if redis.call("exists", ARGV[2] .. ":" .. w) == 0 then
        redis.call("zrem", KEYS[1], w)
        gone = gone + 1
    end
end
return gone
"#;

/// Members read from a done or dead set per round trip.
const SWEEP_CHUNK: usize = 500;

/// How long Redis keeps what finished tickets and dead workers leave behind.
#[derive(Debug, Clone, Copy)]
pub struct KeyLifetimes {
    pub finished: Duration,
    /// Past the lease: a worker silent this much longer is gone for good.
    pub dead_worker: Duration,
    pub lease: Duration,
}

impl KeyLifetimes {
    /// What the settings say (`queue.finished_ttl_s`, `queue.dead_worker_ttl_s`, the lease).
    pub fn of(settings: &harch_jobs::config::Settings) -> KeyLifetimes {
        KeyLifetimes {
            finished: Duration::from_secs(settings.queue.finished_ttl_s),
            dead_worker: Duration::from_secs(settings.queue.dead_worker_ttl_s),
            lease: settings.lease(),
        }
    }

    /// Seconds a worker's metadata hash lives without a renewal.
    fn worker_metadata_s(&self) -> u64 {
        (self.lease + self.dead_worker).as_secs().max(1)
    }
}

/// The store's connection, with the worker registration kept under the queue's prefix.
#[derive(Clone)]
pub struct HygienicConnection {
    inner: ConnectionManager,
    worker_metadata_s: u64,
}

impl HygienicConnection {
    pub fn new(inner: ConnectionManager, lifetimes: KeyLifetimes) -> HygienicConnection {
        HygienicConnection {
            inner,
            worker_metadata_s: lifetimes.worker_metadata_s(),
        }
    }
}

/// apalis-redis's registration is `EVALSHA <sha> 2 <queue>:workers
/// <queue>:workers:metadata:<name> now name threshold "RedisStorage" service`; it becomes an
/// `EVAL` of [`REGISTER_WORKER`] with the metadata lifetime appended. None for anything else,
/// which passes through unchanged.
fn rewrite_registration(cmd: &Cmd, worker_metadata_s: u64) -> Option<Cmd> {
    let args: Vec<&[u8]> = cmd
        .args_iter()
        .map(|a| match a {
            Arg::Simple(b) => Some(b),
            _ => None,
        })
        .collect::<Option<_>>()?;
    let [name, _sha, numkeys, workers, metadata, rest @ ..] = args.as_slice() else {
        return None;
    };
    let is_registration = name.eq_ignore_ascii_case(b"EVALSHA")
        && *numkeys == b"2"
        && workers.ends_with(b":workers")
        && metadata.starts_with(workers)
        && metadata[workers.len()..].starts_with(b":metadata:")
        && rest.len() == 5
        && rest[3] == b"RedisStorage";
    if !is_registration {
        return None;
    }
    let mut eval = redis::cmd("EVAL");
    eval.arg(REGISTER_WORKER)
        .arg(2)
        .arg(*workers)
        .arg(*metadata);
    for a in rest {
        eval.arg(*a);
    }
    eval.arg(worker_metadata_s);
    Some(eval)
}

impl ConnectionLike for HygienicConnection {
    fn req_packed_command<'a>(&'a mut self, cmd: &'a Cmd) -> RedisFuture<'a, Value> {
        match rewrite_registration(cmd, self.worker_metadata_s) {
            Some(eval) => Box::pin(async move { self.inner.req_packed_command(&eval).await }),
            None => self.inner.req_packed_command(cmd),
        }
    }

    fn req_packed_commands<'a>(
        &'a mut self,
        pipeline: &'a redis::Pipeline,
        offset: usize,
        count: usize,
    ) -> RedisFuture<'a, Vec<Value>> {
        self.inner.req_packed_commands(pipeline, offset, count)
    }

    fn get_db(&self) -> i64 {
        self.inner.get_db()
    }
}

/// The metadata hash of worker `name` (apalis-redis's `Config::worker_metadata_key`).
pub fn worker_metadata_key(config: &apalis_redis::Config, name: &str) -> String {
    format!("{}:metadata:{name}", config.workers_set())
}

/// Renews the lifetime of a live worker's metadata hash (every heartbeat).
pub async fn renew_worker(
    conn: &mut HygienicConnection,
    config: &apalis_redis::Config,
    name: &str,
) -> anyhow::Result<()> {
    redis::cmd("EXPIRE")
        .arg(worker_metadata_key(config, name))
        .arg(conn.worker_metadata_s)
        .query_async::<()>(conn)
        .await
        .context("cannot renew the worker's key in Redis")
}

/// What a worker that stops leaves: its entry in the workers set (when it holds no ticket) and
/// its metadata hash. apalis-redis's own close means to do this but removes the wrong member.
pub async fn deregister_worker(
    conn: &mut HygienicConnection,
    config: &apalis_redis::Config,
    name: &str,
) -> anyhow::Result<()> {
    let inflight = format!("{}:{name}", config.inflight_jobs_set());
    let held: bool = redis::cmd("EXISTS")
        .arg(&inflight)
        .query_async(conn)
        .await
        .context("cannot deregister the worker in Redis")?;
    if !held {
        redis::cmd("ZREM")
            .arg(config.workers_set())
            .arg(name)
            .query_async::<()>(conn)
            .await
            .context("cannot deregister the worker in Redis")?;
    }
    redis::cmd("DEL")
        .arg(worker_metadata_key(config, name))
        .query_async::<()>(conn)
        .await
        .context("cannot deregister the worker in Redis")
}

/// Gives finished tickets their lifetime, removes what expired tickets left, and drops dead
/// workers. Returns (tickets removed, workers removed).
pub async fn sweep(
    conn: &mut HygienicConnection,
    config: &apalis_redis::Config,
    lifetimes: KeyLifetimes,
) -> anyhow::Result<(u64, u64)> {
    let finished = redis::Script::new(SWEEP_FINISHED);
    let mut removed = 0u64;
    for set in [config.done_jobs_set(), config.dead_jobs_set()] {
        let mut cursor = 0u64;
        loop {
            let (next, ids): (u64, Vec<String>) = redis::cmd("SSCAN")
                .arg(&set)
                .arg(cursor)
                .arg("COUNT")
                .arg(SWEEP_CHUNK)
                .query_async(conn)
                .await
                .context("cannot read finished tickets from Redis")?;
            if !ids.is_empty() {
                let mut call = finished.prepare_invoke();
                call.key(config.done_jobs_set())
                    .key(config.dead_jobs_set())
                    .key(config.job_data_hash())
                    .arg(config.job_meta_hash())
                    .arg(lifetimes.finished.as_secs().max(1));
                for id in &ids {
                    call.arg(id);
                }
                removed += call
                    .invoke_async::<u64>(conn)
                    .await
                    .context("cannot expire finished tickets in Redis")?;
            }
            cursor = next;
            if cursor == 0 {
                break;
            }
        }
    }
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs());
    let before = now.saturating_sub(lifetimes.worker_metadata_s());
    let workers: u64 = redis::Script::new(SWEEP_WORKERS)
        .key(config.workers_set())
        .arg(before)
        .arg(config.inflight_jobs_set())
        .invoke_async(conn)
        .await
        .context("cannot remove dead workers from Redis")?;
    Ok((removed, workers))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn args(cmd: &Cmd) -> Vec<Vec<u8>> {
        cmd.args_iter()
            .map(|a| match a {
                Arg::Simple(b) => b.to_vec(),
                _ => Vec::new(),
            })
            .collect()
    }

    #[test]
    fn only_the_worker_registration_is_rewritten() {
        let mut register = redis::cmd("EVALSHA");
        register
            .arg("0123")
            .arg(2)
            .arg("q:workers")
            .arg("q:workers:metadata:w1")
            .arg(1000)
            .arg("w1")
            .arg(20)
            .arg("RedisStorage")
            .arg("svc");
        let eval = rewrite_registration(&register, 120).expect("the registration is rewritten");
        let a = args(&eval);
        assert_eq!(a[0], b"EVAL");
        let script = String::from_utf8(a[1].clone()).unwrap();
        assert!(!script.contains("core:apalis"), "{script}");
        assert_eq!(
            &a[2..5],
            [&b"2"[..], b"q:workers", b"q:workers:metadata:w1"]
        );
        assert_eq!(
            &a[5..],
            args(&register)[5..]
                .iter()
                .cloned()
                .chain([b"120".to_vec()])
                .collect::<Vec<_>>()
        );
        let mut other = redis::cmd("EVALSHA");
        other
            .arg("0123")
            .arg(1)
            .arg("q:workers")
            .arg(1000)
            .arg("w1");
        assert!(rewrite_registration(&other, 120).is_none());
        assert!(rewrite_registration(&redis::cmd("PING"), 120).is_none());
    }
}
