//! The coordinator on a 3-master Redis Cluster: membership in the `{cluster}` slot, wake-ups
//! on sharded channels in each partition's slot, and both surviving planned and forced
//! failovers (of a partition's master and of the `{cluster}` master).

mod common;

use std::sync::Arc;
use std::time::{Duration, Instant};

use common::topology::{
    join_on, options, wait_for_heartbeats_after, wake_until_received, MembershipGuard,
};
use common::{agree, sorted_ids, view, wait_for};
use delayq_coordinator::{owned_partitions, Coordinator, RedisCoordinator, Wakeup};
use delayq_redis::Topology;
use delayq_testkit::RedisCluster;

const REGISTRY: &str = "t:{cluster}:registry";

/// `PUBSUB SHARDNUMSUB <channel>` summed over the master at `port` and its replicas.
fn shard_subscribers(cluster: &RedisCluster, port: u16, channel: &str) -> i64 {
    let mut nodes = cluster.replicas_of(port);
    nodes.push(port);
    nodes
        .into_iter()
        .filter_map(|node| {
            cluster
                .command(node, &["PUBSUB", "SHARDNUMSUB", channel])
                .ok()
        })
        .filter_map(|reply| redis::from_redis_value::<(String, i64)>(reply).ok())
        .map(|(_, count)| count)
        .sum()
}

/// The first partition of `queue` (of 64) whose wake-up channel is served by `master`.
fn partition_on(cluster: &RedisCluster, queue: &str, master: u16) -> u32 {
    (0..64)
        .find(|&p| cluster.master_of(&format!("t:{{{queue}:{p}}}:wake")) == master)
        .unwrap_or_else(|| panic!("no partition of {queue} on master {master}"))
}

