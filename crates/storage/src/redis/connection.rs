//! [`RedisStore`]: connecting, and running scripts and commands with deadlines and retries.

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use delayq_redis::{RedisConnection, ScriptCall, TopologyKind};
use redis::Value;

use crate::error::StorageResult;
use crate::model::{
    AckOutcome, ClaimBatch, LeaseToken, NewTask, Partition, ScheduleMode, ScheduleOutcome,
    StoreOptions,
};

use super::batch::Batcher;
use super::error_map::{map_error, timed_out};
use super::keys::PartitionKeys;
use super::replication::Replication;
use super::scripts::SCRIPTS;
use super::RedisStoreOptions;

/// The most tasks one claim call asks for, summed over the partitions that share it (a
/// single claim may ask for more, up to `engine.claim_batch`, and then goes alone): bounds
/// how long one call holds Redis.
const MAX_CLAIM_TASKS: usize = 1024;

/// One partition's claim, waiting to share a call with others (see [`RedisStore::group_of`]).
#[derive(Debug, Clone)]
pub(crate) struct ClaimRequest {
    pub(crate) partition: Partition,
    pub(crate) now_ms: u64,
    pub(crate) limit: usize,
    pub(crate) lease_deadline_ms: u64,
    pub(crate) owner: String,
    /// The queue's per-key limits, when it has flow keys and any is set.
    pub(crate) flow: Option<crate::flow::FlowLimits>,
}

/// Pauses before the retries of an idempotent read that failed on a transient error.
const READ_RETRY_DELAYS: [Duration; 2] = [Duration::from_millis(100), Duration::from_millis(400)];

/// The Redis task store: partitions as sorted sets and a hash, changed by Lua scripts, on one
/// server, a Redis Cluster or a Sentinel master.
///
/// Cloning is cheap: clones share the connections of `delayq-redis` (each one multiplexed,
/// repairing itself after a lost connection or a failover): one for the firing path (claims,
/// acks, renewals, reads) and one for producers' writes (`schedule`, `schedule_many`,
/// `cancel`), so a bulk load never queues a claim behind its pipelines. With
/// [`RedisStoreOptions::wait_replicas`], acks get a third one: `WAIT` holds up every command
/// behind it on its connection, and claims must not wait for replicas.
///
/// Layout (DESIGN.md): per partition `<prefix>:{<queue>:<p>}:due|tasks|inflight|done|dead`,
/// plus the queue registry `<prefix>:{cluster}:queues`. The record in `tasks` is a versioned
/// text header followed by the payload (`1|generation|attempt|claim|due|scheduled due|error
/// length|error payload`); completed tasks keep only the header. Every change is one Lua script
/// called with `FCALL` (or by SHA), with every key passed through `KEYS` and all in one slot, routed to the
/// master of that slot.
///
/// Reads are retried twice after a transient failure; changes are not (after a lost
/// connection their fate is unknown, and the error says so).
#[derive(Clone)]
pub struct RedisStore {
    /// The firing path: claims, renewals, failures, reads, maintenance (and acks, unless
    /// writes wait for replicas).
    pub(crate) firing: RedisConnection,
    /// Producers' writes: single and bulk schedules, cancels.
    pub(crate) producer: RedisConnection,
    /// Acks: the firing connection, or one of their own when acks wait for replicas.
    pub(crate) acker: RedisConnection,
    /// Concurrent acks, sent together: of one partition on a cluster, of all of them on a
    /// single master (see [`RedisStore::group_of`]).
    pub(crate) acks: Batcher<Option<Partition>, LeaseToken, AckOutcome>,
    /// Concurrent claims, grouped like acks, weighed by their limits.
    pub(crate) claims: Batcher<Option<Partition>, ClaimRequest, ClaimBatch>,
    /// Concurrent single schedules of one mode, grouped like acks, at most 8 MiB of payload
    /// per call (as a round of `schedule_many`).
    pub(crate) schedules:
        Batcher<(Option<Partition>, ScheduleMode), (Partition, NewTask), ScheduleOutcome>,
    pub(crate) prefix: Arc<str>,
    pub(crate) options: StoreOptions,
    /// The longest one operation may take: a failover, a response and a reconnection.
    pub(crate) deadline: Duration,
    /// The queue registry's per-process state (legacy merge, bad entries reported).
    pub(crate) registry: Arc<super::registry::RegistryState>,
    /// Waiting for replicas, when asked to.
    pub(crate) replication: Option<Arc<Replication>>,
    /// The per-key limits the claims apply, per queue (`set_flow_limits`).
    pub(crate) flow_limits: Arc<crate::flow::FlowLimitsByQueue>,
}

impl std::fmt::Debug for RedisStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RedisStore")
            .field("redis", &self.firing.describe())
            .field("prefix", &self.prefix)
            .field("options", &self.options)
            .finish_non_exhaustive()
    }
}

