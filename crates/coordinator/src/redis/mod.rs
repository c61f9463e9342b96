//! The Redis coordinator, on the delayq-redis connection layer: one server, a Redis Cluster
//! or a Sentinel-watched master, with TLS and ACL users.
//!
//! # Keys and channels
//! The membership lives under `<prefix>:{cluster}:` (one hash tag, one Redis Cluster slot):
//! `registry` (HASH node id -> JSON entry), `deadlines` (ZSET node id -> the server time in
//! ms at which its heartbeat expires), `hb:<node id>` (a heartbeat with a `PX` TTL, for the
//! previous release, which checks it for every member), `epoch` (the membership epoch),
//! `stall` (set for one TTL after a stall), and the pub/sub channels `events` (membership
//! announcements, payload the new epoch) and `wake:<node id>` (wake-ups for partitions
//! nobody listened to). Every membership script, and the `TIME` the cluster clock is read
//! from, goes to the master serving that slot.
//!
//! Each partition's wake-ups travel on a channel in the partition's own slot,
//! `<prefix>:{<queue>:<partition>}:wake`: `SPUBLISH`/`SSUBSCRIBE` on a cluster (so wake-ups
//! spread over the masters like the partitions do), `PUBLISH`/`SUBSCRIBE` otherwise. A node
//! subscribes to the channels of the partitions it owns ([`Coordinator::listen`]); a wake-up
//! that reaches no subscriber (a queue created a moment ago, an ownership change under way)
//! is sent again to the owner the membership names, on its node channel.
//!
//! # How membership stays consistent
//! Every change of the member set (join, leave, removal of the dead) happens in one Lua script
//! that changes the registry and bumps the epoch together, at most once per call, and then
//! announces the new epoch. Every read takes the epoch and the registry together, so two
//! nodes that see the same epoch see the same members.
//!
//! # What membership costs
//! A heartbeat costs the same with 10 members as with 1,000 (guarantee 12): it refreshes this
//! node's entry, `hb:<id>` key and deadline, and looks only at the low end of `deadlines`
//! (the deadlines already past, at most 64 per call; more are removed by the next calls),
//! never at every member. Each script is told the epoch the node holds and answers with the
//! current one; the registry comes with the answer only when the two differ (or after a
//! stall, or when the node was added), so an unchanged membership costs O(1) commands and
//! bytes, and a change is read once per node. The node asks on each announcement (a
//! conditional read: its own announcements cost no registry) and on each heartbeat (an
//! observer: each period), so a lost announcement or a dropped subscription delays an update
//! by one period at most. A registry write that bumps no epoch is seen with the next change:
//! delayq makes none that matters (a heartbeat rewrites the node's entry, but only its
//! `last_heartbeat_ms` changes, which is not part of the membership; `delayq nodes` reads
//! the registry itself).
//!
//! # Rolling upgrades
//! The previous release finds the dead by checking every member's `hb:<id>` key with
//! `EXISTS`, and knows nothing of `deadlines`. So this release keeps setting its `hb:<id>`
//! key with its TTL (the old nodes see it alive, and remove it when it dies; the deadline it
//! leaves behind is dropped by the next new heartbeat that finds it past, without a bump),
//! and each registry read names the members registered without a deadline (nodes of the
//! previous release): until the next read, every heartbeat checks their `hb:<id>` keys, as
//! the previous release did. That costs one `EXISTS` per old node per heartbeat while old
//! nodes remain, and nothing once the upgrade is over.
//!
//! # After an outage
//! A node whose entry vanished (its heartbeat expired during an outage and another node
//! removed it, or Redis restarted empty) re-registers on its next heartbeat *under the same
//! id*, with a new epoch bump: it is a new member as far as ownership is concerned (ownership
//! is recomputed from the membership), while `delayq nodes` keeps showing one entry per
//! process. The epoch never goes backwards: each bump is at least one above the highest epoch
//! the bumping node has seen, even when Redis lost the counter.
//!
//! # After a stall or a failover
//! When Redis stands still for longer than the heartbeat TTL (a fork, a slow fsync,
//! `DEBUG SLEEP`), every heartbeat expires at once. The first heartbeat after it finds its
//! own deadline passed while its entry is still registered: nobody removed it, so it was not
//! the only one silent. It sets the `stall` marker for one TTL, and while that is set no
//! heartbeat removes anybody: every live node beats again within the TTL, and the
//! membership does not change. A failover (a Sentinel promotion, a Cluster failover of the
//! `{cluster}` slot) is the same from the nodes' side: nobody can write until the new master
//! is in charge, and it may lack the last refreshes. So a heartbeat that comes at least
//! `heartbeat_ttl - heartbeat_period` after this node's previous one (measured on the
//! server's `TIME`) sets the marker too, even if its own deadline survived: the others',
//! refreshed up to a period earlier, may not have; such a heartbeat also reads the registry
//! whatever the epoch (a failover may have lost the last bump, and the next one may reuse
//! its number). Failed round trips are retried every
//! period, and the connection layer finds the new master by itself. A node that was itself
//! paused (GC, SIGSTOP) and came back before anybody removed it sets the marker as well,
//! harmlessly; one removed meanwhile finds its entry gone and re-registers. A node that
//! really died is removed once the quiet time is over: about one TTL later than usual, and
//! only after a stall.

