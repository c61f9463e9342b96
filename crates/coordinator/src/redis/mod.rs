//! The Redis coordinator.
//!
//! # Keys
//! Everything lives under `<prefix>:{cluster}:` (one hash tag, one Redis Cluster slot):
//! `registry` (HASH node id -> JSON entry), `hb:<node id>` (a heartbeat with a `PX` TTL),
//! `epoch` (the membership epoch), `stall` (set for one TTL after a stall), and the pub/sub
//! channels `events` (membership announcements) and `wake:<node id>` (wake-ups).
//!
//! # How membership stays consistent
//! Every change of the member set (join, leave, removal of the dead) happens in one Lua script
//! that changes the registry and bumps the epoch together, at most once per call, and then
//! announces the new epoch. Every read takes the epoch and the registry together, so two
//! nodes that see the same epoch see the same members. A node re-reads on each announcement
//! and on each heartbeat, so a lost announcement or a dropped subscription only delays an
//! update.
//!
//! # After an outage
//! A node whose entry vanished (its heartbeat expired during an outage and another node
//! removed it, or Redis restarted empty) re-registers on its next heartbeat *under the same
//! id*, with a new epoch bump: it is a new member as far as ownership is concerned (ownership
//! is recomputed from the membership), while `delayq nodes` keeps showing one entry per
//! process. The epoch never goes backwards: each bump is at least one above the highest epoch
//! the bumping node has seen, even when Redis lost the counter.
//!
//! # After a stall
//! When Redis stands still for longer than the heartbeat TTL (a fork, a slow fsync,
//! `DEBUG SLEEP`), every heartbeat expires at once. The first heartbeat after it finds its
//! own key expired while its entry is still registered: nobody removed it, so it was not
//! the only one silent. It sets the `stall` marker for one TTL, and while that is set no
//! heartbeat removes anybody: every live node beats again within the TTL, and the
//! membership does not change. A node that was itself paused (GC, SIGSTOP) and came back
//! before anybody removed it does the same, harmlessly; one removed meanwhile finds its
//! entry gone and re-registers. A node that really died is removed once the quiet time
//! is over: about one TTL later than usual, and only after a stall.

mod background;
mod connect;
mod keys;
mod scripts;
mod state;
mod wire;

use std::sync::Arc;
use std::time::Instant;

use async_trait::async_trait;
use parking_lot::Mutex;
use tokio::sync::{oneshot, watch};

use self::state::Shared;
use self::wire::{decode_registry, encode_wakeup, RawReply, RegistryEntry, ScriptReply};
use crate::api::{
    Coordinator, CoordinatorConfig, Membership, NodeId, NodeInfo, QueueFilter, Wakeup,
};
use crate::clock::{ClockSample, ClusterClock, LocalClock};
use crate::config::{host_name, validate};
use crate::error::{CoordinatorError, CoordinatorResult};
use crate::tasks::TaskGroup;
use crate::wakeups::{wakeup_mailbox, WakeupMonitor, WakeupReceiver, WakeupStats, WAKEUP_CAPACITY};

/// The longest a wake-up may take before it is given up.
const WAKE_TIMEOUT: std::time::Duration = std::time::Duration::from_millis(500);

/// How many `TIME` round trips warm the clock up before a node registers.
const CLOCK_WARMUP_SAMPLES: usize = 3;

/// A [`Coordinator`] on Redis (or Valkey, or a Redis Cluster: all keys share one slot).
///
/// ```no_run
/// # async fn run() -> delayq_coordinator::CoordinatorResult<()> {
/// use std::sync::Arc;
/// use delayq_coordinator::{Coordinator, CoordinatorConfig, RedisCoordinator, SystemClock};
///
/// let config = CoordinatorConfig { node_name: "api-1".into(), ..Default::default() };
/// let node = RedisCoordinator::join("redis://127.0.0.1:6379/0", config, Arc::new(SystemClock)).await?;
/// let membership = node.membership().borrow().clone();
/// println!("epoch {} with {} members", membership.epoch, membership.members.len());
/// node.leave().await?;
/// # Ok(())
/// # }
/// ```
pub struct RedisCoordinator {
    shared: Arc<Shared>,
    /// The heartbeat (member) or periodic re-read (observer).
    heartbeat: TaskGroup,
    /// The subscriber and the refresher.
    listeners: TaskGroup,
    wakeups: Mutex<Option<WakeupReceiver>>,
    /// The counters of the wake-up mailbox (a member's).
    wakeup_monitor: Option<WakeupMonitor>,
    /// Whether `leave` has completed (and serializes concurrent calls).
    left: tokio::sync::Mutex<bool>,
}

impl std::fmt::Debug for RedisCoordinator {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RedisCoordinator")
            .field("node", &self.shared.id)
            .field("member", &self.is_member())
            .field("key_prefix", &self.shared.config.key_prefix)
            .finish()
    }
}

