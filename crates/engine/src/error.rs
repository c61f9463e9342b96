//! Typed errors of the engine.

use delayq_coordinator::CoordinatorError;
use delayq_storage::StorageError;

use crate::config::ConfigError;

/// What the [`Scheduler`](crate::Scheduler) and its builder fail with.
#[derive(Debug, thiserror::Error)]
pub enum EngineError {
    /// The configuration is invalid.
    #[error(transparent)]
    Config(#[from] ConfigError),
    /// The task store failed or rejected the input (invalid queue name, id, payload, ...).
    #[error(transparent)]
    Storage(#[from] StorageError),
    /// The coordinator failed (Redis unreachable at start, ...).
    #[error(transparent)]
    Coordinator(#[from] CoordinatorError),
    /// The PostgreSQL layer failed: connecting, or migrating the schema at start.
    #[error(transparent)]
    Postgres(#[from] delayq_postgres::Error),
    /// A relative delay or absolute time that cannot be a due time.
    #[error("invalid due time for task {id:?}: {reason}")]
    InvalidWhen {
        /// The task's id.
        id: String,
        /// What is wrong.
        reason: String,
    },
    /// A typed payload that could not be encoded.
    #[error("payload of task {id:?} does not serialize to JSON: {reason}")]
    InvalidPayload {
        /// The task's id.
        id: String,
        /// The serializer's message.
        reason: String,
    },
    /// Two handlers were registered for one queue.
    #[error("queue {queue:?} already has a handler")]
    DuplicateHandler {
        /// The queue.
        queue: String,
    },
    /// A recurring schedule's name or spec is invalid (names the field and the value).
    #[error(transparent)]
    InvalidSpec(#[from] crate::recurring::SpecError),
    /// A recurring schedule's stored record cannot be read, or kept changing under a write.
    #[error("recurring schedule {name:?}: {reason}")]
    CorruptSchedule {
        /// The schedule's name.
        name: String,
        /// What is wrong.
        reason: String,
    },
    /// A recurring schedule kept changing under a write (other writers won every
    /// compare-and-set); nothing was changed by this call, and trying again is safe.
    #[error("recurring schedule {name:?} kept changing during {attempts} attempts; try again")]
    ScheduleContended {
        /// The schedule's name.
        name: String,
        /// How many compare-and-sets were lost.
        attempts: usize,
    },
    /// The store knows no queue of this name (nothing was ever scheduled into it).
    #[error("unknown queue {queue:?}")]
    UnknownQueue {
        /// The queue's name.
        queue: String,
    },
    /// `delete_queue` without `force` on a queue that still holds tasks: nothing was deleted.
    #[error("queue {queue:?} holds {pending} pending, {inflight} in-flight and {dead} dead tasks; delete it with force to remove them too")]
    QueueNotEmpty {
        /// The queue's name.
        queue: String,
        /// Its pending tasks (also those waiting for a retry).
        pending: u64,
        /// Its tasks whose handler is running.
        inflight: u64,
        /// Its dead letters.
        dead: u64,
    },
    /// A listing (`pending`, `dead_letters`) asked for no entries or for more than
    /// [`MAX_LIST_LIMIT`](crate::admin::MAX_LIST_LIMIT).
    #[error("invalid limit {limit}: expected 1..={max}")]
    InvalidLimit {
        /// The limit asked for.
        limit: usize,
        /// The most a listing returns.
        max: usize,
    },
    /// A PostgreSQL-only call (`schedule_in_tx`, `cancel_in_tx`) on a scheduler of another
    /// backend, or one built with its own store.
    #[error("this call needs the PostgreSQL backend (backend: postgres); this scheduler runs on another")]
    NotPostgres,
    /// The scheduler is shutting down or was shut down.
    #[error("the scheduler is shut down")]
    ShutDown,
}

/// `Result` with [`EngineError`].
pub type EngineResult<T> = Result<T, EngineError>;