impl RedisStore {
    /// Connects to Redis (any topology) and loads the scripts (a Functions library, or
    /// `EVALSHA` scripts where Functions cannot be used).
    ///
    /// Connection attempts are retried until `options.redis.timeouts.start` runs out, then
    /// fail with `ConnectionLost` (refused, unreachable) or `Timeout` (no answer). A refused
    /// login, a bad URL or TLS file, a permission the ACL user lacks and an invalid
    /// `wait_replicas` fail at once with `Backend`. No message contains a password.
    pub async fn connect(options: RedisStoreOptions) -> StorageResult<Self> {
        const OPERATION: &str = "connect";
        let timeouts = options.redis.timeouts;
        let replication = match options.wait_replicas.filter(|wait| wait.replicas > 0) {
            Some(wait) => Some(Arc::new(Replication::new(wait, timeouts.response)?)),
            None => None,
        };
        let connect = || {
            let options = options.redis.clone();
            async move {
                RedisConnection::connect(options)
                    .await
                    .map_err(|error| map_error(OPERATION, "", error))
            }
        };
        let (firing, producer) = tokio::try_join!(connect(), connect())?;
        let acker = match replication {
            Some(_) => connect().await?,
            None => firing.clone(),
        };
        let deadline = timeouts.failover + timeouts.response + timeouts.connect;
        // Each connection learns for itself whether the servers take Functions.
        let load = |connection: &RedisConnection| {
            let connection = connection.clone();
            async move {
                within(deadline, connection.load_library(&SCRIPTS.library))
                    .await
                    .map_err(|error| map_error(OPERATION, "", error))
            }
        };
        tokio::try_join!(load(&firing), load(&producer))?;
        if replication.is_some() {
            load(&acker).await?;
        }
        tracing::debug!(redis = %firing.describe(), prefix = %options.key_prefix, "connected to Redis");
        Ok(RedisStore {
            firing,
            producer,
            acker,
            acks: Batcher::default(),
            claims: Batcher::with_max_weight(MAX_CLAIM_TASKS),
            schedules: Batcher::weighed(super::schedule::PIPELINE_BYTES, |(_, task)| {
                super::schedule::item_bytes(task)
            }),
            prefix: Arc::from(options.key_prefix),
            options: options.store,
            deadline,
            registry: Arc::default(),
            replication,
            flow_limits: Arc::default(),
        })
    }

    /// The keys of `partition`.
    pub(crate) fn keys(&self, partition: &Partition) -> PartitionKeys {
        PartitionKeys::new(&self.prefix, partition)
    }

    /// Which concurrent calls of `partition` may share one script call: on a Redis Cluster
    /// those of the same partition (a call touches one slot); on a single master (one
    /// server, Sentinel) all of them (`None`), since most of a call's cost is the call itself
    /// and the scripts take several partitions.
    pub(crate) fn group_of(&self, partition: &Partition) -> Option<Partition> {
        match self.firing.kind() {
            TopologyKind::Cluster => Some(partition.clone()),
            TopologyKind::Standalone | TopologyKind::Sentinel => None,
        }
    }

    /// Runs one script call on the firing connection (routed by `KEYS[1]`, reloaded on
    /// `NOSCRIPT`), bounded by the operation deadline. Never retried otherwise: scripts
    /// change state.
    pub(crate) async fn invoke(&self, call: &ScriptCall<'_>) -> delayq_redis::Result<Value> {
        within(self.deadline, self.firing.run_script(call)).await
    }

    /// Runs one script call on `connection` (the producers' or the acks' one).
    pub(crate) async fn invoke_on(
        &self,
        connection: &RedisConnection,
        call: &ScriptCall<'_>,
    ) -> delayq_redis::Result<Value> {
        within(self.deadline, connection.run_script(call)).await
    }

    /// Runs an idempotent read on the firing connection, retrying it twice after a transient
    /// failure (the connection layer repairs itself meanwhile). `key` names the hash a
    /// corrupt record would be in.
    pub(crate) async fn read<T, F, Fut>(
        &self,
        operation: &'static str,
        key: &str,
        attempt: F,
    ) -> StorageResult<T>
    where
        F: Fn(RedisConnection) -> Fut,
        Fut: Future<Output = delayq_redis::Result<T>>,
    {
        self.read_on(&self.firing, operation, key, attempt).await
    }

    /// Like [`read`](Self::read), on `connection` (the producers' one, for work that must
    /// not queue in front of claims).
    pub(crate) async fn read_on<T, F, Fut>(
        &self,
        connection: &RedisConnection,
        operation: &'static str,
        key: &str,
        attempt: F,
    ) -> StorageResult<T>
    where
        F: Fn(RedisConnection) -> Fut,
        Fut: Future<Output = delayq_redis::Result<T>>,
    {
        let mut delays = READ_RETRY_DELAYS.iter();
        loop {
            let error = match within(self.deadline, attempt(connection.clone())).await {
                Ok(value) => return Ok(value),
                Err(error) => map_error(operation, key, error),
            };
            match delays.next() {
                Some(delay) if error.is_transient() => {
                    tracing::debug!(operation, %error, ?delay, "retrying a read");
                    tokio::time::sleep(*delay).await;
                }
                _ => return Err(error),
            }
        }
    }
}

/// Awaits `future` for at most `limit`; running out of time is a transient error that the
/// error mapping reports as `Timeout`.
pub(crate) async fn within<T>(
    limit: Duration,
    future: impl Future<Output = delayq_redis::Result<T>>,
) -> delayq_redis::Result<T> {
    match tokio::time::timeout(limit, future).await {
        Ok(result) => result,
        Err(_) => Err(timed_out("redis", limit)),
    }
}
