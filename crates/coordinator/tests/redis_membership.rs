//! Membership on a real redis-server: join, crash, leave, restart, lost announcements.

mod common;

use std::sync::Arc;
use std::time::Duration;

use common::{agree, config, sorted_ids, view, wait_for};
use delayq_coordinator::{Coordinator, NodeId, RedisCoordinator, SystemClock, Wakeup};
use delayq_testkit::RedisServer;

const PERIOD_MS: u64 = 100;
const TTL_MS: u64 = 300;
/// Scheduling slack on a loaded 2-core machine.
const SLACK: Duration = Duration::from_millis(500);

async fn join(
    server: &RedisServer,
    name: &str,
    period_ms: u64,
    ttl_ms: u64,
) -> Arc<RedisCoordinator> {
    RedisCoordinator::join(
        &server.url(),
        config(name, period_ms, ttl_ms),
        Arc::new(SystemClock),
    )
    .await
    .expect("join")
}

async fn join_many(
    server: &RedisServer,
    count: usize,
    period_ms: u64,
    ttl_ms: u64,
) -> Vec<Arc<RedisCoordinator>> {
    let mut nodes = Vec::new();
    for i in 0..count {
        nodes.push(join(server, &format!("node-{i}"), period_ms, ttl_ms).await);
    }
    nodes
}

/// `count` nodes that all see each other at the same epoch.
async fn join_agreed(
    server: &RedisServer,
    count: usize,
    period_ms: u64,
    ttl_ms: u64,
) -> (Vec<Arc<RedisCoordinator>>, Vec<NodeId>) {
    let nodes = join_many(server, count, period_ms, ttl_ms).await;
    let all = sorted_ids(&nodes);
    wait_for(Duration::from_secs(5), || async { agree(&nodes, &all) })
        .await
        .expect("initial agreement");
    (nodes, all)
}

#[tokio::test]
async fn five_nodes_agree_on_sorted_members_and_epoch_within_one_period() {
    let server = RedisServer::start();
    let period = Duration::from_millis(250);
    let nodes = join_many(&server, 5, 250, 750).await;
    let expected = sorted_ids(&nodes);
    let took = wait_for(period, || async { agree(&nodes, &expected) })
        .await
        .unwrap_or_else(|| {
            panic!(
                "no agreement within one period: {:?}",
                nodes.iter().map(|n| view(n.as_ref())).collect::<Vec<_>>()
            )
        });
    // One bump per join on a fresh Redis.
    assert_eq!(view(nodes[0].as_ref()).epoch, 5, "took {took:?}");
    for node in &nodes {
        node.leave().await.expect("leave");
    }
}

#[tokio::test]
async fn a_crashed_node_is_seen_dead_within_ttl_plus_period_with_one_epoch_bump() {
    let server = RedisServer::start();
    let (mut nodes, _) = join_agreed(&server, 5, PERIOD_MS, TTL_MS).await;
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
    // And nothing else changes afterwards (no churn, no second bump).
    tokio::time::sleep(Duration::from_millis(3 * PERIOD_MS)).await;
    assert!(agree(&nodes, &survivors));
    assert_eq!(view(nodes[0].as_ref()).epoch, before + 1);
    let registered: Vec<_> = nodes[0]
        .nodes()
        .await
        .expect("nodes")
        .into_iter()
        .map(|n| n.id)
        .collect();
    assert_eq!(registered, survivors);
}

#[tokio::test]
async fn two_crashes_at_once_lose_no_survivor() {
    let server = RedisServer::start();
    let (mut nodes, _) = join_agreed(&server, 5, PERIOD_MS, TTL_MS).await;
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

#[tokio::test]
async fn a_graceful_leave_is_seen_at_once() {
    let server = RedisServer::start();
    // A long TTL: only the leave itself can explain a quick update.
    let (mut nodes, _) = join_agreed(&server, 3, 200, 10_000).await;
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

#[tokio::test]
async fn nodes_reregister_and_converge_after_redis_restarts_empty() {
    let mut server = RedisServer::start();
    let (nodes, all) = join_agreed(&server, 3, PERIOD_MS, TTL_MS).await;
    let before = view(nodes[0].as_ref()).epoch;

    server.restart();
    let url = server.url();
    let converged = wait_for(Duration::from_secs(15), || async {
        let registered = RedisCoordinator::read_nodes(&url, "t")
            .await
            .map(|nodes| nodes.into_iter().map(|n| n.id).collect::<Vec<_>>())
            .unwrap_or_default();
        registered == all && agree(&nodes, &all) && view(nodes[0].as_ref()).epoch > before
    })
    .await;
    assert!(
        converged.is_some(),
        "no convergence after the restart: {:?}",
        nodes.iter().map(|n| view(n.as_ref())).collect::<Vec<_>>()
    );
    // The membership Redis now holds is the one every node sees.
    let stored = RedisCoordinator::read_membership(&url, "t")
        .await
        .expect("read membership");
    assert_eq!(stored, view(nodes[0].as_ref()));
}

#[tokio::test]
async fn a_lost_announcement_is_caught_by_the_periodic_reread() {
    let server = RedisServer::start();
    let (nodes, all) = join_agreed(&server, 3, PERIOD_MS, 10_000).await;
    // A member appears without any announcement, as if the message had been lost.
    let ghost =
        r#"{"name":"ghost","host":"h","pid":1,"version":"0","started_ms":0,"last_heartbeat_ms":0}"#;
    server
        .command(&["SET", "t:{cluster}:hb:0-ghost", "1", "PX", "60000"])
        .expect("SET");
    server
        .command(&["HSET", "t:{cluster}:registry", "0-ghost", ghost])
        .expect("HSET");
    server
        .command(&["INCR", "t:{cluster}:epoch"])
        .expect("INCR");
    let mut expected = all.clone();
    expected.insert(0, NodeId::from_string("0-ghost"));
    wait_for(Duration::from_millis(2 * PERIOD_MS) + SLACK, || async {
        agree(&nodes, &expected)
    })
    .await
    .expect("the periodic re-read sees the silent change");
}

#[tokio::test]
async fn a_killed_subscriber_connection_reconnects_and_updates_still_arrive() {
    let server = RedisServer::start();
    let (mut nodes, _) = join_agreed(&server, 3, PERIOD_MS, 10_000).await;
    server
        .command(&["CLIENT", "KILL", "TYPE", "pubsub"])
        .expect("CLIENT KILL");
    nodes.push(join(&server, "late", PERIOD_MS, 10_000).await);
    let all = sorted_ids(&nodes);
    wait_for(Duration::from_secs(3), || async { agree(&nodes, &all) })
        .await
        .expect("converged after the subscriber connections were killed");

    // The wake-up channel is subscribed again too.
    let mut wakeups = nodes[0].take_wakeups().expect("wake-ups");
    let target = nodes[0].node_id().clone();
    server
        .command(&["CLIENT", "KILL", "TYPE", "pubsub"])
        .expect("CLIENT KILL");
    let sender = nodes[1].clone();
    let received = wait_for(Duration::from_secs(3), || {
        let sender = sender.clone();
        let target = target.clone();
        let ready = wakeups.try_recv().is_ok();
        async move {
            if !ready {
                let wakeup = Wakeup {
                    queue: "q".into(),
                    partition: 1,
                    due_ms: 2,
                };
                sender.wake(&target, wakeup).await.expect("wake");
            }
            ready
        }
    })
    .await;
    assert!(
        received.is_some(),
        "no wake-up after the subscription was killed"
    );
}
