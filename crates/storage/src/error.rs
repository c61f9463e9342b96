//! Typed errors of the task store.

/// Everything a [`TaskStore`](crate::TaskStore) operation can fail with.
///
/// Input errors name the field and the value; backend errors say whether retrying can help
/// ([`StorageError::is_transient`]).
#[derive(Debug, thiserror::Error)]
pub enum StorageError {
    /// A queue name outside 1..=64 characters of `[A-Za-z0-9_.-]`.
    #[error("invalid queue name {name:?}: {reason}")]
    InvalidQueueName {
        /// The name given.
        name: String,
        /// What is wrong with it.
        reason: &'static str,
    },
    /// An empty task id, or one longer than 512 bytes.
    #[error("invalid task id {id:?}: {reason}")]
    InvalidTaskId {
        /// The id given (shortened when long).
        id: String,
        /// What is wrong with it.
        reason: &'static str,
    },
    /// A `traceparent` that is not a W3C trace context.
    #[error("invalid traceparent {value:?}: {reason}")]
    InvalidTraceParent {
        /// The value given (shortened when long).
        value: String,
        /// What is wrong with it.
        reason: &'static str,
    },
    /// A due time beyond the year 9999.
    #[error("invalid due time {due_ms} ms: it is beyond the year 9999")]
    InvalidDue {
        /// The due time given.
        due_ms: u64,
    },
    /// A payload larger than `max_payload`; nothing was stored.
    #[error("payload of task {id:?} is {size} bytes, more than max_payload ({max} bytes)")]
    PayloadTooLarge {
        /// The task's id.
        id: String,
        /// The payload's size.
        size: usize,
        /// The limit.
        max: usize,
    },
    /// A partition index outside `0..partitions` of its queue.
    #[error("partition {index} of queue {queue:?} does not exist (the queue has {partitions})")]
    NoSuchPartition {
        /// The queue.
        queue: String,
        /// The index given.
        index: u32,
        /// The number of partitions the queue has.
        partitions: u32,
    },
    /// The queue was first used with another number of partitions.
    #[error("queue {queue:?} has {recorded} partitions in the store, but {configured} are configured; use {recorded} (changing it would misroute tasks)")]
    PartitionMismatch {
        /// The queue.
        queue: String,
        /// The number configured here.
        configured: u32,
        /// The number recorded in the store.
        recorded: u32,
    },
    /// The queue was first registered with the other `flow_keys` setting.
    #[error("queue {queue:?} is registered with flow_keys: {recorded}, but flow_keys: {configured} is asked for; the setting is fixed when a queue is first registered (changing it would misroute keyed tasks): use flow_keys: {recorded}, or a new queue")]
    FlowKeysMismatch {
        /// The queue.
        queue: String,
        /// The setting asked for here.
        configured: bool,
        /// The setting recorded in the store.
        recorded: bool,
    },
    /// Per-key limits for a queue without flow keys (its keyed ids are spread over every
    /// partition, so no claim could keep a key's limit).
    #[error("queue {queue:?} has per-key limits but is registered without flow_keys: set flow_keys: true on a new queue")]
    FlowKeysRequired {
        /// The queue.
        queue: String,
    },
    /// A flow key that cannot be part of an id's `{...}`.
    #[error("invalid flow key {key:?}: {reason}")]
    InvalidFlowKey {
        /// The key given.
        key: String,
        /// What is wrong with it.
        reason: &'static str,
    },
    /// Per-key limits that cannot be kept (a zero concurrency, rate or period).
    #[error("invalid per-key limits: {reason}")]
    InvalidFlowLimits {
        /// What is wrong with them.
        reason: &'static str,
    },
    /// The backend does not offer this yet.
    #[error("{what} is not supported by the {backend} backend yet")]
    Unsupported {
        /// What was asked for.
        what: &'static str,
        /// The backend.
        backend: &'static str,
    },
    /// An invalid partition count (0 or more than 65536).
    #[error("invalid partition count {partitions} for queue {queue:?}: it must be 1..=65536")]
    InvalidPartitionCount {
        /// The queue.
        queue: String,
        /// The count given.
        partitions: u32,
    },
    /// The lease behind a token is no longer held: it expired and the task went back to
    /// pending or was claimed again. Nothing was changed.
    #[error("stale lease on task {id:?} in {partition}: the task was requeued or claimed again")]
    StaleLease {
        /// The task's partition, as `queue:index`.
        partition: String,
        /// The task's id.
        id: String,
    },
    /// A record in the store could not be decoded.
    #[error("corrupt record at {key} field {field:?}: {reason}")]
    CorruptRecord {
        /// The Redis key (or the memory store's name for it).
        key: String,
        /// The hash field (the task id).
        field: String,
        /// What is wrong.
        reason: String,
    },
    /// The connection to the backend is down or was lost during the operation; the
    /// operation may or may not have been applied.
    #[error("connection to the store lost during {operation}: {message}")]
    ConnectionLost {
        /// The operation that failed.
        operation: &'static str,
        /// The backend's message.
        message: String,
    },
    /// The backend did not answer in time; the operation may or may not have been applied.
    #[error("the store did not answer {operation} in time: {message}")]
    Timeout {
        /// The operation that timed out.
        operation: &'static str,
        /// The backend's message.
        message: String,
    },
    /// `WAIT` saw fewer replicas confirm the write than `wait_replicas` asks for, within its
    /// timeout. The write is on the master, but a failover now could lose it; trying again
    /// later can succeed (an `ack` retried with the same token only waits again). The engine
    /// does not retry an ack for it: the ack is applied, so the node counts it done.
    #[error(
        "{operation} is on the Redis master, but only {confirmed} of {wanted} replicas confirmed \
         it within redis.wait_timeout; a failover now could lose it"
    )]
    ReplicationTimeout {
        /// The operation (`schedule`, `schedule_many`, `cancel`, `ack`).
        operation: &'static str,
        /// The replicas asked for (`redis.wait_replicas`).
        wanted: u32,
        /// The replicas that confirmed in time.
        confirmed: u32,
    },
    /// The backend refused the operation for another reason.
    #[error("the store failed {operation}: {message}")]
    Backend {
        /// The operation that failed.
        operation: &'static str,
        /// The backend's message.
        message: String,
    },
}

