//! Behaviours every backend must show, run against Redis and memory alike.

use std::time::Duration;

use delayq_coordinator::{owner, Coordinator, NodeId, QueueFilter, Wakeup};

use super::{agree, join_agreed, sorted_ids, view, wait_for, TestCluster};

pub const PERIOD_MS: u64 = 100;
pub const TTL_MS: u64 = 300;
/// Scheduling slack on a loaded 2-core machine.
pub const SLACK: Duration = Duration::from_millis(500);

/// The ids in the registry, as `node` reads them.
async fn registered_ids(node: &dyn Coordinator) -> Vec<NodeId> {
    let nodes = node.nodes().await.expect("nodes");
    nodes.into_iter().map(|n| n.id).collect()
}

/// Defines one `#[tokio::test]` per shared scenario, each on a fresh `$cluster`.
#[macro_export]
macro_rules! shared_scenarios {
    ($cluster:expr) => {
        $crate::shared_scenarios!(@each $cluster;
            five_nodes_agree_on_sorted_members_and_epoch_within_one_period,
            a_crashed_node_is_seen_dead_within_ttl_plus_period_with_one_epoch_bump,
            two_crashes_at_once_lose_no_survivor,
            a_graceful_leave_is_seen_at_once,
            wakeups_reach_the_listeners_of_their_partition,
            a_wakeup_nobody_listens_to_goes_to_the_partition_owner,
            an_observer_follows_the_membership_without_registering,
        );
    };
    (@each $cluster:expr; $($scenario:ident,)*) => {
        $(
            #[tokio::test]
            async fn $scenario() {
                common::scenarios::$scenario(&$cluster).await;
            }
        )*
    };
}

pub async fn five_nodes_agree_on_sorted_members_and_epoch_within_one_period(
    cluster: &dyn TestCluster,
) {
    let period = Duration::from_millis(250);
    let nodes = super::join_many(cluster, 5, 250, 750).await;
    let expected = sorted_ids(&nodes);
    let took = wait_for(period, || async { agree(&nodes, &expected) })
        .await
        .unwrap_or_else(|| {
            let views: Vec<_> = nodes.iter().map(|n| view(n.as_ref())).collect();
            panic!("no agreement within one period: {views:?}")
        });
    // One bump per join on a fresh cluster.
    assert_eq!(view(nodes[0].as_ref()).epoch, 5, "took {took:?}");
    for node in &nodes {
        node.leave().await.expect("leave");
    }
}

pub async fn a_crashed_node_is_seen_dead_within_ttl_plus_period_with_one_epoch_bump(
    cluster: &dyn TestCluster,
) {
    let (mut nodes, _) = join_agreed(cluster, 5, PERIOD_MS, TTL_MS).await;
    let before = view(nodes[0].as_ref()).epoch;
    let crashed = nodes.remove(2);
    crashed.crash();
    let survivors = sorted_ids(&nodes);
    let bound = Duration::from_millis(TTL_MS + PERIOD_MS) + SLACK;
    let took = wait_for(bound, || async { agree(&nodes, &survivors) })
        .await
        .unwrap_or_else(|| panic!("crash not detected within {bound:?}"));
    // Four survivors raced to remove it: exactly one bump.
    assert_eq!(
        view(nodes[0].as_ref()).epoch,
        before + 1,
        "detected after {took:?}"
    );
    // Nothing changes afterwards: no churn, no second bump. (A bounded wait for something
    // that must *not* happen.)
    tokio::time::sleep(Duration::from_millis(3 * PERIOD_MS)).await;
    assert!(agree(&nodes, &survivors));
    assert_eq!(view(nodes[0].as_ref()).epoch, before + 1);
    assert_eq!(registered_ids(nodes[0].as_ref()).await, survivors);
    // The crashed node's own view froze.
    assert!(view(crashed.as_ref()).contains(crashed.node_id()));
}

