//! The configuration types, their defaults and the retry backoff formula.

use std::collections::BTreeMap;
use std::fmt;
use std::time::Duration;

use delayq_storage::DEFAULT_MAX_PAYLOAD;

use super::http::HttpConfig;
use super::topology::{SentinelConfig, TlsConfig};
use super::validate::redact_password;

/// The whole configuration of one delayq node, as read from `cluster.yaml`.
///
/// Every field has a default (see [`Config::default`]); a missing section or key in the file
/// takes it.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Config {
    /// Which database holds the cluster (`backend:`, default Redis).
    pub backend: super::backend::Backend,
    /// Where the cluster's Redis is and how its keys are named (`redis:`).
    pub redis: RedisConfig,
    /// Where the cluster's PostgreSQL is and which schema holds delayq's tables
    /// (`postgres:`, used when `backend: postgres`).
    pub postgres: delayq_postgres::PostgresConfig,
    /// Where the HTTP API, dashboard and /metrics listen, and who may act (`http:`).
    pub http: HttpConfig,
    /// This node's identity and liveness settings (`node:`).
    pub node: NodeConfig,
    /// Prefetching, claiming and shutdown settings of the scheduler runtime (`engine:`).
    pub engine: EngineConfig,
    /// The settings of every queue not listed under `queues:`, and of every key a listed queue
    /// leaves out (`queue_defaults:`).
    pub queue_defaults: QueueConfig,
    /// Per-queue settings by queue name (`queues:`); see [`Config::queue`].
    pub queues: BTreeMap<String, QueueConfig>,
    /// Recurring schedules by name (`recurring:`), validated when the file is read; every node
    /// and `delayq serve` upsert them at start (an unchanged spec moves nothing).
    pub recurring: BTreeMap<String, crate::recurring::RecurringSpec>,
}

/// The `redis:` section. Its `Debug` output hides the password in the URL.
#[derive(Clone, PartialEq, Eq)]
pub struct RedisConfig {
    /// Connection URL: `redis://`, `rediss://` (TLS), `redis+unix://`/`unix://`, or the
    /// `valkey` equivalents; `user:password@` for ACL. Default `redis://127.0.0.1:6379/0`.
    pub url: String,
    /// Prefix of every key delayq writes, so several clusters can share one Redis.
    /// Default `delayq`.
    pub key_prefix: String,
    /// How long one Redis command may take before it counts as failed (and, for reads, is
    /// retried). `engine.lease` must exceed three times this. Default 2 s.
    pub response_timeout: Duration,
    /// Redis Cluster seed URLs, instead of `url` (empty: not a cluster).
    pub cluster: Vec<String>,
    /// A master watched by Redis Sentinel, instead of `url`.
    pub sentinel: Option<SentinelConfig>,
    /// TLS files for `rediss://` URLs (private CA, client certificate).
    pub tls: Option<TlsConfig>,
    /// Writes (schedule, cancel, ack) return only after `WAIT` saw this many replicas;
    /// 0 (the default) does not wait.
    pub wait_replicas: u32,
    /// How long a write waits for `wait_replicas` before it fails. Default 100 ms.
    pub wait_timeout: Duration,
}

impl Default for RedisConfig {
    fn default() -> Self {
        RedisConfig {
            url: "redis://127.0.0.1:6379/0".to_owned(),
            key_prefix: "delayq".to_owned(),
            response_timeout: Duration::from_secs(2),
            cluster: Vec::new(),
            sentinel: None,
            tls: None,
            wait_replicas: 0,
            wait_timeout: Duration::from_millis(100),
        }
    }
}

impl fmt::Debug for RedisConfig {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let cluster: Vec<String> = self
            .cluster
            .iter()
            .map(|url| redact_password(url))
            .collect();
        f.debug_struct("RedisConfig")
            .field("url", &redact_password(&self.url))
            .field("key_prefix", &self.key_prefix)
            .field("response_timeout", &self.response_timeout)
            .field("cluster", &cluster)
            .field("sentinel", &self.sentinel)
            .field("tls", &self.tls)
            .field("wait_replicas", &self.wait_replicas)
            .field("wait_timeout", &self.wait_timeout)
            .finish()
    }
}