impl StorageError {
    /// Whether retrying the same operation later can succeed: the connection was lost, the
    /// backend did not answer in time (a failover in progress is either), or too few replicas
    /// confirmed a write.
    pub fn is_transient(&self) -> bool {
        matches!(
            self,
            StorageError::ConnectionLost { .. }
                | StorageError::Timeout { .. }
                | StorageError::ReplicationTimeout { .. }
        )
    }

    /// A copy of this error for each item of a group (one backend call, one transaction)
    /// that failed with it: the transient kinds and `NoSuchPartition` keep their kind and
    /// fields, so each item's caller can still tell whether to retry; any other kind becomes
    /// a `Backend` error of `operation` carrying this one's message.
    pub(crate) fn copy_for(&self, operation: &'static str) -> StorageError {
        match self {
            StorageError::NoSuchPartition {
                queue,
                index,
                partitions,
            } => StorageError::NoSuchPartition {
                queue: queue.clone(),
                index: *index,
                partitions: *partitions,
            },
            StorageError::ReplicationTimeout {
                operation,
                wanted,
                confirmed,
            } => StorageError::ReplicationTimeout {
                operation,
                wanted: *wanted,
                confirmed: *confirmed,
            },
            StorageError::ConnectionLost { operation, message } => StorageError::ConnectionLost {
                operation,
                message: message.clone(),
            },
            StorageError::Timeout { operation, message } => StorageError::Timeout {
                operation,
                message: message.clone(),
            },
            other => StorageError::Backend {
                operation,
                message: other.to_string(),
            },
        }
    }
}

/// `Result` with [`StorageError`].
pub type StorageResult<T> = Result<T, StorageError>;
