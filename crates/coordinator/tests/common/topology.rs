//! Helpers of the tests on a Redis Cluster, a Sentinel set and a TLS server: nodes joined
//! through [`ConnectOptions`], a guard that watches that a membership never changes, and
//! wake-ups sent until they arrive.

use std::sync::Arc;
use std::time::{Duration, Instant};

use delayq_coordinator::{
    Coordinator, Membership, RedisCoordinator, SystemClock, Wakeup, WakeupReceiver,
};
use delayq_redis::{ConnectOptions, Timeouts, Topology};
use parking_lot::Mutex;

use super::{config, view};

/// Options with timeouts fit for failovers on a busy 2-core machine.
pub fn options(topology: Topology) -> ConnectOptions {
    ConnectOptions::new(topology).with_timeouts(Timeouts {
        connect: Duration::from_millis(500),
        response: Duration::from_secs(2),
        start: Duration::from_secs(10),
        failover: Duration::from_secs(15),
    })
}

/// `count` members named `node-<i>` on `redis`, and an observer.
pub async fn join_on(
    redis: &ConnectOptions,
    count: usize,
    period_ms: u64,
    ttl_ms: u64,
) -> (Vec<Arc<RedisCoordinator>>, Arc<RedisCoordinator>) {
    let mut nodes = Vec::new();
    for i in 0..count {
        let node = RedisCoordinator::join(
            redis.clone(),
            config(&format!("node-{i}"), period_ms, ttl_ms),
            Arc::new(SystemClock),
        )
        .await
        .expect("join");
        nodes.push(node);
    }
    let observer = RedisCoordinator::observe(
        redis.clone(),
        config("producer", period_ms, ttl_ms),
        Arc::new(SystemClock),
    )
    .await
    .expect("observe");
    (nodes, observer)
}

/// Watches, every 20 ms, that the membership every node sees stays `expected`; collects
/// every other view seen.
pub struct MembershipGuard {
    seen: Arc<Mutex<Vec<(usize, Membership)>>>,
    task: tokio::task::JoinHandle<()>,
}

impl MembershipGuard {
    pub fn watch(nodes: &[Arc<RedisCoordinator>], expected: Membership) -> Self {
        let seen: Arc<Mutex<Vec<(usize, Membership)>>> = Arc::default();
        let nodes = nodes.to_vec();
        let record = seen.clone();
        let task = tokio::spawn(async move {
            loop {
                for (index, node) in nodes.iter().enumerate() {
                    let membership = view(node.as_ref());
                    if membership != expected {
                        record.lock().push((index, membership));
                    }
                }
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
        });
        MembershipGuard { seen, task }
    }

    /// Panics with what changed, if anything did.
    pub fn assert_unchanged(&self, what: &str) {
        let seen = self.seen.lock();
        assert!(
            seen.is_empty(),
            "{what}: the membership changed ({} views), first: {:?}",
            seen.len(),
            seen.first()
        );
    }
}

impl Drop for MembershipGuard {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// Sends `wakeup` through `sender` every 200 ms until `receiver` hands it out, for at most
/// `limit`. Returns how long that took and the other wake-ups received meanwhile.
pub async fn wake_until_received(
    sender: &dyn Coordinator,
    receiver: &mut WakeupReceiver,
    wakeup: &Wakeup,
    limit: Duration,
) -> Option<(Duration, Vec<Wakeup>)> {
    let started = Instant::now();
    let mut others = Vec::new();
    while started.elapsed() < limit {
        // A failed send (the cluster is failing over) is retried like any other.
        let _ = sender.wake(wakeup.clone()).await;
        let deadline = tokio::time::Instant::now() + Duration::from_millis(200);
        while let Ok(Some(got)) = tokio::time::timeout_at(deadline, receiver.recv()).await {
            if &got == wakeup {
                return Some((started.elapsed(), others));
            }
            others.push(got);
        }
    }
    None
}

/// Waits until every node's registry entry shows a heartbeat later than `after_ms` (cluster
/// time): the nodes beat again. Returns how long that took.
pub async fn wait_for_heartbeats_after(
    reader: &dyn Coordinator,
    count: usize,
    after_ms: u64,
    limit: Duration,
) -> Option<Duration> {
    super::wait_for(limit, || async {
        match reader.nodes().await {
            Ok(nodes) => {
                nodes.len() == count && nodes.iter().all(|n| n.last_heartbeat_ms > after_ms)
            }
            Err(_) => false,
        }
    })
    .await
}