mod background;
mod keys;
mod listener;
mod scripts;
mod state;
mod wire;

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Instant;

use async_trait::async_trait;
use delayq_redis::redis::{self, Value};
use delayq_redis::{ConnectOptions, RedisConnection, ScriptCall};
use parking_lot::Mutex;
use tokio::sync::{oneshot, watch};

use self::listener::{Listener, Partitions};
use self::state::Shared;
use self::wire::{decode_registry, RawReply, RegistryEntry, ScriptReply};
use crate::api::{
    Coordinator, CoordinatorConfig, Membership, NodeId, NodeInfo, QueueFilter, Wakeup,
};
use crate::assignment::owner;
use crate::clock::{ClusterClock, LocalClock};
use crate::config::{host_name, validate};
use crate::error::{CoordinatorError, CoordinatorResult};
use crate::tasks::TaskGroup;
use crate::wakeups::encode_wakeup;
use crate::wakeups::{wakeup_mailbox, WakeupMonitor, WakeupReceiver, WakeupStats, WAKEUP_CAPACITY};

/// The longest a wake-up may take before it is given up.
const WAKE_TIMEOUT: std::time::Duration = std::time::Duration::from_millis(500);

/// How many `TIME` round trips warm the clock up before a node registers.
const CLOCK_WARMUP_SAMPLES: usize = 3;

/// A [`Coordinator`] on Redis (or Valkey): one server, a Redis Cluster or a master watched
/// by Redis Sentinel, as [`ConnectOptions`] say (TLS and ACL users included).
///
/// ```no_run
/// # async fn run() -> delayq_coordinator::CoordinatorResult<()> {
/// use std::sync::Arc;
/// use delayq_coordinator::{Coordinator, CoordinatorConfig, RedisCoordinator, SystemClock};
/// use delayq_redis::{ConnectOptions, Topology};
///
/// let redis = ConnectOptions::new(Topology::cluster(["redis://10.0.0.1:7000", "redis://10.0.0.2:7000"]));
/// let config = CoordinatorConfig { node_name: "api-1".into(), ..Default::default() };
/// let node = RedisCoordinator::join(redis, config, Arc::new(SystemClock)).await?;
/// // The engine says which partitions it owns; their wake-ups reach this node from now on.
/// node.listen(vec![("orders".to_owned(), 3), ("orders".to_owned(), 7)]);
/// let membership = node.membership().borrow().clone();
/// println!("epoch {} with {} members", membership.epoch, membership.members.len());
/// node.leave().await?;
/// # Ok(())
/// # }
/// ```
pub struct RedisCoordinator {
    shared: Arc<Shared>,
    /// The heartbeat (member) or periodic epoch check (observer).
    heartbeat: TaskGroup,
    /// The subscriber and the refresher.
    listeners: TaskGroup,
    wakeups: Mutex<Option<WakeupReceiver>>,
    /// The counters of the wake-up mailbox (a member's).
    wakeup_monitor: Option<WakeupMonitor>,
    /// The partitions whose wake-ups this node wants (see [`Coordinator::listen`]).
    wanted: watch::Sender<Partitions>,
    /// Whether `leave` has completed (and serializes concurrent calls).
    left: tokio::sync::Mutex<bool>,
}

