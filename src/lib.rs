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

/// The PostgreSQL layer (pool, TLS, migrations), and through it the driver whose transaction
/// type [`Scheduler::schedule_in_tx`] takes: `delayq::postgres::tokio_postgres`.
pub use delayq_postgres as postgres;

/// The README's code blocks, compiled as doctests so the embedding example stays true.
#[cfg(doctest)]
#[doc = include_str!("../README.md")]
pub struct ReadmeDoctests;
