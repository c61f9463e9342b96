//! Issue 9 end to end, in-process: schedulers on a 3-master Redis Cluster (tasks fire once,
//! never early, and the queue's script calls spread over the masters), surviving a master
//! SIGKILLed on a cluster with replicas and on a Sentinel set (plus a planned `SENTINEL
//! FAILOVER`) with `redis.wait_replicas: 1`, and what `wait_replicas` does when no replica
//! answers.

mod support;
mod topologies_support;

use std::collections::HashMap;
use std::time::{Duration, Instant};

use bytes::Bytes;
use delayq_engine::config::{QueueConfig, SentinelConfig};
use delayq_engine::{ScheduleRequest, Scheduler, When};
use delayq_testkit::{RedisCluster, RedisServer, SentinelSet};
use support::{fast_config, wait_for_ownership, wait_until, Recorder};
use tokio::task::block_in_place;
use topologies_support::{
    eventually, failover_config, nodes_owning, script_calls, settled, start_nodes, Failover,
    FailoverRun,
};

/// 64 partitions whose hash tags fall 22/21/21 on the three masters of a fresh cluster.
const SPREAD_QUEUE: &str = "device-offline";

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn cluster_three_nodes_fire_every_task_once_never_early_spread_over_the_masters() {
    const PER_NODE: usize = 5_000;
    let cluster = block_in_place(|| RedisCluster::start(0));
    let mut config = fast_config();
    config.redis.cluster = cluster.seed_urls();
    // Fewer heartbeats: the coordinator's own scripts run on one master only.
    config.node.heartbeat_period = Duration::from_millis(300);
    config.node.heartbeat_ttl = Duration::from_secs(2);
    config.queues.insert(
        SPREAD_QUEUE.to_owned(),
        QueueConfig {
            partitions: 64,
            concurrency: 256,
            ..config.queue_defaults
        },
    );
    let recorder = Recorder::new();
    let nodes = start_nodes(&config, &recorder, 3).await;
    nodes_owning(&nodes, 64).await;
    let masters = cluster.masters();
    assert_eq!(masters.len(), 3, "{:?}", cluster.nodes());
    for &port in &masters {
        cluster
            .command(port, &["CONFIG", "RESETSTAT"])
            .expect("CONFIG RESETSTAT");
    }

    let loads = nodes
        .iter()
        .enumerate()
        .map(|(node_index, node)| async move {
            let requests: Vec<ScheduleRequest> = (0..PER_NODE)
                .map(|task| ScheduleRequest {
                    id: format!("n{node_index}-t{task}"),
                    // Due 2 to 5 s ahead, spread evenly (7919 is prime).
                    when: When::In(Duration::from_millis(2_000 + (task * 7_919 % 3_000) as u64)),
                    payload: Bytes::new(),
                    mode: Default::default(),
                    traceparent: None,
                })
                .collect();
            let results = node
                .schedule_many(SPREAD_QUEUE, requests)
                .await
                .expect("schedule_many on the cluster");
            for result in results {
                result.expect("every item scheduled");
            }
        });
    futures::future::join_all(loads).await;
    let total = PER_NODE * nodes.len();
    wait_until(Duration::from_secs(90), "every task fired", || {
        recorder.distinct() == total
    })
    .await;
    settled(
        &nodes[0],
        SPREAD_QUEUE,
        total as u64,
        Duration::from_secs(30),
    )
    .await;

    let firings = recorder.firings();
    let repeated: Vec<(String, usize)> = recorder
        .counts()
        .into_iter()
        .filter(|(_, count)| *count > 1)
        .collect();
    assert!(repeated.is_empty(), "tasks fired twice: {repeated:?}");
    let early: Vec<_> = firings.iter().filter(|f| f.fired_ms < f.due_ms).collect();
    assert!(early.is_empty(), "fired before their due: {early:?}");
    let fired_by: HashMap<&str, usize> = firings.iter().fold(HashMap::new(), |mut by, f| {
        *by.entry(f.node.as_str()).or_default() += 1;
        by
    });
    assert_eq!(fired_by.len(), 3, "every node fired a share: {fired_by:?}");

    let calls: Vec<(u16, u64)> = masters
        .iter()
        .map(|&port| (port, script_calls(&cluster.info(port, "commandstats"))))
        .collect();
    let sum: u64 = calls.iter().map(|(_, calls)| calls).sum();
    let shares: Vec<(u16, f64)> = calls
        .iter()
        .map(|&(port, calls)| (port, calls as f64 / sum as f64))
        .collect();
    eprintln!("script calls per master: {calls:?}, shares {shares:?}");
    for (port, share) in shares {
        assert!(
            (0.25..=0.42).contains(&share),
            "master {port} ran {:.1} % of the script calls ({calls:?})",
            share * 100.0
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn cluster_master_sigkilled_while_tasks_fire_loses_no_acknowledged_schedule() {
    let mut cluster = block_in_place(|| RedisCluster::start(2));
    let mut config = failover_config();
    config.redis.cluster = cluster.seed_urls();
    let run = FailoverRun::start(config).await;
    run.wait_for_steady_firing().await;
    // The master of the coordinator's slot: heartbeats, the cluster clock and a third of the
    // queue's partitions all move at once.
    let kill_ms = run.now_ms();
    let killed = block_in_place(|| cluster.kill_master_of("{cluster}"));
    block_in_place(|| cluster.wait_for_failover("{cluster}", killed, Duration::from_secs(30)));
    let done_ms = run.now_ms();
    run.finish(&[Failover {
        what: "SIGKILL of the {cluster} master",
        from_ms: kill_ms,
        to_ms: done_ms,
    }])
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn sentinel_master_sigkilled_then_planned_failover_loses_no_acknowledged_schedule() {
    let mut set = block_in_place(SentinelSet::start);
    let mut config = failover_config();
    config.redis.sentinel = Some(SentinelConfig {
        urls: set.sentinel_urls(),
        master: set.master_name().to_owned(),
        username: None,
        password: None,
    });
    let run = FailoverRun::start(config).await;
    run.wait_for_steady_firing().await;

    let kill_ms = run.now_ms();
    let killed = block_in_place(|| set.kill_master());
    block_in_place(|| set.wait_for_new_master(killed, Duration::from_secs(30)));
    let promoted_ms = run.now_ms();
    run.wait_for_steady_firing().await;

    let planned_ms = run.now_ms();
    block_in_place(|| set.failover());
    let switched_ms = run.now_ms();
    run.finish(&[
        Failover {
            what: "SIGKILL of the master",
            from_ms: kill_ms,
            to_ms: promoted_ms,
        },
        Failover {
            what: "SENTINEL FAILOVER",
            from_ms: planned_ms,
            to_ms: switched_ms,
        },
    ])
    .await;
}

/// A schedule whose `WAIT` saw too few replicas is on the master all the same (the error
/// says so): the owner of its partition hears of it as of any schedule and fires it on time.
/// Before, the error skipped the wake-up, so an idle owner found the task only at its next
/// look, up to `idle_pull_period` late: the Sentinel soak (`tests/e2e_soak.rs`) saw tasks
/// fire 26–30 s after their due once a failover had left a replica resyncing.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn an_unconfirmed_schedule_still_wakes_the_owner_of_its_partition() {
    let server = block_in_place(RedisServer::start);
    let mut lax = fast_config();
    lax.redis.url = server.url();
    // Only a wake-up can get the task fired on time: the owner's looks are 30 s apart.
    lax.engine.pull_period = Duration::from_secs(30);
    lax.engine.prefetch_window = Duration::from_secs(30);
    lax.engine.idle_pull_period = Duration::from_secs(60);
    lax.queues.insert("orders".to_owned(), lax.queue_defaults);
    let mut strict = lax.clone();
    strict.redis.wait_replicas = 1;
    strict.redis.wait_timeout = Duration::from_millis(100);
    let recorder = Recorder::new();
    let node = Scheduler::builder(lax.clone())
        .handler("orders", recorder.handler())
        .start()
        .await
        .expect("a node starts");
    let producer = Scheduler::builder(strict)
        .start()
        .await
        .expect("a producer starts");
    wait_for_ownership(std::slice::from_ref(&node), 1).await;
    // The node's first looks at its new partitions are over: from now on it is idle.
    tokio::time::sleep(Duration::from_millis(500)).await;

    let due_ms = node.now_ms() + 1_000;
    let single = producer
        .schedule("orders", "unconfirmed", When::At(due_ms), "")
        .await
        .expect_err("no replica can confirm the schedule");
    assert!(
        single.to_string().contains("replicas confirmed it"),
        "{single}"
    );
    let many = producer
        .schedule_many(
            "orders",
            vec![ScheduleRequest::new(
                "unconfirmed-many",
                When::At(due_ms + 200),
                Bytes::new(),
            )],
        )
        .await
        .expect("the call is answered item by item");
    assert!(
        many[0]
            .as_ref()
            .is_err_and(|error| error.to_string().contains("replicas confirmed it")),
        "{many:?}"
    );
    wait_until(
        Duration::from_secs(10),
        "both unconfirmed tasks fire",
        || recorder.len() == 2,
    )
    .await;
    for firing in recorder.firings() {
        let late = firing.fired_ms.saturating_sub(firing.due_ms);
        assert!(late < 2_000, "{} fired {late} ms late", firing.id);
    }
}

/// `wait_replicas: 1` on a server without replicas: a producer's schedule fails fast with a
/// clear error (the write stays on the master), and a node whose acks cannot be confirmed
/// keeps heartbeating and firing; an unconfirmed ack is done after its one `WAIT` (it is
/// applied on the master: the task does not fire again), not retried while the lease holds.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn wait_replicas_unmet_fails_producers_fast_and_never_stalls_a_node() {
    let server = block_in_place(RedisServer::start);
    let mut lax = fast_config();
    lax.redis.url = server.url();
    let mut strict = lax.clone();
    strict.redis.wait_replicas = 1;
    strict.redis.wait_timeout = Duration::from_millis(100);
    let lease = strict.engine.lease;

    let producer = Scheduler::builder(strict.clone())
        .start()
        .await
        .expect("a producer starts");
    let asked = Instant::now();
    let error = producer
        .schedule(
            "orders",
            "unconfirmed",
            When::In(Duration::from_secs(60)),
            "",
        )
        .await
        .expect_err("no replica can confirm the schedule");
    let took = asked.elapsed();
    let message = error.to_string();
    assert!(took < Duration::from_secs(1), "took {took:?}: {message}");
    assert!(
        message.contains("only 0 of 1 replicas confirmed it within redis.wait_timeout"),
        "{message}"
    );
    let stored = producer
        .get("orders", "unconfirmed")
        .await
        .expect("get")
        .expect("the write stays on the master");
    assert_eq!(stored.id.as_str(), "unconfirmed");

    let recorder = Recorder::new();
    let node = Scheduler::builder(strict.clone())
        .handler("acks", recorder.handler())
        .start()
        .await
        .expect("a node starts");
    let observer = Scheduler::builder(lax.clone())
        .start()
        .await
        .expect("an observer starts");
    eventually(Duration::from_secs(10), "the node joins", || async {
        observer.nodes().await.is_ok_and(|nodes| nodes.len() == 1)
    })
    .await;
    let waits = || script_waits(&server);
    let before = waits();
    observer
        .schedule("acks", "first", When::In(Duration::from_millis(200)), "")
        .await
        .expect("scheduled without waiting");
    wait_until(Duration::from_secs(10), "the task fires", || {
        recorder.len() == 1
    })
    .await;
    let fired_at = Instant::now();
    // The ack is applied on the master; its WAIT sees no replica: one WAIT, and the node
    // counts it done (not retried while the lease holds), heartbeating all along.
    let first = loop {
        let first = observer
            .get("acks", "first")
            .await
            .expect("get")
            .expect("known");
        if format!("{:?}", first.state) == "Done" {
            break first;
        }
        assert!(fired_at.elapsed() < lease / 2, "not acked: {first:?}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    };
    // Its WAIT answers after redis.wait_timeout (100 ms); a retry would send more soon.
    tokio::time::sleep(Duration::from_millis(500)).await;
    let settled_waits = waits();
    let mut ages = Vec::new();
    while fired_at.elapsed() < lease {
        let nodes = observer.nodes().await.expect("nodes");
        assert_eq!(nodes.len(), 1, "the node stays a member: {nodes:?}");
        ages.push(nodes[0].heartbeat_age_ms);
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    let ttl = strict.node.heartbeat_ttl.as_millis() as u64;
    assert!(ages.iter().all(|age| *age < ttl), "heartbeat ages {ages:?}");
    let acked_waits = settled_waits - before;
    assert_eq!(acked_waits, 1, "one WAIT for the ack, no retries");
    assert_eq!(
        waits(),
        settled_waits,
        "the unconfirmed ack was not retried"
    );
    eprintln!(
        "schedule refused after {took:?}: {message}; the ack was done after {acked_waits} \
         WAIT, heartbeat ages {ages:?} ms"
    );
    assert_eq!(format!("{:?}", first.state), "Done", "{first:?}");
    assert_eq!(recorder.len(), 1, "{:?}", recorder.firings());
    // Not stalled: a later task fires too.
    observer
        .schedule("acks", "second", When::In(Duration::from_millis(100)), "")
        .await
        .expect("scheduled");
    wait_until(Duration::from_secs(10), "a later task fires", || {
        recorder.distinct() == 2
    })
    .await;
    for scheduler in [node, observer, producer] {
        let _ = scheduler.shutdown().await;
    }
}

/// `WAIT` calls the server has answered so far.
fn script_waits(server: &RedisServer) -> u64 {
    let info: String = server
        .command(&["INFO", "commandstats"])
        .ok()
        .and_then(|value| delayq_redis::redis::from_redis_value(value).ok())
        .unwrap_or_default();
    topologies_support::calls_of(&info, "wait")
}
