//! `delete_queue` on Redis leaves no key of the queue behind, on one server and on every
//! master of a 3-master Redis Cluster: the partitions' keys by name, keys with the queue's tag
//! that only a `SCAN` finds (a partition beyond the count, a key of another kind), and the
//! queue's entries in the registry, the paused set and the legacy registry. Other queues,
//! one whose name starts with the deleted name among them, keep every key.

use std::time::Duration;

use bytes::Bytes;
use delayq_redis::{ConnectOptions, Timeouts, Topology};
use delayq_storage::{
    partition_of, NewTask, Partition, QueueName, RedisStore, RedisStoreOptions, ScheduleMode,
    StoreOptions, TaskId, TaskStore,
};
use delayq_testkit::{RedisCluster, RedisServer};
use redis::Value;

const T0: u64 = 1_700_000_000_000;
const PARTITIONS: u32 = 8;
const QUEUE: &str = "orders";
const LOOKALIKE: &str = "orders-eu";

fn task(name: &str, due_ms: u64) -> NewTask {
    NewTask {
        id: TaskId::new(name).expect("valid id"),
        due_ms,
        payload: Bytes::from(format!("payload of {name}")),
        traceparent: None,
    }
}

/// The keys of a `KEYS *` reply.
fn key_names(reply: Value) -> Vec<String> {
    redis::from_redis_value(reply).expect("KEYS returns names")
}

/// Fills `orders` (40 tasks over 8 partitions: 38 pending, one in flight, one dead; one
/// done; paused) and `orders-eu` (10 pending), plus keys the store did not write:
/// `{orders:9}:due` with a task (a partition beyond the count), `{orders:extra}:note`, and
/// `orders` in the legacy registry. `raw(key, args)` runs a command on the master of `key`.
async fn fill(store: &RedisStore, prefix: &str, raw: &dyn Fn(&str, &[&str])) {
    let queue = QueueName::new(QUEUE).expect("name");
    let lookalike = QueueName::new(LOOKALIKE).expect("name");
    store
        .register_queue(&queue, PARTITIONS)
        .await
        .expect("register");
    store
        .register_queue(&lookalike, PARTITIONS)
        .await
        .expect("register");
    let mut items = Vec::new();
    for n in 0..40 {
        let task = task(&format!("task-{n}"), T0 + 60_000);
        let partition = Partition::new(queue.clone(), partition_of(&task.id, PARTITIONS));
        items.push((partition, task));
    }
    for n in 0..10 {
        let task = task(&format!("task-{n}"), T0 + 60_000);
        let partition = Partition::new(lookalike.clone(), partition_of(&task.id, PARTITIONS));
        items.push((partition, task));
    }
    for result in store
        .schedule_many(items, ScheduleMode::Upsert)
        .await
        .expect("schedule_many")
    {
        result.expect("scheduled");
    }
    // One in flight, one dead, one done: three more due now, claimed one at a time.
    let id = TaskId::new("special").expect("id");
    let partition = Partition::new(queue.clone(), partition_of(&id, PARTITIONS));
    for (name, _) in [("inflight", 0), ("dead", 1), ("done", 2)] {
        store
            .schedule(&partition, task(name, T0), ScheduleMode::Upsert)
            .await
            .expect("schedule");
        let batch = store
            .claim_due(&partition, T0, 1, T0 + 600_000, "test")
            .await
            .expect("claim");
        let claimed = batch.tasks.into_iter().next().expect("one claimed");
        match name {
            "dead" => {
                store
                    .fail(
                        &claimed.token,
                        "boom",
                        delayq_storage::FailAction::DeadLetter,
                    )
                    .await
                    .expect("fail");
            }
            "done" => {
                store.ack(&claimed.token).await.expect("ack");
            }
            _ => {}
        }
    }
    store
        .set_paused(&queue, PARTITIONS, true)
        .await
        .expect("pause");
    let ghost = format!("{prefix}:{{{QUEUE}:9}}:due");
    raw(&ghost, &["ZADD", &ghost, &T0.to_string(), "ghost"]);
    let note = format!("{prefix}:{{{QUEUE}:extra}}:note");
    raw(&note, &["SET", &note, "left by outside tooling"]);
    let legacy = format!("{prefix}:queues");
    raw(&legacy, &["HSET", &legacy, QUEUE, "8"]);
}

