//! Membership on a real redis-server: the shared behaviours, plus what only Redis can do
//! wrong (restarts, lost announcements, killed subscriptions).

mod common;

use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use common::scenarios::{self, PERIOD_MS, SLACK, TTL_MS};
use common::{agree, config, ids, join_agreed, sorted_ids, view, wait_for, TestCluster};
use delayq_coordinator::{
    owner, Coordinator, CoordinatorConfig, CoordinatorError, NodeId, QueueFilter, RedisCoordinator,
    SystemClock, Wakeup, WAKEUP_CAPACITY,
};
use delayq_redis::{ConnectOptions, Topology};
use delayq_testkit::RedisServer;

struct Redis {
    server: RedisServer,
}

impl Redis {
    fn start() -> Self {
        Redis {
            server: RedisServer::start(),
        }
    }

    fn options(&self) -> ConnectOptions {
        ConnectOptions::new(Topology::standalone(self.server.url()))
    }
}

#[async_trait]
impl TestCluster for Redis {
    async fn join(&self, name: &str, period_ms: u64, ttl_ms: u64) -> Arc<dyn Coordinator> {
        RedisCoordinator::join(
            self.options(),
            config(name, period_ms, ttl_ms),
            Arc::new(SystemClock),
        )
        .await
        .expect("join")
    }

    async fn observe(&self, name: &str, period_ms: u64, ttl_ms: u64) -> Arc<dyn Coordinator> {
        RedisCoordinator::observe(
            self.options(),
            config(name, period_ms, ttl_ms),
            Arc::new(SystemClock),
        )
        .await
        .expect("observe")
    }
}

shared_scenarios!(Redis::start());

#[tokio::test]
async fn node_info_is_registered_for_delayq_nodes() {
    let redis = Redis::start();
    scenarios::node_info_is_registered_for_delayq_nodes(&redis).await;
    // The command line reads the same without joining.
    let nodes = RedisCoordinator::read_nodes(redis.options(), "t")
        .await
        .expect("read nodes");
    assert_eq!(nodes.len(), 1);
    assert_eq!(nodes[0].name, "api-1");
    let membership = RedisCoordinator::read_membership(redis.options(), "t")
        .await
        .expect("read membership");
    assert_eq!(membership.members, vec![nodes[0].member()]);
    // Another prefix is another cluster.
    assert!(RedisCoordinator::read_nodes(redis.options(), "other")
        .await
        .expect("read nodes")
        .is_empty());
}

#[tokio::test]
async fn nodes_reregister_and_converge_after_redis_restarts_empty() {
    let mut redis = Redis::start();
    let (nodes, all) = join_agreed(&redis, 3, PERIOD_MS, TTL_MS).await;
    let before = view(nodes[0].as_ref()).epoch;

    redis.server.restart();
    let converged = wait_for(Duration::from_secs(15), || async {
        let registered = RedisCoordinator::read_nodes(redis.options(), "t")
            .await
            .map(|nodes| nodes.into_iter().map(|n| n.id).collect::<Vec<_>>())
            .unwrap_or_default();
        registered == all && agree(&nodes, &all)
    })
    .await;
    let views: Vec<_> = nodes.iter().map(|n| view(n.as_ref())).collect();
    assert!(
        converged.is_some(),
        "no convergence after the restart: {views:?}"
    );
    // The counter restarted from the highest epoch the nodes had seen, not from zero.
    assert!(views[0].epoch > before, "{before} -> {}", views[0].epoch);
    let stored = RedisCoordinator::read_membership(redis.options(), "t")
        .await
        .expect("read membership");
    assert_eq!(stored, views[0]);
}

