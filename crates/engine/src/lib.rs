//! # delayq-engine
//!
//! The scheduler runtime that applications embed in every replica: it follows the cluster
//! membership, owns its share of the queues' partitions, prefetches what is due soon into one
//! timer, claims due tasks atomically, runs them on the queue's handler under a concurrency
//! limit, renews their leases, and acks, retries with backoff or dead-letters them.
//!
//! ```no_run
//! use std::time::Duration;
//! use delayq_engine::{config::Config, Scheduler, Task, When};
//!
//! # async fn run() -> Result<(), delayq_engine::EngineError> {
//! let scheduler = Scheduler::builder(Config::default())
//!     .handler("device-offline", |task: Task| async move {
//!         tracing::warn!(device = %task.id, "device went silent");
//!         Ok::<(), std::io::Error>(())
//!     })
//!     .start()
//!     .await?;
//! // Each heartbeat of device 7 pushes its deadline 30 s forward (upsert).
//! scheduler.schedule("device-offline", "device-7", When::In(Duration::from_secs(30)), "").await?;
//! # Ok(()) }
//! ```
//!
//! Guarantees are those of DESIGN.md: no double fire in normal operation (claims are atomic
//! Lua scripts), nothing lost (leases expire and come back), cancel and reschedule win over a
//! prefetched entry (the claim checks `due <= now` in the store), precise (one timer that
//! sleeps until the next due time), failures visible (retries, dead letters), dedup.

#![warn(missing_docs)]

pub mod admin;
mod builder;
mod claim_size;
pub mod config;
mod controls;
mod dispatch;
mod error;
mod gauges;
mod handler;
mod health;
pub mod in_tx;
mod late_claims;
mod limits;
mod partition;
mod queue_metrics;
mod read_cache;
pub mod recurring;
mod resources;
mod runtime;
mod scheduler;
mod settle;
mod task;
mod throttled;
pub mod timer;
mod trace;
mod unconfirmed;

pub use builder::{MemoryBackend, SchedulerBuilder};
pub use delayq_storage::{Cancel, HeldKey, ScheduleMode, TraceParent, UnknownScheduleMode};
pub use error::{EngineError, EngineResult};
pub use handler::{
    Handler, HandlerError, HandlerFuture, ResourceExhausted, RetryAfter, RESOURCE_RETRY_DELAY,
};
pub use scheduler::{ScheduleRequest, Scheduler};
pub use task::{Scheduled, Task, When};

/// The id `<prefix>:{<key>}:<rest>` of a task of flow key `key` (DESIGN.md, "Flow keys"): on a
/// queue with `flow_keys: true`, the tasks of one key share a partition and the queue's
/// `per_key_*` limits hold for them across the cluster. `schedule`, `get` and `cancel` take
/// the id as any other. Fails when `key` is empty or holds `{` or `}`, or the id is not a
/// valid id.
///
/// ```
/// let id = delayq_engine::keyed_id("webhook", "api.example.com", "evt-9")?;
/// assert_eq!(id, "webhook:{api.example.com}:evt-9");
/// assert_eq!(delayq_engine::flow_key_of(&id), Some("api.example.com"));
/// # Ok::<(), delayq_engine::EngineError>(())
/// ```
pub fn keyed_id(prefix: &str, key: &str, rest: &str) -> EngineResult<String> {
    Ok(delayq_storage::TaskId::keyed(prefix, key, rest)?
        .as_str()
        .to_owned())
}

pub use delayq_storage::flow_key_of;
