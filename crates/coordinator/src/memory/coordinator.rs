//! [`MemoryCoordinator`]: a [`Coordinator`] on a [`MemoryCluster`].

use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use parking_lot::Mutex;
use tokio::sync::watch;
use tokio::time::MissedTickBehavior;

use super::hub::MemoryCluster;
use crate::api::{
    publish_if_changed, Coordinator, CoordinatorConfig, Membership, NodeId, NodeInfo, Wakeup,
};
use crate::clock::{ClusterClock, LocalClock};
use crate::config::{host_name, validate};
use crate::error::CoordinatorResult;
use crate::tasks::TaskGroup;
use crate::wakeups::{wakeup_mailbox, WakeupMonitor, WakeupReceiver, WakeupStats, WAKEUP_CAPACITY};

/// A node of an in-process [`MemoryCluster`], with the semantics of
/// [`RedisCoordinator`](crate::RedisCoordinator): registration with a heartbeat TTL, removal
/// of dead members by any live member with one epoch bump per change, a membership watch,
/// wake-ups to the listeners of a partition (else to its owner), leave and crash.
///
/// Its cluster clock *is* the hub's clock (a Redis with no round trip), so the `local_clock`
/// given to [`MemoryCoordinator::join`] cannot make it wrong, just as on Redis a skewed local
/// clock is corrected by the measured offset.
///
/// ```
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> delayq_coordinator::CoordinatorResult<()> {
/// use std::sync::Arc;
/// use delayq_coordinator::{Coordinator, CoordinatorConfig, MemoryCluster, MemoryCoordinator, SystemClock};
///
/// let cluster = MemoryCluster::new();
/// let a = MemoryCoordinator::join(&cluster, CoordinatorConfig::default(), Arc::new(SystemClock)).await?;
/// let b = MemoryCoordinator::join(&cluster, CoordinatorConfig::default(), Arc::new(SystemClock)).await?;
/// assert_eq!(a.membership().borrow().members.len(), 2);
/// b.leave().await?;
/// assert_eq!(a.membership().borrow().members.len(), 1);
/// # Ok(())
/// # }
/// ```
pub struct MemoryCoordinator {
    hub: Arc<MemoryCluster>,
    id: NodeId,
    config: CoordinatorConfig,
    /// This node's registry entry; `None` for an observer.
    info: Option<NodeInfo>,
    clock: Arc<ClusterClock>,
    membership: Arc<watch::Sender<Membership>>,
    wakeups: Mutex<Option<WakeupReceiver>>,
    /// The counters of the wake-up mailbox (a member's).
    wakeup_monitor: Option<WakeupMonitor>,
    heartbeat: TaskGroup,
    left: Mutex<bool>,
}

impl std::fmt::Debug for MemoryCoordinator {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("MemoryCoordinator")
            .field("node", &self.id)
            .field("member", &self.is_member())
            .finish()
    }
}

impl MemoryCoordinator {
    /// Joins `cluster` as a new member with a fresh id and starts heartbeating (checks
    /// `config` first, like [`RedisCoordinator::join`](crate::RedisCoordinator::join)).
    /// Must be called inside a tokio runtime.
    pub async fn join(
        cluster: &Arc<MemoryCluster>,
        config: CoordinatorConfig,
        local_clock: Arc<dyn LocalClock>,
    ) -> CoordinatorResult<Arc<Self>> {
        Self::start(cluster, config, local_clock, true)
    }

    /// Follows `cluster` without joining it (a producer): membership, clock, `wake` and
    /// `nodes` work; it never registers and receives no wake-ups.
    pub async fn observe(
        cluster: &Arc<MemoryCluster>,
        config: CoordinatorConfig,
        local_clock: Arc<dyn LocalClock>,
    ) -> CoordinatorResult<Arc<Self>> {
        Self::start(cluster, config, local_clock, false)
    }