/// Deletes `orders` and checks what `keys()` (every key of every master) and the registries
/// hold afterwards.
async fn delete_and_check(
    store: &RedisStore,
    prefix: &str,
    keys: &dyn Fn() -> Vec<String>,
    hkeys: &dyn Fn(&str) -> Vec<String>,
) {
    let before = keys();
    let tag = format!("{prefix}:{{{QUEUE}:");
    let lookalike_tag = format!("{prefix}:{{{LOOKALIKE}:");
    assert!(before.iter().any(|key| key.starts_with(&tag)), "{before:?}");
    let lookalike_before: Vec<&String> = before
        .iter()
        .filter(|key| key.starts_with(&lookalike_tag))
        .collect();
    assert!(!lookalike_before.is_empty());

    let queue = QueueName::new(QUEUE).expect("name");
    let removed = store
        .delete_queue(&queue, PARTITIONS)
        .await
        .expect("delete_queue");
    // 40 pending + the in-flight one + the dead one + the ghost beyond the count.
    assert_eq!(removed, 43);

    let after = keys();
    let left: Vec<&String> = after.iter().filter(|key| key.starts_with(&tag)).collect();
    assert!(left.is_empty(), "keys of the deleted queue left: {left:?}");
    let lookalike_after: Vec<&String> = after
        .iter()
        .filter(|key| key.starts_with(&lookalike_tag))
        .collect();
    assert_eq!(
        lookalike_after, lookalike_before,
        "the other queue keeps its keys"
    );
    for registry in [
        format!("{prefix}:{{cluster}}:queues"),
        format!("{prefix}:{{cluster}}:paused"),
        format!("{prefix}:queues"),
    ] {
        let fields = hkeys(&registry);
        assert!(
            !fields.iter().any(|field| field == QUEUE),
            "{registry}: {fields:?}"
        );
    }
    assert_eq!(
        hkeys(&format!("{prefix}:{{cluster}}:queues")),
        [LOOKALIKE.to_owned()]
    );
    let queues = store.queues().await.expect("queues");
    assert_eq!(queues.len(), 1);
    assert_eq!(queues[0].0.as_str(), LOOKALIKE);
}

#[tokio::test]
async fn delete_leaves_no_key_of_the_queue_on_one_server() {
    let server = RedisServer::start();
    let prefix = "qdel";
    let store = RedisStore::connect(RedisStoreOptions {
        key_prefix: prefix.to_owned(),
        ..RedisStoreOptions::standalone(server.url())
    })
    .await
    .expect("connect");
    let raw = |_key: &str, args: &[&str]| {
        server.command(args).expect("raw command");
    };
    fill(&store, prefix, &raw).await;
    let keys = || {
        let mut all = key_names(server.command(&["KEYS", "*"]).expect("KEYS"));
        all.sort();
        all
    };
    let hkeys = |key: &str| key_names(server.command(&["HKEYS", key]).expect("HKEYS"));
    delete_and_check(&store, prefix, &keys, &hkeys).await;
}

#[tokio::test]
async fn delete_leaves_no_key_of_the_queue_on_any_master_of_a_cluster() {
    let cluster = RedisCluster::start(0);
    // A prefix with glob characters: the sweep must escape it.
    let prefix = "qdel[1]*";
    let store = RedisStore::connect(RedisStoreOptions {
        redis: ConnectOptions::new(Topology::cluster(cluster.seed_urls())).with_timeouts(
            Timeouts {
                start: Duration::from_secs(20),
                ..Timeouts::default()
            },
        ),
        key_prefix: prefix.to_owned(),
        store: StoreOptions::default(),
        wait_replicas: None,
    })
    .await
    .expect("connect to the cluster");
    let raw = |key: &str, args: &[&str]| {
        cluster
            .command(cluster.master_of(key), args)
            .expect("raw command");
    };
    fill(&store, prefix, &raw).await;
    let keys = || {
        let mut all = Vec::new();
        for port in cluster.masters() {
            all.extend(key_names(
                cluster.command(port, &["KEYS", "*"]).expect("KEYS"),
            ));
        }
        all.sort();
        all
    };
    // The partitions really are spread: more than one master holds keys of the queue.
    let holding = cluster
        .masters()
        .into_iter()
        .filter(|&port| {
            key_names(cluster.command(port, &["KEYS", "*"]).expect("KEYS"))
                .iter()
                .any(|key| key.starts_with(&format!("{prefix}:{{{QUEUE}:")))
        })
        .count();
    assert!(holding > 1, "the queue's keys sit on {holding} master(s)");
    let hkeys = |key: &str| {
        key_names(
            cluster
                .command(cluster.master_of(key), &["HKEYS", key])
                .expect("HKEYS"),
        )
    };
    delete_and_check(&store, prefix, &keys, &hkeys).await;
}