impl std::fmt::Debug for RedisCoordinator {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RedisCoordinator")
            .field("node", &self.shared.id)
            .field("member", &self.is_member())
            .field("redis", &self.shared.redis.describe())
            .field("key_prefix", &self.shared.config.key_prefix)
            .finish()
    }
}

/// Runs `attempt` until it succeeds or the start budget is spent: a Redis that is slow to
/// answer while a whole fleet starts at once (the reply times out) must not make a node give
/// up its start after one try. Errors other than a failed operation (bad config, refused
/// login, Redis unreachable after the connection's own retries) end the start at once.
async fn retry_during_start<T, F, Fut>(
    operation: &'static str,
    started: Instant,
    start_timeout: std::time::Duration,
    mut attempt: F,
) -> CoordinatorResult<T>
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = CoordinatorResult<T>>,
{
    let mut delay = std::time::Duration::from_millis(100);
    loop {
        match attempt().await {
            Ok(value) => return Ok(value),
            Err(CoordinatorError::Backend { message, .. })
                if started.elapsed() + delay < start_timeout =>
            {
                tracing::warn!(operation, error = %message, retry_in_ms = delay.as_millis() as u64, "a start step failed; trying again within node.start_timeout");
                tokio::time::sleep(delay).await;
                delay = (delay * 2).min(std::time::Duration::from_secs(1));
            }
            Err(error) => return Err(error),
        }
    }
}

impl RedisCoordinator {
    /// Joins the cluster on the Redis of `redis` as a new member with a fresh id, and starts
    /// heartbeating.
    ///
    /// Checks `config` first ([`crate::validate`]). While Redis is unreachable it retries
    /// with backoff, logging each attempt, and fails with [`CoordinatorError::Unreachable`]
    /// after `config.start_timeout` (which replaces `redis.timeouts.start`); a refused login
    /// fails at once ([`CoordinatorError::Authentication`]). When it returns, the node is
    /// registered, its membership includes itself, its clock has been sampled, and its
    /// announcement and node channels are subscribed.
    pub async fn join(
        redis: ConnectOptions,
        config: CoordinatorConfig,
        local_clock: Arc<dyn LocalClock>,
    ) -> CoordinatorResult<Arc<Self>> {
        Self::start(redis, config, local_clock, true).await
    }

    /// Follows the cluster on the Redis of `redis` without joining it (a producer): the
    /// membership and the cluster clock are kept up to date (the epoch is checked every
    /// `heartbeat_period` and on each announcement, the registry read when it changed), [`Coordinator::wake`] and
    /// [`Coordinator::nodes`] work, but the node never registers, so it owns nothing,
    /// receives no wake-ups ([`Coordinator::take_wakeups`] returns `None`) and never removes
    /// dead members.
    pub async fn observe(
        redis: ConnectOptions,
        config: CoordinatorConfig,
        local_clock: Arc<dyn LocalClock>,
    ) -> CoordinatorResult<Arc<Self>> {
        Self::start(redis, config, local_clock, false).await
    }

