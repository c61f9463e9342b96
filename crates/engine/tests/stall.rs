//! Guarantee 9, Redis stalls: a stall of Redis longer than `heartbeat_ttl` (a fork, a slow
//! fsync, `DEBUG SLEEP`) lets every heartbeat expire at once, and must not make the nodes
//! evict each other: the membership epoch stays, no partition moves.

mod support;

use std::collections::BTreeSet;
use std::time::Duration;

use delayq_engine::Scheduler;
use delayq_storage::Partition;
use delayq_testkit::{RedisOptions, RedisServer};
use support::{fast_config, wait_for_ownership, Recorder};

/// The partitions each node owns.
fn ownership(nodes: &[Scheduler]) -> Vec<BTreeSet<Partition>> {
    nodes
        .iter()
        .map(|node| node.owned_partitions().into_iter().collect())
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_3s_redis_stall_with_a_2s_ttl_moves_no_partition() {
    let server = RedisServer::start_with(RedisOptions {
        extra_args: vec![("enable-debug-command".to_owned(), "yes".to_owned())],
        ..Default::default()
    });
    let mut config = fast_config();
    config.redis.url = server.url();
    config.node.heartbeat_period = Duration::from_millis(500);
    config.node.heartbeat_ttl = Duration::from_secs(2);
    let recorder = Recorder::new();
    let mut nodes = Vec::new();
    for _ in 0..3 {
        let node = Scheduler::builder(config.clone())
            .handler("orders", recorder.handler())
            .start()
            .await
            .expect("node starts");
        nodes.push(node);
    }
    wait_for_ownership(&nodes, 3).await;
    let epoch = nodes[0].membership().epoch;
    let owned = ownership(&nodes);
    assert!(nodes.iter().all(|n| n.membership().epoch == epoch));

    // Redis stands still for 3 s: every heartbeat key (TTL 2 s) expires meanwhile.
    // (On this test's thread only: the nodes keep running on the other workers.)
    tokio::task::block_in_place(|| server.command(&["DEBUG", "SLEEP", "3"])).expect("DEBUG SLEEP");

    // A bounded wait for something that must not happen: two TTLs and more after the stall.
    let watch_until = std::time::Instant::now() + Duration::from_secs(5);
    while std::time::Instant::now() < watch_until {
        for (n, node) in nodes.iter().enumerate() {
            let membership = node.membership();
            assert_eq!(
                (membership.epoch, membership.members.len()),
                (epoch, 3),
                "node {n} saw the membership change after the stall"
            );
        }
        assert_eq!(
            ownership(&nodes),
            owned,
            "a partition moved after the stall"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    for node in &nodes {
        node.shutdown().await.expect("shutdown");
    }
}
