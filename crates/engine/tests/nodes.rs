//! `Scheduler::nodes` (what `delayq nodes` and `GET /v1/nodes` show): the same counts as the
//! per-node ownership, cached per membership and queue registry, and cheap with a large
//! cluster (DESIGN.md, "Cost model").

mod support;

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use delayq_coordinator::{
    owned_partitions, Coordinator, CoordinatorConfig, MemoryCoordinator, QueueFilter, SystemClock,
};
use delayq_engine::{MemoryBackend, Scheduler};
use delayq_storage::{QueueName, TaskStore};

/// A small deterministic generator (the test must not depend on luck).
struct Lcg(u64);

impl Lcg {
    fn below(&mut self, bound: u64) -> u64 {
        self.0 = self
            .0
            .wrapping_mul(6_364_136_223_846_793_005)
            .wrapping_add(1_442_695_040_888_963_407);
        (self.0 >> 33) % bound
    }
}

async fn join(backend: &MemoryBackend, queues: QueueFilter) -> Arc<MemoryCoordinator> {
    let config = CoordinatorConfig {
        queues,
        ..CoordinatorConfig::default()
    };
    MemoryCoordinator::join(&backend.cluster, config, Arc::new(SystemClock))
        .await
        .expect("join")
}

async fn register(backend: &MemoryBackend, queues: usize, partitions: u32) -> Vec<String> {
    let mut names = Vec::new();
    for i in 0..queues {
        let name = format!("queue-{i:02}");
        let queue = QueueName::new(&name).expect("queue name");
        backend
            .store
            .register_queue(&queue, partitions)
            .await
            .expect("register");
        names.push(name);
    }
    names
}

async fn observer(backend: &MemoryBackend) -> Scheduler {
    Scheduler::builder(support::fast_config())
        .memory(backend.clone())
        .start()
        .await
        .expect("an observer")
}

/// What `nodes` computed before: `owned_partitions` of every node for every queue.
fn per_node_counts(
    scheduler: &Scheduler,
    queues: &[(QueueName, u32)],
) -> BTreeMap<String, BTreeMap<String, usize>> {
    let members = scheduler.membership().members;
    members
        .iter()
        .map(|member| {
            let by_queue = queues
                .iter()
                .map(|(queue, partitions)| {
                    let owned = owned_partitions(&member.id, queue.as_str(), *partitions, &members);
                    (queue.as_str().to_owned(), owned.len())
                })
                .filter(|(_, owned)| *owned > 0)
                .collect();
            (member.id.as_str().to_owned(), by_queue)
        })
        .collect()
}

fn node_counts(
    nodes: &[delayq_engine::admin::NodeStatus],
) -> BTreeMap<String, BTreeMap<String, usize>> {
    nodes
        .iter()
        .map(|node| {
            assert_eq!(
                node.partitions,
                node.partitions_by_queue.values().sum::<usize>()
            );
            (
                node.info.id.as_str().to_owned(),
                node.partitions_by_queue.clone(),
            )
        })
        .collect()
}