    async fn start(
        mut redis: ConnectOptions,
        config: CoordinatorConfig,
        local_clock: Arc<dyn LocalClock>,
        member: bool,
    ) -> CoordinatorResult<Arc<Self>> {
        validate(&config)?;
        let started = Instant::now();
        redis.timeouts.start = config.start_timeout;
        let connection = RedisConnection::connect(redis)
            .await
            .map_err(|error| CoordinatorError::from_redis("connect", error))?;
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
            connection,
            clock,
            entry,
        ));
        for _ in 0..CLOCK_WARMUP_SAMPLES {
            retry_during_start("clock sample", started, start_timeout, || {
                shared.sample_clock()
            })
            .await?;
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
        let (wanted, wanted_receiver) = watch::channel(Partitions::default());
        let this = Arc::new(RedisCoordinator {
            shared: shared.clone(),
            heartbeat: TaskGroup::default(),
            listeners: TaskGroup::default(),
            wakeups: Mutex::new(wake_receiver),
            wakeup_monitor,
            wanted,
            left: tokio::sync::Mutex::new(false),
        });

        // Subscribe before registering, so that no announcement after ours is missed.
        let (subscribed_sender, subscribed) = oneshot::channel();
        this.listeners
            .push(tokio::spawn(background::refresh_loop(shared.clone())));
        let listener = Listener::new(shared.clone(), wake_sender, wanted_receiver);
        this.listeners
            .push(tokio::spawn(listener.run(Some(subscribed_sender))));
        let budget = start_timeout
            .saturating_sub(started.elapsed())
            .max(shared.operation_timeout);
        if tokio::time::timeout(budget, subscribed).await.is_err() {
            tracing::warn!(node = %shared.id, "pub/sub subscription not up yet; it keeps retrying, and the membership epoch is checked every heartbeat meanwhile");
        }

        let reply =
            retry_during_start("join", started, start_timeout, || shared.heartbeat()).await?;
        if member {
            tracing::info!(node = %shared.id, name = %shared.config.node_name, redis = %shared.redis.describe(), epoch = reply.epoch, members = shared.membership.borrow().members.len(), "joined the cluster");
        }
        this.heartbeat
            .push(tokio::spawn(background::heartbeat_loop(shared)));
        Ok(this)
    }

    /// Whether this coordinator is a member (joined) rather than an observer.
    pub fn is_member(&self) -> bool {
        self.shared.entry.is_some()
    }

    /// The registered nodes of the cluster under `key_prefix` on the Redis of `redis`,
    /// sorted by id, without joining (for `delayq nodes`). Entries whose heartbeat expired
    /// but that no live node has removed yet are included; compare their
    /// `last_heartbeat_ms` with the cluster time. A registry entry that cannot be decoded
    /// fails the read with [`CoordinatorError::CorruptEntry`] naming the node (the
    /// membership leaves such an entry out instead, with a warning).
    pub async fn read_nodes(
        redis: ConnectOptions,
        key_prefix: &str,
    ) -> CoordinatorResult<Vec<NodeInfo>> {
        let connection = connect_once(redis).await?;
        let keys = keys::Keys::new(key_prefix);
        let mut command = redis::cmd("HGETALL");
        command.arg(&keys.registry);
        let pairs: Vec<(String, String)> = connection
            .query("read nodes", &command)
            .await
            .map_err(|error| CoordinatorError::from_redis("read nodes", error))?;
        decode_registry(&pairs)
    }

    /// The current membership of the cluster under `key_prefix` on the Redis of `redis`,
    /// without joining.
    pub async fn read_membership(
        redis: ConnectOptions,
        key_prefix: &str,
    ) -> CoordinatorResult<Membership> {
        let connection = connect_once(redis).await?;
        let keys = keys::Keys::new(key_prefix);
        let value: Value = connection
            .run_script(
                &ScriptCall::new(&scripts::SNAPSHOT)
                    .key(&keys.registry)
                    .key(&keys.epoch)
                    .key(&keys.deadlines),
            )
            .await
            .map_err(|error| CoordinatorError::from_redis("read membership", error))?;
        let raw: RawReply =
            redis::from_redis_value(value).map_err(|error| CoordinatorError::Backend {
                operation: "read membership",
                message: format!("unexpected reply of the snapshot script: {error}"),
            })?;
        ScriptReply::from_raw(raw)
            .membership(|error| {
                tracing::warn!(%error, "corrupt registry entry left out of the membership");
            })
            .ok_or(CoordinatorError::Backend {
                operation: "read membership",
                message: "the snapshot script did not return the registry".to_owned(),
            })
    }
}

