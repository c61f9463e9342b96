//! The state a Redis coordinator shares with its background tasks, and its round trips.

use std::collections::HashSet;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use parking_lot::Mutex;
use redis::aio::ConnectionManager;
use redis::{Client, ScriptInvocation};
use tokio::sync::{watch, Notify};

use super::keys::Keys;
use super::scripts;
use super::wire::{RawReply, RegistryEntry, ScriptReply};
use crate::api::{publish_if_changed, CoordinatorConfig, Membership, NodeId};
use crate::clock::{ClockSample, ClusterClock};
use crate::error::{CoordinatorError, CoordinatorResult};

pub(crate) struct Shared {
    pub(crate) id: NodeId,
    pub(crate) keys: Keys,
    pub(crate) config: CoordinatorConfig,
    pub(crate) client: Client,
    pub(crate) connection: ConnectionManager,
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
    applied_read: Mutex<u64>,
    /// The highest epoch seen: the floor of the next bump (the epoch never goes backwards,
    /// even when Redis restarted empty).
    highest_epoch: AtomicU64,
    /// Corrupt registry entries already warned about.
    corrupt_warned: Mutex<HashSet<String>>,
}

impl Shared {
    pub(crate) fn new(
        id: NodeId,
        config: CoordinatorConfig,
        client: Client,
        connection: ConnectionManager,
        clock: Arc<ClusterClock>,
        entry: Option<RegistryEntry>,
    ) -> Self {
        Shared {
            id,
            keys: Keys::new(&config.key_prefix),
            operation_timeout: super::connect::operation_timeout(&config),
            config,
            client,
            connection,
            clock,
            membership: watch::Sender::new(Membership::default()),
            refresh: Notify::new(),
            entry: entry.map(Mutex::new),
            next_read: AtomicU64::new(0),
            applied_read: Mutex::new(0),
            highest_epoch: AtomicU64::new(0),
            corrupt_warned: Mutex::new(HashSet::new()),
        }
    }

    /// Registers or refreshes this node and removes the members whose heartbeat expired, in
    /// one round trip that also samples the clock and re-reads the membership.
    pub(crate) async fn heartbeat(&self) -> CoordinatorResult<ScriptReply> {
        let Some(entry) = &self.entry else {
            return self.snapshot().await;
        };
        let json = {
            let mut entry = entry.lock();
            entry.last_heartbeat_ms = self.clock.now_ms();
            entry.to_json()
        };
        // The members to check are those of the last membership seen; a member that joined
        // since then has a fresh heartbeat anyway and is checked next period.
        let others: Vec<NodeId> = self
            .membership
            .borrow()
            .members
            .iter()
            .filter(|member| member.id != self.id)
            .map(|member| member.id.clone())
            .collect();
        let mut invocation = scripts::HEARTBEAT.prepare_invoke();
        invocation
            .key(&self.keys.registry)
            .key(&self.keys.epoch)
            .key(self.keys.heartbeat(self.id.as_str()))
            .key(&self.keys.stall);
        for other in &others {
            invocation.key(self.keys.heartbeat(other.as_str()));
        }
        invocation
            .arg(self.id.as_str())
            .arg(json)
            .arg(self.config.heartbeat_ttl.as_millis() as u64)
            .arg(self.highest_epoch.load(Ordering::SeqCst))
            .arg(&self.keys.events);
        for other in &others {
            invocation.arg(other.as_str());
        }
        self.run("heartbeat", &invocation).await
    }

    /// Removes this node at once and announces it.
    pub(crate) async fn leave(&self) -> CoordinatorResult<ScriptReply> {
        let mut invocation = scripts::LEAVE.prepare_invoke();
        invocation
            .key(&self.keys.registry)
            .key(&self.keys.epoch)
            .key(self.keys.heartbeat(self.id.as_str()))
            .arg(self.id.as_str())
            .arg(self.highest_epoch.load(Ordering::SeqCst))
            .arg(&self.keys.events);
        self.run("leave", &invocation).await
    }

    /// Re-reads epoch and registry (and samples the clock); writes nothing.
    pub(crate) async fn snapshot(&self) -> CoordinatorResult<ScriptReply> {
        let mut invocation = scripts::SNAPSHOT.prepare_invoke();
        invocation.key(&self.keys.registry).key(&self.keys.epoch);
        self.run("snapshot", &invocation).await
    }

    /// Runs a membership script: times it for the clock, applies the membership it returns.
    async fn run(
        &self,
        operation: &'static str,
        invocation: &ScriptInvocation<'_>,
    ) -> CoordinatorResult<ScriptReply> {
        let read = self.next_read.fetch_add(1, Ordering::SeqCst) + 1;
        let mut connection = self.connection.clone();
        let local_before_us = self.clock.local_now_us();
        let raw: RawReply = self
            .bounded(operation, invocation.invoke_async(&mut connection))
            .await?;
        let local_after_us = self.clock.local_now_us();
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
        future: impl std::future::Future<Output = redis::RedisResult<T>>,
    ) -> CoordinatorResult<T> {
        self.bounded_by(self.operation_timeout, operation, future)
            .await
    }

    /// Runs one Redis operation under `timeout`.
    pub(crate) async fn bounded_by<T>(
        &self,
        timeout: Duration,
        operation: &'static str,
        future: impl std::future::Future<Output = redis::RedisResult<T>>,
    ) -> CoordinatorResult<T> {
        match tokio::time::timeout(timeout, future).await {
            Ok(Ok(value)) => Ok(value),
            Ok(Err(error)) => Err(CoordinatorError::Backend {
                operation,
                message: error.to_string(),
            }),
            Err(_) => Err(CoordinatorError::Backend {
                operation,
                message: format!("no reply within {timeout:?}"),
            }),
        }
    }

    fn apply(&self, read: u64, reply: &ScriptReply) {
        self.highest_epoch.fetch_max(reply.epoch, Ordering::SeqCst);
        let membership = reply.membership(|error| {
            if let CoordinatorError::CorruptEntry { node, reason } = &error {
                if self.corrupt_warned.lock().insert(node.clone()) {
                    tracing::warn!(node = %self.id, member = %node, %reason, "corrupt registry entry left out of the membership");
                }
            }
        });
        let mut applied = self.applied_read.lock();
        if read <= *applied {
            return;
        }
        *applied = read;
        let (epoch, members) = (membership.epoch, membership.members.len());
        if publish_if_changed(&self.membership, membership) {
            tracing::debug!(node = %self.id, epoch, members, "membership changed");
        }
    }
}
