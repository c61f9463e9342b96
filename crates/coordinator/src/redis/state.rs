//! The state a Redis coordinator shares with its background tasks, and its round trips.

use std::collections::HashSet;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use delayq_redis::redis::{self, Value};
use delayq_redis::{RedisConnection, ScriptCall, TopologyKind};
use parking_lot::Mutex;
use tokio::sync::{watch, Notify};

use super::keys::Keys;
use super::scripts;
use super::wire::{RawReply, RegistryEntry, ScriptReply};
use crate::api::{publish_if_changed, CoordinatorConfig, Membership, NodeId};
use crate::clock::{ClockSample, ClusterClock};
use crate::error::{CoordinatorError, CoordinatorResult};

/// The most passed deadlines one heartbeat examines (and removes). More dead members than
/// this at once (a whole rack) are removed by the next heartbeats, of this node or others.
pub(crate) const PASSED_DEADLINES_PER_BEAT: u32 = 64;

/// What the last registry read that was applied said.
#[derive(Debug, Default)]
struct Applied {
    /// The number of that read (0: none yet).
    read: u64,
    /// Its epoch: a script reads the registry again only when the epoch differs.
    epoch: Option<u64>,
    /// The other members it named without a heartbeat deadline (nodes of the previous
    /// release): each heartbeat checks their `hb:<id>` keys, as that release did.
    without_deadline: Vec<NodeId>,
}

pub(crate) struct Shared {
    pub(crate) id: NodeId,
    pub(crate) keys: Keys,
    pub(crate) config: CoordinatorConfig,
    pub(crate) redis: RedisConnection,
    pub(crate) clock: Arc<ClusterClock>,
    pub(crate) membership: watch::Sender<Membership>,
    /// Asks the refresher task for a re-read (an announcement arrived).
    pub(crate) refresh: Notify,
    /// This node's registry entry; `None` for an observer.
    pub(crate) entry: Option<Mutex<RegistryEntry>>,
    pub(crate) operation_timeout: Duration,
    /// Reads are numbered when sent; a reply older than the last one applied is not applied,
    /// so a slow read never rolls the membership back.
    next_read: AtomicU64,
    applied: Mutex<Applied>,
    /// The highest epoch seen: the floor of the next bump (the epoch never goes backwards,
    /// even when Redis restarted empty or a failover lost the last bump).
    highest_epoch: AtomicU64,
    /// The server time (ms) of this node's last successful heartbeat; 0 before the first.
    last_beat_server_ms: AtomicU64,
    /// Corrupt registry entries already warned about.
    corrupt_warned: Mutex<HashSet<String>>,
}

impl Shared {
    pub(crate) fn new(
        id: NodeId,
        config: CoordinatorConfig,
        redis: RedisConnection,
        clock: Arc<ClusterClock>,
        entry: Option<RegistryEntry>,
    ) -> Self {
        Shared {
            id,
            keys: Keys::new(&config.key_prefix),
            operation_timeout: operation_timeout(&config),
            config,
            redis,
            clock,
            membership: watch::Sender::new(Membership::default()),
            refresh: Notify::new(),
            entry: entry.map(Mutex::new),
            next_read: AtomicU64::new(0),
            applied: Mutex::new(Applied::default()),
            highest_epoch: AtomicU64::new(0),
            last_beat_server_ms: AtomicU64::new(0),
            corrupt_warned: Mutex::new(HashSet::new()),
        }
    }