/// The `node:` section.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NodeConfig {
    /// A human-readable name shown by `delayq nodes` and in logs; not the node's identity
    /// (every start registers a fresh id), so several nodes may share it. Default: the host
    /// name ([`default_node_name`]).
    pub name: String,
    /// How often the node refreshes its heartbeat. Default 1 s.
    pub heartbeat_period: Duration,
    /// How long a heartbeat lives: a node silent for this long is dead and its partitions
    /// move. Must exceed `heartbeat_period`. Default 3 s.
    pub heartbeat_ttl: Duration,
    /// How long starting a node may wait for Redis and for joining the cluster before it
    /// gives up with an error. Default 10 s.
    pub start_timeout: Duration,
    /// Most handlers running at once on this node, over all its queues (1..=1 000 000, see
    /// [`MAX_RUNNING`](super::MAX_RUNNING)); each queue's `concurrency` still applies within
    /// it. Tasks beyond it wait pending (claims wait for a free slot), never fail. Default
    /// 1 024 ([`DEFAULT_MAX_RUNNING`]).
    pub max_running: usize,
}

/// The default `node.max_running`: 1 024 handlers at once on one node.
pub const DEFAULT_MAX_RUNNING: usize = 1_024;

impl Default for NodeConfig {
    fn default() -> Self {
        NodeConfig {
            name: default_node_name(),
            heartbeat_period: Duration::from_secs(1),
            heartbeat_ttl: Duration::from_secs(3),
            start_timeout: Duration::from_secs(10),
            max_running: DEFAULT_MAX_RUNNING,
        }
    }
}

/// The `engine:` section.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EngineConfig {
    /// How often each owned partition is re-read from Redis: the safety net behind the
    /// wake-ups. Default 1 s.
    pub pull_period: Duration,
    /// How often an idle partition (nothing due within `prefetch_window`, nothing in flight)
    /// is looked at by its owner: the safety net behind the wake-ups when nothing happens.
    /// A look is never planned later than the partition's next pending due minus the window,
    /// and a partition is back on `pull_period` as soon as it has work. At least
    /// `pull_period`. Default 30 s.
    pub idle_pull_period: Duration,
    /// How far ahead of now due tasks are held in memory. At least `pull_period`. Default 5 s.
    pub prefetch_window: Duration,
    /// Most prefetched entries held in memory by one node; beyond it the node claims straight
    /// from Redis in batches. Default 100 000.
    pub max_prefetched: usize,
    /// Most tasks claimed from one partition by one script call. Default 256. The upper bound
    /// of the adaptive claim size: a partition's first claim of a round asks for 32 (or this,
    /// if smaller), each claim that comes back full doubles the next one up to this, a short
    /// one starts over (`claim_size.rs`).
    pub claim_batch: usize,
    /// In-flight lease: a claimed task whose lease runs out (its node died) is delivered
    /// again. Renewed every third of its length while the handler runs, so it must exceed
    /// three times `redis.response_timeout` (see [`EngineConfig::lease_renewal_period`]).
    /// Default 30 s.
    pub lease: Duration,
    /// On graceful shutdown, how long running handlers may finish before their tasks are
    /// released for another node. Default 10 s.
    pub shutdown_grace: Duration,
    /// How long fired tasks are remembered, so a producer re-sending the same id and due time
    /// gets `duplicate` instead of a second fire. Zero disables the check. Default 1 h.
    pub executed_retention: Duration,
    /// Largest payload accepted, in bytes. Default 1 MiB (1 048 576).
    pub max_payload: usize,
}

impl EngineConfig {
    /// How often a running handler's lease is renewed: a third of `lease` (at least 10 ms).
    /// Two renewals fit in one lease, so a renewal that fails (times out after
    /// `redis.response_timeout`) still leaves one more try before the lease runs out.
    pub fn lease_renewal_period(&self) -> Duration {
        (self.lease / 3).max(Duration::from_millis(10))
    }
}

