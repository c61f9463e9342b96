//! # delayq-storage
//!
//! The task store of delayq: the [`TaskStore`] trait and its backends, Redis
//! ([`RedisStore`], with atomic Lua scripts), PostgreSQL ([`PostgresStore`], one transaction
//! per operation on the partition's locked row) and memory ([`MemoryStore`], the in-process
//! twin), all held to the same conformance suite and model test.
//!
//! The Redis backend runs on one server, a Redis Cluster (each queue partition is one slot, so
//! a queue's partitions spread over every master) or a Sentinel-watched master, over TLS and
//! as an ACL user, through `delayq-redis` ([`RedisStoreOptions::redis`]). With
//! [`RedisStoreOptions::wait_replicas`], writes return only once replicas confirmed them, or
//! fail with [`StorageError::ReplicationTimeout`].
//!
//! The PostgreSQL backend keeps every queue in the tables of one schema (`postgres.schema`),
//! created and migrated when it connects, through `delayq-postgres` (pool, TLS, several hosts
//! with `target_session_attrs=read-write`; transient failures are retried).
//!
//! ```
//! use delayq_storage::{MemoryStore, NewTask, Partition, QueueName, ScheduleMode, TaskId, TaskStore};
//! # async fn demo() -> Result<(), delayq_storage::StorageError> {
//! let store = MemoryStore::new(Default::default());
//! let queue = QueueName::new("order-timeout")?;
//! store.register_queue(&queue, 4).await?;
//! let id = TaskId::new("order-42")?;
//! let partition = Partition::new(queue, delayq_storage::partition_of(&id, 4));
//! let task = NewTask { id, due_ms: 1_700_000_000_000, payload: "cancel".into(), traceparent: None };
//! store.schedule(&partition, task, ScheduleMode::Upsert).await?;
//! let batch = store.claim_due(&partition, 1_700_000_000_000, 10, 1_700_000_030_000, "node-a").await?;
//! assert_eq!(batch.tasks.len(), 1);
//! # Ok(()) }
//! ```

#![warn(missing_docs)]

mod error;
mod flow;
mod hash;
mod memory;
mod model;
mod postgres;
mod recurring;
mod redis;
mod store;
mod trace;

pub use error::{StorageError, StorageResult};
pub use flow::{flow_key_of, FlowLimits, HeldKey, KeyRate, QueueLayout};
pub use hash::{partition_of, stable_hash};
pub use memory::MemoryStore;
pub use model::*;
pub use postgres::{PostgresStore, PostgresStoreOptions, HEAD_VIEW_MAX_AGE};
pub use recurring::{
    recurring_shard, RecurringStore, ShardLook, StoredSchedule, TickOutcome, RECURRING_SHARDS,
};
pub use redis::{RedisStore, RedisStoreOptions, WaitReplicas};
pub use store::{ItemResult, TaskStore};
pub use trace::{TraceParent, TRACEPARENT_LEN};
