//! Helpers shared by the coordinator's integration tests.

#![allow(dead_code)]

pub mod proxy;
pub mod scenarios;
pub mod topology;

use std::future::Future;
use std::sync::Arc;
use std::time::{Duration, Instant};

use async_trait::async_trait;
use delayq_coordinator::{Coordinator, CoordinatorConfig, Membership, NodeId};

/// A backend under test: how to start nodes on one cluster.
#[async_trait]
pub trait TestCluster: Send + Sync {
    /// A new member.
    async fn join(&self, name: &str, period_ms: u64, ttl_ms: u64) -> Arc<dyn Coordinator>;
    /// A new observer.
    async fn observe(&self, name: &str, period_ms: u64, ttl_ms: u64) -> Arc<dyn Coordinator>;
    /// Whether a wake-up reaches only the listeners of its partition (Redis, memory), or the
    /// partition's owner by the membership as well (PostgreSQL: one wake channel per schema,
    /// so a node cannot tell whether another one listens; see `PostgresCoordinator`).
    fn wakeups_exclusive(&self) -> bool {
        true
    }
}

/// `count` new members, named `node-0`, `node-1`, ...
pub async fn join_many(
    cluster: &dyn TestCluster,
    count: usize,
    period_ms: u64,
    ttl_ms: u64,
) -> Vec<Arc<dyn Coordinator>> {
    let mut nodes = Vec::new();
    for i in 0..count {
        nodes.push(cluster.join(&format!("node-{i}"), period_ms, ttl_ms).await);
    }
    nodes
}

/// `count` new members that all see each other at the same epoch, and their sorted ids.
pub async fn join_agreed(
    cluster: &dyn TestCluster,
    count: usize,
    period_ms: u64,
    ttl_ms: u64,
) -> (Vec<Arc<dyn Coordinator>>, Vec<NodeId>) {
    let nodes = join_many(cluster, count, period_ms, ttl_ms).await;
    let all = sorted_ids(&nodes);
    wait_for(Duration::from_secs(5), || async { agree(&nodes, &all) })
        .await
        .expect("initial agreement");
    (nodes, all)
}

/// A config with short periods, so that the tests run fast.
pub fn config(name: &str, period_ms: u64, ttl_ms: u64) -> CoordinatorConfig {
    CoordinatorConfig {
        key_prefix: "t".to_owned(),
        node_name: name.to_owned(),
        heartbeat_period: Duration::from_millis(period_ms),
        heartbeat_ttl: Duration::from_millis(ttl_ms),
        start_timeout: Duration::from_secs(5),
        ..Default::default()
    }
}

/// Polls `condition` every 5 ms until it holds (returns how long that took) or `within` runs
/// out (returns `None`).
pub async fn wait_for<F, Fut>(within: Duration, mut condition: F) -> Option<Duration>
where
    F: FnMut() -> Fut,
    Fut: Future<Output = bool>,
{
    let started = Instant::now();
    loop {
        if condition().await {
            return Some(started.elapsed());
        }
        if started.elapsed() > within {
            return None;
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
}

/// The current membership of `node`.
pub fn view<C: Coordinator + ?Sized>(node: &C) -> Membership {
    node.membership().borrow().clone()
}

/// The member ids of a membership.
pub fn ids(membership: &Membership) -> Vec<NodeId> {
    membership.members.iter().map(|m| m.id.clone()).collect()
}

/// Whether every node sees exactly `expected` (sorted) members, all at the same epoch.
pub fn agree<C: Coordinator + ?Sized>(nodes: &[Arc<C>], expected: &[NodeId]) -> bool {
    let Some(first) = nodes.first() else {
        return true;
    };
    let epoch = view(first.as_ref()).epoch;
    nodes.iter().all(|node| {
        let membership = view(node.as_ref());
        membership.epoch == epoch && ids(&membership) == expected
    })
}

/// The ids of `nodes`, sorted.
pub fn sorted_ids<C: Coordinator + ?Sized>(nodes: &[Arc<C>]) -> Vec<NodeId> {
    let mut ids: Vec<NodeId> = nodes.iter().map(|node| node.node_id().clone()).collect();
    ids.sort();
    ids
}
