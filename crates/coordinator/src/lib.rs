//! # delayq-coordinator
//!
//! Who is alive, since when, what time it is on the cluster, and which partitions are mine.
//! Knows nothing of tasks.
//!
//! - [`Coordinator`]: register, heartbeat with a TTL, detect dead nodes, follow the
//!   membership, listen to the wake-ups of the partitions this node owns and send wake-ups
//!   (received through a bounded, coalescing [`WakeupReceiver`]), leave. Backends:
//!   [`RedisCoordinator`] (one Redis server, a Redis Cluster or a Sentinel-watched master,
//!   with TLS and ACL users, through delayq-redis) and [`MemoryCoordinator`] (many nodes in
//!   one process over a shared [`MemoryCluster`]).
//! - [`ClusterClock`]: Redis `TIME` as an offset from the local clock, which is monotonic (a
//!   step of the wall clock never moves it).
//! - [`owner`] / [`owned_partitions`]: rendezvous hashing of `(queue, partition)` over the
//!   live members.
//! - [`validate`]: the configuration checks every backend runs first.
//!
//! ```
//! # #[tokio::main(flavor = "current_thread")]
//! # async fn main() -> delayq_coordinator::CoordinatorResult<()> {
//! use std::sync::Arc;
//! use delayq_coordinator::{
//!     owned_partitions, Coordinator, CoordinatorConfig, MemoryCluster, MemoryCoordinator,
//!     SystemClock, Wakeup,
//! };
//!
//! // Two nodes in one process (`RedisCoordinator::join(connect_options, ..)` is the same on
//! // Redis).
//! let cluster = MemoryCluster::new();
//! let config = CoordinatorConfig::default();
//! let a = MemoryCoordinator::join(&cluster, config.clone(), Arc::new(SystemClock)).await?;
//! let b = MemoryCoordinator::join(&cluster, config, Arc::new(SystemClock)).await?;
//!
//! // Both see the same membership, so both agree on who owns what.
//! let membership = a.membership().borrow().clone();
//! assert_eq!(membership, *b.membership().borrow());
//! let mine = owned_partitions(a.node_id(), "order-timeout", 64, &membership.members);
//! let theirs = owned_partitions(b.node_id(), "order-timeout", 64, &membership.members);
//! assert_eq!(mine.len() + theirs.len(), 64);
//!
//! // Each node listens to the wake-ups of the partitions it owns: a wake-up reaches the owner.
//! let mut wakeups = a.take_wakeups().expect("a member's wake-ups");
//! a.listen(mine.iter().map(|&p| ("order-timeout".to_owned(), p)).collect());
//! let wakeup = Wakeup { queue: "order-timeout".into(), partition: mine[0], due_ms: 0 };
//! b.wake(wakeup.clone()).await?;
//! assert_eq!(wakeups.recv().await, Some(wakeup));
//!
//! // A graceful leave hands everything over at once.
//! b.leave().await?;
//! let membership = a.membership().borrow().clone();
//! assert_eq!(owned_partitions(a.node_id(), "order-timeout", 64, &membership.members).len(), 64);
//! # Ok(())
//! # }
//! ```

#![warn(missing_docs)]

mod api;
mod assignment;
mod clock;
mod config;
mod error;
mod memory;
mod postgres;
mod redis;
mod tasks;
mod wakeups;

pub use api::*;
pub use assignment::{owned_partitions, owner};
pub use clock::{
    ClockSample, ClusterClock, LocalClock, ManualClock, SkewedClock, SteppingClock, SystemClock,
};
pub use config::{host_name, validate};
pub use error::{CoordinatorError, CoordinatorResult};
pub use memory::{MemoryCluster, MemoryCoordinator};
pub use postgres::PostgresCoordinator;
pub use redis::RedisCoordinator;
pub use wakeups::{WakeupReceiver, WakeupStats, WAKEUP_CAPACITY};
