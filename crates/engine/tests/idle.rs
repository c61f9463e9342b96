//! Idle partitions (DESIGN.md, guarantee 12 and "Cost model"): a partition with nothing due
//! within the window and nothing in flight is looked at every `idle_pull_period`, not every
//! `pull_period`, and is back on `pull_period` as soon as it has work — without a task
//! firing late, a lost wake-up going unnoticed, or a dead node's in-flight tasks waiting.
//!
//! Each case counts the looks (`TaskStore::look`) through a recording store, on both
//! backends where the case does not need a real server.

mod support;

use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use delayq_engine::config::Config;
use delayq_engine::{Scheduler, Task, When};
use delayq_storage::{
    partition_of, NewTask, Partition, QueueName, ScheduleMode, StoreOptions, TaskId, TaskStore,
};
use support::{fast_config, wait_until, Recorder, RecordingStore, TestBackend};

const QUEUE: &str = "idle";
const PARTITIONS: u32 = 8;
const IDLE: Duration = Duration::from_secs(2);

/// Schedules `id` due at `due_ms` straight in the store, without the wake-up the engine's
/// own `schedule` sends: only the owner's looks can find it.
async fn write_behind_the_engine(store: &RecordingStore, id: &str, due_ms: u64) {
    let task = NewTask {
        id: TaskId::new(id).expect("id"),
        due_ms,
        payload: Bytes::new(),
        traceparent: None,
    };
    store
        .schedule(&partition(id), task, ScheduleMode::Upsert)
        .await
        .expect("written to the store");
}

fn idle_config() -> Config {
    let mut config = fast_config();
    config.queue_defaults.partitions = PARTITIONS;
    config.engine.pull_period = Duration::from_millis(100);
    config.engine.prefetch_window = Duration::from_secs(1);
    config.engine.idle_pull_period = IDLE;
    config
}

async fn node(
    backend: &TestBackend,
    config: &Config,
    store: &Arc<RecordingStore>,
    recorder: &Recorder,
) -> Scheduler {
    backend
        .builder(config)
        .store(store.clone())
        .handler(QUEUE, recorder.handler())
        .start()
        .await
        .expect("node starts")
}

/// Creates the queue (one task an hour ahead) and waits until the node owns its partitions
/// and they have gone quiet.
async fn quiet_queue(node: &Scheduler, store: &RecordingStore) {
    node.schedule(
        QUEUE,
        "an-hour-ahead",
        When::In(Duration::from_secs(3600)),
        "",
    )
    .await
    .expect("schedule");
    wait_until(Duration::from_secs(10), "the node owns the queue", || {
        node.owned_partitions().len() == PARTITIONS as usize
    })
    .await;
    // Three quiet looks a pull period apart, and then some.
    tokio::time::sleep(Duration::from_millis(800)).await;
    let _ = store.all_looks();
}

/// Looks at every partition over `span`.
async fn looks_over(store: &RecordingStore, span: Duration) -> u64 {
    let before = store.all_looks();
    tokio::time::sleep(span).await;
    store.all_looks() - before
}

fn partition(id: &str) -> Partition {
    let id = TaskId::new(id).expect("id");
    Partition::new(
        QueueName::new(QUEUE).expect("queue"),
        partition_of(&id, PARTITIONS),
    )
}