#[tokio::test]
async fn a_lost_announcement_is_caught_by_the_periodic_reread() {
    let redis = Redis::start();
    let (nodes, all) = join_agreed(&redis, 3, PERIOD_MS, 10_000).await;
    // A member appears without any announcement, as if the message had been lost.
    let ghost =
        r#"{"name":"ghost","host":"h","pid":1,"version":"0","started_ms":0,"last_heartbeat_ms":0}"#;
    let server = &redis.server;
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
    let redis = Redis::start();
    let (mut nodes, _) = join_agreed(&redis, 3, PERIOD_MS, 10_000).await;
    redis
        .server
        .command(&["CLIENT", "KILL", "TYPE", "pubsub"])
        .expect("CLIENT KILL");
    nodes.push(redis.join("late", PERIOD_MS, 10_000).await);
    let all = sorted_ids(&nodes);
    wait_for(Duration::from_secs(3), || async { agree(&nodes, &all) })
        .await
        .expect("converged after the subscriber connections were killed");

    // The partition channels are subscribed again too, and the node is told to look at
    // their partitions at once (wake-ups sent while it was away were lost).
    let mut wakeups = nodes[0].take_wakeups().expect("wake-ups");
    nodes[0].listen(vec![("q".to_owned(), 1), ("q".to_owned(), 2)]);
    scenarios::wait_listening(nodes[0].as_ref(), 2).await;
    let before_kill = nodes[0].clock().now_ms();
    redis
        .server
        .command(&["CLIENT", "KILL", "TYPE", "pubsub"])
        .expect("CLIENT KILL");
    let mut caught_up = Vec::new();
    let told = wait_for(Duration::from_secs(3), || {
        while let Some(wakeup) = wakeups.try_recv() {
            caught_up.push(wakeup);
        }
        let told = caught_up.len() >= 2;
        async move { told }
    })
    .await;
    assert!(told.is_some(), "no catch-up wake-ups: {caught_up:?}");
    caught_up.sort_by_key(|wakeup| wakeup.partition);
    assert_eq!(
        caught_up
            .iter()
            .map(|w| (w.queue.as_str(), w.partition))
            .collect::<Vec<_>>(),
        [("q", 1), ("q", 2)]
    );
    assert!(caught_up.iter().all(|w| w.due_ms >= before_kill));
    let sender = nodes[1].clone();
    let wakeup = Wakeup {
        queue: "q".into(),
        partition: 1,
        due_ms: 2,
    };
    let received = wait_for(Duration::from_secs(3), || {
        let arrived = wakeups.try_recv() == Some(wakeup.clone());
        let (sender, wakeup) = (sender.clone(), wakeup.clone());
        async move {
            if !arrived {
                sender.wake(wakeup).await.expect("wake");
            }
            arrived
        }
    })
    .await;
    assert!(
        received.is_some(),
        "no wake-up after the subscription was killed"
    );
}

#[tokio::test]
async fn a_wakeup_naming_another_partition_than_its_channel_is_rejected() {
    let redis = Redis::start();
    let (nodes, _) = join_agreed(&redis, 1, PERIOD_MS, 10_000).await;
    let mut wakeups = nodes[0].take_wakeups().expect("wake-ups");
    nodes[0].listen(vec![("orders".to_owned(), 3)]);
    scenarios::wait_listening(nodes[0].as_ref(), 1).await;
    for payload in ["orders\n4\n5", "other\n3\n5", "garbage", "orders\n3\n5"] {
        redis
            .server
            .command(&["PUBLISH", "t:{orders:3}:wake", payload])
            .expect("PUBLISH");
    }
    let stats = || nodes[0].wakeup_stats().expect("a mailbox");
    wait_for(Duration::from_secs(3), || async {
        let stats = stats();
        stats.received == 1 && stats.malformed == 3
    })
    .await
    .unwrap_or_else(|| panic!("{:?}", stats()));
    assert_eq!(
        wakeups.try_recv(),
        Some(Wakeup {
            queue: "orders".into(),
            partition: 3,
            due_ms: 5
        })
    );
}

#[tokio::test]
async fn queue_filters_travel_through_the_registry() {
    let redis = Redis::start();
    let filtered = CoordinatorConfig {
        queues: QueueFilter::only(["order-timeout"]),
        ..config("orders-only", PERIOD_MS, TTL_MS)
    };
    let orders_only = RedisCoordinator::join(redis.options(), filtered, Arc::new(SystemClock))
        .await
        .expect("join");
    let other = redis.join("everything", PERIOD_MS, TTL_MS).await;
    let nodes = [orders_only.clone() as Arc<dyn Coordinator>, other.clone()];
    let all = sorted_ids(&nodes);
    wait_for(Duration::from_secs(2), || async { agree(&nodes, &all) })
        .await
        .expect("agreement");
    let members = view(other.as_ref()).members;
    let member = members
        .iter()
        .find(|m| &m.id == orders_only.node_id())
        .expect("a member");
    assert_eq!(member.queues, QueueFilter::only(["order-timeout"]));
    assert_eq!(
        owner("reminders", 0, &members),
        Some(other.node_id()),
        "only the unfiltered node serves other queues"
    );
}

#[tokio::test]
async fn a_corrupt_registry_entry_is_named_and_left_out_of_the_membership() {
    let redis = Redis::start();
    let (nodes, all) = join_agreed(&redis, 2, PERIOD_MS, TTL_MS).await;
    let server = &redis.server;
    server
        .command(&["SET", "t:{cluster}:hb:0-corrupt", "1", "PX", "60000"])
        .expect("SET");
    server
        .command(&["HSET", "t:{cluster}:registry", "0-corrupt", "{not json"])
        .expect("HSET");
    server
        .command(&["INCR", "t:{cluster}:epoch"])
        .expect("INCR");
    let epoch = view(nodes[0].as_ref()).epoch;
    // Every node reads the new epoch, and leaves the corrupt entry out of its members.
    wait_for(Duration::from_secs(2), || async {
        view(nodes[0].as_ref()).epoch > epoch && agree(&nodes, &all)
    })
    .await
    .expect("the change is read, without the corrupt entry");
    match nodes[0].nodes().await {
        Err(CoordinatorError::CorruptEntry { node, .. }) => assert_eq!(node, "0-corrupt"),
        other => panic!("expected CorruptEntry, got {other:?}"),
    }
}

