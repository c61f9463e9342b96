//! The rules a configuration must satisfy beyond its types.

use std::fmt::Display;
use std::time::Duration;

use delayq_storage::QueueName;

use super::error::ConfigError;
use super::schema::QUEUE_NAME_RULE;
use super::types::{Config, EngineConfig, NodeConfig, QueueConfig, RedisConfig};

/// Most partitions one queue may have.
pub const MAX_PARTITIONS: u32 = 65_536;
/// Most tasks one claim script may take: a larger batch blocks Redis for too long.
pub const MAX_CLAIM_BATCH: usize = 10_000;
/// Largest `max_payload`: Redis strings cannot exceed 512 MiB.
pub const MAX_PAYLOAD_LIMIT: usize = 512 << 20;
/// Most handlers of one queue running at once on one node.
///
/// Far above what one node usefully runs at once, and far below the limit where tokio's
/// semaphore panics (`usize::MAX >> 3` permits). Each running handler holds a lease renewed
/// every third of `engine.lease` (10 000 handlers cost about 1 000 renewals a second at the
/// default 30 s lease) and, with `--handler exec`, a process and three pipes: 10 000 is
/// already beyond a default limit of 1 024 open files. More work per node wants more nodes.
pub const MAX_CONCURRENCY: usize = 10_000;
/// Most handlers running at once on one node, over all its queues (`node.max_running`).
///
/// A hundred times the most one queue may run ([`MAX_CONCURRENCY`]), and far below the
/// limit where tokio's semaphore panics; a node never usefully runs more.
pub const MAX_RUNNING: usize = 1_000_000;
/// How many `redis.response_timeout`s `engine.lease` must exceed: the lease is renewed every
/// third of its length, so a renewal that fails after a full response timeout still leaves
/// a second renewal time to land before the lease runs out.
pub const LEASE_RESPONSE_TIMEOUTS: u32 = 3;
/// Longest node name, in characters.
pub const MAX_NODE_NAME_CHARS: usize = 255;
/// URL schemes the Redis client understands.
pub const REDIS_SCHEMES: &[&str] = &[
    "redis",
    "rediss",
    "redis+unix",
    "unix",
    "valkey",
    "valkeys",
    "valkey+unix",
];

type Check = Result<(), ConfigError>;

fn fail(key: &str, value: impl Display, reason: impl Into<String>) -> Check {
    Err(ConfigError::InvalidValue {
        key: key.to_owned(),
        value: value.to_string(),
        reason: reason.into(),
        line: None,
    })
}

fn human(duration: Duration) -> humantime::FormattedDuration {
    humantime::format_duration(duration)
}

fn positive(key: &str, duration: Duration) -> Check {
    if duration.is_zero() {
        return fail(key, human(duration), "must be longer than zero");
    }
    Ok(())
}

fn at_least_one(key: &str, number: impl Into<u64>) -> Check {
    let number = number.into();
    if number == 0 {
        return fail(key, number, "must be at least 1");
    }
    Ok(())
}

/// Checks every rule; the first violation is returned.
pub(crate) fn check(config: &Config) -> Check {
    redis(&config.redis)?;
    super::backend::check(config)?;
    config.http.check()?;
    node(&config.node)?;
    engine(&config.engine)?;
    lease(config)?;
    queue("queue_defaults", &config.queue_defaults)?;
    for (name, settings) in &config.queues {
        if QueueName::new(name).is_err() {
            return Err(ConfigError::InvalidQueueName {
                name: name.clone(),
                reason: QUEUE_NAME_RULE.to_owned(),
                line: None,
            });
        }
        queue(&format!("queues.{name}"), settings)?;
    }
    Ok(())
}

/// A Redis URL of one of [`REDIS_SCHEMES`], for the error of `key`.
fn redis_url(key: &str, url: &str) -> Check {
    let scheme = url.split_once("://").map(|(scheme, _)| scheme);
    if !scheme.is_some_and(|scheme| REDIS_SCHEMES.contains(&scheme)) {
        return fail(
            key,
            redact_password(url),
            format!(
                "expected a URL starting with one of {}, e.g. redis://127.0.0.1:6379/0",
                REDIS_SCHEMES
                    .iter()
                    .map(|scheme| format!("{scheme}://"))
                    .collect::<Vec<_>>()
                    .join(", ")
            ),
        );
    }
    Ok(())
}

