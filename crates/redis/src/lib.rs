//! delayq's one connection layer to Redis, for the three topologies delayq runs on: one
//! server, a Redis Cluster, and a master watched by Redis Sentinel; each with TLS
//! (`rediss://`, private CA and client certificates) and ACL users (`user:password@`).
//!
//! ```no_run
//! use delayq_redis::{ConnectOptions, RedisConnection, Script, ScriptCall, Topology};
//!
//! # async fn example() -> Result<(), delayq_redis::Error> {
//! let options = ConnectOptions::new(Topology::cluster([
//!     "redis://10.0.0.1:7000",
//!     "redis://10.0.0.2:7000",
//! ]));
//! let redis = RedisConnection::connect(options).await?;
//!
//! // Scripts go to the master of KEYS[1]'s slot, and are loaded again where one is missing.
//! let bump = Script::new("return redis.call('INCRBY', KEYS[1], ARGV[1])");
//! let value = redis.run_script(&ScriptCall::new(&bump).key("delayq:{q:7}:n").arg(2)).await?;
//!
//! // Wake-ups: SPUBLISH/SSUBSCRIBE on a cluster, PUBLISH/SUBSCRIBE elsewhere.
//! let mut subscriber = redis.subscriber().await?;
//! subscriber.subscribe("delayq:{q:7}:wake").await.map_err(|e| redis.error("subscribe", &e))?;
//! redis.publish("delayq:{q:7}:wake", b"due").await?;
//! let event = subscriber.next_event().await;
//! # let _ = (value, event);
//! # Ok(())
//! # }
//! ```
//!
//! # What it guarantees
//! - Failover-aware errors: [`is_transient`] is true for `READONLY`, `LOADING`, `MASTERDOWN`,
//!   `CLUSTERDOWN`, `TRYAGAIN`, redirections, lost connections and timeouts. Commands the
//!   server refused before running them are sent again (to the new master) for up to
//!   [`Timeouts::failover`]; a command whose connection dropped is not (its fate is unknown),
//!   and comes back as a transient error.
//! - Sentinel: the master is asked of the sentinels at start and on any sign of a failover
//!   (`READONLY`, a dropped connection, `+switch-master`); a named master must answer `ROLE`
//!   as master before anything is sent to it.
//! - Redis Functions: a [`LibraryBuilder`] turns script bodies into one library, loaded on
//!   every master with [`RedisConnection::load_library`] and called with `FCALL`; loaded again
//!   where a master lost it (`Function not found`), and replaced by the bodies as `EVALSHA`
//!   scripts where Functions cannot be used (Redis < 7, no ACL permission,
//!   [`ConnectOptions::functions`] off).
//! - Cluster: commands go to the master of their first key's slot (scripts: `KEYS[1]`);
//!   [`RedisConnection::run_scripts`] groups calls by slot and runs the groups in parallel.
//! - No error message or log line of this crate contains a password ([`redact_url`]).
//! - [`RedisConnection::wait_replicas`] turns `WAIT` into a clear error when too few
//!   replicas confirmed a write in time.

mod calls;
mod connection;
mod error;
mod library;
mod masters;
mod pubsub;
mod redact;
mod scripts;
mod sentinel;
mod tls;
mod topology;
mod wait;

pub use connection::RedisConnection;
pub use error::{is_transient, Error, Result};
pub use library::{Library, LibraryBuilder};
pub use pubsub::{PubSubEvent, Subscriber};
pub use redact::redact_url;
pub use scripts::{Script, ScriptCall};
pub use topology::{
    ConnectOptions, Credentials, Timeouts, TlsOptions, Topology, TopologyKind, FUNCTIONS_ENV,
};

/// The redis-rs crate this layer is built on, for commands, pipelines and values.
pub use redis;
