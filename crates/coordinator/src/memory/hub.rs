//! [`MemoryCluster`]: the in-process stand-in for Redis that memory coordinators share.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::{Arc, Weak};
use std::time::Duration;

use parking_lot::Mutex;
use tokio::sync::watch;
use tokio::time::Instant;

use crate::api::{publish_if_changed, Membership, NodeId, NodeInfo, Wakeup};
use crate::assignment::owner;
use crate::clock::{ClusterClock, LocalClock, SystemClock};
use crate::wakeups::WakeupSender;

/// A cluster in one process: the registry, the epoch and the wake-up channels that
/// [`MemoryCoordinator`](super::MemoryCoordinator)s share, so that tests and `delayq demo` can
/// run many nodes without Redis.
///
/// Two clocks are at work, on purpose:
/// - **cluster time** (what `Coordinator::clock().now_ms()` returns, and `started_ms` /
///   `last_heartbeat_ms`) is the hub's [`LocalClock`], anchored once like every local clock
///   (a later step of its wall clock does not move it): the system clock by default, or a
///   [`ManualClock`](crate::ManualClock) that a test moves with
///   [`MemoryCluster::with_clock`]. Moving it does not kill anybody's heartbeat.
/// - **liveness** (heartbeat TTLs) is measured on tokio's monotonic clock, so it follows
///   real time, or `tokio::time::pause` / `advance` in a test with paused time. An advance
///   longer than the TTL is a stall, as on Redis: the first heartbeat after it finds its own
///   heartbeat expired and nobody is removed for one TTL, so the live nodes beat again.
///
/// ```
/// use std::sync::Arc;
/// use delayq_coordinator::{ManualClock, MemoryCluster};
///
/// let time = Arc::new(ManualClock::new(1_700_000_000_000));
/// let cluster = MemoryCluster::with_clock(time.clone());
/// time.advance(30_000);
/// assert_eq!(cluster.now_ms(), 1_700_000_030_000);
/// ```
pub struct MemoryCluster {
    clock: Arc<dyn LocalClock>,
    /// Cluster time: `clock` anchored when the hub was made (monotonic, like any local
    /// clock), shared by every coordinator on the hub as they would share Redis `TIME`.
    time: Arc<ClusterClock>,
    state: Mutex<HubState>,
}

#[derive(Default)]
struct HubState {
    epoch: u64,
    registry: BTreeMap<NodeId, Registration>,
    /// The mailbox of every member that listens (its node channel).
    wakeups: HashMap<NodeId, WakeupSender>,
    /// Who listens to each partition's wake-ups (its partition channel).
    listeners: HashMap<(String, u32), BTreeSet<NodeId>>,
    /// The partitions each node listens to.
    listening: HashMap<NodeId, Vec<(String, u32)>>,
    /// Until when nobody is removed: one TTL after a heartbeat found its own registration
    /// expired but not removed (a stall; see the Redis heartbeat script).
    quiet_until: Option<Instant>,
    /// The membership views of the coordinators that listen, updated with each change
    /// before the change returns (so a test sees it at once, without yielding).
    views: HashMap<NodeId, Weak<watch::Sender<Membership>>>,
}

impl HubState {
    fn membership(&self) -> Membership {
        Membership {
            epoch: self.epoch,
            // BTreeMap: sorted by id.
            members: self.registry.values().map(|r| r.info.member()).collect(),
        }
    }
}

struct Registration {
    info: NodeInfo,
    expires_at: Instant,
}

/// What one heartbeat changed.
#[derive(Debug, Default)]
pub(crate) struct HeartbeatOutcome {
    /// The node was not registered (first join, or its entry had expired and was removed).
    pub(crate) added: bool,
    /// Members removed because their heartbeat expired.
    pub(crate) removed: Vec<NodeId>,
    /// The node's own registration had expired without being removed: a stall, nobody was
    /// removed.
    pub(crate) stalled: bool,
    pub(crate) epoch: u64,
}

impl std::fmt::Debug for MemoryCluster {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let state = self.state.lock();
        f.debug_struct("MemoryCluster")
            .field("epoch", &state.epoch)
            .field("members", &state.registry.len())
            .finish()
    }
}

impl Default for MemoryCluster {
    /// A cluster on the system clock.
    fn default() -> Self {
        Self::build(Arc::new(SystemClock))
    }
}

impl MemoryCluster {
    /// A cluster on the system clock.
    pub fn new() -> Arc<Self> {
        Arc::new(Self::default())
    }

    /// A cluster whose time is `clock` (a [`ManualClock`](crate::ManualClock) in tests).
    pub fn with_clock(clock: Arc<dyn LocalClock>) -> Arc<Self> {
        Arc::new(Self::build(clock))
    }

    fn build(clock: Arc<dyn LocalClock>) -> Self {
        MemoryCluster {
            time: Arc::new(ClusterClock::new(clock.clone())),
            clock,
            state: Mutex::new(HubState::default()),
        }
    }

    /// The local clock behind the hub's cluster time.
    pub fn clock(&self) -> Arc<dyn LocalClock> {
        self.clock.clone()
    }

    /// The hub's cluster clock, which every coordinator on this hub reads.
    pub(crate) fn cluster_clock(&self) -> Arc<ClusterClock> {
        self.time.clone()
    }

    /// Now in cluster time.
    pub fn now_ms(&self) -> u64 {
        self.time.now_ms()
    }

    /// The current membership (as a Redis `snapshot` would read it).
    pub fn membership(&self) -> Membership {
        self.state.lock().membership()
    }

