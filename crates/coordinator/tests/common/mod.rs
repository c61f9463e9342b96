//! Helpers shared by the coordinator's integration tests.

#![allow(dead_code)]

use std::future::Future;
use std::sync::Arc;
use std::time::{Duration, Instant};

use delayq_coordinator::{Coordinator, CoordinatorConfig, Membership, NodeId};

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
