//! Guarantees 6-8 through the engine, with real handlers: a resend while the handler runs is
//! a duplicate, cancel tells the truth about a running task, a poison pill never blocks its
//! partition, and a claim whose reply was lost does not park its tasks for a whole lease.

mod support;

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use delayq_engine::{Cancel, Task, When};
use delayq_storage::{partition_of, TaskId, TaskState};
use support::{fast_config, recording_redis_store, wait_until, Recorder, TestBackend};

/// A handler that records the run, then sleeps `hold` and answers with `result`.
fn slow_handler(
    recorder: Recorder,
    hold: Duration,
    fail: bool,
) -> impl Fn(
    Task,
)
    -> std::pin::Pin<Box<dyn std::future::Future<Output = Result<(), std::io::Error>> + Send>>
       + Send
       + Sync
       + 'static {
    move |task: Task| {
        recorder.record(&task);
        Box::pin(async move {
            tokio::time::sleep(hold).await;
            if fail {
                Err(std::io::Error::other("the webhook failed"))
            } else {
                Ok(())
            }
        })
    }
}

async fn resend_while_running_is_a_duplicate(backend: TestBackend) {
    let config = fast_config();
    let runs = Recorder::new();
    let node = backend
        .builder(&config)
        .handler(
            "webhooks",
            slow_handler(runs.clone(), Duration::from_millis(1_500), false),
        )
        .start()
        .await
        .expect("node starts");
    let due = node.now_ms() + 200;
    let first = node
        .schedule("webhooks", "hook-1", When::At(due), "{}")
        .await
        .expect("schedule");
    assert!(!first.duplicate);
    wait_until(Duration::from_secs(10), "the handler started", || {
        runs.len() == 1
    })
    .await;
    // The producer timed out and sends the same schedule again while the handler runs.
    let resent = node
        .schedule("webhooks", "hook-1", When::At(due), "{}")
        .await
        .expect("resend");
    assert!(resent.duplicate, "{resent:?}");
    assert!(!resent.replaced, "{resent:?}");
    wait_until(Duration::from_secs(10), "the run completed", || {
        futures::executor::block_on(node.get("webhooks", "hook-1"))
            .ok()
            .flatten()
            .is_some_and(|info| info.state == TaskState::Done)
    })
    .await;
    tokio::time::sleep(Duration::from_millis(500)).await;
    let firings = runs.firings();
    assert_eq!(firings.len(), 1, "ran twice: {firings:?}");
    let info = node
        .get("webhooks", "hook-1")
        .await
        .expect("get")
        .expect("done");
    assert_eq!(info.generation, firings[0].generation, "no new generation");
    node.shutdown().await.expect("shutdown");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn resend_while_running_is_a_duplicate_on_redis() {
    resend_while_running_is_a_duplicate(TestBackend::redis()).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn resend_while_running_is_a_duplicate_on_postgres() {
    resend_while_running_is_a_duplicate(TestBackend::postgres()).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn resend_while_running_is_a_duplicate_on_memory() {
    resend_while_running_is_a_duplicate(TestBackend::memory()).await;
}

async fn cancel_of_a_running_task_lets_it_finish_and_nothing_follows(backend: TestBackend) {
    let config = fast_config();
    let runs = Recorder::new();
    // The handler fails: without the cancel it would be retried (max_attempts 3).
    let node = backend
        .builder(&config)
        .handler(
            "orders",
            slow_handler(runs.clone(), Duration::from_millis(1_000), true),
        )
        .start()
        .await
        .expect("node starts");
    node.schedule(
        "orders",
        "order-42",
        When::In(Duration::from_millis(100)),
        "",
    )
    .await
    .expect("schedule");
    wait_until(Duration::from_secs(10), "the handler started", || {
        runs.len() == 1
    })
    .await;
    let outcome = node.cancel("orders", "order-42").await.expect("cancel");
    assert_eq!(outcome, Cancel::InFlight);
    assert!(!outcome.cancelled());
    let running = node.get("orders", "order-42").await.expect("get");
    assert_eq!(running.map(|info| info.state), Some(TaskState::Inflight));
    wait_until(Duration::from_secs(10), "the running attempt ended", || {
        futures::executor::block_on(node.get("orders", "order-42"))
            .ok()
            .is_some_and(|info| info.is_none())
    })
    .await;
    // Longer than the backoff (50-200 ms) and a pull period: no retry comes.
    tokio::time::sleep(Duration::from_millis(1_000)).await;
    assert_eq!(
        runs.len(),
        1,
        "a retry followed a cancel: {:?}",
        runs.firings()
    );
    assert_eq!(node.get("orders", "order-42").await.expect("get"), None);
    assert_eq!(
        node.cancel("orders", "order-42")
            .await
            .expect("cancel again"),
        Cancel::NotFound
    );
    node.shutdown().await.expect("shutdown");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn cancel_of_a_running_task_lets_it_finish_and_nothing_follows_on_redis() {
    cancel_of_a_running_task_lets_it_finish_and_nothing_follows(TestBackend::redis()).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn cancel_of_a_running_task_lets_it_finish_and_nothing_follows_on_postgres() {
    cancel_of_a_running_task_lets_it_finish_and_nothing_follows(TestBackend::postgres()).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn cancel_of_a_running_task_lets_it_finish_and_nothing_follows_on_memory() {
    cancel_of_a_running_task_lets_it_finish_and_nothing_follows(TestBackend::memory()).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_poison_pill_is_dead_lettered_and_its_partition_keeps_firing() {
    let backend = TestBackend::redis();
    let TestBackend::Redis(server) = &backend else {
        unreachable!("a Redis backend");
    };
    let mut config = fast_config();
    config.queue_defaults.partitions = 1;
    let runs = Recorder::new();
    let producer = backend.builder(&config).start().await.expect("producer");
    let now = producer.now_ms();
    for n in 0..20 {
        producer
            .schedule("q", &format!("task-{n}"), When::At(now + 1_000 + n), "ok")
            .await
            .expect("schedule");
    }
    // Outside tooling writes a record this release cannot read, due first.
    producer
        .schedule("q", "poison", When::At(now + 500), "x")
        .await
        .expect("schedule");
    let key = format!("{}:{{q:0}}:tasks", config.redis.key_prefix);
    server
        .command(&["HSET", &key, "poison", "7|a record from the future"])
        .expect("plant the poison pill");
    let node = backend
        .builder(&config)
        .handler("q", runs.handler())
        .start()
        .await
        .expect("node starts");
    wait_until(Duration::from_secs(10), "the other tasks fired", || {
        runs.distinct() == 20
    })
    .await;
    let dead = node.get("q", "poison").await.expect("get").expect("kept");
    assert_eq!(dead.state, TaskState::Dead);
    let reason = dead.last_error.unwrap_or_default();
    assert!(reason.contains("unknown record version 7"), "{reason}");
    assert!(
        !runs.counts().contains_key("poison"),
        "the poison pill never ran"
    );
    node.shutdown().await.expect("shutdown");
    producer.shutdown().await.expect("shutdown");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_lost_claim_reply_fires_its_tasks_within_a_pull_period_not_a_lease() {
    let backend = TestBackend::redis();
    let TestBackend::Redis(server) = &backend else {
        unreachable!("a Redis backend");
    };
    let mut config = fast_config();
    config.queue_defaults.partitions = 1;
    config.engine.lease = Duration::from_secs(30);
    let store = recording_redis_store(server, &config).await;
    let runs = Recorder::new();
    let node = backend
        .builder(&config)
        .store(store.clone())
        .handler("q", runs.handler())
        .start()
        .await
        .expect("node starts");
    store.lose_next_claim_replies(1);
    let due = node.now_ms() + 300;
    for n in 0..50 {
        node.schedule("q", &format!("task-{n}"), When::At(due), "")
            .await
            .expect("schedule");
    }
    // Without recovery the claimed batch would sit in flight for the 30 s lease.
    wait_until(Duration::from_secs(5), "every task fired", || {
        runs.distinct() == 50
    })
    .await;
    assert_eq!(store.lost_claims(), 1, "the test dropped one claim reply");
    let counts = runs.counts();
    assert!(counts.values().all(|&n| n == 1), "ran twice: {counts:?}");
    let id = TaskId::new("task-0").expect("id");
    assert_eq!(partition_of(&id, 1), 0);
    node.shutdown().await.expect("shutdown");
}

/// A claim that reaches Redis late (the call waited out an outage in the connection layer:
/// a Redis restart loading its AOF answers `LOADING` for seconds) carries the lease deadline
/// computed when it was sent, already past or nearly: its tasks get a fresh lease before their
/// handlers start, so the next look does not take them back while they run, and each runs
/// once. Before, the next look requeued them and the same node ran them again at once
/// (`tests/e2e_soak.rs` saw it after every slow Redis restart: tasks due during the outage
/// fired twice on one node 15–300 ms apart).
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_claim_that_reaches_redis_late_runs_its_tasks_once() {
    let backend = TestBackend::redis();
    let TestBackend::Redis(server) = &backend else {
        unreachable!("a Redis backend");
    };
    let mut config = fast_config();
    config.queue_defaults.partitions = 1;
    let lease = config.engine.lease;
    let store = recording_redis_store(server, &config).await;
    let runs = Recorder::new();
    // Handlers that take a moment, as real ones do: a run outlasts the next look.
    let node = backend
        .builder(&config)
        .store(store.clone())
        .handler("q", {
            let runs = runs.clone();
            move |task: Task| {
                runs.record(&task);
                async {
                    tokio::time::sleep(Duration::from_millis(500)).await;
                    Ok::<(), std::io::Error>(())
                }
            }
        })
        .start()
        .await
        .expect("node starts");
    let due = node.now_ms() + 300;
    for n in 0..10 {
        node.schedule("q", &format!("task-{n}"), When::At(due), "")
            .await
            .expect("schedule");
    }
    // The claim of these tasks (the next claim: none is made before a task is due).
    store.delay_next_claim(lease + Duration::from_millis(300));
    wait_until(Duration::from_secs(15), "every task fired", || {
        runs.distinct() == 10
    })
    .await;
    // Long enough for a second run of anything whose lease was taken back.
    tokio::time::sleep(lease + Duration::from_secs(1)).await;
    let counts = runs.counts();
    assert!(counts.values().all(|&n| n == 1), "ran twice: {counts:?}");
    node.shutdown().await.expect("shutdown");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn tasks_beyond_one_claims_byte_budget_all_fire_once() {
    // 64 tasks of 256 KiB due at once: with the default 8 MiB claim budget, no claim reply
    // carries them all (16 MiB); every one still fires exactly once.
    let backend = TestBackend::redis();
    let mut config = fast_config();
    config.queue_defaults.partitions = 1;
    let runs = Recorder::new();
    let counted = Arc::new(AtomicUsize::new(0));
    let node = backend
        .builder(&config)
        .handler("big", {
            let (runs, counted) = (runs.clone(), counted.clone());
            move |task: Task| {
                runs.record(&task);
                counted.fetch_add(task.payload.len(), Ordering::Relaxed);
                async { Ok::<(), std::io::Error>(()) }
            }
        })
        .start()
        .await
        .expect("node starts");
    let payload = vec![b'x'; 256 * 1024];
    let due = node.now_ms() + 500;
    for n in 0..64 {
        node.schedule("big", &format!("big-{n}"), When::At(due), payload.clone())
            .await
            .expect("schedule");
    }
    wait_until(Duration::from_secs(15), "every big task fired", || {
        runs.distinct() == 64
    })
    .await;
    assert_eq!(counted.load(Ordering::Relaxed), 64 * 256 * 1024);
    node.shutdown().await.expect("shutdown");
}
