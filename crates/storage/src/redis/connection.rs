//! [`RedisStore`]: connecting, and running scripts and commands with deadlines and retries.

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use redis::aio::{ConnectionManager, ConnectionManagerConfig};
use redis::{AsyncConnectionConfig, RedisError, RedisResult, ScriptInvocation, Value};

use crate::error::{StorageError, StorageResult};
use crate::model::{AckOutcome, LeaseToken, NewTask, Partition, ScheduleOutcome, StoreOptions};

use super::batch::Batcher;
use super::error_map::{map_error, redact_url};
use super::keys::PartitionKeys;
use super::scripts::SCRIPTS;
use super::RedisStoreOptions;

/// Pauses before the retries of an idempotent read that failed on a transient error.
const READ_RETRY_DELAYS: [Duration; 2] = [Duration::from_millis(100), Duration::from_millis(400)];

/// The Redis task store: partitions as sorted sets and a hash, changed by Lua scripts.
///
/// Cloning is cheap: clones share two multiplexed connections (redis-rs `ConnectionManager`s,
/// which reconnect in the background after a connection drops): one for the firing path
/// (claims, acks, renewals, reads) and one for producers' writes (`schedule`,
/// `schedule_many`), so a bulk load never queues a claim behind its pipelines.
///
/// Layout (DESIGN.md): per partition `<prefix>:{<queue>:<p>}:due|tasks|inflight|done|dead`,
/// plus the queue registry `<prefix>:{cluster}:queues`. The record in `tasks` is a versioned text header
/// followed by the payload (`1|generation|attempt|claim|due|scheduled due|error length|error
/// payload`); completed tasks keep only the header. Every change is one Lua script called by
/// SHA, with every key passed through `KEYS`, so the store is ready for Redis Cluster.
///
/// Reads are retried twice after a transient failure; changes are not (after a lost
/// connection their fate is unknown, and the error says so).
#[derive(Clone)]
pub struct RedisStore {
    /// The firing path: claims, acks, renewals, reads, maintenance.
    pub(crate) connection: ConnectionManager,
    /// Producers' writes: single and bulk schedules.
    pub(crate) producer: ConnectionManager,
    /// Concurrent acks of one partition, sent together.
    pub(crate) acks: Batcher<Partition, LeaseToken, AckOutcome>,
    /// Concurrent single schedules of one partition and mode (`true`: if-absent), sent
    /// together.
    pub(crate) schedules: Batcher<(Partition, bool), NewTask, ScheduleOutcome>,
    pub(crate) prefix: Arc<str>,
    pub(crate) options: StoreOptions,
    /// The longest one operation may take: a response timeout plus a reconnection.
    pub(crate) deadline: Duration,
    /// The queue registry's per-process state (legacy merge, bad entries reported).
    pub(crate) registry: Arc<super::registry::RegistryState>,
    shown_url: Arc<str>,
}

impl std::fmt::Debug for RedisStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RedisStore")
            .field("url", &self.shown_url)
            .field("prefix", &self.prefix)
            .field("options", &self.options)
            .finish_non_exhaustive()
    }
}