async fn looks_back_off_and_come_back_on_a_wakeup(backend: TestBackend) {
    let config = idle_config();
    let store = backend
        .recording_store(&config, StoreOptions::default())
        .await;
    let recorder = Recorder::new();
    let owner = node(&backend, &config, &store, &recorder).await;
    let producer = backend
        .builder(&config)
        .start()
        .await
        .expect("producer starts");
    quiet_queue(&owner, &store).await;

    // Busy, 8 partitions would be looked at 8 × 30 = 240 times in 3 s; idle, at most
    // 8 × 2 (one idle period of 2–3 s each, and one more for a look under way).
    let idle_looks = looks_over(&store, Duration::from_secs(3)).await;
    assert!(
        idle_looks <= 2 * u64::from(PARTITIONS),
        "{idle_looks} looks in 3 s while idle"
    );

    // A task from another node, due after the window: its wake-up plans the owner's look.
    let woken = partition("wake-me");
    let before = store.looks(&woken);
    let due = producer.now_ms() + 1_500;
    producer
        .schedule(QUEUE, "wake-me", When::At(due), "")
        .await
        .expect("schedule");
    wait_until(Duration::from_secs(5), "the task fired", || {
        recorder.len() == 1
    })
    .await;
    let firing = &recorder.firings()[0];
    let lateness = firing.fired_ms as i64 - due as i64;
    assert!(
        (0..=300).contains(&lateness),
        "fired {lateness} ms from its due"
    );
    // Busy from the planned look (the due minus the 1 s window) until a few quiet looks
    // after the fire: a look every 100 ms, about 13 of them. Idle, it would be one or two.
    wait_until(
        Duration::from_secs(2),
        "the partition is looked at every pull period",
        || store.looks(&woken) >= before + 6,
    )
    .await;
    producer.shutdown().await.expect("shutdown");
    owner.shutdown().await.expect("shutdown");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn idle_looks_back_off_and_come_back_on_a_wakeup_on_memory() {
    looks_back_off_and_come_back_on_a_wakeup(TestBackend::memory()).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn idle_looks_back_off_and_come_back_on_a_wakeup_on_redis() {
    looks_back_off_and_come_back_on_a_wakeup(TestBackend::redis()).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn idle_looks_back_off_and_come_back_on_a_wakeup_on_postgres() {
    looks_back_off_and_come_back_on_a_wakeup(TestBackend::postgres()).await;
}

/// A task written straight to the store (as if its wake-up were lost) into an idle
/// partition fires at its owner's next idle look: within 1.5 × `idle_pull_period` (+ one
/// pull period) of its due, never before it.
async fn a_lost_wakeup_is_caught_by_the_next_idle_look(backend: TestBackend) {
    let config = idle_config();
    let store = backend
        .recording_store(&config, StoreOptions::default())
        .await;
    let recorder = Recorder::new();
    let owner = node(&backend, &config, &store, &recorder).await;
    quiet_queue(&owner, &store).await;
    let due = owner.now_ms() + 200;
    // Through a store of its own, as another node would write: the owner's store learns
    // nothing of the write.
    let elsewhere = backend
        .recording_store(&config, StoreOptions::default())
        .await;
    write_behind_the_engine(&elsewhere, "unannounced", due).await;
    // On PostgreSQL the light looks answer from a view of the partitions' heads up to
    // `HEAD_VIEW_MAX_AGE` old.
    let view_age = match backend {
        TestBackend::Postgres(_) => delayq_storage::HEAD_VIEW_MAX_AGE,
        _ => Duration::ZERO,
    };
    let bound = IDLE.mul_f64(1.5) + view_age + Duration::from_millis(100);
    wait_until(
        bound + Duration::from_secs(2),
        "the unannounced task fired",
        || recorder.len() == 1,
    )
    .await;
    let lateness = recorder.firings()[0].fired_ms as i64 - due as i64;
    assert!(
        (0..=bound.as_millis() as i64 + 300).contains(&lateness),
        "fired {lateness} ms from its due (bound {bound:?})"
    );
    owner.shutdown().await.expect("shutdown");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_lost_wakeup_is_caught_by_the_next_idle_look_on_memory() {
    a_lost_wakeup_is_caught_by_the_next_idle_look(TestBackend::memory()).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_lost_wakeup_is_caught_by_the_next_idle_look_on_redis() {
    a_lost_wakeup_is_caught_by_the_next_idle_look(TestBackend::redis()).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_lost_wakeup_is_caught_by_the_next_idle_look_on_postgres() {
    a_lost_wakeup_is_caught_by_the_next_idle_look(TestBackend::postgres()).await;
}

/// A task scheduled long ago is prefetched in time although its partition is idle: the idle
/// look is planned no later than its due minus the window.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_task_due_after_several_idle_periods_fires_on_time() {
    let backend = TestBackend::memory();
    let config = idle_config();
    let store = backend
        .recording_store(&config, StoreOptions::default())
        .await;
    let recorder = Recorder::new();
    let owner = node(&backend, &config, &store, &recorder).await;
    quiet_queue(&owner, &store).await;
    // Written straight to the store: only the owner's looks can find it.
    let due = owner.now_ms() + 7_000;
    write_behind_the_engine(&store, "long-ago", due).await;
    wait_until(Duration::from_secs(12), "the task fired", || {
        recorder.len() == 1
    })
    .await;
    let lateness = recorder.firings()[0].fired_ms as i64 - due as i64;
    assert!(
        (0..=300).contains(&lateness),
        "fired {lateness} ms from its due"
    );
    owner.shutdown().await.expect("shutdown");
}

/// A node killed with tasks in flight in an otherwise idle queue: the survivor runs them
/// again within `heartbeat_ttl` + `lease` + 1 s of the kill.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_dead_nodes_in_flight_tasks_in_an_idle_queue_run_again_within_the_lease() {
    let backend = TestBackend::redis();
    let config = idle_config();
    let store = backend
        .recording_store(&config, StoreOptions::default())
        .await;
    let recorder = Recorder::new();
    let hanging = Recorder::new();
    let victim = backend
        .builder(&config)
        .handler(QUEUE, {
            let hanging = hanging.clone();
            move |task: Task| {
                hanging.record(&task);
                futures::future::pending::<Result<(), std::io::Error>>()
            }
        })
        .start()
        .await
        .expect("victim starts");
    let survivor = node(&backend, &config, &store, &recorder).await;
    survivor
        .schedule(
            QUEUE,
            "an-hour-ahead",
            When::In(Duration::from_secs(3600)),
            "",
        )
        .await
        .expect("schedule");
    wait_until(Duration::from_secs(10), "both own partitions", || {
        victim.owned_partitions().len() + survivor.owned_partitions().len() == PARTITIONS as usize
            && !victim.owned_partitions().is_empty()
    })
    .await;
    let due = survivor.now_ms() + 300;
    for n in 0..40 {
        survivor
            .schedule(QUEUE, &format!("task-{n}"), When::At(due), "")
            .await
            .expect("schedule");
    }
    wait_until(Duration::from_secs(5), "every task started", || {
        recorder.distinct() + hanging.distinct() == 40
    })
    .await;
    let stuck = hanging.distinct();
    assert!(stuck > 0, "the victim runs some of them");
    // Idle again apart from what the victim holds in flight.
    tokio::time::sleep(Duration::from_millis(500)).await;
    let killed_at = Instant::now();
    victim.kill();
    let bound = config.node.heartbeat_ttl + config.engine.lease + Duration::from_secs(1);
    wait_until(
        bound + Duration::from_secs(3),
        "the victim's tasks ran again",
        || recorder.distinct() == 40,
    )
    .await;
    let took = killed_at.elapsed();
    assert!(
        took <= bound + Duration::from_millis(500),
        "took {took:?} (bound {bound:?})"
    );
    assert!(store.requeued() >= stuck as u64, "their leases were swept");
    survivor.shutdown().await.expect("shutdown");
}
