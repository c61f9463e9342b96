//! The coordinator's public types and the [`Coordinator`] trait.
//!
//! Written first so that the engine can be built against it while the backends are written.

use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use tokio::sync::watch;

use crate::clock::ClusterClock;
use crate::error::CoordinatorResult;
use crate::wakeups::{WakeupReceiver, WakeupStats};

/// A node's identity: a fresh uuid v4 per process start (a restarted node is a new member).
#[derive(Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct NodeId(Arc<str>);

impl NodeId {
    /// A fresh random id.
    pub fn random() -> Self {
        NodeId(Arc::from(uuid::Uuid::new_v4().to_string()))
    }

    /// An id from its string form (as stored in the registry).
    pub fn from_string(id: impl AsRef<str>) -> Self {
        NodeId(Arc::from(id.as_ref()))
    }

    /// The id as a string.
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl fmt::Display for NodeId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl fmt::Debug for NodeId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{:?}", &*self.0)
    }
}

/// Which queues a member serves.
#[derive(Clone, Debug, PartialEq, Eq, Hash, Default)]
pub enum QueueFilter {
    /// Every queue (the default).
    #[default]
    All,
    /// Only these queues (sorted, deduplicated).
    Only(Vec<String>),
}

impl QueueFilter {
    /// Only the given queues (sorted and deduplicated here).
    pub fn only(queues: impl IntoIterator<Item = impl Into<String>>) -> Self {
        let mut queues: Vec<String> = queues.into_iter().map(Into::into).collect();
        queues.sort();
        queues.dedup();
        QueueFilter::Only(queues)
    }

    /// Whether a member with this filter serves `queue`.
    pub fn serves(&self, queue: &str) -> bool {
        match self {
            QueueFilter::All => true,
            QueueFilter::Only(queues) => queues.iter().any(|q| q == queue),
        }
    }
}

/// A live member of the cluster, as every node sees it.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Member {
    /// Its id.
    pub id: NodeId,
    /// The queues it serves: partitions of other queues are never assigned to it.
    pub queues: QueueFilter,
}

/// One view of the cluster: the epoch and the live members, sorted by id.
///
/// Every node that sees the same epoch sees the same members, and so computes the same
/// partition assignment.
#[derive(Clone, Debug, PartialEq, Eq, Default)]
pub struct Membership {
    /// Bumped once per membership change (join, leave, death).
    pub epoch: u64,
    /// The live members, sorted by id.
    pub members: Vec<Member>,
}

impl Membership {
    /// Whether `node` is a member.
    pub fn contains(&self, node: &NodeId) -> bool {
        self.members.iter().any(|member| &member.id == node)
    }
}

/// Replaces the membership behind `sender` if `membership` differs (so watchers wake only on
/// a real change); whether it did.
pub(crate) fn publish_if_changed(
    sender: &watch::Sender<Membership>,
    membership: Membership,
) -> bool {
    sender.send_if_modified(|current| {
        let changed = *current != membership;
        if changed {
            *current = membership;
        }
        changed
    })
}

/// What a node tells about itself when it registers; `delayq nodes` shows it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct NodeInfo {
    /// The node's id.
    pub id: NodeId,
    /// Its name (from the config, or the host name).
    pub name: String,
    /// The host it runs on.
    pub host: String,
    /// Its process id.
    pub pid: u32,
    /// The delayq version it runs.
    pub version: String,
    /// When it started, in cluster milliseconds.
    pub started_ms: u64,
    /// When it last refreshed its heartbeat, in cluster milliseconds.
    pub last_heartbeat_ms: u64,
    /// The queues it serves.
    pub queues: QueueFilter,
}

impl NodeInfo {
    /// This node as a member of the membership (its id and the queues it serves).
    pub fn member(&self) -> Member {
        Member {
            id: self.id.clone(),
            queues: self.queues.clone(),
        }
    }
}

/// A nudge to the owner of a partition: a task due at `due_ms` was just scheduled there, and
/// may be due before the owner's next periodic pull. (A coordinator also sends one due now
/// to itself when it may have missed some, see [`Coordinator::listen`].)
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Wakeup {
    /// The queue.
    pub queue: String,
    /// The partition.
    pub partition: u32,
    /// The earliest due time scheduled.
    pub due_ms: u64,
}