fn total(nodes: &[delayq_engine::admin::NodeStatus]) -> usize {
    nodes.iter().map(|node| node.partitions).sum()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn nodes_counts_match_the_per_node_ownership_of_a_random_membership() {
    let backend = MemoryBackend::new();
    let names = register(&backend, 20, 64).await;
    let mut random = Lcg(0x5eed);
    let mut coordinators = Vec::new();
    for i in 0..40 {
        // A third serve only a few queues; the others (the first among them) serve all.
        let filter = if i % 3 == 2 {
            let picked: Vec<String> = (0..1 + random.below(4))
                .map(|_| names[random.below(names.len() as u64) as usize].clone())
                .collect();
            QueueFilter::only(picked)
        } else {
            QueueFilter::All
        };
        coordinators.push(join(&backend, filter).await);
    }
    let scheduler = observer(&backend).await;
    support::wait_until(Duration::from_secs(5), "40 members", || {
        scheduler.membership().members.len() == 40
    })
    .await;
    let queues = backend.store.queues().await.expect("queues");

    let nodes = scheduler.nodes().await.expect("nodes");
    assert_eq!(nodes.len(), 40);
    assert_eq!(node_counts(&nodes), per_node_counts(&scheduler, &queues));
    assert_eq!(total(&nodes), 20 * 64, "every partition has one owner");
    let ids: Vec<&str> = nodes.iter().map(|node| node.info.id.as_str()).collect();
    let mut sorted = ids.clone();
    sorted.sort_unstable();
    assert_eq!(ids, sorted, "sorted by id");

    scheduler.shutdown().await.expect("shutdown");
    for coordinator in coordinators {
        coordinator.leave().await.expect("leave");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn nodes_follow_the_membership_and_the_queue_registry() {
    let backend = MemoryBackend::new();
    register(&backend, 2, 16).await;
    let a = join(&backend, QueueFilter::All).await;
    let b = join(&backend, QueueFilter::All).await;
    let scheduler = observer(&backend).await;
    let check = |nodes: &[delayq_engine::admin::NodeStatus], queues: &[(QueueName, u32)]| {
        assert_eq!(node_counts(nodes), per_node_counts(&scheduler, queues));
    };

    let first = scheduler.nodes().await.expect("nodes");
    assert_eq!(first.len(), 2);
    assert_eq!(total(&first), 32);
    let queues = backend.store.queues().await.expect("queues");
    check(&first, &queues);

    // Heartbeat ages are not cached: the registry is read on every call.
    tokio::time::sleep(Duration::from_millis(1_200)).await;
    let later = scheduler.nodes().await.expect("nodes");
    assert!(
        later[0].info.last_heartbeat_ms > first[0].info.last_heartbeat_ms,
        "a fresh heartbeat: {:?} then {:?}",
        first[0].info,
        later[0].info
    );
    assert_eq!(node_counts(&later), node_counts(&first));

    // A queue added is counted.
    let added = QueueName::new("added").expect("name");
    backend
        .store
        .register_queue(&added, 8)
        .await
        .expect("register");
    let nodes = scheduler.nodes().await.expect("nodes");
    assert_eq!(total(&nodes), 40);
    check(&nodes, &backend.store.queues().await.expect("queues"));

    // A member joining (a new epoch) takes its share.
    let c = join(&backend, QueueFilter::All).await;
    support::wait_until(Duration::from_secs(5), "the observer sees c", || {
        scheduler.membership().contains(c.node_id())
    })
    .await;
    let nodes = scheduler.nodes().await.expect("nodes");
    assert_eq!(nodes.len(), 3);
    assert_eq!(total(&nodes), 40);
    assert!(nodes.iter().any(|node| &node.info.id == c.node_id()));
    assert!(nodes
        .iter()
        .all(|node| node.partitions > 0 || &node.info.id != c.node_id()));
    check(&nodes, &backend.store.queues().await.expect("queues"));

    // A member leaving hands its share over.
    b.leave().await.expect("leave");
    support::wait_until(Duration::from_secs(5), "the observer sees b leave", || {
        !scheduler.membership().contains(b.node_id())
    })
    .await;
    let nodes = scheduler.nodes().await.expect("nodes");
    assert_eq!(nodes.len(), 2);
    assert!(nodes.iter().all(|node| &node.info.id != b.node_id()));
    assert_eq!(total(&nodes), 40);
    check(&nodes, &backend.store.queues().await.expect("queues"));

    // A queue deleted is no longer counted.
    scheduler
        .delete_queue("added", false)
        .await
        .expect("delete");
    let nodes = scheduler.nodes().await.expect("nodes");
    assert_eq!(total(&nodes), 32);
    assert!(nodes
        .iter()
        .all(|node| !node.partitions_by_queue.contains_key("added")));
    check(&nodes, &backend.store.queues().await.expect("queues"));

    scheduler.shutdown().await.expect("shutdown");
    for coordinator in [a, c] {
        coordinator.leave().await.expect("leave");
    }
}

/// 120 members × 50 queues × 64 partitions: the cluster, where `delayq nodes` did not
/// answer within 10 s. The bound is generous (debug builds, a shared machine); the figures
/// are printed (`--nocapture`).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn nodes_of_a_large_cluster_answer_fast() {
    let backend = MemoryBackend::new();
    register(&backend, 50, 64).await;
    let mut coordinators = Vec::new();
    for _ in 0..120 {
        coordinators.push(join(&backend, QueueFilter::All).await);
    }
    let scheduler = observer(&backend).await;
    support::wait_until(Duration::from_secs(10), "120 members", || {
        scheduler.membership().members.len() == 120
    })
    .await;

    let started = Instant::now();
    let nodes = scheduler.nodes().await.expect("nodes");
    let cold = started.elapsed();
    let started = Instant::now();
    let again = scheduler.nodes().await.expect("nodes");
    let cached = started.elapsed();
    eprintln!(
        "nodes() of 120 members × 50 queues × 64 partitions: {cold:?} computed, {cached:?} cached"
    );

    assert_eq!(nodes.len(), 120);
    assert_eq!(total(&nodes), 50 * 64);
    assert_eq!(node_counts(&again), node_counts(&nodes));
    assert!(cold < Duration::from_secs(5), "computed in {cold:?}");
    assert!(cached < Duration::from_secs(1), "cached in {cached:?}");

    scheduler.shutdown().await.expect("shutdown");
    for coordinator in coordinators {
        coordinator.leave().await.expect("leave");
    }
}
