//! `wait_replicas` on one server: without a replica a write fails quickly with
//! `ReplicationTimeout` (the write stays on the master); an ack that could not be confirmed is
//! retried with its token and completes once a replica confirms it; claims never wait.

use std::time::{Duration, Instant};

use bytes::Bytes;
use delayq_storage::{
    AckOutcome, Cancel, NewTask, Partition, QueueName, RedisStore, RedisStoreOptions, ScheduleMode,
    StorageError, TaskId, TaskState, TaskStore, WaitReplicas,
};
use delayq_testkit::RedisServer;

const T0: u64 = 1_700_000_000_000;
/// Long enough that a WAIT with a replica attached answers in time on a loaded 2-core CI
/// machine (200 ms was not), short enough to keep the failing cases quick.
const WAIT: Duration = Duration::from_millis(1_000);

fn task(name: &str, due_ms: u64) -> NewTask {
    NewTask {
        id: TaskId::new(name).expect("valid id"),
        due_ms,
        payload: Bytes::from(format!("payload of {name}")),
        traceparent: None,
    }
}

fn id(name: &str) -> TaskId {
    TaskId::new(name).expect("valid id")
}

fn assert_unconfirmed<T: std::fmt::Debug>(
    result: Result<T, StorageError>,
    operation: &str,
    took: Duration,
) {
    match result {
        Err(StorageError::ReplicationTimeout {
            operation: named,
            wanted: 1,
            confirmed: 0,
        }) if named == operation => {}
        other => panic!("{operation}: expected ReplicationTimeout, got {other:?}"),
    }
    assert!(
        took >= WAIT && took < WAIT + Duration::from_millis(1_500),
        "{operation} failed after {took:?}, not about redis.wait_timeout"
    );
}

/// Polls until the master at `server` reports `replicas` replicas online.
async fn replicas_online(server: &RedisServer, replicas: usize) {
    let deadline = Instant::now() + Duration::from_secs(15);
    loop {
        let info: String = server
            .command(&["INFO", "replication"])
            .ok()
            .and_then(|value| redis::from_redis_value(value).ok())
            .unwrap_or_default();
        let online = info
            .lines()
            .filter(|line| line.starts_with("slave") && line.contains("state=online"))
            .count();
        if online >= replicas {
            return;
        }
        assert!(Instant::now() < deadline, "no replica online: {info}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_a_replica_writes_fail_quickly_and_an_unconfirmed_ack_completes_once_one_confirms()
{
    let master = tokio::task::spawn_blocking(RedisServer::start)
        .await
        .expect("start redis-server");
    let store = RedisStore::connect(RedisStoreOptions {
        wait_replicas: Some(WaitReplicas {
            replicas: 1,
            timeout: WAIT,
        }),
        ..RedisStoreOptions::standalone(master.url())
    })
    .await
    .expect("connect");
    let queue = QueueName::new("q").expect("valid queue");
    store.register_queue(&queue, 1).await.expect("register");
    let p = Partition::new(queue, 0);

    let started = Instant::now();
    let result = store
        .schedule(&p, task("a", T0), ScheduleMode::Upsert)
        .await;
    assert_unconfirmed(result, "schedule", started.elapsed());
    let stored = store.get(&p, &id("a")).await.expect("get").expect("stored");
    assert_eq!(
        stored.state,
        TaskState::Pending,
        "the write is on the master"
    );

    let started = Instant::now();
    let results = store
        .schedule_many(
            vec![(p.clone(), task("b", T0)), (p.clone(), task("c", T0 + 1))],
            ScheduleMode::Upsert,
        )
        .await
        .expect("per-item results");
    let took = started.elapsed();
    for result in results {
        assert_unconfirmed(result, "schedule_many", took);
    }
    let started = Instant::now();
    let result = store.cancel(&p, &id("c")).await;
    assert_unconfirmed(result, "cancel", started.elapsed());

    // Claims never wait for replicas.
    let started = Instant::now();
    let claimed = store
        .claim_due(&p, T0, 10, T0 + 60_000, "node")
        .await
        .expect("claim")
        .tasks;
    assert!(started.elapsed() < WAIT, "a claim waited for replicas");
    assert_eq!(claimed.len(), 2);
    let token = claimed[0].token.clone();
    for attempt in 0..2 {
        let started = Instant::now();
        let result = store.ack(&token).await;
        assert_unconfirmed(result, "ack", started.elapsed());
        let done = store.get(&p, &token.id).await.expect("get").expect("kept");
        assert_eq!(
            done.state,
            TaskState::Done,
            "attempt {attempt}: applied once"
        );
    }

    // A replica attaches: the retried ack is confirmed and reports the first outcome.
    let replica = tokio::task::spawn_blocking(RedisServer::start)
        .await
        .expect("start the replica");
    // Redis waits 5 s for more replicas before a diskless sync by default.
    master
        .command(&["CONFIG", "SET", "repl-diskless-sync-delay", "0"])
        .expect("CONFIG SET");
    replica
        .command(&["REPLICAOF", "127.0.0.1", &master.port().to_string()])
        .expect("REPLICAOF");
    replicas_online(&master, 1).await;
    assert_eq!(
        store.ack(&token).await.expect("confirmed now"),
        AckOutcome::Completed
    );
    assert_eq!(
        store.ack(&token).await.map_err(|error| error.to_string()),
        Err(format!(
            "stale lease on task {:?} in {}: the task was requeued or claimed again",
            token.id.as_str(),
            token.partition
        )),
        "once confirmed, the token is an ordinary stale one"
    );
    assert_eq!(
        store
            .schedule(&p, task("d", T0), ScheduleMode::Upsert)
            .await
            .expect("confirmed"),
        delayq_storage::ScheduleOutcome::Created
    );
    assert_eq!(
        store.cancel(&p, &id("d")).await.expect("confirmed"),
        Cancel::Cancelled
    );
    let other = claimed[1].token.clone();
    assert_eq!(
        store.ack(&other).await.expect("confirmed"),
        AckOutcome::Completed
    );
    // What returned is on the replica.
    let on_replica: Option<Vec<u8>> = redis::from_redis_value(
        replica
            .command(&["HGET", "delayq:{q:0}:tasks", other.id.as_str()])
            .expect("HGET on the replica"),
    )
    .expect("a record");
    assert!(on_replica.is_some(), "the confirmed ack is on the replica");
}

#[tokio::test]
async fn a_wait_timeout_not_below_the_response_timeout_is_refused_at_connect() {
    let server = tokio::task::spawn_blocking(RedisServer::start)
        .await
        .expect("start redis-server");
    let error = RedisStore::connect(RedisStoreOptions {
        wait_replicas: Some(WaitReplicas {
            replicas: 1,
            timeout: Duration::from_secs(5),
        }),
        ..RedisStoreOptions::standalone(server.url())
    })
    .await
    .expect_err("WAIT would outlive the response timeout");
    let message = error.to_string();
    assert!(message.contains("redis.wait_timeout"), "{message}");
    assert!(!error.is_transient());
}