    fn start(
        cluster: &Arc<MemoryCluster>,
        config: CoordinatorConfig,
        _local_clock: Arc<dyn LocalClock>,
        member: bool,
    ) -> CoordinatorResult<Arc<Self>> {
        validate(&config)?;
        let id = NodeId::random();
        let now = cluster.now_ms();
        let info = member.then(|| NodeInfo {
            id: id.clone(),
            name: config.node_name.clone(),
            host: host_name(),
            pid: std::process::id(),
            version: env!("CARGO_PKG_VERSION").to_owned(),
            started_ms: now,
            last_heartbeat_ms: now,
            queues: config.queues.clone(),
        });
        let (wake_sender, wake_receiver) = wakeup_mailbox(WAKEUP_CAPACITY);
        let wakeup_monitor = member.then(|| wake_sender.monitor());
        let view = Arc::new(watch::Sender::new(Membership::default()));
        publish_if_changed(&view, cluster.follow(&id, &view));
        if let Some(info) = &info {
            cluster.listen_for_wakeups(&id, wake_sender);
            let outcome = cluster.heartbeat(info, config.heartbeat_ttl);
            tracing::info!(node = %id, name = %info.name, epoch = outcome.epoch, "joined the in-memory cluster");
        }
        let this = Arc::new(MemoryCoordinator {
            hub: cluster.clone(),
            id,
            info,
            clock: cluster.cluster_clock(),
            membership: view,
            wakeups: Mutex::new(member.then_some(wake_receiver)),
            wakeup_monitor,
            heartbeat: TaskGroup::default(),
            left: Mutex::new(false),
            config,
        });
        if let Some(info) = this.info.clone() {
            this.heartbeat.push(tokio::spawn(heartbeat_loop(
                this.hub.clone(),
                info,
                this.config.heartbeat_period,
                this.config.heartbeat_ttl,
            )));
        }
        Ok(this)
    }

    /// Whether this coordinator is a member (joined) rather than an observer.
    pub fn is_member(&self) -> bool {
        self.info.is_some()
    }

    /// The hub this coordinator is on.
    pub fn cluster(&self) -> &Arc<MemoryCluster> {
        &self.hub
    }
}

async fn heartbeat_loop(hub: Arc<MemoryCluster>, info: NodeInfo, period: Duration, ttl: Duration) {
    let mut ticks = tokio::time::interval_at(tokio::time::Instant::now() + period, period);
    ticks.set_missed_tick_behavior(MissedTickBehavior::Delay);
    loop {
        ticks.tick().await;
        let outcome = hub.heartbeat(&info, ttl);
        if outcome.added {
            tracing::warn!(node = %info.id, epoch = outcome.epoch, "this node's heartbeat had expired and it was removed: re-registered as a new member");
        }
        if outcome.stalled {
            tracing::warn!(node = %info.id, epoch = outcome.epoch, "this node's heartbeat had expired while it was registered (a stall): nobody is removed for one TTL");
        }
        if !outcome.removed.is_empty() {
            tracing::info!(node = %info.id, epoch = outcome.epoch, removed = ?outcome.removed, "removed members whose heartbeat expired");
        }
    }
}

impl Drop for MemoryCoordinator {
    fn drop(&mut self) {
        // The heartbeat stops with its group; a dead process hears nothing any more.
        self.hub.stop_wakeups(&self.id);
        self.hub.unfollow(&self.id);
    }
}

#[async_trait]
impl Coordinator for MemoryCoordinator {
    fn node_id(&self) -> &NodeId {
        &self.id
    }

    fn membership(&self) -> watch::Receiver<Membership> {
        self.membership.subscribe()
    }

    fn clock(&self) -> Arc<ClusterClock> {
        self.clock.clone()
    }

    fn take_wakeups(&self) -> Option<WakeupReceiver> {
        self.wakeups.lock().take()
    }

    fn wakeup_stats(&self) -> Option<WakeupStats> {
        self.wakeup_monitor.as_ref().map(WakeupMonitor::stats)
    }

    fn listen(&self, mut partitions: Vec<(String, u32)>) {
        if self.is_member() {
            partitions.sort();
            partitions.dedup();
            self.hub.listen(&self.id, partitions);
        }
    }

    async fn wake(&self, wakeup: Wakeup) -> CoordinatorResult<()> {
        self.hub.wake(wakeup);
        Ok(())
    }

    async fn nodes(&self) -> CoordinatorResult<Vec<NodeInfo>> {
        Ok(self.hub.nodes())
    }

    async fn leave(&self) -> CoordinatorResult<()> {
        if std::mem::replace(&mut *self.left.lock(), true) {
            return Ok(());
        }
        self.heartbeat.stop_all().await;
        if self.is_member() && self.hub.leave(&self.id) {
            tracing::info!(node = %self.id, epoch = self.hub.membership().epoch, "left the in-memory cluster");
        }
        // The last view it gets is the one without itself.
        self.hub.unfollow(&self.id);
        Ok(())
    }

    fn crash(&self) {
        self.heartbeat.abort_all();
        self.hub.stop_wakeups(&self.id);
        self.hub.unfollow(&self.id);
    }
}