impl RedisCoordinator {
    /// Joins the cluster at `url` as a new member with a fresh id, and starts heartbeating.
    ///
    /// Checks `config` first ([`crate::validate`]). While Redis is unreachable it retries
    /// with backoff, logging each attempt, and fails with [`CoordinatorError::Unreachable`]
    /// after `config.start_timeout`. When it returns, the node is registered, its membership
    /// includes itself, its clock has been sampled, and its wake-up channel is subscribed.
    pub async fn join(
        url: &str,
        config: CoordinatorConfig,
        local_clock: Arc<dyn LocalClock>,
    ) -> CoordinatorResult<Arc<Self>> {
        Self::start(url, config, local_clock, true).await
    }

    /// Follows the cluster at `url` without joining it (a producer): the membership and the
    /// cluster clock are kept up to date (re-read every `heartbeat_period` and on each
    /// announcement), [`Coordinator::wake`] and [`Coordinator::nodes`] work, but the node
    /// never registers, so it owns nothing, receives no wake-ups
    /// ([`Coordinator::take_wakeups`] returns `None`) and never removes dead members.
    pub async fn observe(
        url: &str,
        config: CoordinatorConfig,
        local_clock: Arc<dyn LocalClock>,
    ) -> CoordinatorResult<Arc<Self>> {
        Self::start(url, config, local_clock, false).await
    }

    async fn start(
        url: &str,
        config: CoordinatorConfig,
        local_clock: Arc<dyn LocalClock>,
        member: bool,
    ) -> CoordinatorResult<Arc<Self>> {
        validate(&config)?;
        let started = Instant::now();
        let connected = connect::connect(url, &config).await?;
        let clock = Arc::new(ClusterClock::new(local_clock));
        let entry = member.then(|| RegistryEntry {
            name: config.node_name.clone(),
            host: host_name(),
            pid: std::process::id(),
            version: env!("CARGO_PKG_VERSION").to_owned(),
            started_ms: 0,
            last_heartbeat_ms: 0,
            queues: match &config.queues {
                QueueFilter::All => None,
                QueueFilter::Only(queues) => Some(queues.clone()),
            },
        });
        let start_timeout = config.start_timeout;
        let shared = Arc::new(Shared::new(
            NodeId::random(),
            config,
            connected.client,
            connected.connection,
            clock,
            entry,
        ));
        for _ in 0..CLOCK_WARMUP_SAMPLES {
            sample_clock(&shared).await?;
        }
        if let Some(entry) = &shared.entry {
            entry.lock().started_ms = shared.clock.now_ms();
        }

        let (wake_sender, wake_receiver) = if member {
            let (sender, receiver) = wakeup_mailbox(WAKEUP_CAPACITY);
            (Some(sender), Some(receiver))
        } else {
            (None, None)
        };
        let wakeup_monitor = wake_sender.as_ref().map(|sender| sender.monitor());
        let this = Arc::new(RedisCoordinator {
            shared: shared.clone(),
            heartbeat: TaskGroup::default(),
            listeners: TaskGroup::default(),
            wakeups: Mutex::new(wake_receiver),
            wakeup_monitor,
            left: tokio::sync::Mutex::new(false),
        });

        // Subscribe before registering, so that no announcement after ours is missed.
        let (subscribed_sender, subscribed) = oneshot::channel();
        this.listeners
            .push(tokio::spawn(background::refresh_loop(shared.clone())));
        this.listeners
            .push(tokio::spawn(background::subscriber_loop(
                shared.clone(),
                wake_sender,
                Some(subscribed_sender),
            )));
        let budget = start_timeout
            .saturating_sub(started.elapsed())
            .max(shared.operation_timeout);
        if tokio::time::timeout(budget, subscribed).await.is_err() {
            tracing::warn!(node = %shared.id, "pub/sub subscription not up yet; it keeps retrying, and membership is re-read every heartbeat meanwhile");
        }

        let reply = shared.heartbeat().await?;
        if member {
            tracing::info!(node = %shared.id, name = %shared.config.node_name, epoch = reply.epoch, members = shared.membership.borrow().members.len(), "joined the cluster");
        }
        this.heartbeat
            .push(tokio::spawn(background::heartbeat_loop(shared)));
        Ok(this)
    }

    /// Whether this coordinator is a member (joined) rather than an observer.
    pub fn is_member(&self) -> bool {
        self.shared.entry.is_some()
    }

    /// The registered nodes of the cluster under `key_prefix` at `url`, sorted by id, without
    /// joining (for `delayq nodes`). Entries whose heartbeat expired but that no live node has
    /// removed yet are included; compare their `last_heartbeat_ms` with the cluster time.
    /// A registry entry that cannot be decoded fails the read with
    /// [`CoordinatorError::CorruptEntry`] naming the node (the membership leaves such an entry
    /// out instead, with a warning).
    pub async fn read_nodes(url: &str, key_prefix: &str) -> CoordinatorResult<Vec<NodeInfo>> {
        let mut connection = connect_once(url).await?;
        let keys = keys::Keys::new(key_prefix);
        let pairs: Vec<(String, String)> = redis::cmd("HGETALL")
            .arg(&keys.registry)
            .query_async(&mut connection)
            .await
            .map_err(|error| backend("read nodes", &error))?;
        decode_registry(&pairs)
    }

