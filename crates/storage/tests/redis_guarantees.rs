//! Guarantees of the Redis backend that the memory twin has no counterpart for: Redis `TIME`
//! bounds claims and lease expiry (guarantee 9), and the queue registry's `{cluster}` key,
//! its upgrade from the old key, and its tolerance of bad entries.

use std::time::{SystemTime, UNIX_EPOCH};

use bytes::Bytes;
use delayq_storage::{
    NewTask, Partition, QueueName, RedisStore, RedisStoreOptions, ScheduleMode, StoreOptions,
    TaskId, TaskState, TaskStore,
};
use delayq_testkit::RedisServer;

fn options(url: String) -> RedisStoreOptions {
    RedisStoreOptions {
        key_prefix: "g".to_owned(),
        store: StoreOptions::default(),
        ..RedisStoreOptions::standalone(url)
    }
}

async fn start() -> (RedisServer, RedisStore) {
    let server = tokio::task::spawn_blocking(RedisServer::start)
        .await
        .expect("start redis-server");
    let store = RedisStore::connect(options(server.url()))
        .await
        .expect("connect");
    (server, store)
}

async fn partition(store: &RedisStore) -> Partition {
    let queue = QueueName::new("q").expect("valid queue");
    store.register_queue(&queue, 1).await.expect("register");
    Partition::new(queue, 0)
}

/// Redis `TIME` in milliseconds, read through the server.
fn redis_now_ms(server: &RedisServer) -> u64 {
    let mut connection = server.client().get_connection().expect("connect");
    let (seconds, micros): (u64, u64) = redis::cmd("TIME").query(&mut connection).expect("TIME");
    seconds * 1_000 + micros / 1_000
}

fn wall_now_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|elapsed| elapsed.as_millis() as u64)
        .unwrap_or(0)
}

fn task(name: &str, due_ms: u64) -> NewTask {
    NewTask {
        id: TaskId::new(name).expect("valid id"),
        due_ms,
        payload: Bytes::from_static(b"p"),
        traceparent: None,
    }
}

#[tokio::test]
async fn a_claim_with_a_clock_far_ahead_never_takes_a_task_before_its_due_on_redis_time() {
    let (server, store) = start().await;
    let p = partition(&store).await;
    let due = redis_now_ms(&server) + 5_000;
    store
        .schedule(&p, task("soon", due), ScheduleMode::Upsert)
        .await
        .expect("schedule");
    // A node whose clock stepped 10 s ahead believes the task is due.
    let stepped_now = wall_now_ms() + 10_000;
    let batch = store
        .claim_due(&p, stepped_now, 10, stepped_now + 30_000, "stepped")
        .await
        .expect("claim");
    assert!(
        batch.tasks.is_empty(),
        "claimed {:?} before its due",
        batch.tasks
    );
    assert_eq!(batch.next_due_ms, Some(due));
    let info = store
        .get(&p, &TaskId::new("soon").expect("id"))
        .await
        .expect("get")
        .expect("still there");
    assert_eq!(info.state, TaskState::Pending);
}

#[tokio::test]
async fn requeue_expired_with_a_clock_far_ahead_leaves_healthy_leases_alone() {
    let (server, store) = start().await;
    let p = partition(&store).await;
    let now = redis_now_ms(&server);
    store
        .schedule(&p, task("running", now - 1), ScheduleMode::Upsert)
        .await
        .expect("schedule");
    let claimed = store
        .claim_due(&p, now, 10, now + 30_000, "healthy")
        .await
        .expect("claim");
    assert_eq!(claimed.tasks.len(), 1);
    // Another node whose clock stepped a minute ahead sweeps for lapsed leases.
    let requeued = store
        .requeue_expired(&p, now + 60_000, 100)
        .await
        .expect("requeue");
    assert!(
        requeued.is_empty(),
        "requeued a healthy lease: {requeued:?}"
    );
    assert_eq!(
        store
            .ack(&claimed.tasks[0].token)
            .await
            .expect("the healthy handler still holds its lease"),
        delayq_storage::AckOutcome::Completed
    );
}

#[tokio::test]
async fn the_registry_lives_in_the_cluster_slot_and_skips_a_bad_entry() {
    let (server, store) = start().await;
    partition(&store).await;
    let recorded = server
        .command(&["HGET", "g:{cluster}:queues", "q"])
        .expect("HGET");
    assert_eq!(recorded, redis::Value::BulkString(b"1".to_vec()));
    for (name, count) in [("bad:name", "4"), ("zero", "0"), ("words", "many")] {
        server
            .command(&["HSET", "g:{cluster}:queues", name, count])
            .expect("plant a bad entry");
    }
    let later = QueueName::new("later").expect("valid");
    store.register_queue(&later, 8).await.expect("register");
    let queues = store.queues().await.expect("one bad entry hides nothing");
    let names: Vec<_> = queues.iter().map(|(q, n)| (q.to_string(), *n)).collect();
    assert_eq!(names, [("later".to_owned(), 8), ("q".to_owned(), 1)]);
}

