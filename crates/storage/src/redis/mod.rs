//! The Redis backend: [`RedisStore`], on one server, a Redis Cluster or a Sentinel-watched
//! master (with TLS and ACL users), through delayq's connection layer `delayq-redis`.
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
//! <prefix>:{<queue>:<p>}:paused     STRING                       set while the queue is paused (controls.rs)
//! <prefix>:{cluster}:paused         HASH queue -> paused since   the paused queues (controls.rs)
//! <prefix>:{<queue>:<p>}:ticks      ZSET tick id -> tick ms      tick ledger (recurring.rs)
//! <prefix>:{recurring#<s>}:schedules HASH name -> record         recurring schedules, 16 shards
//! <prefix>:{recurring#<s>}:next     ZSET name -> next tick ms    the active ones, by next tick
//! <prefix>:{recurring#<s>}:fired    HASH name -> tick:fired_ms   the latest tick handed to a handler
//! <prefix>:{cluster}:queues         HASH queue -> partition count (registry.rs)
//! ```
//!
//! `delete_queue` removes all of a queue's keys on every master and its registry entries
//! (`drop_queue.rs`).
//!
//! Every change is one Lua script (`lua/*.lua`, each with its `KEYS`/`ARGV`/reply contract on
//! top), a function of one Redis Functions library called with `FCALL` (or, on Redis 6, a
//! script called by SHA: `scripts.rs`); every key it touches arrives through `KEYS`, and all of them share one
//! slot.
//!
//! # Topologies
//! On a Redis Cluster each script call goes to the master of its partition's slot, so the
//! partitions of one queue spread over every master; a script a new master lacks (`NOSCRIPT`)
//! is loaded again there by the connection layer. `schedule_many` groups its items by slot
//! and sends the groups in parallel. A claim never takes a task before its due on the
//! claiming shard's own `TIME` (`claim_due.lua`). On Sentinel the master is asked of the
//! sentinels again on any sign of a failover, and nothing is written to a demoted master.
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
//! itself. `schedule_many` sends multi-item calls, one per partition, grouped by slot.
//!
//! # Waiting for replicas
//! With [`RedisStoreOptions::wait_replicas`], `schedule`, `schedule_many`, `cancel` and
//! `ack` return only after `WAIT` on the master that took the write saw that many replicas
//! acknowledge it (see `replication.rs`). When fewer do within the timeout, the call fails
//! with [`StorageError::ReplicationTimeout`](crate::StorageError::ReplicationTimeout) after
//! about that timeout: the write is on the master, but a failover now could lose it. The error
//! is transient: a producer may schedule again (an upsert), and an `ack` retried with the
//! same token only waits for the replicas again and then reports the first outcome.
//!
//! # Failures
//! `READONLY`, `LOADING`, `MASTERDOWN`, `CLUSTERDOWN`, `TRYAGAIN`, a lost connection and a
//! timeout are transient (`ConnectionLost` or `Timeout`); commands the server refused before
//! running them are sent again by the connection layer while the topology changes. Reads
//! (`get`, `stats`, `peek_window`, `queues`, `list_dead`, `peek_dead`, and `register_queue`,
//! which is idempotent) are retried twice after a transient failure; state-changing scripts
//! are not (their fate is unknown after a lost connection, and the error says so).

mod admin;
pub(crate) mod batch;
mod claim;
mod connection;
mod controls;
mod drop_queue;
mod error_map;
mod flow;
mod keys;
mod lease;
mod record;
mod recurring;
mod registry;
mod replication;
mod reply;
mod schedule;
mod scripts;
mod store;
#[cfg(test)]
mod tests;

use std::time::Duration;

use delayq_redis::{ConnectOptions, Topology};

use crate::model::StoreOptions;

pub use connection::RedisStore;

/// How to reach Redis, and the store's limits.
///
/// ```
/// use std::time::Duration;
/// use delayq_storage::{RedisStoreOptions, WaitReplicas};
/// use delayq_redis::{ConnectOptions, Topology};
///
/// // One server, defaults otherwise.
/// let one = RedisStoreOptions::standalone("redis://127.0.0.1:6379/0");
/// assert_eq!(one.key_prefix, "delayq");
///
/// // A 3-master Redis Cluster; writes wait for one replica for at most 100 ms.
/// let cluster = RedisStoreOptions {
///     redis: ConnectOptions::new(Topology::cluster(["redis://10.0.0.1:7000", "redis://10.0.0.2:7000"])),
///     wait_replicas: Some(WaitReplicas { replicas: 1, timeout: Duration::from_millis(100) }),
///     ..RedisStoreOptions::standalone("")
/// };
/// # let _ = cluster;
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RedisStoreOptions {
    /// The topology (one server, a cluster, a Sentinel master), TLS files and timeouts: see
    /// `delayq_redis::ConnectOptions`. `timeouts.start` bounds [`RedisStore::connect`].
    pub redis: ConnectOptions,
    /// The first part of every key (`<prefix>:{queue:p}:due`, `<prefix>:{cluster}:queues`).
    pub key_prefix: String,
    /// Payload limit and executed retention.
    pub store: StoreOptions,
    /// Replicas that must confirm `schedule`, `schedule_many`, `cancel` and `ack` before they
    /// return; `None` (the default) waits for none. When fewer confirm within the timeout, the
    /// call fails after about that timeout with
    /// [`StorageError::ReplicationTimeout`](crate::StorageError::ReplicationTimeout): the write
    /// is on the master but a failover now could lose it. Claims never wait for replicas.
    pub wait_replicas: Option<WaitReplicas>,
}

/// `redis.wait_replicas` and `redis.wait_timeout`: how many replicas must confirm a write
/// (`WAIT`), and for how long to wait for them.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct WaitReplicas {
    /// Replicas of the written master that must acknowledge the write (0: none).
    pub replicas: u32,
    /// How long `WAIT` may take; it must be above zero and below the response timeout
    /// (`redis.timeouts.response`).
    pub timeout: Duration,
}

impl RedisStoreOptions {
    /// One server at `url` (`redis://[user:password@]host:port/db`, or `rediss://`), the
    /// `delayq` prefix, default limits and timeouts, no waiting for replicas.
    pub fn standalone(url: impl Into<String>) -> Self {
        RedisStoreOptions {
            redis: ConnectOptions::new(Topology::standalone(url)),
            key_prefix: "delayq".to_owned(),
            store: StoreOptions::default(),
            wait_replicas: None,
        }
    }
}

impl Default for RedisStoreOptions {
    /// [`RedisStoreOptions::standalone`] at `redis://127.0.0.1:6379/0`.
    fn default() -> Self {
        RedisStoreOptions::standalone("redis://127.0.0.1:6379/0")
    }
}