    /// The registered nodes, sorted by id.
    pub fn nodes(&self) -> Vec<NodeInfo> {
        // BTreeMap: already sorted by id.
        let state = self.state.lock();
        state.registry.values().map(|r| r.info.clone()).collect()
    }

    /// Keeps `view` up to date with every change from now on, and returns the current
    /// membership.
    pub(crate) fn follow(
        &self,
        node: &NodeId,
        view: &Arc<watch::Sender<Membership>>,
    ) -> Membership {
        let mut state = self.state.lock();
        state.views.insert(node.clone(), Arc::downgrade(view));
        state.membership()
    }

    /// Stops updating `node`'s view (it crashed or left).
    pub(crate) fn unfollow(&self, node: &NodeId) {
        self.state.lock().views.remove(node);
    }

    /// Registers or refreshes `info`, and removes the members whose heartbeat expired; one
    /// epoch bump if anything changed. Atomic, like the Redis script, and like it removes
    /// nobody for one TTL after a heartbeat found its own registration expired.
    pub(crate) fn heartbeat(&self, info: &NodeInfo, ttl: Duration) -> HeartbeatOutcome {
        let now = Instant::now();
        let mut state = self.state.lock();
        let mut outcome = HeartbeatOutcome::default();
        let mut info = info.clone();
        info.last_heartbeat_ms = self.now_ms();
        let registration = Registration {
            info,
            expires_at: now + ttl,
        };
        let previous = state
            .registry
            .insert(registration.info.id.clone(), registration);
        outcome.added = previous.is_none();
        outcome.stalled = previous.is_some_and(|previous| previous.expires_at <= now);
        if outcome.stalled {
            state.quiet_until = Some(now + ttl);
        }
        if state.quiet_until.is_none_or(|until| until <= now) {
            outcome.removed = state
                .registry
                .iter()
                .filter(|(_, registration)| registration.expires_at <= now)
                .map(|(id, _)| id.clone())
                .collect();
        }
        for id in &outcome.removed {
            // Its wake-up channel stays: a node that was only slow re-registers and keeps
            // listening; a dead one closed its channel when it died.
            state.registry.remove(id);
        }
        if outcome.added || !outcome.removed.is_empty() {
            self.publish(&mut state);
        }
        outcome.epoch = state.epoch;
        outcome
    }

    /// Removes `node` at once; whether it was registered.
    pub(crate) fn leave(&self, node: &NodeId) -> bool {
        let mut state = self.state.lock();
        state.wakeups.remove(node);
        set_listening(&mut state, node, Vec::new());
        let removed = state.registry.remove(node).is_some();
        if removed {
            self.publish(&mut state);
        }
        removed
    }

    /// Bumps the epoch and announces the membership (under the state lock, so announcements
    /// are in epoch order).
    fn publish(&self, state: &mut HubState) {
        state.epoch += 1;
        let membership = state.membership();
        state.views.retain(|_, view| match view.upgrade() {
            Some(view) => {
                publish_if_changed(&view, membership.clone());
                true
            }
            None => false,
        });
    }

    pub(crate) fn listen_for_wakeups(&self, node: &NodeId, sender: WakeupSender) {
        self.state.lock().wakeups.insert(node.clone(), sender);
    }

    /// Stops every wake-up to `node` (it crashed or left).
    pub(crate) fn stop_wakeups(&self, node: &NodeId) {
        let mut state = self.state.lock();
        state.wakeups.remove(node);
        set_listening(&mut state, node, Vec::new());
    }

    /// Sets the partitions whose wake-ups `node` receives (like SUBSCRIBE to their channels;
    /// effective at once, as nothing is in between).
    pub(crate) fn listen(&self, node: &NodeId, partitions: Vec<(String, u32)>) {
        let mut state = self.state.lock();
        if state.wakeups.contains_key(node) {
            set_listening(&mut state, node, partitions);
        }
    }

    /// Delivers a wake-up to the nodes listening to its partition, or, when none does, to the
    /// partition's owner by the membership, like the Redis coordinator. Nobody listening,
    /// nobody told.
    pub(crate) fn wake(&self, wakeup: Wakeup) {
        let state = self.state.lock();
        let key = (wakeup.queue.clone(), wakeup.partition);
        let listeners: Vec<&WakeupSender> = state
            .listeners
            .get(&key)
            .into_iter()
            .flatten()
            .filter_map(|node| state.wakeups.get(node))
            .collect();
        // Never waits: a full mailbox coalesces or drops, like on Redis.
        if listeners.is_empty() {
            let members = state.membership().members;
            if let Some(sender) = owner(&wakeup.queue, wakeup.partition, &members)
                .and_then(|owner| state.wakeups.get(owner))
            {
                sender.send(wakeup);
            }
        } else {
            for sender in listeners {
                sender.send(wakeup.clone());
            }
        }
    }
}

/// Replaces the partitions `node` listens to.
fn set_listening(state: &mut HubState, node: &NodeId, partitions: Vec<(String, u32)>) {
    for key in state.listening.remove(node).unwrap_or_default() {
        if let Some(nodes) = state.listeners.get_mut(&key) {
            nodes.remove(node);
            if nodes.is_empty() {
                state.listeners.remove(&key);
            }
        }
    }
    if let Some(sender) = state.wakeups.get(node) {
        sender.set_listening(partitions.len());
    }
    if partitions.is_empty() {
        return;
    }
    for key in &partitions {
        state
            .listeners
            .entry(key.clone())
            .or_default()
            .insert(node.clone());
    }
    state.listening.insert(node.clone(), partitions);
}
