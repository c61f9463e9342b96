//! Wake-ups travel on per-partition channels that each node subscribes to for the partitions
//! it owns (the engine tells its coordinator after every rebalance). The pull period is 30 s
//! here, so only a wake-up can get a task fired on time:
//!
//! - on a 3-master Redis Cluster (sharded pub/sub: each partition's channel on the master of
//!   its slot), tasks scheduled by a producer fire on time on their owners;
//! - a task in a queue no node knew yet fires on time too: nobody listens to its partitions,
//!   so the wake-up goes to the owner the membership names, which adopts the queue.

mod support;

use std::collections::BTreeSet;
use std::time::Duration;

use delayq_coordinator::{LocalClock, SystemClock};
use delayq_engine::config::Config;
use delayq_engine::{Scheduler, When};
use delayq_testkit::{RedisCluster, RedisServer};
use support::{fast_config, wait_for_ownership, wait_until, Recorder};

/// A config whose nodes pull only every 30 s.
fn slow_pull(mut config: Config) -> Config {
    config.engine.pull_period = Duration::from_secs(30);
    config.engine.prefetch_window = Duration::from_secs(30);
    config
}

/// Schedules `count` tasks due in 700 ms through `producer`; waits until all fired and
/// checks that none fired early or more than 250 ms late.
async fn fire_on_time(producer: &Scheduler, recorder: &Recorder, queue: &str, count: usize) {
    let due = SystemClock.now_ms() + 700;
    for n in 0..count {
        producer
            .schedule(queue, &format!("task-{n}"), When::At(due), "")
            .await
            .expect("scheduled");
    }
    wait_until(Duration::from_secs(10), "every task fired", || {
        recorder.len() >= count
    })
    .await;
    for firing in recorder.firings() {
        let lateness = firing.fired_ms as i64 - firing.due_ms as i64;
        assert!(
            (0..=250).contains(&lateness),
            "{} fired {lateness} ms from its due time (pull period 30 s)",
            firing.id
        );
    }
    assert_eq!(recorder.distinct(), count);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn tasks_fire_on_time_through_sharded_wakeups_on_a_3_master_cluster() {
    let cluster = RedisCluster::start(0);
    let mut config = slow_pull(fast_config());
    config.redis.cluster = cluster.seed_urls();
    config
        .queues
        .insert("orders".to_owned(), config.queue_defaults);
    let recorder = Recorder::new();
    let mut nodes = Vec::new();
    for _ in 0..2 {
        let node = Scheduler::builder(config.clone())
            .handler("orders", recorder.handler())
            .start()
            .await
            .expect("node starts on the cluster");
        nodes.push(node);
    }
    let producer = Scheduler::builder(config.clone())
        .start()
        .await
        .expect("producer starts");
    wait_for_ownership(&nodes, 2).await;
    // Each node listens to exactly the partitions it owns.
    for node in &nodes {
        let owned = node.owned_partitions().len();
        wait_until(
            Duration::from_secs(5),
            "listening to the owned partitions",
            || node.coordinator().wakeup_stats().map(|s| s.listening) == Some(owned),
        )
        .await;
    }
    // The 16 channels are spread over the masters, like the partitions' keys.
    let prefix = format!("{}:{{orders:", config.redis.key_prefix);
    let masters_with_channels: BTreeSet<u16> = cluster
        .masters()
        .into_iter()
        .filter(|&master| {
            let channels: Vec<String> = cluster
                .command(master, &["PUBSUB", "SHARDCHANNELS"])
                .ok()
                .and_then(|reply| delayq_redis::redis::from_redis_value(reply).ok())
                .unwrap_or_default();
            channels.iter().any(|channel| channel.starts_with(&prefix))
        })
        .collect();
    assert_eq!(masters_with_channels.len(), 3, "{masters_with_channels:?}");

    fire_on_time(&producer, &recorder, "orders", 48).await;
    for scheduler in nodes.iter().chain([&producer]) {
        scheduler.shutdown().await.expect("shutdown");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_task_in_a_queue_no_node_knew_fires_on_time() {
    let server = RedisServer::start();
    let mut config = slow_pull(fast_config());
    config.redis.url = server.url();
    let recorder = Recorder::new();
    // A default handler, like `delayq node`: it serves whatever queue appears.
    let node = Scheduler::builder(config.clone())
        .default_handler(recorder.handler())
        .start()
        .await
        .expect("node starts");
    let producer = Scheduler::builder(config.clone())
        .start()
        .await
        .expect("producer starts");
    wait_until(Duration::from_secs(5), "the node is a member", || {
        producer.membership().members.len() == 1
    })
    .await;
    assert!(node.owned_partitions().is_empty(), "no queue exists yet");
    fire_on_time(&producer, &recorder, "brand-new", 4).await;
    assert!(!node.owned_partitions().is_empty(), "the queue was adopted");
    for scheduler in [&node, &producer] {
        scheduler.shutdown().await.expect("shutdown");
    }
}