/// The topology: a valid `redis.url`, or valid seed URLs, or sentinels with a master name;
/// `wait_timeout` below the response timeout (a WAIT must answer within one).
fn topology(redis: &RedisConfig) -> Check {
    if redis.sentinel.is_some() && !redis.cluster.is_empty() {
        return fail(
            "redis.sentinel",
            "{...}",
            "give exactly one of redis.url, redis.cluster and redis.sentinel (redis.cluster is set too)",
        );
    }
    if let Some(sentinel) = &redis.sentinel {
        if sentinel.urls.is_empty() {
            return fail(
                "redis.sentinel.urls",
                "[]",
                "list at least one sentinel URL",
            );
        }
        for url in &sentinel.urls {
            redis_url("redis.sentinel.urls", url)?;
        }
        if sentinel.master.trim().is_empty() {
            return fail(
                "redis.sentinel.master",
                &sentinel.master,
                "name the master as the sentinels know it (DELAYQ_REDIS_SENTINEL_MASTER)",
            );
        }
    } else if !redis.cluster.is_empty() {
        for url in &redis.cluster {
            redis_url("redis.cluster", url)?;
        }
    } else {
        redis_url("redis.url", &redis.url)?;
    }
    if redis.wait_replicas > MAX_WAIT_REPLICAS {
        return fail(
            "redis.wait_replicas",
            redis.wait_replicas,
            format!("at most {MAX_WAIT_REPLICAS} replicas can be waited for"),
        );
    }
    if redis.wait_replicas > 0 && redis.wait_timeout >= redis.response_timeout {
        return fail(
            "redis.wait_timeout",
            human(redis.wait_timeout),
            format!(
                "must be shorter than redis.response_timeout ({}): WAIT answers within one response",
                human(redis.response_timeout)
            ),
        );
    }
    if redis.wait_replicas > 0 {
        positive("redis.wait_timeout", redis.wait_timeout)?;
    }
    Ok(())
}

/// The most replicas `redis.wait_replicas` may ask for.
pub const MAX_WAIT_REPLICAS: u32 = 16;

fn redis(redis: &RedisConfig) -> Check {
    topology(redis)?;
    let prefix = &redis.key_prefix;
    if prefix.is_empty() {
        return fail("redis.key_prefix", prefix, "must not be empty");
    }
    if prefix
        .chars()
        .any(|c| c == '{' || c == '}' || c.is_whitespace() || c.is_control())
    {
        return fail(
            "redis.key_prefix",
            prefix,
            "must not contain '{', '}' (they would break Redis Cluster hash tags) or whitespace",
        );
    }
    positive("redis.response_timeout", redis.response_timeout)
}

fn node(node: &NodeConfig) -> Check {
    let name = &node.name;
    if name.trim().is_empty() {
        return fail("node.name", name, "must not be empty");
    }
    if name.chars().count() > MAX_NODE_NAME_CHARS || name.chars().any(char::is_control) {
        return fail(
            "node.name",
            name,
            format!("must be at most {MAX_NODE_NAME_CHARS} characters without control characters"),
        );
    }
    positive("node.heartbeat_period", node.heartbeat_period)?;
    if node.heartbeat_ttl <= node.heartbeat_period {
        return fail(
            "node.heartbeat_ttl",
            human(node.heartbeat_ttl),
            format!(
                "must be longer than node.heartbeat_period ({}), or a live node would be declared dead",
                human(node.heartbeat_period)
            ),
        );
    }
    positive("node.start_timeout", node.start_timeout)?;
    if !(1..=MAX_RUNNING).contains(&node.max_running) {
        return fail(
            "node.max_running",
            node.max_running,
            format!(
                "must be between 1 and {MAX_RUNNING} (handlers running at once on this node, \
                 over all its queues)"
            ),
        );
    }
    Ok(())
}

