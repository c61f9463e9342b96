//! The Redis backend on a 3-master Redis Cluster: one queue's partitions spread its script
//! calls over every master, the old untagged registry key is found on its own master, scripts
//! a master lost are loaded again, and `wait_replicas` confirms writes on the replicas, or
//! fails quickly when none answers.

use std::collections::HashMap;
use std::time::{Duration, Instant};

use bytes::Bytes;
use delayq_redis::{ConnectOptions, Timeouts, Topology};
use delayq_storage::{
    partition_of, AckOutcome, Cancel, NewTask, Partition, QueueName, RedisStore, RedisStoreOptions,
    ScheduleMode, StorageError, StoreOptions, TaskId, TaskState, TaskStore, WaitReplicas,
};
use delayq_testkit::RedisCluster;
use futures::future::join_all;

const T0: u64 = 1_700_000_000_000;
const PARTITIONS: u32 = 64;

fn options(cluster: &RedisCluster, prefix: &str, wait: Option<WaitReplicas>) -> RedisStoreOptions {
    RedisStoreOptions {
        redis: ConnectOptions::new(Topology::cluster(cluster.seed_urls())).with_timeouts(
            Timeouts {
                start: Duration::from_secs(20),
                ..Timeouts::default()
            },
        ),
        key_prefix: prefix.to_owned(),
        store: StoreOptions::default(),
        wait_replicas: wait,
    }
}

fn task(name: &str, due_ms: u64) -> NewTask {
    NewTask {
        id: TaskId::new(name).expect("valid id"),
        due_ms,
        payload: Bytes::from(format!("payload of {name}")),
        traceparent: None,
    }
}

/// `count` tasks routed to their partitions of `queue` as a producer would.
fn routed(queue: &QueueName, count: u64, due: u64) -> Vec<(Partition, NewTask)> {
    (0..count)
        .map(|n| {
            let task = task(&format!("task-{n}"), due);
            let partition = Partition::new(queue.clone(), partition_of(&task.id, PARTITIONS));
            (partition, task)
        })
        .collect()
}

/// Script calls (`FCALL` and `EVALSHA`) of every master.
fn script_calls(cluster: &RedisCluster) -> HashMap<u16, u64> {
    cluster
        .masters()
        .into_iter()
        .map(|port| {
            let info = cluster.info(port, "commandstats");
            let calls: u64 = ["fcall", "evalsha"]
                .iter()
                .map(|command| delayq_testkit::command_calls(&info, command))
                .sum();
            (port, calls)
        })
        .collect()
}

