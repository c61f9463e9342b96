//! The in-memory coordinator: the same behaviours as on Redis, plus a clock tests can move.

mod common;

use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use common::scenarios::{self, PERIOD_MS, TTL_MS};
use common::{agree, config, join_agreed, view, wait_for, TestCluster};
use delayq_coordinator::{
    Coordinator, CoordinatorError, ManualClock, MemoryCluster, MemoryCoordinator, SkewedClock,
    SystemClock,
};

struct Memory {
    hub: Arc<MemoryCluster>,
}

impl Memory {
    fn start() -> Self {
        Memory {
            hub: MemoryCluster::new(),
        }
    }
}

#[async_trait]
impl TestCluster for Memory {
    async fn join(&self, name: &str, period_ms: u64, ttl_ms: u64) -> Arc<dyn Coordinator> {
        MemoryCoordinator::join(
            &self.hub,
            config(name, period_ms, ttl_ms),
            Arc::new(SystemClock),
        )
        .await
        .expect("join")
    }

    async fn observe(&self, name: &str, period_ms: u64, ttl_ms: u64) -> Arc<dyn Coordinator> {
        MemoryCoordinator::observe(
            &self.hub,
            config(name, period_ms, ttl_ms),
            Arc::new(SystemClock),
        )
        .await
        .expect("observe")
    }
}

shared_scenarios!(Memory::start());

#[tokio::test]
async fn node_info_is_registered_for_delayq_nodes() {
    let memory = Memory::start();
    scenarios::node_info_is_registered_for_delayq_nodes(&memory).await;
    assert_eq!(memory.hub.nodes().len(), 1);
}

#[tokio::test]
async fn dropping_a_coordinator_is_a_crash() {
    let memory = Memory::start();
    let (mut nodes, _) = join_agreed(&memory, 3, PERIOD_MS, TTL_MS).await;
    drop(nodes.pop());
    let rest = common::sorted_ids(&nodes);
    wait_for(Duration::from_secs(3), || async { agree(&nodes, &rest) })
        .await
        .expect("the dropped node expires");
}

#[tokio::test]
async fn a_manual_clock_moves_cluster_time_without_killing_anybody() {
    let time = Arc::new(ManualClock::new(1_700_000_000_000));
    let hub = MemoryCluster::with_clock(time.clone());
    let memory = Memory { hub: hub.clone() };
    let (nodes, all) = join_agreed(&memory, 3, 20, 100).await;
    let epoch = view(nodes[0].as_ref()).epoch;
    assert_eq!(nodes[0].clock().now_ms(), 1_700_000_000_000);
    assert_eq!(hub.nodes()[0].started_ms, 1_700_000_000_000);

    // An hour passes on the cluster clock at once: every node reads it at once, and nobody's
    // heartbeat expires because of it.
    time.advance(3_600_000);
    for node in &nodes {
        assert_eq!(node.clock().now_ms(), 1_700_003_600_000);
    }
    wait_for(Duration::from_secs(2), || async {
        hub.nodes()
            .iter()
            .all(|n| n.last_heartbeat_ms == 1_700_003_600_000)
    })
    .await
    .expect("heartbeats stamp the new time");
    assert!(agree(&nodes, &all));
    assert_eq!(view(nodes[0].as_ref()).epoch, epoch);
}

#[tokio::test]
async fn a_skewed_local_clock_still_reads_cluster_time() {
    let hub = MemoryCluster::new();
    let skewed = MemoryCoordinator::join(
        &hub,
        config("skewed", PERIOD_MS, TTL_MS),
        Arc::new(SkewedClock { skew_ms: 5_000 }),
    )
    .await
    .expect("join");
    let error = skewed.clock().now_ms() as i64 - hub.now_ms() as i64;
    assert!(error.abs() <= 10, "off by {error} ms");
}

#[tokio::test]
async fn bad_config_is_refused_before_joining() {
    let hub = MemoryCluster::new();
    let result = MemoryCoordinator::join(&hub, config("n", 300, 300), Arc::new(SystemClock)).await;
    match result {
        Err(CoordinatorError::InvalidConfig { key, .. }) => assert_eq!(key, "node.heartbeat_ttl"),
        other => panic!("expected InvalidConfig, got {other:?}"),
    }
    assert!(hub.nodes().is_empty());
}

#[tokio::test(start_paused = true)]
async fn with_paused_time_expiry_is_exact() {
    let memory = Memory::start();
    let (mut nodes, _) = join_agreed(&memory, 3, 1_000, 3_000).await;
    let crashed = nodes.pop().expect("a node");
    crashed.crash();
    let started = tokio::time::Instant::now();
    let rest = common::sorted_ids(&nodes);
    while !agree(&nodes, &rest) {
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    // Its last heartbeat was at most one period before the crash; it expires a TTL later and
    // is noticed at the next heartbeat of a survivor.
    let took = started.elapsed();
    assert!(
        took >= Duration::from_millis(2_000) && took <= Duration::from_millis(4_010),
        "{took:?}"
    );
}

#[tokio::test(start_paused = true)]
async fn a_stall_longer_than_the_ttl_evicts_nobody() {
    let memory = Memory::start();
    let (nodes, all) = join_agreed(&memory, 3, 1_000, 3_000).await;
    let epoch = view(nodes[0].as_ref()).epoch;
    // Nobody runs for 7 s (the whole process stood still): every registration expires.
    tokio::time::advance(Duration::from_secs(7)).await;
    // Several periods and TTLs later, nobody was removed and nobody re-joined.
    tokio::time::sleep(Duration::from_secs(10)).await;
    assert!(agree(&nodes, &all), "{:?}", view(nodes[0].as_ref()));
    assert_eq!(view(nodes[0].as_ref()).epoch, epoch);
}

#[tokio::test(start_paused = true)]
async fn a_crash_right_after_a_stall_is_still_detected() {
    let memory = Memory::start();
    let (mut nodes, _) = join_agreed(&memory, 3, 1_000, 3_000).await;
    let epoch = view(nodes[0].as_ref()).epoch;
    tokio::time::advance(Duration::from_secs(7)).await;
    // Everybody beats once after the stall, then one node dies.
    tokio::time::sleep(Duration::from_millis(1_100)).await;
    let crashed = nodes.pop().expect("a node");
    crashed.crash();
    let started = tokio::time::Instant::now();
    let rest = common::sorted_ids(&nodes);
    while !agree(&nodes, &rest) {
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    // Its key lives a TTL after its last beat, and the quiet time after the stall ends
    // within that; a survivor notices at its next beat.
    let took = started.elapsed();
    assert!(took <= Duration::from_millis(4_010), "{took:?}");
    assert_eq!(view(nodes[0].as_ref()).epoch, epoch + 1);
}
