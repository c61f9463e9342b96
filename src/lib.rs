//! # delayq
//!
//! A clustered, sharded delayed-task scheduler that services embed in every replica. This
//! crate is the facade: it re-exports the engine's public API ([`Scheduler`], [`Task`],
//! [`When`], [`config::Config`], ...) and the storage and coordinator crates.

#![warn(missing_docs)]

pub use delayq_engine::*;

/// The task store: trait, Redis and memory backends.
pub use delayq_storage as storage;

/// The cluster coordinator: membership, heartbeats, cluster clock, assignment.
pub use delayq_coordinator as coordinator;