fn engine(engine: &EngineConfig) -> Check {
    positive("engine.pull_period", engine.pull_period)?;
    if engine.prefetch_window < engine.pull_period {
        return fail(
            "engine.prefetch_window",
            human(engine.prefetch_window),
            format!(
                "must be at least engine.pull_period ({}), or tasks due between two pulls would fire late",
                human(engine.pull_period)
            ),
        );
    }
    if engine.idle_pull_period < engine.pull_period {
        return fail(
            "engine.idle_pull_period",
            human(engine.idle_pull_period),
            format!(
                "must be at least engine.pull_period ({})",
                human(engine.pull_period)
            ),
        );
    }
    at_least_one("engine.max_prefetched", engine.max_prefetched as u64)?;
    if !(1..=MAX_CLAIM_BATCH).contains(&engine.claim_batch) {
        return fail(
            "engine.claim_batch",
            engine.claim_batch,
            format!("must be between 1 and {MAX_CLAIM_BATCH}"),
        );
    }
    positive("engine.lease", engine.lease)?;
    if !(1..=MAX_PAYLOAD_LIMIT).contains(&engine.max_payload) {
        return fail(
            "engine.max_payload",
            engine.max_payload,
            "must be between 1 byte and 512MiB (the Redis string limit)",
        );
    }
    Ok(())
}

/// The lease against the time one Redis command may take: the renewal period (a third of the
/// lease) must exceed the response timeout, or a single slow renewal lets a healthy
/// handler's lease run out and its task run twice.
/// The lease against the backend's bound on one call: `redis.response_timeout` on Redis,
/// `postgres.statement_timeout` on PostgreSQL (none when it is turned off with 0).
fn lease(config: &Config) -> Check {
    let (key, timeout) = match config.backend {
        super::backend::Backend::Redis => ("redis.response_timeout", config.redis.response_timeout),
        super::backend::Backend::Postgres => (
            "postgres.statement_timeout",
            config.postgres.statement_timeout,
        ),
    };
    let engine = &config.engine;
    let floor = timeout.saturating_mul(LEASE_RESPONSE_TIMEOUTS);
    if engine.lease <= floor {
        return fail(
            "engine.lease",
            human(engine.lease),
            format!(
                "must be longer than {LEASE_RESPONSE_TIMEOUTS} x {key} ({} x {} = {}): \
                 the lease is renewed every third of its length (every {}), and a renewal may \
                 take a whole {key}; lengthen the lease or shorten the timeout",
                LEASE_RESPONSE_TIMEOUTS,
                human(timeout),
                human(floor),
                human(engine.lease_renewal_period()),
            ),
        );
    }
    Ok(())
}

fn queue(path: &str, queue: &QueueConfig) -> Check {
    let key = |name: &str| format!("{path}.{name}");
    if !(1..=MAX_PARTITIONS).contains(&queue.partitions) {
        return fail(
            &key("partitions"),
            queue.partitions,
            format!("must be between 1 and {MAX_PARTITIONS}"),
        );
    }
    if !(1..=MAX_CONCURRENCY).contains(&queue.concurrency) {
        return fail(
            &key("concurrency"),
            queue.concurrency,
            format!(
                "must be between 1 and {MAX_CONCURRENCY} (handlers running at once on one node; \
                 for more, run more nodes)"
            ),
        );
    }
    at_least_one(&key("max_attempts"), queue.max_attempts)?;
    if queue.backoff.initial > queue.backoff.max {
        return fail(
            &key("backoff.initial"),
            human(queue.backoff.initial),
            format!(
                "must not exceed {} ({})",
                key("backoff.max"),
                human(queue.backoff.max)
            ),
        );
    }
    positive(&key("timeout"), queue.timeout)?;
    if !queue.flow_keys {
        let per_key = [
            ("per_key_concurrency", queue.per_key_concurrency.is_some()),
            ("per_key_rate", queue.per_key_rate.is_some()),
            ("per_key_order", queue.per_key_fifo),
        ];
        if let Some((name, _)) = per_key.iter().find(|(_, set)| *set) {
            return fail(
                &key(name),
                "set",
                format!(
                    "needs {} (a key's tasks must share a partition for its limit to hold                      across the cluster)",
                    key("flow_keys: true")
                ),
            );
        }
    }
    Ok(())
}

/// `url` with the password of its `user:password@` part replaced by `***`, for messages.
pub(crate) fn redact_password(url: &str) -> String {
    let Some((scheme, rest)) = url.split_once("://") else {
        return url.to_owned();
    };
    let authority_end = rest.find('/').unwrap_or(rest.len());
    let Some(at) = rest[..authority_end].rfind('@') else {
        return url.to_owned();
    };
    match rest[..at].split_once(':') {
        Some((user, _password)) => format!("{scheme}://{user}:***{}", &rest[at..]),
        None => url.to_owned(),
    }
}