impl Default for EngineConfig {
    fn default() -> Self {
        EngineConfig {
            pull_period: Duration::from_secs(1),
            idle_pull_period: Duration::from_secs(30),
            prefetch_window: Duration::from_secs(5),
            max_prefetched: 100_000,
            claim_batch: 256,
            lease: Duration::from_secs(30),
            shutdown_grace: Duration::from_secs(10),
            executed_retention: Duration::from_secs(3600),
            max_payload: DEFAULT_MAX_PAYLOAD,
        }
    }
}

/// The settings of one queue (`queue_defaults:` or an entry of `queues:`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct QueueConfig {
    /// Number of partitions the queue's tasks are spread over (1..=65536). Must be the same
    /// on every node and must not change while the queue holds tasks. Default 64.
    pub partitions: u32,
    /// Most handlers of this queue running at once on one node (1..=10 000, see
    /// [`MAX_CONCURRENCY`](super::MAX_CONCURRENCY)). Default 64.
    pub concurrency: usize,
    /// Deliveries before a failing task is dead-lettered (1 = no retry). Default 5.
    pub max_attempts: u32,
    /// Delay between a failed attempt and the next one.
    pub backoff: BackoffConfig,
    /// How long one handler run may take before it counts as failed. Default 30 s.
    pub timeout: Duration,
    /// Cluster-wide fire rate (`rate_limit: 200/s`): at most this many tasks of the queue
    /// fire per period, summed over every node. Default: none.
    pub rate_limit: Option<RateLimit>,
    /// Cluster-wide handler slots (`global_concurrency: 20`): at most this many handlers of
    /// the queue run at once across the cluster, besides `concurrency` per node. Default: none.
    pub global_concurrency: Option<u32>,
    /// `flow_keys: true`: ids with a flow key (the part of the id inside its first `{...}`)
    /// are routed by their key, so that the per-key limits below hold across the cluster.
    /// Fixed when the queue is first registered (like `partitions`). Default false.
    pub flow_keys: bool,
    /// `per_key_concurrency: N`: at most N tasks of one flow key run at once, across the
    /// cluster. Needs `flow_keys: true`. Default: none.
    pub per_key_concurrency: Option<u32>,
    /// `per_key_rate: N/PERIOD`: at most N fires of one flow key within any PERIOD (a sliding
    /// period, unlike `rate_limit`'s fixed windows), across the cluster. Needs
    /// `flow_keys: true`. Default: none.
    pub per_key_rate: Option<RateLimit>,
    /// `per_key_order: fifo`: one task of a flow key at a time, in due order, held through
    /// its retries. Needs `flow_keys: true`. Default: none.
    pub per_key_fifo: bool,
}

impl QueueConfig {
    /// The per-key limits the store's claims apply for this queue.
    pub fn flow_limits(&self) -> delayq_storage::FlowLimits {
        delayq_storage::FlowLimits {
            concurrency: self.per_key_concurrency,
            rate: self.per_key_rate.map(|rate| delayq_storage::KeyRate {
                limit: u32::try_from(rate.count).unwrap_or(u32::MAX),
                period_ms: u64::try_from(rate.period.as_millis()).unwrap_or(u64::MAX),
            }),
            fifo: self.per_key_fifo,
        }
    }
}

/// `rate_limit: N/PERIOD`: at most `count` fires per `period` (fixed windows of the cluster
/// clock, `floor(now / period)`), summed over every node.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RateLimit {
    /// Fires per period (>= 1).
    pub count: u64,
    /// The period (>= 1 ms): `s`, `m`, `h` or a humantime duration (`200/s`, `1000/1m`,
    /// `5/500ms`).
    pub period: Duration,
}

