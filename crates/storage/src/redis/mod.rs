//! The Redis backend: [`RedisStore`].
//!
//! # Layout
//! Each queue partition is five keys sharing the hash tag `{<queue>:<index>}` (one Redis
//! Cluster slot per partition), exactly as DESIGN.md fixes them, plus a claim receipt:
//!
//! ```text
//! <prefix>:{<queue>:<p>}:due        ZSET id -> due_ms            pending
//! <prefix>:{<queue>:<p>}:tasks      HASH id -> record
//! <prefix>:{<queue>:<p>}:inflight   ZSET id -> lease deadline    claimed
//! <prefix>:{<queue>:<p>}:done       ZSET id -> completed_ms      executed-set (dedup)
//! <prefix>:{<queue>:<p>}:dead       ZSET id -> failed_ms         dead letters
//! <prefix>:{<queue>:<p>}:claim      STRING                       receipt of the latest claim
//! <prefix>:{cluster}:queues         HASH queue -> partition count (registry.rs)
//! ```
//!
//! Every change is one Lua script (`lua/*.lua`, each with its `KEYS`/`ARGV`/reply contract on
//! top), called by SHA; every key it touches arrives through `KEYS`.
//!
//! # Record
//! The `tasks` hash holds a versioned text header and the payload:
//! `1|<generation>|<attempt>|<claim>|<due>|<scheduled due>|<error length>|<error><payload>`
//! (see `record.rs` and `lua/record.lua`, the two halves of one codec). Empty fields take
//! their defaults, and a pending record's due is its score in `due`, so a fresh task's header
//! is 24 bytes and a 50-byte payload keeps the value in jemalloc's 80-byte class (about 196 B
//! of Redis memory per pending task beyond the payload, measured). Completed tasks keep only
//! the header (no payload, no error): what dedup needs. A record that does not decode,
//! or carries an unknown version, is reported as `CorruptRecord` with its key and field by
//! `get`, `ack` and `fail`; `claim_due` moves such a record to the dead letters instead (its
//! payload is the record as it was, its last error the reason), so it never blocks its
//! partition. Generation 0 marks a task cancelled while its handler ran.
//!
//! # Generations, leases and fencing
//! A new id starts at generation = Redis `TIME` in µs and each later schedule adds 1, so a
//! generation is never reused, not even after a cancel. `claim_due` gives each claimed
//! record a new claim number, `max(previous + 1, Redis TIME in µs)`, so claim numbers never
//! repeat either; the token is `(partition, id, generation, claim)`. `ack`, `fail` and `renew`
//! check it inside their script: no record, or another generation (cancelled, or scheduled
//! again while the handler ran) is `Superseded` (for `renew`: `StaleLease`); the same
//! generation with another claim number, or no in-flight entry (requeued, claimed again), is
//! `StaleLease`, and nothing changes.
//!
//! # Batching
//! Concurrent `ack`s of one partition, and concurrent single `schedule`s of one partition,
//! share one script call (see `batch.rs`): most of a small script's cost in Redis is the call
//! itself. `schedule_many` sends pipelines of multi-item calls.
//!
//! # Failures
//! Reads (`get`, `stats`, `peek_window`, `queues`, `list_dead`, and `register_queue`, which
//! is idempotent) are retried twice after a transient failure; state-changing scripts are
//! not (their fate is unknown after a lost connection, and the error says so). Every call is
//! bounded by `response_timeout + connect_timeout`, which also covers waiting for a
//! reconnection.

mod admin;
mod batch;
mod connection;
mod error_map;
mod keys;
mod lease;
mod record;
mod registry;
mod reply;
mod schedule;
mod scripts;
mod store;
#[cfg(test)]
mod tests;

use std::time::Duration;

use crate::model::StoreOptions;

pub use connection::RedisStore;

/// How to reach Redis, and the store's limits.
#[derive(Clone)]
pub struct RedisStoreOptions {
    /// `redis://[user:password@]host:port/db`, or `rediss://` for TLS.
    pub url: String,
    /// The first part of every key (`<prefix>:{queue:p}:due`, `<prefix>:queues`).
    pub key_prefix: String,
    /// Payload limit and executed retention.
    pub store: StoreOptions,
    /// How long to wait for one reply (redis-rs's own default is 500 ms; ours is 2 s, so a
    /// claim of a large batch on a busy server does not time out).
    pub response_timeout: Duration,
    /// How long to wait for a connection to be established.
    pub connect_timeout: Duration,
}

impl Default for RedisStoreOptions {
    fn default() -> Self {
        RedisStoreOptions {
            url: "redis://127.0.0.1:6379/0".to_owned(),
            key_prefix: "delayq".to_owned(),
            store: StoreOptions::default(),
            response_timeout: Duration::from_secs(2),
            connect_timeout: Duration::from_secs(2),
        }
    }
}

impl std::fmt::Debug for RedisStoreOptions {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RedisStoreOptions")
            .field("url", &error_map::redact_url(&self.url))
            .field("key_prefix", &self.key_prefix)
            .field("store", &self.store)
            .field("response_timeout", &self.response_timeout)
            .field("connect_timeout", &self.connect_timeout)
            .finish()
    }
}