/// Settings of a coordinator (the `node:` section of cluster.yaml plus the key prefix).
#[derive(Clone, Debug)]
pub struct CoordinatorConfig {
    /// Prefix of every key (`<prefix>:{cluster}:...`).
    pub key_prefix: String,
    /// This node's name (non-empty).
    pub node_name: String,
    /// How often the heartbeat is refreshed.
    pub heartbeat_period: Duration,
    /// How long a heartbeat lives; must be larger than the period.
    pub heartbeat_ttl: Duration,
    /// How long `join` keeps retrying an unreachable Redis before it gives up.
    pub start_timeout: Duration,
    /// The queues this node serves.
    pub queues: QueueFilter,
}

impl Default for CoordinatorConfig {
    fn default() -> Self {
        CoordinatorConfig {
            key_prefix: "delayq".to_owned(),
            node_name: "delayq".to_owned(),
            heartbeat_period: Duration::from_secs(1),
            heartbeat_ttl: Duration::from_secs(3),
            start_timeout: Duration::from_secs(10),
            queues: QueueFilter::All,
        }
    }
}

/// A node's view of the cluster: who is alive, what time it is, and channels to wake the
/// owner of a partition.
///
/// A joined coordinator heartbeats in the background until [`Coordinator::leave`] (or until
/// it is dropped, which stops the heartbeat without leaving: the others see it die after the
/// TTL, which is how tests simulate a crash).
#[async_trait]
pub trait Coordinator: Send + Sync + 'static {
    /// This node's id. An observer (a producer that is not a member) has one too, but it never
    /// appears in the membership.
    fn node_id(&self) -> &NodeId;

    /// The current membership, updated on announcements at once and by a periodic re-read.
    fn membership(&self) -> watch::Receiver<Membership>;

    /// The cluster clock (Redis `TIME` as an offset from the local clock).
    fn clock(&self) -> Arc<ClusterClock>;

    /// The wake-ups sent to this node. Can be taken once; later calls return `None` (and an
    /// observer, which receives none, always does).
    ///
    /// The receiver is bounded and coalescing: one waiting entry per `(queue, partition)`
    /// with the earliest due time sent, at most [`crate::WAKEUP_CAPACITY`] entries, malformed
    /// payloads rejected on arrival. A wake-up dropped because it was full is covered by the
    /// owner's periodic pull. The engine still checks that the partition exists.
    fn take_wakeups(&self) -> Option<WakeupReceiver>;

    /// The counters of this node's wake-up mailbox (also after it was taken); `None` for an
    /// observer.
    fn wakeup_stats(&self) -> Option<WakeupStats>;

    /// Sets the partitions whose wake-ups this node receives, `(queue, partition)`,
    /// replacing the previous set: the engine calls it after every rebalance with the
    /// partitions it owns. Returns at once; the subscriptions follow in the background
    /// ([`WakeupStats::listening`] counts the confirmed ones) and are kept through
    /// reconnections, failovers and slot moves. After a subscription was restored, the
    /// node gets a wake-up due now for that partition (wake-ups sent meanwhile were lost).
    /// An observer ignores it.
    fn listen(&self, partitions: Vec<(String, u32)>);

    /// Sends a wake-up to whoever listens to its partition (best effort: the periodic pull is
    /// the safety net). When nobody does (a queue created a moment ago, an ownership change
    /// under way), it goes to the partition's owner by the current membership instead, which
    /// adopts the partition if it should own it.
    async fn wake(&self, wakeup: Wakeup) -> CoordinatorResult<()>;

    /// The registered nodes with their info, sorted by id.
    async fn nodes(&self) -> CoordinatorResult<Vec<NodeInfo>>;

    /// Leaves the cluster at once (graceful shutdown): removes this node, bumps the epoch,
    /// announces the change and stops the heartbeat. Idempotent.
    async fn leave(&self) -> CoordinatorResult<()>;

    /// Stops heartbeating and listening *without* leaving, as if the process had died: the
    /// others notice when the heartbeat expires (after the TTL). For tests of crashes and
    /// takeover; dropping the coordinator does the same. The membership seen through
    /// [`Coordinator::membership`] stops changing, and wake-ups sent here are lost.
    fn crash(&self);
}