impl RateLimit {
    /// Reads `N/PERIOD`; the error says what is expected.
    pub fn parse(text: &str) -> Result<Self, String> {
        const EXPECTED: &str = "expected N/PERIOD such as 200/s, 1000/1m or 5/500ms";
        let (count, period) = text.trim().split_once('/').ok_or(EXPECTED)?;
        let count: u64 = count
            .trim()
            .parse()
            .map_err(|_| format!("{EXPECTED}: {count:?} is not a whole number"))?;
        if count == 0 {
            return Err(format!("{EXPECTED}: the count must be at least 1"));
        }
        let period = match period.trim() {
            "s" | "sec" | "second" => Duration::from_secs(1),
            "m" | "min" | "minute" => Duration::from_secs(60),
            "h" | "hour" => Duration::from_secs(3600),
            other => humantime::parse_duration(other)
                .map_err(|error| format!("{EXPECTED}: {other:?}: {error}"))?,
        };
        if period < Duration::from_millis(1) {
            return Err(format!("{EXPECTED}: the period must be at least 1ms"));
        }
        Ok(RateLimit { count, period })
    }
}

impl Default for QueueConfig {
    fn default() -> Self {
        QueueConfig {
            partitions: 64,
            concurrency: 64,
            max_attempts: 5,
            backoff: BackoffConfig::default(),
            timeout: Duration::from_secs(30),
            rate_limit: None,
            global_concurrency: None,
            flow_keys: false,
            per_key_concurrency: None,
            per_key_rate: None,
            per_key_fifo: false,
        }
    }
}

/// Exponential retry backoff (`backoff: { initial, max }`); see [`QueueConfig::backoff_delay`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BackoffConfig {
    /// Delay after the first failed attempt. Default 1 s.
    pub initial: Duration,
    /// Ceiling of the delay. At least `initial`. Default 5 min.
    pub max: Duration,
}

impl Default for BackoffConfig {
    fn default() -> Self {
        BackoffConfig {
            initial: Duration::from_secs(1),
            max: Duration::from_secs(300),
        }
    }
}

impl QueueConfig {
    /// How long to wait before retrying after attempt number `attempt` (1-based) failed.
    ///
    /// The base delay doubles with each attempt, `initial * 2^(attempt - 1)`, and is capped
    /// at `max`. "Equal jitter" then keeps half of it fixed and scales the other half by
    /// `jitter` (a uniform random number in `0..=1` supplied by the caller, so this stays
    /// deterministic and testable): the result lies in `[base / 2, base]`. The fixed half keeps
    /// retries from hammering a sick dependency; the random half keeps the retries of many
    /// tasks that failed together from arriving together. `attempt` 0 counts as 1, and a
    /// `jitter` outside `0..=1` (or NaN) is clamped.
    ///
    /// ```
    /// use std::time::Duration;
    /// use delayq_engine::config::QueueConfig;
    ///
    /// let queue = QueueConfig::default(); // backoff 1s .. 5m
    /// assert_eq!(queue.backoff_delay(1, 1.0), Duration::from_secs(1));
    /// assert_eq!(queue.backoff_delay(3, 1.0), Duration::from_secs(4));
    /// assert_eq!(queue.backoff_delay(3, 0.0), Duration::from_secs(2));
    /// assert_eq!(queue.backoff_delay(30, 1.0), Duration::from_secs(300));
    /// ```
    pub fn backoff_delay(&self, attempt: u32, jitter: f64) -> Duration {
        let BackoffConfig { initial, max } = self.backoff;
        let doublings = attempt.saturating_sub(1);
        let base = if doublings >= 32 {
            max
        } else {
            initial
                .checked_mul(1u32 << doublings)
                .map_or(max, |delay| delay.min(max))
        };
        let jitter = if jitter.is_nan() {
            0.0
        } else {
            jitter.clamp(0.0, 1.0)
        };
        let fixed = base / 2;
        fixed + (base - fixed).mul_f64(jitter)
    }
}

/// The default `node.name`: this machine's host name, as the coordinator reads it for the
/// `host` it registers (`HOSTNAME`, then the kernel's host name, then `/etc/hostname`, else
/// `unknown`).
pub fn default_node_name() -> String {
    delayq_coordinator::host_name()
}
