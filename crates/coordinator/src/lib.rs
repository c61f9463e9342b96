//! # delayq-coordinator
//!
//! Who is alive, since when, what time it is on the cluster, and which partitions are mine.
//! Knows nothing of tasks.
//!
//! - [`Coordinator`]: register, heartbeat with a TTL, detect dead nodes, follow the
//!   membership, send wake-ups, leave. Backends: [`RedisCoordinator`] and
//!   [`MemoryCoordinator`] (many nodes in one process over a shared [`MemoryCluster`]).
//! - [`ClusterClock`]: Redis `TIME` as an offset from the local clock.
//! - [`owner`] / [`owned_partitions`]: rendezvous hashing of `(queue, partition)` over the
//!   live members.

#![warn(missing_docs)]

mod api;
mod assignment;
mod clock;
mod config;
mod error;
mod memory;
mod redis;
mod tasks;

pub use api::*;
pub use assignment::{owned_partitions, owner};
pub use clock::{ClockSample, ClusterClock, LocalClock, ManualClock, SkewedClock, SystemClock};
pub use config::{host_name, validate};
pub use error::{CoordinatorError, CoordinatorResult};
pub use memory::{MemoryCluster, MemoryCoordinator};
pub use redis::RedisCoordinator;
