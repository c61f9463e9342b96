//! The coordinator on a master watched by Redis Sentinel: the nodes keep their membership
//! (no eviction, no epoch bump) and their wake-up subscriptions through a planned
//! `SENTINEL FAILOVER` and through a killed master, and beat again within a few seconds.

mod common;

use std::sync::Arc;
use std::time::{Duration, Instant};

use common::topology::{join_on, options, wake_until_received, MembershipGuard};
use common::{agree, sorted_ids, view, wait_for};
use delayq_coordinator::{owned_partitions, Coordinator, RedisCoordinator, Wakeup};
use delayq_redis::Topology;
use delayq_testkit::SentinelSet;

const QUEUE: &str = "orders";
const REGISTRY: &str = "t:{cluster}:registry";
const PARTITIONS: u32 = 16;

/// The nodes listen to the partitions they own, as the engine does; waits until they do.
async fn listen_to_owned(nodes: &[Arc<RedisCoordinator>]) {
    let members = view(nodes[0].as_ref()).members;
    for node in nodes {
        let owned = owned_partitions(node.node_id(), QUEUE, PARTITIONS, &members);
        let count = owned.len();
        node.listen(owned.into_iter().map(|p| (QUEUE.to_owned(), p)).collect());
        wait_for(Duration::from_secs(5), || async {
            node.wakeup_stats().map(|s| s.listening) == Some(count)
        })
        .await
        .expect("subscribed to the owned partitions");
    }
}

/// How many registry entries on the data node at `port` show a heartbeat after `after_ms`.
fn beats_on(set: &SentinelSet, port: u16, after_ms: u64) -> usize {
    let Ok(reply) = set.command(port, &["HGETALL", REGISTRY]) else {
        return 0;
    };
    let entries: Vec<(String, String)> = redis::from_redis_value(reply).unwrap_or_default();
    entries
        .iter()
        .filter_map(|(_, json)| serde_json::from_str::<serde_json::Value>(json).ok())
        .filter(|entry| entry["last_heartbeat_ms"].as_u64() > Some(after_ms))
        .count()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn membership_and_wakeups_survive_a_planned_failover_and_a_killed_master() {
    let mut set = SentinelSet::start();
    let redis = options(Topology::sentinel(set.sentinel_urls(), set.master_name()));
    let (nodes, producer) = join_on(&redis, 3, 200, 1_000).await;
    let all = sorted_ids(&nodes);
    wait_for(Duration::from_secs(5), || async { agree(&nodes, &all) })
        .await
        .expect("three members agree");
    listen_to_owned(&nodes).await;
    let members = view(nodes[0].as_ref()).members;
    let owner = nodes
        .iter()
        .position(|n| owned_partitions(n.node_id(), QUEUE, PARTITIONS, &members).contains(&5))
        .expect("an owner of partition 5");
    let mut mailbox = nodes[owner].take_wakeups().expect("wake-ups");
    let wakeup = |due_ms: u64| Wakeup {
        queue: QUEUE.to_owned(),
        partition: 5,
        due_ms,
    };
    wake_until_received(
        producer.as_ref(),
        &mut mailbox,
        &wakeup(1),
        Duration::from_secs(3),
    )
    .await
    .expect("a wake-up before any failover");
    let expected = view(nodes[0].as_ref());
    let guard = MembershipGuard::watch(&nodes, expected.clone());

    // A planned failover: a replica is promoted, the old master demoted (READONLY).
    let old = set.master_port();
    let asked_ms = nodes[0].clock().now_ms();
    let asked = Instant::now();
    let sentinel = set
        .sentinel_urls()
        .iter()
        .filter_map(|url| url.rsplit(':').next()?.parse::<u16>().ok())
        .find(|&port| {
            set.command(port, &["SENTINEL", "FAILOVER", set.master_name()])
                .is_ok()
        });
    assert!(sentinel.is_some(), "no sentinel accepted SENTINEL FAILOVER");
    let new = tokio::task::block_in_place(|| set.wait_for_new_master(old, Duration::from_secs(20)));
    let promoted = asked.elapsed();
    // Every node's heartbeat is written on the new master within a few seconds.
    wait_for(Duration::from_secs(5), || async {
        beats_on(&set, new, asked_ms) == 3
    })
    .await
    .unwrap_or_else(|| panic!("no heartbeats on the new master\n{}", set.logs()));
    let beating = asked.elapsed();
    let (heard, _) = wake_until_received(
        producer.as_ref(),
        &mut mailbox,
        &wakeup(2),
        Duration::from_secs(10),
    )
    .await
    .unwrap_or_else(|| panic!("no wake-up on the new master\n{}", set.logs()));
    eprintln!(
        "SENTINEL FAILOVER: new master named after {promoted:?}; every node beat there {beating:?} after the request; a wake-up got through {heard:?} later"
    );
    assert!(beating < Duration::from_secs(8), "{beating:?}");
    guard.assert_unchanged("SENTINEL FAILOVER");

    // A killed master: down after 1 s, then a promotion; longer than the TTL.
    let killed_ms = nodes[0].clock().now_ms();
    let killed_at = Instant::now();
    let old = set.kill_master();
    let new = tokio::task::block_in_place(|| set.wait_for_new_master(old, Duration::from_secs(30)));
    let promoted = killed_at.elapsed();
    wait_for(Duration::from_secs(5), || async {
        beats_on(&set, new, killed_ms) == 3
    })
    .await
    .unwrap_or_else(|| panic!("no heartbeats after the master was killed\n{}", set.logs()));
    let beating = killed_at.elapsed();
    let (heard, _) = wake_until_received(
        producer.as_ref(),
        &mut mailbox,
        &wakeup(3),
        Duration::from_secs(10),
    )
    .await
    .unwrap_or_else(|| panic!("no wake-up after the master was killed\n{}", set.logs()));
    eprintln!(
        "killed master: new master named after {promoted:?}; every node beat there {beating:?} after the kill; a wake-up got through {heard:?} later"
    );
    assert!(beating < Duration::from_secs(10), "{beating:?}");
    // Two more TTLs: still nobody evicted, same epoch.
    tokio::time::sleep(Duration::from_millis(2_000)).await;
    guard.assert_unchanged("a killed master");
    assert_eq!(view(nodes[0].as_ref()), expected);
    assert_eq!(
        RedisCoordinator::read_membership(redis.clone(), "t")
            .await
            .expect("read membership"),
        expected
    );
}