/// A Redis server that accepts `DEBUG` (to stall it with `DEBUG SLEEP`).
fn debuggable_server() -> RedisServer {
    RedisServer::start_with(delayq_testkit::RedisOptions {
        extra_args: vec![("enable-debug-command".to_owned(), "yes".to_owned())],
        ..Default::default()
    })
}

/// Blocks Redis for `seconds` (from a blocking thread: the nodes keep running meanwhile).
async fn stall_redis(server: &RedisServer, seconds: f64) {
    let client = server.client();
    let seconds = seconds.to_string();
    tokio::task::spawn_blocking(move || {
        let mut connection = client.get_connection().expect("connect");
        redis::cmd("DEBUG")
            .arg("SLEEP")
            .arg(&seconds)
            .query::<()>(&mut connection)
            .expect("DEBUG SLEEP");
    })
    .await
    .expect("the stall ends");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_redis_stall_longer_than_the_ttl_evicts_nobody() {
    let redis = Redis {
        server: debuggable_server(),
    };
    let (nodes, all) = join_agreed(&redis, 3, PERIOD_MS, TTL_MS).await;
    let epoch = view(nodes[0].as_ref()).epoch;
    // Every heartbeat expires during the stall; each node has requests queued behind it.
    stall_redis(&redis.server, 1.5).await;
    // A bounded wait for something that must not happen: several periods and TTLs.
    for _ in 0..(3 * TTL_MS / 50) {
        let views: Vec<_> = nodes.iter().map(|n| view(n.as_ref())).collect();
        assert!(
            views.iter().all(|v| v.epoch == epoch && ids(v) == all),
            "the stall changed the membership (epoch {epoch} before): {views:?}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let stored = RedisCoordinator::read_membership(redis.options(), "t")
        .await
        .expect("read membership");
    assert_eq!((stored.epoch, ids(&stored)), (epoch, all));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_crash_during_the_quiet_time_after_a_stall_is_still_detected() {
    let redis = Redis {
        server: debuggable_server(),
    };
    let (mut nodes, _) = join_agreed(&redis, 3, PERIOD_MS, TTL_MS).await;
    let epoch = view(nodes[0].as_ref()).epoch;
    stall_redis(&redis.server, 1.0).await;
    let crashed = nodes.remove(0);
    crashed.crash();
    let survivors = sorted_ids(&nodes);
    // The stall holds removals back for one TTL: the bound is one TTL longer than usual.
    let bound = Duration::from_millis(2 * TTL_MS + PERIOD_MS) + SLACK;
    wait_for(bound, || async { agree(&nodes, &survivors) })
        .await
        .unwrap_or_else(|| panic!("crash after a stall not detected within {bound:?}"));
    assert_eq!(view(nodes[0].as_ref()).epoch, epoch + 1);
}

/// Guarantee 9: a node whose every heartbeat comes a "long gap" after its previous one (each
/// sets the stall marker anew) must not keep a dead member in. Before the marker carried the
/// time the silence began, it was renewed by every late beat and nobody was ever removed.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn late_heartbeats_again_and_again_do_not_keep_a_dead_member_in() {
    const PERIOD: u64 = 200;
    const TTL: u64 = 1_000;
    let redis = Redis::start();
    let proxy = common::proxy::Proxy::start(redis.server.port()).await;
    let a = redis.join("a", PERIOD, TTL).await;
    let dead = redis.join("dead", PERIOD, TTL).await;
    let late = RedisCoordinator::join(
        ConnectOptions::new(Topology::standalone(proxy.url())),
        config("late", PERIOD, TTL),
        Arc::new(SystemClock),
    )
    .await
    .expect("join through the proxy");
    let nodes: Vec<Arc<dyn Coordinator>> = vec![a, late];
    let mut all = sorted_ids(&nodes);
    all.push(dead.node_id().clone());
    all.sort();
    wait_for(Duration::from_secs(5), || async { agree(&nodes, &all) })
        .await
        .expect("three members");
    // Round trips of ~860 ms: above TTL - period (a long gap, every beat), below the TTL.
    proxy.set_delay(430);
    tokio::time::sleep(Duration::from_millis(2 * TTL)).await;
    dead.crash();
    let survivors = sorted_ids(&nodes);
    // Its deadline, one TTL of slack before the late node's silence began, one gap, periods.
    let bound = Duration::from_millis(3 * TTL + 2 * PERIOD) + SLACK;
    let took = wait_for(bound + Duration::from_secs(5), || async {
        agree(&nodes[..1], &survivors)
    })
    .await;
    proxy.set_delay(0);
    let took = took.unwrap_or_else(|| panic!("the dead member was never removed"));
    assert!(took <= bound, "removed after {took:?}, bound {bound:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_flood_of_wakeups_stays_bounded_and_urgent_ones_get_through() {
    let redis = Redis::start();
    let (nodes, _) = join_agreed(&redis, 2, PERIOD_MS, 10_000).await;
    // Nobody reads the wake-ups while they arrive: the worst case for the mailbox.
    let mut wakeups = nodes[0].take_wakeups().expect("wake-ups");
    let channel = format!("t:{{cluster}}:wake:{}", nodes[0].node_id());
    let mut connection = redis
        .server
        .client()
        .get_multiplexed_async_connection()
        .await
        .expect("connect");
    // 100,000 well-formed wake-ups over 20,000 partitions, due late, and some garbage.
    let (flood, garbage) = (100_000u64, 1_000u64);
    for chunk in 0..(flood / 10_000) {
        let mut pipe = redis::pipe();
        for n in chunk * 10_000..(chunk + 1) * 10_000 {
            let payload = format!("flood-{}\n{}\n{}", n % 5_000, n % 4, 1_000_000 + n);
            pipe.cmd("PUBLISH").arg(&channel).arg(payload).ignore();
        }
        for n in 0..garbage / 10 {
            pipe.cmd("PUBLISH")
                .arg(&channel)
                .arg(format!("not a queue\n{n}\n1"))
                .ignore();
        }
        pipe.query_async::<()>(&mut connection)
            .await
            .expect("PUBLISH");
    }
    let stats = || nodes[0].wakeup_stats().expect("a member has a mailbox");
    wait_for(Duration::from_secs(20), || async {
        let stats = stats();
        stats.received + stats.malformed == flood + garbage
    })
    .await
    .unwrap_or_else(|| panic!("the flood did not arrive: {:?}", stats()));
    let after_flood = stats();
    assert_eq!(after_flood.malformed, garbage);
    assert_eq!(after_flood.pending, WAKEUP_CAPACITY, "{after_flood:?}");
    assert_eq!(wakeups.len(), WAKEUP_CAPACITY);
    assert_eq!(
        after_flood.received,
        after_flood.pending as u64 + after_flood.coalesced + after_flood.dropped
    );
    assert!(after_flood.dropped > 0 && after_flood.coalesced > 0);

    // A wake-up due sooner than the flood still gets in, and comes out first.
    let urgent = Wakeup {
        queue: "orders".into(),
        partition: 3,
        due_ms: 5,
    };
    nodes[0].listen(vec![("orders".to_owned(), 3)]);
    scenarios::wait_listening(nodes[0].as_ref(), 1).await;
    nodes[1].wake(urgent.clone()).await.expect("wake");
    wait_for(Duration::from_secs(5), || async {
        stats().received == flood + 1
    })
    .await
    .expect("the urgent wake-up arrives");
    assert_eq!(wakeups.len(), WAKEUP_CAPACITY);
    assert_eq!(wakeups.try_recv(), Some(urgent));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_backlog_of_200k_wakeups_is_read_without_losing_the_subscription() {
    let redis = Redis::start();
    // A 300 ms TTL: the backlog takes many operation timeouts to read.
    let (nodes, _) = join_agreed(&redis, 1, PERIOD_MS, TTL_MS).await;
    let mut wakeups = nodes[0].take_wakeups().expect("wake-ups");
    let reader = tokio::spawn(async move { while wakeups.recv().await.is_some() {} });
    let channel = format!("t:{{cluster}}:wake:{}", nodes[0].node_id());
    let script = "for i = 1, tonumber(ARGV[2]) do \
                  redis.call('PUBLISH', ARGV[1], 'q' .. (i % 1000) .. '\\n' .. (i % 7) .. '\\n' .. i) end";
    let flood = 200_000u64;
    for _ in 0..(flood / 50_000) {
        redis
            .server
            .command(&["EVAL", script, "0", &channel, "50000"])
            .expect("PUBLISH script");
    }
    let stats = || nodes[0].wakeup_stats().expect("a member has a mailbox");
    wait_for(Duration::from_secs(30), || async {
        stats().received == flood
    })
    .await
    .unwrap_or_else(|| panic!("wake-ups were lost with the subscription: {:?}", stats()));
    reader.abort();
}