#[tokio::test]
async fn queues_of_the_old_registry_key_are_merged_once_on_upgrade() {
    let server = tokio::task::spawn_blocking(RedisServer::start)
        .await
        .expect("start redis-server");
    // What a release before the {cluster} slot wrote.
    server
        .command(&["HSET", "g:queues", "legacy", "16", "shared", "4"])
        .expect("plant the old registry");
    server
        .command(&["HSET", "g:{cluster}:queues", "shared", "4"])
        .expect("one queue in both");
    let store = RedisStore::connect(options(server.url()))
        .await
        .expect("connect");
    let queues = store.queues().await.expect("queues");
    let names: Vec<_> = queues.iter().map(|(q, n)| (q.to_string(), *n)).collect();
    assert_eq!(names, [("legacy".to_owned(), 16), ("shared".to_owned(), 4)]);
    let legacy = QueueName::new("legacy").expect("valid");
    assert!(
        store.register_queue(&legacy, 8).await.is_err(),
        "the old record of 16 partitions still binds"
    );
    assert_eq!(
        store.register_queue(&legacy, 16).await.expect("same count"),
        16
    );
}

/// A burst of single schedules of large payloads into one partition: the coalescing batcher
/// cuts them into script calls of at most 8 MiB (as `schedule_many` cuts its rounds), and
/// every one lands. Redis's slow log (every command, with its argument count) shows how many
/// items each `schedule.lua` call carried. Before the byte cap the schedules that waited
/// behind the first went as one call (39 items, 39 MB here), blocking Redis for as long.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_burst_of_large_single_schedules_is_sent_in_calls_under_8_mib() {
    const TASKS: usize = 40;
    const PAYLOAD: usize = 1_000_000;
    /// `FCALL name 9 <9 keys> mode retention count`, then 4 arguments per item (id, due,
    /// payload, traceparent).
    const CALL_ARGS: usize = 15;
    let (server, store) = start().await;
    let mut connection = server.client().get_connection().expect("connect");
    for (name, value) in [
        ("slowlog-log-slower-than", "0"),
        ("slowlog-max-len", "10000"),
    ] {
        let () = redis::cmd("CONFIG")
            .arg("SET")
            .arg(name)
            .arg(value)
            .query(&mut connection)
            .expect("CONFIG SET");
    }
    let p = partition(&store).await;
    let now = redis_now_ms(&server);
    let tasks: Vec<NewTask> = (0..TASKS)
        .map(|index| NewTask {
            id: TaskId::new(format!("big-{index}")).expect("valid id"),
            due_ms: now + 600_000,
            payload: Bytes::from(vec![b'a' + (index % 26) as u8; PAYLOAD]),
            traceparent: None,
        })
        .collect();
    let schedules = tasks.into_iter().map(|task| {
        let store = store.clone();
        let p = p.clone();
        tokio::spawn(async move { store.schedule(&p, task, ScheduleMode::Upsert).await })
    });
    for (index, outcome) in futures::future::join_all(schedules)
        .await
        .into_iter()
        .enumerate()
    {
        let outcome = outcome.expect("no panic");
        assert!(
            matches!(outcome, Ok(delayq_storage::ScheduleOutcome::Created)),
            "schedule {index}: {outcome:?}"
        );
    }
    for index in 0..TASKS {
        let id = TaskId::new(format!("big-{index}")).expect("valid id");
        let info = store.get(&p, &id).await.expect("get").expect("stored");
        assert_eq!(info.state, TaskState::Pending);
        assert_eq!(info.payload.len(), PAYLOAD, "{id}");
        assert_eq!(info.payload[0], b'a' + (index % 26) as u8, "{id}");
    }
    // Items per schedule call, from the slow log's argument lists (the first 31 arguments,
    // then "... (N more arguments)").
    let log: Vec<redis::Value> = redis::cmd("SLOWLOG")
        .arg("GET")
        .arg(-1)
        .query(&mut connection)
        .expect("SLOWLOG GET");
    let text = |value: &redis::Value| match value {
        redis::Value::BulkString(bytes) => String::from_utf8_lossy(bytes).into_owned(),
        redis::Value::SimpleString(text) => text.clone(),
        _ => String::new(),
    };
    let mut per_call = Vec::new();
    for entry in &log {
        let redis::Value::Array(fields) = entry else {
            continue;
        };
        let Some(redis::Value::Array(args)) = fields.get(3) else {
            continue;
        };
        let args: Vec<String> = args.iter().map(text).collect();
        // FCALL (or EVALSHA) name 9 <9 keys> upsert <retention> <count> (id due payload
        // traceparent)...: one partition per call here.
        let is_schedule = args.first().is_some_and(|name| {
            name.eq_ignore_ascii_case("fcall") || name.eq_ignore_ascii_case("evalsha")
        }) && args.get(2).map(String::as_str) == Some("9")
            && args.get(12).map(String::as_str) == Some("upsert");
        if !is_schedule {
            continue;
        }
        let count = match args.last().and_then(|last| {
            let more = last
                .strip_prefix("... (")?
                .strip_suffix(" more arguments)")?;
            more.parse::<usize>().ok()
        }) {
            Some(more) => args.len() - 1 + more,
            None => args.len(),
        };
        per_call.push((count - CALL_ARGS) / 4);
    }
    eprintln!("items per schedule call: {per_call:?}");
    assert_eq!(per_call.iter().sum::<usize>(), TASKS, "{per_call:?}");
    // 8 items of 1,000,000 bytes fit in 8 MiB, 9 do not.
    assert!(
        per_call.iter().all(|&items| items <= 8),
        "a call carried more than 8 MiB: {per_call:?}"
    );
    assert!(
        per_call.iter().any(|&items| items > 1),
        "the waiting schedules were still coalesced: {per_call:?}"
    );
}