/// A connection for a one-off command line read.
async fn connect_once(redis: ConnectOptions) -> CoordinatorResult<RedisConnection> {
    RedisConnection::connect(redis)
        .await
        .map_err(|error| CoordinatorError::from_redis("connect", error))
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

    fn listen(&self, partitions: Vec<(String, u32)>) {
        if !self.is_member() {
            return;
        }
        let keys = &self.shared.keys;
        let wanted: BTreeMap<String, (String, u32)> = partitions
            .into_iter()
            .map(|(queue, partition)| {
                (
                    keys.partition_wake_channel(&queue, partition),
                    (queue, partition),
                )
            })
            .collect();
        self.wanted.send_if_modified(|current| {
            let changed = **current != wanted;
            if changed {
                *current = Arc::new(wanted);
            }
            changed
        });
    }

    async fn wake(&self, wakeup: Wakeup) -> CoordinatorResult<()> {
        let shared = &self.shared;
        // Best effort on the scheduling path: never hold a producer up for long.
        let timeout = shared.operation_timeout.min(WAKE_TIMEOUT);
        let payload = encode_wakeup(&wakeup);
        let channel = shared
            .keys
            .partition_wake_channel(&wakeup.queue, wakeup.partition);
        let heard = shared
            .bounded_by(
                timeout,
                "wake",
                shared.redis.publish(&channel, payload.as_bytes()),
            )
            .await?;
        if heard > 0 {
            return Ok(());
        }
        // Nobody listens to the partition yet: its owner by the membership may not know the
        // queue, or may be taking the partition over right now.
        let owner = {
            let membership = shared.membership.borrow();
            owner(&wakeup.queue, wakeup.partition, &membership.members).cloned()
        };
        if let Some(owner) = owner {
            let channel = shared.keys.node_wake_channel(owner.as_str());
            shared
                .bounded_by(
                    timeout,
                    "wake",
                    shared.redis.publish(&channel, payload.as_bytes()),
                )
                .await?;
        }
        Ok(())
    }

    async fn nodes(&self) -> CoordinatorResult<Vec<NodeInfo>> {
        let mut command = redis::cmd("HGETALL");
        command.arg(&self.shared.keys.registry);
        self.shared
            .bounded(
                "read nodes",
                self.shared.redis.query("read nodes", &command),
            )
            .await
            .and_then(|pairs: Vec<(String, String)>| decode_registry(&pairs))
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

#[cfg(test)]
mod start_tests {
    use std::sync::atomic::{AtomicU32, Ordering};
    use std::time::Duration;

    use super::*;

    fn timed_out() -> CoordinatorError {
        CoordinatorError::Backend {
            operation: "heartbeat",
            message: "EVALSHA failed (transient): timed out".to_owned(),
        }
    }

    #[tokio::test]
    async fn a_start_step_that_times_out_is_tried_again_within_the_start_timeout() {
        let calls = AtomicU32::new(0);
        let joined = retry_during_start("join", Instant::now(), Duration::from_secs(5), || {
            let call = calls.fetch_add(1, Ordering::SeqCst);
            async move {
                if call < 2 {
                    Err(timed_out())
                } else {
                    Ok(call)
                }
            }
        })
        .await;
        assert_eq!(joined.expect("joined on the third try"), 2);
    }

    #[tokio::test]
    async fn a_start_step_gives_up_when_the_budget_is_spent_or_the_error_is_not_a_timeout() {
        let started = Instant::now();
        let failed = retry_during_start("join", started, Duration::from_millis(300), || async {
            Err::<(), _>(timed_out())
        })
        .await;
        assert!(matches!(failed, Err(CoordinatorError::Backend { .. })));
        assert!(started.elapsed() < Duration::from_secs(2));
        let calls = AtomicU32::new(0);
        let refused = retry_during_start("join", Instant::now(), Duration::from_secs(5), || {
            calls.fetch_add(1, Ordering::SeqCst);
            async {
                Err::<(), _>(CoordinatorError::Authentication {
                    target: "redis://x".to_owned(),
                    message: "WRONGPASS".to_owned(),
                })
            }
        })
        .await;
        assert!(matches!(
            refused,
            Err(CoordinatorError::Authentication { .. })
        ));
        assert_eq!(
            calls.load(Ordering::SeqCst),
            1,
            "a refused login is not retried"
        );
    }
}