impl RedisStore {
    /// Connects to Redis and loads the scripts.
    ///
    /// Fails within about `connect_timeout` with `ConnectionLost` (refused, unreachable) or
    /// `Timeout` when Redis cannot be reached, and with `Backend` for an invalid URL or a
    /// refused login; the message names the URL without its password.
    pub async fn connect(options: RedisStoreOptions) -> StorageResult<Self> {
        let shown_url: Arc<str> = Arc::from(redact_url(&options.url));
        let client =
            redis::Client::open(options.url.as_str()).map_err(|error| StorageError::Backend {
                operation: "connect",
                message: format!("invalid Redis URL {shown_url}: {error}"),
            })?;
        let connect_timeout = options.connect_timeout;
        let response_timeout = options.response_timeout;
        let failed = |error: RedisError| {
            let shown = &shown_url;
            match map_error("connect", "", error) {
                StorageError::ConnectionLost { operation, message } => {
                    StorageError::ConnectionLost {
                        operation,
                        message: format!("cannot reach Redis at {shown}: {message}"),
                    }
                }
                StorageError::Timeout { operation, message } => StorageError::Timeout {
                    operation,
                    message: format!("Redis at {shown} did not answer: {message}"),
                },
                StorageError::Backend { operation, message } => StorageError::Backend {
                    operation,
                    message: format!("Redis at {shown} refused us: {message}"),
                },
                other => other,
            }
        };

        // One direct attempt first: the connection manager would retry a refused connection
        // with backoff for seconds, and a caller starting up wants the reason at once.
        let probe_config = AsyncConnectionConfig::new()
            .set_connection_timeout(Some(connect_timeout))
            .set_response_timeout(Some(response_timeout));
        let mut probe = within(
            connect_timeout,
            client.get_multiplexed_async_connection_with_config(&probe_config),
        )
        .await
        .map_err(failed)?;
        // Pipelined script calls get no NOSCRIPT fallback, so every script is loaded now.
        for script in SCRIPTS.all() {
            within(response_timeout, script.load_async(&mut probe))
                .await
                .map_err(failed)?;
        }

        let manager_config = ConnectionManagerConfig::new()
            .set_connection_timeout(Some(connect_timeout))
            .set_response_timeout(Some(response_timeout))
            .set_min_delay(Duration::from_millis(50))
            .set_max_delay(Duration::from_secs(1))
            .set_number_of_retries(6);
        let connection = within(
            connect_timeout,
            ConnectionManager::new_with_config(client.clone(), manager_config.clone()),
        )
        .await
        .map_err(failed)?;
        let producer = within(
            connect_timeout,
            ConnectionManager::new_with_config(client, manager_config),
        )
        .await
        .map_err(failed)?;
        tracing::debug!(url = %shown_url, prefix = %options.key_prefix, "connected to Redis");
        Ok(RedisStore {
            connection,
            producer,
            acks: Batcher::default(),
            schedules: Batcher::default(),
            prefix: Arc::from(options.key_prefix),
            options: options.store,
            deadline: response_timeout + connect_timeout,
            registry: Arc::default(),
            shown_url,
        })
    }

    /// The keys of `partition`.
    pub(crate) fn keys(&self, partition: &Partition) -> PartitionKeys {
        PartitionKeys::new(&self.prefix, partition)
    }

    /// Runs one script call (EVALSHA; on NOSCRIPT, SCRIPT LOAD and one more try), bounded by
    /// the operation deadline. Never retried otherwise: scripts change state.
    pub(crate) async fn invoke(&self, invocation: &ScriptInvocation<'_>) -> RedisResult<Value> {
        let mut connection = self.connection.clone();
        within(self.deadline, invocation.invoke_async(&mut connection)).await
    }

    /// Runs a producer's script (schedule) on the producers' connection.
    pub(crate) async fn invoke_for_producer(
        &self,
        invocation: &ScriptInvocation<'_>,
    ) -> RedisResult<Value> {
        let mut connection = self.producer.clone();
        within(self.deadline, invocation.invoke_async(&mut connection)).await
    }

    /// Runs an idempotent read, retrying it twice after a transient failure (the connection
    /// manager reconnects in the background meanwhile). `key` names the hash a corrupt
    /// record would be in.
    pub(crate) async fn read<T, F, Fut>(
        &self,
        operation: &'static str,
        key: &str,
        attempt: F,
    ) -> StorageResult<T>
    where
        F: Fn(ConnectionManager) -> Fut,
        Fut: Future<Output = RedisResult<T>>,
    {
        let mut delays = READ_RETRY_DELAYS.iter();
        loop {
            let error = match within(self.deadline, attempt(self.connection.clone())).await {
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

/// Awaits `future` for at most `limit`; running out of time is an I/O timeout, which the error
/// mapping reports as `Timeout`.
pub(crate) async fn within<T>(
    limit: Duration,
    future: impl Future<Output = RedisResult<T>>,
) -> RedisResult<T> {
    match tokio::time::timeout(limit, future).await {
        Ok(result) => result,
        Err(_) => Err(RedisError::from(std::io::Error::new(
            std::io::ErrorKind::TimedOut,
            format!("no answer within {limit:?}"),
        ))),
    }
}