    /// The current membership of the cluster under `key_prefix` at `url`, without joining.
    pub async fn read_membership(url: &str, key_prefix: &str) -> CoordinatorResult<Membership> {
        let mut connection = connect_once(url).await?;
        let keys = keys::Keys::new(key_prefix);
        let raw: RawReply = scripts::SNAPSHOT
            .key(&keys.registry)
            .key(&keys.epoch)
            .invoke_async(&mut connection)
            .await
            .map_err(|error| backend("read membership", &error))?;
        Ok(ScriptReply::from_raw(raw).membership(|error| {
            tracing::warn!(%error, "corrupt registry entry left out of the membership");
        }))
    }
}

/// One `TIME` round trip into the clock.
async fn sample_clock(shared: &Shared) -> CoordinatorResult<()> {
    let mut connection = shared.connection.clone();
    let local_before_us = shared.clock.local_now_us();
    let (seconds, micros): (u64, u64) = shared
        .bounded(
            "read the server time",
            redis::cmd("TIME").query_async(&mut connection),
        )
        .await?;
    let local_after_us = shared.clock.local_now_us();
    shared.clock.record(ClockSample {
        local_before_us,
        server_us: seconds.saturating_mul(1_000_000) + micros,
        local_after_us,
    });
    Ok(())
}

/// A single connection for a one-off command line read.
async fn connect_once(url: &str) -> CoordinatorResult<redis::aio::MultiplexedConnection> {
    let client = connect::open_client(url)?;
    let timeout = std::time::Duration::from_secs(2);
    let config = redis::AsyncConnectionConfig::new()
        .set_connection_timeout(Some(timeout))
        .set_response_timeout(Some(timeout));
    let started = Instant::now();
    client
        .get_multiplexed_async_connection_with_config(&config)
        .await
        .map_err(|error| CoordinatorError::Unreachable {
            url: connect::redact_url(url),
            waited_ms: started.elapsed().as_millis() as u64,
            message: error.to_string(),
        })
}

fn backend(operation: &'static str, error: &redis::RedisError) -> CoordinatorError {
    CoordinatorError::Backend {
        operation,
        message: error.to_string(),
    }
}

#[async_trait]
impl Coordinator for RedisCoordinator {
    fn node_id(&self) -> &NodeId {
        &self.shared.id
    }

    fn membership(&self) -> watch::Receiver<Membership> {
        self.shared.membership.subscribe()
    }

    fn clock(&self) -> Arc<ClusterClock> {
        self.shared.clock.clone()
    }

    fn take_wakeups(&self) -> Option<WakeupReceiver> {
        self.wakeups.lock().take()
    }

    fn wakeup_stats(&self) -> Option<WakeupStats> {
        self.wakeup_monitor.as_ref().map(WakeupMonitor::stats)
    }

    async fn wake(&self, node: &NodeId, wakeup: Wakeup) -> CoordinatorResult<()> {
        let mut connection = self.shared.connection.clone();
        // Best effort on the scheduling path: never hold a producer up for long.
        let _receivers: u64 = self
            .shared
            .bounded_by(
                self.shared.operation_timeout.min(WAKE_TIMEOUT),
                "wake",
                redis::cmd("PUBLISH")
                    .arg(self.shared.keys.wake_channel(node.as_str()))
                    .arg(encode_wakeup(&wakeup))
                    .query_async(&mut connection),
            )
            .await?;
        Ok(())
    }

    async fn nodes(&self) -> CoordinatorResult<Vec<NodeInfo>> {
        let mut connection = self.shared.connection.clone();
        let pairs: Vec<(String, String)> = self
            .shared
            .bounded(
                "read nodes",
                redis::cmd("HGETALL")
                    .arg(&self.shared.keys.registry)
                    .query_async(&mut connection),
            )
            .await?;
        decode_registry(&pairs)
    }

    async fn leave(&self) -> CoordinatorResult<()> {
        let mut left = self.left.lock().await;
        if *left {
            return Ok(());
        }
        // The heartbeat must be over before the entry goes, or it would register us again.
        self.heartbeat.stop_all().await;
        if self.is_member() {
            let reply = self.shared.leave().await?;
            tracing::info!(node = %self.shared.id, epoch = reply.epoch, "left the cluster");
        }
        self.listeners.stop_all().await;
        *left = true;
        Ok(())
    }

    fn crash(&self) {
        self.heartbeat.abort_all();
        self.listeners.abort_all();
    }
}