/// Every node listens to the partitions of `queue` (16 of them) it owns, as the engine does.
fn listen_to_owned(nodes: &[Arc<RedisCoordinator>], queue: &str) {
    let members = view(nodes[0].as_ref()).members;
    for node in nodes {
        let owned = owned_partitions(node.node_id(), queue, 64, &members);
        node.listen(owned.into_iter().map(|p| (queue.to_owned(), p)).collect());
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn three_nodes_join_detect_a_crash_and_leave_on_a_3_master_cluster() {
    let cluster = RedisCluster::start(0);
    let redis = options(Topology::cluster(cluster.seed_urls()));
    let (mut nodes, observer) = join_on(&redis, 3, 100, 300).await;
    let all = sorted_ids(&nodes);
    wait_for(Duration::from_secs(3), || async { agree(&nodes, &all) })
        .await
        .expect("three members agree");
    assert_eq!(view(nodes[0].as_ref()).epoch, 3, "one bump per join");
    // The membership lives on the master of the `{cluster}` slot, nowhere else.
    let home = cluster.master_of(REGISTRY);
    for master in cluster.masters() {
        let stored: i64 = redis::from_redis_value(
            cluster
                .command(master, &["EXISTS", REGISTRY])
                .unwrap_or(redis::Value::Int(0)),
        )
        .unwrap_or(0);
        assert_eq!(stored == 1, master == home, "registry on {master}");
    }
    // The cluster clock is that master's TIME (every process shares this machine's clock).
    let offset = nodes[0].clock().offset_ms();
    assert!(offset.abs() <= 10, "offset {offset} ms");

    let crashed = nodes.remove(2);
    crashed.crash();
    let survivors = sorted_ids(&nodes);
    let took = wait_for(Duration::from_millis(1_500), || async {
        agree(&nodes, &survivors) && view(observer.as_ref()).members.len() == 2
    })
    .await
    .expect("crash detected within TTL + period + slack");
    assert_eq!(view(nodes[0].as_ref()).epoch, 4, "detected after {took:?}");

    let leaving = nodes.remove(1);
    leaving.leave().await.expect("leave");
    let rest = sorted_ids(&nodes);
    wait_for(Duration::from_millis(500), || async {
        agree(&nodes, &rest)
    })
    .await
    .expect("the leave is announced at once (SPUBLISH in the {cluster} slot)");
    assert_eq!(view(nodes[0].as_ref()).epoch, 5);
    let registered = RedisCoordinator::read_nodes(redis.clone(), "t")
        .await
        .expect("read nodes");
    assert_eq!(registered.len(), 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn wakeups_and_membership_survive_planned_and_killed_failovers() {
    let mut cluster = RedisCluster::start(1);
    let redis = options(Topology::cluster(cluster.seed_urls()));
    let (nodes, producer) = join_on(&redis, 3, 200, 1_000).await;
    let all = sorted_ids(&nodes);
    wait_for(Duration::from_secs(5), || async { agree(&nodes, &all) })
        .await
        .expect("three members agree");
    let home = cluster.master_of(REGISTRY);
    let others: Vec<u16> = cluster
        .masters()
        .into_iter()
        .filter(|&m| m != home)
        .collect();
    let (planned_master, killed_master) = (others[0], others[1]);
    let queue = "orders";
    let planned = partition_on(&cluster, queue, planned_master);
    let killed = partition_on(&cluster, queue, killed_master);
    listen_to_owned(&nodes, queue);
    let members = view(nodes[0].as_ref()).members;
    let owner_of = |partition: u32| {
        nodes
            .iter()
            .position(|n| owned_partitions(n.node_id(), queue, 64, &members).contains(&partition))
            .expect("an owner")
    };
    let mut mailboxes: Vec<_> = nodes
        .iter()
        .map(|n| n.take_wakeups().expect("a member's wake-ups"))
        .collect();
    for node in &nodes {
        let owned = owned_partitions(node.node_id(), queue, 64, &members).len();
        wait_for(Duration::from_secs(5), || async {
            node.wakeup_stats().map(|s| s.listening) == Some(owned)
        })
        .await
        .unwrap_or_else(|| panic!("not subscribed to its {owned} partitions"));
    }
    let expected = view(nodes[0].as_ref());
    let guard = MembershipGuard::watch(&nodes, expected.clone());

    // Before any failover: published on the partition's master, heard by its owner only.
    let wakeup = |partition: u32, due_ms: u64| Wakeup {
        queue: queue.to_owned(),
        partition,
        due_ms,
    };
    let channel = |partition: u32| format!("t:{{{queue}:{partition}}}:wake");
    for partition in [planned, killed] {
        let first = wakeup(partition, 1);
        let owner = owner_of(partition);
        wake_until_received(
            producer.as_ref(),
            &mut mailboxes[owner],
            &first,
            Duration::from_secs(3),
        )
        .await
        .unwrap_or_else(|| panic!("no wake-up for partition {partition}"));
        let master = cluster.master_of(&channel(partition));
        assert_eq!(shard_subscribers(&cluster, master, &channel(partition)), 1);
    }

    // A planned failover: the old master drops the slot and tells the subscriber
    // (`sunsubscribe`); the subscription comes back on the new master.
    let replica = cluster.replicas_of(planned_master)[0];
    let failover_at = nodes[0].clock().now_ms();
    cluster
        .command(replica, &["CLUSTER", "FAILOVER"])
        .expect("CLUSTER FAILOVER");
    tokio::task::block_in_place(|| {
        cluster.wait_for_failover(&channel(planned), planned_master, Duration::from_secs(20))
    });
    // The subscription is restored by itself, and the owner is told to look at the
    // partition (wake-ups published meanwhile were lost): a wake-up due now, unasked.
    let owner = owner_of(planned);
    let caught_up = tokio::time::timeout(Duration::from_secs(10), async {
        loop {
            match mailboxes[owner].recv().await {
                Some(w) if w.partition == planned && w.due_ms >= failover_at => return w,
                Some(_) => continue,
                None => panic!("the mailbox closed"),
            }
        }
    })
    .await;
    assert!(
        caught_up.is_ok(),
        "no catch-up wake-up after the planned failover\n{}",
        cluster.logs()
    );
    let (took, _) = wake_until_received(
        producer.as_ref(),
        &mut mailboxes[owner],
        &wakeup(planned, 2),
        Duration::from_secs(15),
    )
    .await
    .unwrap_or_else(|| panic!("no wake-up after a planned failover\n{}", cluster.logs()));
    eprintln!("wake-ups heard again {took:?} after the catch-up of the planned failover");
    // Exactly one subscription, in the new master's shard (replicas are known by gossip).
    let master = cluster.master_of(&channel(planned));
    wait_for(Duration::from_secs(5), || async {
        shard_subscribers(&cluster, master, &channel(planned)) == 1
    })
    .await
    .expect("subscribed once in the new master's shard");

    // A killed master: its replica takes over the slot.
    let started = Instant::now();
    cluster.kill(killed_master);
    tokio::task::block_in_place(|| {
        cluster.wait_for_failover(&channel(killed), killed_master, Duration::from_secs(30))
    });
    let owner = owner_of(killed);
    let (took, _) = wake_until_received(
        producer.as_ref(),
        &mut mailboxes[owner],
        &wakeup(killed, 3),
        Duration::from_secs(15),
    )
    .await
    .unwrap_or_else(|| panic!("no wake-up after a killed master\n{}", cluster.logs()));
    eprintln!(
        "wake-ups back {took:?} after the failover ({:?} after the kill)",
        started.elapsed()
    );
    guard.assert_unchanged("partition masters failed over");

    // The `{cluster}` master itself: heartbeats stop until its replica is promoted, for
    // longer than the TTL, and nobody is evicted.
    let killed_at = nodes[0].clock().now_ms();
    let started = Instant::now();
    cluster.kill(home);
    tokio::task::block_in_place(|| {
        cluster.wait_for_failover(REGISTRY, home, Duration::from_secs(30))
    });
    wait_for_heartbeats_after(
        nodes[0].as_ref(),
        3,
        killed_at + 500,
        Duration::from_secs(10),
    )
    .await
    .unwrap_or_else(|| panic!("heartbeats did not resume\n{}", cluster.logs()));
    eprintln!(
        "every node beat again {:?} after the {{cluster}} master was killed",
        started.elapsed()
    );
    // Two more TTLs on the new master: still nobody evicted.
    tokio::time::sleep(Duration::from_millis(2_000)).await;
    guard.assert_unchanged("the {cluster} master failed over");
    assert_eq!(view(nodes[0].as_ref()), expected);
    drop(guard);

    // Removal still works on the new master.
    let mut nodes = nodes;
    let crashed = nodes.remove(0);
    crashed.crash();
    let survivors = sorted_ids(&nodes);
    wait_for(Duration::from_secs(5), || async {
        agree(&nodes, &survivors)
    })
    .await
    .expect("a crash is still detected after the failover");
    assert_eq!(view(nodes[0].as_ref()).epoch, expected.epoch + 1);
}