pub async fn two_crashes_at_once_lose_no_survivor(cluster: &dyn TestCluster) {
    let (mut nodes, _) = join_agreed(cluster, 5, PERIOD_MS, TTL_MS).await;
    let before = view(nodes[0].as_ref()).epoch;
    let first = nodes.remove(0);
    let second = nodes.remove(0);
    first.crash();
    second.crash();
    let survivors = sorted_ids(&nodes);
    wait_for(Duration::from_secs(5), || async {
        agree(&nodes, &survivors)
    })
    .await
    .expect("both crashes detected");
    let after = view(nodes[0].as_ref()).epoch;
    assert!(
        after == before + 1 || after == before + 2,
        "{before} -> {after}"
    );
}

pub async fn a_graceful_leave_is_seen_at_once(cluster: &dyn TestCluster) {
    // A long TTL: only the leave itself can explain a quick update.
    let (mut nodes, _) = join_agreed(cluster, 3, 200, 10_000).await;
    let before = view(nodes[0].as_ref()).epoch;
    let leaving = nodes.remove(1);
    leaving.leave().await.expect("leave");
    leaving.leave().await.expect("leave is idempotent");
    let rest = sorted_ids(&nodes);
    let took = wait_for(Duration::from_secs(1), || async { agree(&nodes, &rest) })
        .await
        .expect("leave seen well under the 10 s TTL");
    assert_eq!(view(nodes[0].as_ref()).epoch, before + 1, "took {took:?}");
    assert!(!view(leaving.as_ref()).contains(leaving.node_id()));
}

/// Waits until `node` is subscribed to `partitions` wake-up channels.
pub async fn wait_listening(node: &dyn Coordinator, partitions: usize) {
    let stats = || node.wakeup_stats().expect("a member has a mailbox");
    wait_for(Duration::from_secs(5), || async {
        stats().listening == partitions
    })
    .await
    .unwrap_or_else(|| panic!("not listening to {partitions} partitions: {:?}", stats()));
}

pub async fn wakeups_reach_the_listeners_of_their_partition(cluster: &dyn TestCluster) {
    let (nodes, _) = join_agreed(cluster, 2, PERIOD_MS, TTL_MS).await;
    let producer = cluster.observe("producer", PERIOD_MS, TTL_MS).await;
    assert!(
        producer.take_wakeups().is_none(),
        "an observer hears no wake-ups"
    );
    producer.listen(vec![("order-timeout".to_owned(), 42)]);
    let mut wakeups = nodes[1].take_wakeups().expect("first take");
    assert!(
        nodes[1].take_wakeups().is_none(),
        "wake-ups can be taken once"
    );
    let mut others = nodes[0].take_wakeups().expect("first take");
    nodes[1].listen(vec![
        ("order-timeout".to_owned(), 42),
        ("order-timeout".to_owned(), 43),
    ]);
    nodes[0].listen(vec![("order-timeout".to_owned(), 1)]);
    wait_listening(nodes[1].as_ref(), 2).await;
    wait_listening(nodes[0].as_ref(), 1).await;
    let wakeup = Wakeup {
        queue: "order-timeout".to_owned(),
        partition: 42,
        due_ms: 1_700_000_000_000,
    };
    for sender in [&nodes[0], &producer] {
        sender.wake(wakeup.clone()).await.expect("wake");
        let received = tokio::time::timeout(Duration::from_secs(2), wakeups.recv())
            .await
            .expect("wake-up within 2 s");
        assert_eq!(received, Some(wakeup.clone()));
    }
    if cluster.wakeups_exclusive() {
        assert!(others.try_recv().is_none(), "only the listener is woken");
    }
    // Listening to fewer partitions stops their wake-ups; the others keep coming.
    nodes[1].listen(vec![("order-timeout".to_owned(), 43)]);
    wait_listening(nodes[1].as_ref(), 1).await;
    let kept = Wakeup {
        partition: 43,
        ..wakeup.clone()
    };
    producer.wake(kept.clone()).await.expect("wake");
    let received = tokio::time::timeout(Duration::from_secs(2), wakeups.recv())
        .await
        .expect("wake-up within 2 s");
    assert_eq!(received, Some(kept));
    // A wake-up nobody listens to for an unknown queue's partition is not an error.
    producer
        .wake(Wakeup {
            queue: "nobody-listens".to_owned(),
            ..wakeup
        })
        .await
        .expect("wake with no listener");
}

