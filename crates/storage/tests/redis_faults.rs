//! The Redis backend when things go wrong: Redis unreachable, killed, restarted; records
//! corrupted behind our back; scripts and the Functions library flushed; leases lost.

use std::future::Future;
use std::io::Read;
use std::net::TcpListener;
use std::time::{Duration, Instant};

use bytes::Bytes;
use delayq_redis::{ConnectOptions, Timeouts, Topology};
use delayq_storage::{
    AckOutcome, FailAction, NewTask, Partition, QueueName, RedisStore, RedisStoreOptions,
    ScheduleMode, ScheduleOutcome, StorageError, StoreOptions, TaskId, TaskState, TaskStore,
};
use delayq_testkit::{free_port, RedisOptions, RedisServer};

const T0: u64 = 1_700_000_000_000;

/// Short timeouts, so the failure cases stay fast: connecting gives up after 500 ms.
fn options(url: String) -> RedisStoreOptions {
    RedisStoreOptions {
        redis: ConnectOptions::new(Topology::standalone(url)).with_timeouts(Timeouts {
            connect: Duration::from_millis(500),
            response: Duration::from_millis(500),
            start: Duration::from_millis(500),
            failover: Duration::from_secs(2),
        }),
        key_prefix: "faults".to_owned(),
        store: StoreOptions::default(),
        wait_replicas: None,
    }
}

async fn start(redis: RedisOptions) -> (RedisServer, RedisStore, Partition) {
    let server = tokio::task::spawn_blocking(move || RedisServer::start_with(redis))
        .await
        .expect("start redis-server");
    let store = RedisStore::connect(options(server.url()))
        .await
        .expect("connect");
    let queue = QueueName::new("q").expect("valid queue");
    store.register_queue(&queue, 1).await.expect("register");
    (server, store, Partition::new(queue, 0))
}

/// A server and a store that uses Redis Functions or not, whatever the environment says.
async fn start_with_functions(functions: bool) -> (RedisServer, RedisStore, Partition) {
    let server = tokio::task::spawn_blocking(RedisServer::start)
        .await
        .expect("start redis-server");
    let mut settings = options(server.url());
    settings.redis = settings.redis.with_functions(functions);
    let store = RedisStore::connect(settings).await.expect("connect");
    let queue = QueueName::new("q").expect("valid queue");
    store.register_queue(&queue, 1).await.expect("register");
    (server, store, Partition::new(queue, 0))
}

/// Restarts the server (same port and directory) off the async runtime.
async fn restart(mut server: RedisServer) -> RedisServer {
    tokio::task::spawn_blocking(move || {
        server.restart();
        server
    })
    .await
    .expect("restart redis-server")
}

/// Schedules `<prefix>-0..count` with `schedule_many`; every item must be stored.
async fn schedule_all(
    store: &RedisStore,
    p: &Partition,
    prefix: &str,
    count: u64,
    due: impl Fn(u64) -> u64,
) {
    let items: Vec<_> = (0..count)
        .map(|n| (p.clone(), task(&format!("{prefix}-{n}"), due(n))))
        .collect();
    let results = store
        .schedule_many(items, ScheduleMode::Upsert)
        .await
        .expect("schedule_many");
    assert!(results.iter().all(|result| result.is_ok()), "{results:?}");
}

fn task(name: &str, due_ms: u64) -> NewTask {
    NewTask {
        id: id(name),
        due_ms,
        payload: Bytes::from(format!("payload of {name}")),
        traceparent: None,
    }
}

fn id(name: &str) -> TaskId {
    TaskId::new(name).expect("valid id")
}

fn assert_transient<T: std::fmt::Debug>(result: Result<T, StorageError>, what: &str) {
    match result {
        Err(error) if error.is_transient() => {}
        other => panic!("{what}: expected ConnectionLost or Timeout, got {other:?}"),
    }
}