/// Claims every due task of every partition and acks them concurrently; returns the count.
async fn claim_and_ack_all(store: &RedisStore, queue: &QueueName, now_ms: u64) -> usize {
    let mut fired = 0;
    for index in 0..PARTITIONS {
        let partition = Partition::new(queue.clone(), index);
        let batch = store
            .claim_due(&partition, now_ms, 1_000, now_ms + 60_000, "node")
            .await
            .expect("claim_due");
        let acks = join_all(batch.tasks.iter().map(|task| store.ack(&task.token))).await;
        for ack in acks {
            assert_eq!(ack.expect("ack"), AckOutcome::Completed);
        }
        fired += batch.tasks.len();
    }
    fired
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_queue_of_64_partitions_spreads_its_script_calls_over_the_three_masters() {
    let cluster = tokio::task::spawn_blocking(|| RedisCluster::start(0))
        .await
        .expect("start the cluster");
    // The registry key of releases before `{cluster}` has no hash tag: it lives on the master
    // of its own slot, and is still found and merged there.
    let legacy = "spread:queues";
    assert_ne!(
        cluster.master_of(legacy),
        cluster.master_of("spread:{cluster}:queues"),
        "the two registries on different masters"
    );
    cluster
        .command(cluster.master_of(legacy), &["HSET", legacy, "legacy", "8"])
        .expect("plant the old registry");
    let store = RedisStore::connect(options(&cluster, "spread", None))
        .await
        .expect("connect to the cluster");
    let queue = QueueName::new("orders").expect("valid queue");
    store
        .register_queue(&queue, PARTITIONS)
        .await
        .expect("register");
    let listed = store.queues().await.expect("queues");
    let expected = vec![
        (QueueName::new("legacy").expect("valid queue"), 8),
        (queue.clone(), PARTITIONS),
    ];
    assert_eq!(listed, expected);
    let before = script_calls(&cluster);

    let results = store
        .schedule_many(routed(&queue, 6_400, T0), ScheduleMode::Upsert)
        .await
        .expect("schedule_many");
    assert!(results.iter().all(Result::is_ok), "{results:?}");
    for n in 0..PARTITIONS {
        let partition = Partition::new(queue.clone(), n);
        store
            .schedule(
                &partition,
                task(&format!("single-{n}"), T0),
                ScheduleMode::Upsert,
            )
            .await
            .expect("schedule");
    }
    assert_eq!(claim_and_ack_all(&store, &queue, T0).await, 6_464);

    let after = script_calls(&cluster);
    let calls: HashMap<u16, u64> = after
        .iter()
        .map(|(port, calls)| (*port, calls - before.get(port).copied().unwrap_or(0)))
        .collect();
    let total: u64 = calls.values().sum();
    let shares: Vec<(u16, f64)> = calls
        .iter()
        .map(|(port, calls)| (*port, *calls as f64 / total as f64))
        .collect();
    eprintln!("EVALSHA calls per master: {calls:?} (total {total}); shares {shares:?}");
    assert_eq!(shares.len(), 3, "{shares:?}");
    for (port, share) in &shares {
        assert!(
            (0.25..=0.42).contains(share),
            "master {port} ran {:.1} % of the queue's script calls: {calls:?}",
            share * 100.0
        );
    }
    // Each partition's keys are on the master that serves its hash tag.
    for n in [0, 21, 42, 63] {
        let key = format!("spread:{{orders:{n}}}:done");
        let owner = cluster.master_of(&key);
        let done: u64 = redis::from_redis_value(
            cluster
                .command(owner, &["ZCARD", &key])
                .expect("ZCARD on the key's master"),
        )
        .expect("a count");
        assert!(done > 0, "{key} on {owner}");
    }

    // Every master loses its scripts: bulk and single calls load them again where needed.
    for port in cluster.masters() {
        cluster
            .command(port, &["SCRIPT", "FLUSH"])
            .expect("SCRIPT FLUSH");
    }
    let again = store
        .schedule_many(routed(&queue, 640, T0 + 1), ScheduleMode::Upsert)
        .await
        .expect("schedule_many after SCRIPT FLUSH");
    assert!(again.iter().all(Result::is_ok), "{again:?}");
    assert_eq!(claim_and_ack_all(&store, &queue, T0 + 1).await, 640);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn wait_replicas_confirms_writes_on_the_replicas_and_fails_quickly_without_them() {
    let mut cluster = tokio::task::spawn_blocking(|| RedisCluster::start(1))
        .await
        .expect("start the cluster with replicas");
    // Long enough for an attached replica to confirm on a loaded 2-core machine running six
    // Redis processes (the response timeout is 2 s), short enough for the failing cases.
    let wait = WaitReplicas {
        replicas: 1,
        timeout: Duration::from_millis(800),
    };
    let store = RedisStore::connect(options(&cluster, "wait", Some(wait)))
        .await
        .expect("connect to the cluster");
    let queue = QueueName::new("orders").expect("valid queue");
    store
        .register_queue(&queue, PARTITIONS)
        .await
        .expect("register");

    // With a replica per master, every write is confirmed before it returns.
    let results = store
        .schedule_many(routed(&queue, 640, T0), ScheduleMode::Upsert)
        .await
        .expect("schedule_many");
    assert!(results.iter().all(Result::is_ok), "{results:?}");
    let p = Partition::new(queue.clone(), 7);
    store
        .schedule(&p, task("single", T0), ScheduleMode::Upsert)
        .await
        .expect("schedule");
    store
        .schedule(&p, task("cancelled", T0 + 1_000_000), ScheduleMode::Upsert)
        .await
        .expect("schedule");
    assert_eq!(
        store
            .cancel(&p, &TaskId::new("cancelled").expect("id"))
            .await
            .expect("cancel"),
        Cancel::Cancelled
    );
    assert_eq!(claim_and_ack_all(&store, &queue, T0).await, 641);
    // What returned is on the replica of the partition's master, read there at once.
    let done_key = "wait:{orders:7}:done";
    let master = cluster.master_of(done_key);
    let replica = *cluster
        .replicas_of(master)
        .first()
        .expect("the master has a replica");
    assert_eq!(
        count_on_replica(replica, done_key),
        count_on_replica(master, done_key),
        "every ack WAIT confirmed is on the replica"
    );
    assert!(count_on_replica(replica, done_key) > 0);

    // No replica answers: writes stay on the masters but fail quickly with a clear error.
    let masters = cluster.masters();
    for port in &masters {
        for replica in cluster.replicas_of(*port) {
            cluster.kill(replica);
        }
    }
    // A store starting now (nodes down) still connects and works, without waiting.
    let plain = RedisStore::connect(options(&cluster, "wait", None))
        .await
        .expect("connect with replicas down");
    let stats = plain.stats(&p, T0).await.expect("stats");
    assert_eq!(stats.pending, 0, "{stats:?}");

    let started = Instant::now();
    let error = store
        .schedule(&p, task("unconfirmed", T0), ScheduleMode::Upsert)
        .await
        .expect_err("no replica confirms");
    let took = started.elapsed();
    eprintln!("{error} (after {took:?})");
    assert!(
        matches!(
            error,
            StorageError::ReplicationTimeout {
                operation: "schedule",
                wanted: 1,
                confirmed: 0
            }
        ),
        "{error:?}"
    );
    assert!(error.is_transient());
    assert!(
        took >= wait.timeout && took < wait.timeout + Duration::from_millis(1_500),
        "{took:?}"
    );
    let stored = store
        .get(&p, &TaskId::new("unconfirmed").expect("id"))
        .await
        .expect("get")
        .expect("the write is on the master");
    assert_eq!(stored.state, TaskState::Pending);

    // 64 partitions on three masters: one WAIT per master, in parallel, not one per slot.
    let started = Instant::now();
    let results = store
        .schedule_many(routed(&queue, 64, T0 + 5), ScheduleMode::Upsert)
        .await
        .expect("schedule_many");
    let took = started.elapsed();
    assert!(
        took < wait.timeout * 3,
        "schedule_many took {took:?}: one WAIT per master, in parallel"
    );
    assert!(
        results
            .iter()
            .all(|result| matches!(result, Err(StorageError::ReplicationTimeout { .. }))),
        "{results:?}"
    );
    // An ack that cannot be confirmed fails the same way, and so does its retry.
    let claimed = store
        .claim_due(&p, T0, 1, T0 + 60_000, "node")
        .await
        .expect("claims never wait for replicas")
        .tasks;
    assert_eq!(claimed.len(), 1);
    for attempt in 0..2 {
        let error = store
            .ack(&claimed[0].token)
            .await
            .expect_err("no replica confirms the ack");
        assert!(
            matches!(
                error,
                StorageError::ReplicationTimeout {
                    operation: "ack",
                    ..
                }
            ),
            "attempt {attempt}: {error:?}"
        );
    }
}

/// `ZCARD key` on the node at `port`, reading from a replica (`READONLY`).
fn count_on_replica(port: u16, key: &str) -> u64 {
    let client = redis::Client::open(format!("redis://127.0.0.1:{port}/")).expect("a URL");
    let mut connection = client.get_connection().expect("connect to the node");
    let _: () = redis::cmd("READONLY")
        .query(&mut connection)
        .expect("READONLY");
    redis::cmd("ZCARD")
        .arg(key)
        .query(&mut connection)
        .expect("ZCARD")
}