pub async fn a_wakeup_nobody_listens_to_goes_to_the_partition_owner(cluster: &dyn TestCluster) {
    let (nodes, _) = join_agreed(cluster, 2, PERIOD_MS, TTL_MS).await;
    let producer = cluster.observe("producer", PERIOD_MS, TTL_MS).await;
    let members = view(nodes[0].as_ref()).members;
    // A partition of a queue that no node knows yet, owned by nodes[1].
    let partition = (0..64)
        .find(|&p| owner("brand-new", p, &members) == Some(nodes[1].node_id()))
        .expect("nodes[1] owns one of 64 partitions");
    let mut owner_wakeups = nodes[1].take_wakeups().expect("wake-ups");
    let mut other_wakeups = nodes[0].take_wakeups().expect("wake-ups");
    let wakeup = Wakeup {
        queue: "brand-new".to_owned(),
        partition,
        due_ms: 7,
    };
    producer.wake(wakeup.clone()).await.expect("wake");
    let received = tokio::time::timeout(Duration::from_secs(2), owner_wakeups.recv())
        .await
        .expect("the owner is told within 2 s");
    assert_eq!(received, Some(wakeup.clone()));
    assert!(other_wakeups.try_recv().is_none());
    // Once somebody listens to the partition, the wake-ups go there instead.
    nodes[0].listen(vec![("brand-new".to_owned(), partition)]);
    wait_listening(nodes[0].as_ref(), 1).await;
    producer.wake(wakeup.clone()).await.expect("wake");
    let received = tokio::time::timeout(Duration::from_secs(2), other_wakeups.recv())
        .await
        .expect("the listener is told within 2 s");
    assert_eq!(received, Some(wakeup));
    if cluster.wakeups_exclusive() {
        assert!(owner_wakeups.try_recv().is_none());
    }
}

pub async fn an_observer_follows_the_membership_without_registering(cluster: &dyn TestCluster) {
    let observer = cluster.observe("producer", PERIOD_MS, TTL_MS).await;
    let (nodes, all) = join_agreed(cluster, 2, PERIOD_MS, TTL_MS).await;
    wait_for(Duration::from_secs(2), || async {
        view(observer.as_ref())
            .members
            .iter()
            .map(|m| m.id.clone())
            .collect::<Vec<_>>()
            == all
    })
    .await
    .expect("observer sees the members");
    assert!(!view(observer.as_ref()).contains(observer.node_id()));
    assert_eq!(registered_ids(observer.as_ref()).await, all);
    observer
        .leave()
        .await
        .expect("an observer's leave only stops it");
    assert_eq!(view(nodes[0].as_ref()).members.len(), 2);
}

pub async fn node_info_is_registered_for_delayq_nodes(cluster: &dyn TestCluster) {
    let node = cluster.join("api-1", PERIOD_MS, TTL_MS).await;
    let started = node.clock().now_ms();
    // Wait for a couple of heartbeats to move last_heartbeat_ms.
    let info = loop {
        let nodes = node.nodes().await.expect("nodes");
        assert_eq!(nodes.len(), 1);
        if nodes[0].last_heartbeat_ms > nodes[0].started_ms {
            break nodes[0].clone();
        }
        assert!(
            node.clock().now_ms() < started + 5_000,
            "heartbeat never refreshed"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    };
    assert_eq!(&info.id, node.node_id());
    assert_eq!(info.name, "api-1");
    assert_eq!(info.pid, std::process::id());
    assert_eq!(info.version, env!("CARGO_PKG_VERSION"));
    assert!(!info.host.is_empty());
    assert_eq!(info.queues, QueueFilter::All);
    assert!(info.started_ms.abs_diff(started) < 1_000);
    assert_eq!(
        view(node.as_ref()).members,
        vec![info.member()],
        "the membership carries the queue filter"
    );
}