/// Polls `attempt` until it succeeds or `within` runs out.
async fn eventually<T, F, Fut>(within: Duration, what: &str, mut attempt: F) -> T
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Result<T, StorageError>>,
{
    let deadline = Instant::now() + within;
    loop {
        match attempt().await {
            Ok(value) => return value,
            Err(error) => assert!(
                Instant::now() < deadline,
                "{what} still failing after {within:?}: {error}"
            ),
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

#[tokio::test]
async fn unreachable_redis_at_start_is_a_clear_typed_error_within_the_connect_timeout() {
    let port = free_port();
    let url = format!("redis://user:hunter2@127.0.0.1:{port}/0");
    let started = Instant::now();
    let error = RedisStore::connect(options(url))
        .await
        .expect_err("nothing listens there");
    assert!(
        started.elapsed() < Duration::from_millis(1_500),
        "took {:?}",
        started.elapsed()
    );
    assert!(
        matches!(error, StorageError::ConnectionLost { .. }),
        "{error:?}"
    );
    let message = error.to_string();
    assert!(
        message.contains(&format!("127.0.0.1:{port}")),
        "names the URL: {message}"
    );
    assert!(
        !message.contains("hunter2"),
        "leaks the password: {message}"
    );
}

#[tokio::test]
async fn a_server_that_never_answers_is_a_timeout_within_the_connect_timeout() {
    let listener = TcpListener::bind("127.0.0.1:0").expect("bind");
    let port = listener.local_addr().expect("address").port();
    // Accept and hold connections without ever replying.
    std::thread::spawn(move || {
        let mut held = Vec::new();
        for mut stream in listener.incoming().flatten().take(4) {
            let mut buffer = [0u8; 256];
            let _ = stream.set_read_timeout(Some(Duration::from_millis(10)));
            let _ = stream.read(&mut buffer);
            held.push(stream);
        }
        std::thread::sleep(Duration::from_secs(5));
    });
    let started = Instant::now();
    let error = RedisStore::connect(options(format!("redis://127.0.0.1:{port}/0")))
        .await
        .expect_err("no answer");
    assert!(matches!(error, StorageError::Timeout { .. }), "{error:?}");
    assert!(
        started.elapsed() < Duration::from_millis(1_500),
        "took {:?}",
        started.elapsed()
    );
}

#[tokio::test]
async fn redis_killed_mid_run_gives_typed_errors_then_works_again_after_restart() {
    let (mut server, store, p) = start(RedisOptions::default()).await;
    store
        .schedule(&p, task("before", T0), ScheduleMode::Upsert)
        .await
        .expect("schedule while up");

    server.stop();
    assert_transient(
        store
            .schedule(&p, task("during", T0), ScheduleMode::Upsert)
            .await,
        "schedule",
    );
    assert_transient(store.get(&p, &id("before")).await, "get");
    assert_transient(
        store.claim_due(&p, T0, 10, T0 + 1_000, "node").await,
        "claim_due",
    );
    let items = vec![(p.clone(), task("x", T0)), (p.clone(), task("y", T0))];
    let results = store
        .schedule_many(items, ScheduleMode::Upsert)
        .await
        .expect("per-item results");
    assert_eq!(results.len(), 2);
    for result in results {
        assert_transient(result, "schedule_many item");
    }

    let _server = restart(server).await;
    let outcome = eventually(Duration::from_secs(15), "schedule after restart", || {
        store.schedule(&p, task("after", T0), ScheduleMode::Upsert)
    })
    .await;
    assert_eq!(
        outcome,
        ScheduleOutcome::Created,
        "no AOF: the server came back empty"
    );
    // The firing path has its own connection, which reconnects on its own schedule.
    let claimed = eventually(
        Duration::from_secs(15),
        "claim after restart (scripts loaded again)",
        || store.claim_due(&p, T0, 10, T0 + 1_000, "node"),
    )
    .await;
    assert_eq!(claimed.tasks.len(), 1);
    assert_eq!(
        store.ack(&claimed.tasks[0].token).await.expect("ack"),
        AckOutcome::Completed
    );
}

#[tokio::test]
async fn acknowledged_schedules_survive_a_restart_with_aof() {
    let (server, store, p) = start(RedisOptions {
        aof: true,
        ..Default::default()
    })
    .await;
    schedule_all(&store, &p, "bulk", 300, |n| T0 + n).await;
    store
        .schedule(&p, task("single", T0 - 5), ScheduleMode::Upsert)
        .await
        .expect("schedule");

    let server = restart(server).await;
    let stats = eventually(Duration::from_secs(15), "stats after restart", || {
        store.stats(&p, T0 + 1_000)
    })
    .await;
    assert_eq!(stats.pending, 301);
    let single = store
        .get(&p, &id("single"))
        .await
        .expect("get")
        .expect("survived");
    assert_eq!(
        (single.state, single.due_ms, single.payload),
        (TaskState::Pending, T0 - 5, Bytes::from("payload of single"))
    );
    let claimed = store
        .claim_due(&p, T0 + 1_000, 1_000, T0 + 60_000, "node")
        .await
        .expect("claim");
    assert_eq!(claimed.tasks.len(), 301);
    drop(server);
}

#[tokio::test]
async fn a_corrupt_record_is_reported_by_get_and_dead_lettered_by_claim_with_the_reason() {
    let (server, store, p) = start(RedisOptions::default()).await;
    let key = "faults:{q:0}:tasks";
    let assert_corrupt = |result: Result<_, StorageError>, what: &str, needle: &str| match result {
        Err(StorageError::CorruptRecord {
            key: found_key,
            field,
            reason,
        }) => {
            assert_eq!(found_key, key, "{what}");
            assert_eq!(field, "bad", "{what}");
            assert!(reason.contains(needle), "{what}: {reason}");
        }
        other => panic!("{what}: expected CorruptRecord, got {other:?}"),
    };
    // Garbage, and a record written by a future release: get refuses them by name; a claim
    // moves them to the dead letters with the reason and claims the others (guarantee 8).
    for (round, (planted, needle)) in [
        ("garbage", "not a delayq record"),
        ("9|whatever the future holds", "unknown record version 9"),
    ]
    .into_iter()
    .enumerate()
    {
        let good = format!("good-{round}");
        for (name, due) in [("bad", T0), (good.as_str(), T0 + 1)] {
            store
                .schedule(&p, task(name, due), ScheduleMode::Upsert)
                .await
                .expect("schedule");
        }
        server
            .command(&["HSET", key, "bad", planted])
            .expect("plant a corrupt record");
        assert_corrupt(store.get(&p, &id("bad")).await.map(|_| ()), "get", needle);
        let claim = store
            .claim_due(&p, T0 + 10, 10, T0 + 60_000, "node")
            .await
            .expect("a poison pill never fails the claim");
        let claimed: Vec<_> = claim.tasks.iter().map(|t| t.id.to_string()).collect();
        assert_eq!(claimed.len(), 1, "{planted}: {claimed:?}");
        assert_eq!(claimed[0], good, "{planted}: the others are claimed");
        assert_eq!(claim.dead_lettered.len(), 1, "{planted}");
        assert_eq!(claim.dead_lettered[0].0, id("bad"));
        assert!(
            claim.dead_lettered[0].1.contains(needle),
            "{:?}",
            claim.dead_lettered
        );
        let dead = store.get(&p, &id("bad")).await.expect("get").expect("dead");
        assert_eq!(dead.state, TaskState::Dead);
        let error = dead.last_error.expect("the reason");
        assert!(
            error.contains(needle) && error.contains("undecodable"),
            "{error}"
        );
        assert_eq!(
            dead.payload,
            Bytes::from(planted),
            "the record as it was is kept"
        );
        let listed = store.list_dead(&p, 10).await.expect("list_dead");
        assert_eq!(listed.len(), 1);
        assert_eq!(
            store.purge_dead(&p, Some(&id("bad"))).await.expect("purge"),
            1
        );
    }
    // schedule_many still refuses to overwrite a corrupt live record it cannot read.
    store
        .schedule(&p, task("bad", T0), ScheduleMode::Upsert)
        .await
        .expect("schedule");
    server
        .command(&["HSET", key, "bad", "9|future"])
        .expect("plant a corrupt record");
    let results = store
        .schedule_many(
            vec![(p.clone(), task("bad", T0)), (p.clone(), task("new", T0))],
            ScheduleMode::Upsert,
        )
        .await
        .expect("schedule_many");
    let mut results = results.into_iter();
    assert_corrupt(
        results.next().expect("first item").map(|_| ()),
        "schedule",
        "unknown record version 9",
    );
    assert_eq!(
        results.next().expect("second item").ok(),
        Some(ScheduleOutcome::Created),
        "the other item proceeds"
    );
    assert_eq!(
        store.cancel(&p, &id("bad")).await.expect("cancel"),
        delayq_storage::Cancel::Cancelled,
        "a corrupt pending record can always be cancelled"
    );
}

#[tokio::test]
async fn a_stale_token_after_requeue_is_rejected_and_changes_nothing() {
    let (_server, store, p) = start(RedisOptions::default()).await;
    store
        .schedule(&p, task("a", T0), ScheduleMode::Upsert)
        .await
        .expect("schedule");
    let lost = store
        .claim_due(&p, T0, 1, T0 + 1_000, "crashed")
        .await
        .expect("claim")
        .tasks;
    let requeued = store
        .requeue_expired(&p, T0 + 1_001, 10)
        .await
        .expect("requeue");
    assert_eq!(requeued, [id("a")]);
    for result in [
        store.ack(&lost[0].token).await.map(|_| ()),
        store.renew(&lost[0].token, T0 + 99_000).await,
        store
            .fail(&lost[0].token, "late", FailAction::DeadLetter)
            .await
            .map(|_| ()),
    ] {
        assert!(
            matches!(result, Err(StorageError::StaleLease { ref id, .. }) if id == "a"),
            "{result:?}"
        );
    }
    let info = store.get(&p, &id("a")).await.expect("get").expect("exists");
    assert_eq!((info.state, info.attempt), (TaskState::Pending, 1));
    let again = store
        .claim_due(&p, T0 + 1_001, 1, T0 + 60_000, "healthy")
        .await
        .expect("claim");
    assert_ne!(again.tasks[0].token.claim, lost[0].token.claim);
    assert_eq!(
        store.ack(&again.tasks[0].token).await.expect("ack"),
        AckOutcome::Completed
    );
}

#[tokio::test]
async fn flushed_scripts_are_loaded_again_for_single_calls_and_pipelines() {
    // The EVALSHA path (Redis < 7, or Functions turned off).
    let (server, store, p) = start_with_functions(false).await;
    server.command(&["SCRIPT", "FLUSH"]).expect("SCRIPT FLUSH");
    schedule_all(&store, &p, "t", 50, |_| T0).await;
    server.command(&["SCRIPT", "FLUSH"]).expect("SCRIPT FLUSH");
    let claimed = store
        .claim_due(&p, T0, 100, T0 + 60_000, "node")
        .await
        .expect("claim");
    assert_eq!(claimed.tasks.len(), 50);
}

/// A queue registered while Redis stalls (`DEBUG SLEEP`): the registration's first `HSETNX`
/// times out and runs only after the stall, so the retry finds the entry there. The
/// registry's version must still move, so that a store which read the registry before sees
/// the new queue at once. Before, the retry bumped nothing and other stores kept their
/// cached registry for up to 30 s: a node neither served the new queue nor found its tasks
/// (`cancel` answered "no such task" for a pending one; `tests/e2e_soak.rs` caught it after a
/// Redis stall).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_queue_registered_through_a_stall_is_seen_by_every_store_at_once() {
    let (server, store, _) = start(RedisOptions {
        extra_args: vec![("enable-debug-command".to_owned(), "local".to_owned())],
        ..RedisOptions::default()
    })
    .await;
    let reader = RedisStore::connect(options(server.url()))
        .await
        .expect("connect");
    let known = |queues: Vec<(QueueName, u32)>| queues.iter().any(|(q, _)| q.as_str() == "late");
    assert!(!known(reader.queues().await.expect("queues")));
    let stall = tokio::task::spawn_blocking(move || {
        let slept = server.command(&["DEBUG", "SLEEP", "1.2"]);
        (server, slept)
    });
    tokio::time::sleep(Duration::from_millis(100)).await;
    let late = QueueName::new("late").expect("valid queue");
    assert_eq!(
        store.register_queue(&late, 16).await.expect("registered"),
        16
    );
    let (_server, slept) = stall.await.expect("the stall ended");
    slept.expect("DEBUG SLEEP");
    assert!(
        known(reader.queues().await.expect("queues")),
        "a store that read the registry before the stall does not see the new queue"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn firing_goes_on_while_the_functions_library_is_flushed_again_and_again() {
    const TASKS: usize = 2_000;
    // Functions on, whatever DELAYQ_REDIS_FUNCTIONS says.
    let (server, store, p) = start_with_functions(true).await;
    schedule_all(&store, &p, "t", TASKS as u64, |_| T0).await;
    let flushing = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(true));
    let flusher = {
        let (flushing, url) = (flushing.clone(), server.url());
        tokio::task::spawn_blocking(move || {
            let client = redis::Client::open(url).expect("client");
            let mut connection = client.get_connection().expect("connect");
            let mut flushes = 0u32;
            while flushing.load(std::sync::atomic::Ordering::Relaxed) {
                let _: () = redis::cmd("FUNCTION")
                    .arg("FLUSH")
                    .query(&mut connection)
                    .expect("FUNCTION FLUSH");
                flushes += 1;
                std::thread::sleep(Duration::from_millis(10));
            }
            flushes
        })
    };
    let mut completed = 0;
    let deadline = Instant::now() + Duration::from_secs(60);
    while completed < TASKS && Instant::now() < deadline {
        let batch = store
            .claim_due(&p, T0, 50, T0 + 600_000, "node")
            .await
            .expect("a claim while the library comes and goes");
        let acks = futures::future::join_all(batch.tasks.iter().map(|task| store.ack(&task.token)));
        for outcome in acks.await {
            assert_eq!(outcome.expect("an ack"), AckOutcome::Completed);
            completed += 1;
        }
    }
    flushing.store(false, std::sync::atomic::Ordering::Relaxed);
    let flushes = flusher.await.expect("flusher");
    assert_eq!(completed, TASKS, "every task fired and completed once");
    assert!(flushes >= 5, "the library was flushed only {flushes} times");
    let stats = store.stats(&p, T0).await.expect("stats");
    assert_eq!(
        (stats.pending, stats.inflight, stats.done),
        (0, 0, TASKS as u64),
        "{stats:?}"
    );
    let commandstats: String =
        redis::from_redis_value(server.command(&["INFO", "commandstats"]).expect("INFO"))
            .expect("text");
    assert!(commandstats.contains("cmdstat_fcall:"), "{commandstats}");
    assert!(!commandstats.contains("cmdstat_evalsha:"), "{commandstats}");
}
