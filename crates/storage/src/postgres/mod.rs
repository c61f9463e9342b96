//! The PostgreSQL backend: [`PostgresStore`], on one database through delayq's PostgreSQL
//! layer `delayq-postgres` (pool, TLS, failover hosts, retries of transient errors,
//! migrations).
//!
//! # Layout
//! The tables of migration 2 (`crates/postgres/migrations/0002_tasks.sql`) in the schema
//! `postgres.schema`: `tasks` (the live tasks of every partition, with partial indexes on the
//! due time of pending tasks, the lease deadline of in-flight ones and the failure time of
//! dead ones), `superseded`, `done`, `ticks`, `partitions` (one row per partition: its lock,
//! sequence and claim receipt), `queues`, `paused`, `rate_windows`, `global_slots`,
//! `recurring`.
//!
//! # Atomicity
//! Every operation on a partition is one transaction that first locks the partition's row
//! (`SELECT ... FOR UPDATE`): what a Lua script per partition slot is for the Redis backend
//! and the partition's mutex for the memory twin, so the three share one state machine
//! (`partition.rs` follows the memory twin's `partition/` step by step). Claims take the due
//! rows from the partial index in due order with `FOR UPDATE SKIP LOCKED`. A transaction that
//! fails transiently (a restart, a failover, a serialization failure) is rolled back and run
//! again by the layer; a permanent failure is returned.
//!
//! The two operations of every fire are single statements instead, each locking the
//! partition's row as its first step and committing on its own: a claim (`claim.rs`; sent
//! once, its receipt read after a transient failure) and the ack of tokens that still hold
//! their leases (the others get the full check in a transaction). A transaction holds the
//! partition's lock across round trips to the node; a statement only while it runs.
//!
//! # Time
//! Completion and failure stamps, the dedup age and slot leases use the database's
//! `clock_timestamp()`: the cluster clock. Generations and claim numbers are
//! `max(previous + 1, clock in µs)`, so they never repeat, not even after a queue is deleted.
//! Claims and lease sweeps judge by `min(now_ms, database clock)` (guarantee 9).

mod claim;
mod heads;
mod in_tx;
mod look;
mod partition;
mod prune_floor;
mod recurring;
mod sql;
mod store;

use std::sync::Arc;

use delayq_postgres::{Database, Migrator, PostgresConfig};

use crate::error::{StorageError, StorageResult};
use crate::model::{AckOutcome, LeaseToken, Partition, StoreOptions};
use crate::redis::batch::Batcher;

pub use heads::HEAD_VIEW_MAX_AGE;

/// How long the first ack of a partition waits for the others of its claim (see
/// [`Batcher::lingering`]): one statement per claim's acks instead of ~1.2.
const ACK_LINGER: std::time::Duration = std::time::Duration::from_millis(1);

/// How to reach the database and the store's limits.
#[derive(Clone, Debug)]
pub struct PostgresStoreOptions {
    /// The `postgres.*` settings (URL, schema, pool size, `statement_timeout`).
    pub postgres: PostgresConfig,
    /// Limits and retention shared by every backend.
    pub store: StoreOptions,
}

impl PostgresStoreOptions {
    /// The defaults for `url`.
    pub fn new(url: impl Into<String>) -> Self {
        PostgresStoreOptions {
            postgres: PostgresConfig::new(url),
            store: StoreOptions::default(),
        }
    }
}

/// The task store on PostgreSQL.
///
/// Cheap to clone: clones share the pool.
#[derive(Clone, Debug)]
pub struct PostgresStore {
    inner: Arc<Inner>,
}

struct Inner {
    database: Database,
    options: StoreOptions,
    sql: Arc<sql::Sql>,
    /// Concurrent acks of one partition, sent as one transaction (group commit).
    acks: Batcher<Partition, LeaseToken, AckOutcome>,
    /// The earliest pending due of the partitions idle looks ask about (one read for all).
    heads: heads::HeadView,
    /// Per partition, a time no done record is completed before: prunes that cannot find
    /// anything are not sent.
    prune_floors: prune_floor::PruneFloors,
}

impl std::fmt::Debug for Inner {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PostgresStore")
            .field("database", &self.database)
            .field("options", &self.options)
            .finish_non_exhaustive()
    }
}

impl PostgresStore {
    /// Connects, and creates or migrates the schema (under the migration lock, so nodes
    /// starting together migrate once).
    pub async fn connect(options: PostgresStoreOptions) -> StorageResult<Self> {
        let database =
            Database::new(&options.postgres).map_err(|error| from_layer("connect", error))?;
        Migrator::new(&database)
            .apply()
            .await
            .map_err(|error| from_layer("migrate", error))?;
        Ok(Self::on(database, options.store))
    }

    /// A store on an already migrated database (see [`Migrator`]).
    pub fn on(database: Database, options: StoreOptions) -> Self {
        let sql = Arc::new(sql::Sql::new(database.schema()));
        PostgresStore {
            inner: Arc::new(Inner {
                database,
                options,
                sql,
                acks: Batcher::lingering(ACK_LINGER),
                heads: heads::HeadView::default(),
                prune_floors: prune_floor::PruneFloors::default(),
            }),
        }
    }

    /// The database this store works on.
    pub fn database(&self) -> &Database {
        &self.inner.database
    }

    /// The store's statements, for its schema.
    fn sql(&self) -> Arc<sql::Sql> {
        self.inner.sql.clone()
    }
}

/// The storage error for a failure of the PostgreSQL layer during `operation`.
pub(crate) fn from_layer(operation: &'static str, error: delayq_postgres::Error) -> StorageError {
    let message = error.to_string();
    if !error.is_transient() {
        return StorageError::Backend { operation, message };
    }
    if error.code() == Some("57014") {
        StorageError::Timeout { operation, message }
    } else {
        StorageError::ConnectionLost { operation, message }
    }
}

/// A millisecond or count as the database's `bigint` (every value the store accepts fits).
pub(crate) fn to_db(value: impl TryInto<i64>) -> i64 {
    value.try_into().unwrap_or(i64::MAX)
}

/// A `bigint` read back (never negative for what the store writes).
pub(crate) fn from_db(value: i64) -> u64 {
    u64::try_from(value).unwrap_or(0)
}