    /// `SPUBLISH` on a Redis Cluster (sharded pub/sub, heard by the slot's master), `PUBLISH`
    /// elsewhere: the command the scripts announce with, matching how the subscriber listens.
    fn publish_command(&self) -> &'static str {
        match self.redis.kind() {
            TopologyKind::Cluster => "SPUBLISH",
            _ => "PUBLISH",
        }
    }

    /// A gap between two heartbeats of this node at least this long is a stall: the others'
    /// heartbeats, refreshed up to one period apart from ours, may have expired in it.
    fn stall_gap(&self) -> Duration {
        let period = self.config.heartbeat_period;
        self.config
            .heartbeat_ttl
            .saturating_sub(period)
            .max(period * 3 / 2)
    }

    /// Registers or refreshes this node and removes the members whose heartbeat expired, in
    /// one round trip that also samples the clock, and re-reads the membership if its epoch
    /// is not the one this node holds (O(1) on Redis when nothing changed).
    pub(crate) async fn heartbeat(&self) -> CoordinatorResult<ScriptReply> {
        let Some(entry) = &self.entry else {
            return self.snapshot().await;
        };
        let json = {
            let mut entry = entry.lock();
            entry.last_heartbeat_ms = self.clock.now_ms();
            entry.to_json()
        };
        // Only the members without a deadline (the previous release's nodes) are checked one
        // by one; the others' deadlines are found at the low end of the `deadlines` ZSET. A
        // member that joined since the last read has a fresh heartbeat anyway.
        let (held, legacy) = {
            let applied = self.applied.lock();
            (applied.epoch, applied.without_deadline.clone())
        };
        let mut call = ScriptCall::new(&scripts::HEARTBEAT)
            .key(&self.keys.registry)
            .key(&self.keys.epoch)
            .key(self.keys.heartbeat(self.id.as_str()))
            .key(&self.keys.stall)
            .key(&self.keys.deadlines);
        for other in &legacy {
            call = call.key(self.keys.heartbeat(other.as_str()));
        }
        call = call
            .arg(self.id.as_str())
            .arg(json)
            .arg(self.config.heartbeat_ttl.as_millis() as u64)
            .arg(self.highest_epoch.load(Ordering::SeqCst))
            .arg(&self.keys.events)
            .arg(self.publish_command())
            .arg(self.last_beat_server_ms.load(Ordering::SeqCst))
            .arg(self.stall_gap().as_millis() as u64)
            .arg(held_arg(held))
            .arg(PASSED_DEADLINES_PER_BEAT);
        for other in &legacy {
            call = call.arg(other.as_str());
        }
        let reply = self.run("heartbeat", &call).await?;
        // Stored, not maximized: after a failover the new master's clock is the reference.
        self.last_beat_server_ms
            .store(reply.server_us / 1_000, Ordering::SeqCst);
        Ok(reply)
    }

    /// Removes this node at once and announces it.
    pub(crate) async fn leave(&self) -> CoordinatorResult<ScriptReply> {
        let call = ScriptCall::new(&scripts::LEAVE)
            .key(&self.keys.registry)
            .key(&self.keys.epoch)
            .key(self.keys.heartbeat(self.id.as_str()))
            .key(&self.keys.deadlines)
            .arg(self.id.as_str())
            .arg(self.highest_epoch.load(Ordering::SeqCst))
            .arg(&self.keys.events)
            .arg(self.publish_command());
        self.run("leave", &call).await
    }

    /// Reads the epoch, and the registry if the epoch is not the one this node holds (and
    /// samples the clock); writes nothing.
    pub(crate) async fn snapshot(&self) -> CoordinatorResult<ScriptReply> {
        let held = self.applied.lock().epoch;
        let call = ScriptCall::new(&scripts::SNAPSHOT)
            .key(&self.keys.registry)
            .key(&self.keys.epoch)
            .key(&self.keys.deadlines)
            .arg(held_arg(held));
        self.run("snapshot", &call).await
    }

    /// One `TIME` round trip to the master serving the `{cluster}` slot, into the clock.
    pub(crate) async fn sample_clock(&self) -> CoordinatorResult<()> {
        let local_before_us = self.clock.local_now_us();
        let (seconds, micros): (u64, u64) = self
            .bounded(
                "read the server time",
                self.redis
                    .query_at_slot_of("TIME", &self.keys.registry, &redis::cmd("TIME")),
            )
            .await?;
        let local_after_us = self.clock.local_now_us();
        self.clock.record(ClockSample {
            local_before_us,
            server_us: seconds.saturating_mul(1_000_000) + micros,
            local_after_us,
        });
        Ok(())
    }

    /// Runs a membership script: times it for the clock, applies the membership it returns.
    async fn run(
        &self,
        operation: &'static str,
        call: &ScriptCall<'_>,
    ) -> CoordinatorResult<ScriptReply> {
        let read = self.next_read.fetch_add(1, Ordering::SeqCst) + 1;
        let local_before_us = self.clock.local_now_us();
        let value: Value = self.bounded(operation, self.redis.run_script(call)).await?;
        let local_after_us = self.clock.local_now_us();
        let raw: RawReply =
            redis::from_redis_value(value).map_err(|error| CoordinatorError::Backend {
                operation,
                message: format!("unexpected reply of the {operation} script: {error}"),
            })?;
        let reply = ScriptReply::from_raw(raw);
        self.clock.record(ClockSample {
            local_before_us,
            server_us: reply.server_us,
            local_after_us,
        });
        self.apply(read, &reply);
        Ok(reply)
    }

    /// Runs one Redis operation under the operation timeout.
    pub(crate) async fn bounded<T>(
        &self,
        operation: &'static str,
        future: impl std::future::Future<Output = delayq_redis::Result<T>>,
    ) -> CoordinatorResult<T> {
        self.bounded_by(self.operation_timeout, operation, future)
            .await
    }

    /// Runs one Redis operation under `timeout`.
    pub(crate) async fn bounded_by<T>(
        &self,
        timeout: Duration,
        operation: &'static str,
        future: impl std::future::Future<Output = delayq_redis::Result<T>>,
    ) -> CoordinatorResult<T> {
        match tokio::time::timeout(timeout, future).await {
            Ok(Ok(value)) => Ok(value),
            Ok(Err(error)) => Err(CoordinatorError::from_redis(operation, error)),
            Err(_) => Err(CoordinatorError::Backend {
                operation,
                message: format!("no reply within {timeout:?}"),
            }),
        }
    }

    /// Applies a reply: the highest epoch always, the membership when the reply read the
    /// registry and no later read was applied already.
    fn apply(&self, read: u64, reply: &ScriptReply) {
        self.highest_epoch.fetch_max(reply.epoch, Ordering::SeqCst);
        let Some(membership) = reply.membership(|error| {
            if let CoordinatorError::CorruptEntry { node, reason } = &error {
                if self.corrupt_warned.lock().insert(node.clone()) {
                    tracing::warn!(node = %self.id, member = %node, %reason, "corrupt registry entry left out of the membership");
                }
            }
        }) else {
            return;
        };
        let mut applied = self.applied.lock();
        if read <= applied.read {
            return;
        }
        applied.read = read;
        applied.epoch = Some(membership.epoch);
        applied.without_deadline = reply
            .without_deadline
            .iter()
            .filter(|id| id.as_str() != self.id.as_str())
            .map(NodeId::from_string)
            .collect();
        if !applied.without_deadline.is_empty() {
            tracing::debug!(node = %self.id, epoch = membership.epoch, count = applied.without_deadline.len(), "members without a heartbeat deadline (previous release): checked by their heartbeat keys");
        }
        let (epoch, members) = (membership.epoch, membership.members.len());
        if publish_if_changed(&self.membership, membership) {
            tracing::debug!(node = %self.id, epoch, members, "membership changed");
        }
    }
}

/// The epoch a caller holds as a script argument: empty when it holds none (read anyway).
fn held_arg(held: Option<u64>) -> String {
    held.map(|epoch| epoch.to_string()).unwrap_or_default()
}

/// How long one coordinator round trip may take before it counts as failed.
pub(crate) fn operation_timeout(config: &CoordinatorConfig) -> Duration {
    config.heartbeat_ttl.max(Duration::from_millis(500))
}
