//! A claim's tasks run together in one driver (`dispatch.rs`): they start at once, each
//! settles as soon as its handler is done, a long handler keeps its lease while the others
//! of its claim finish, and a timeout or a panic is that one task's failure.

mod support;

use std::sync::Arc;
use std::time::{Duration, Instant};

use delayq_engine::{Task, When};
use parking_lot::Mutex;
use support::{fast_config, wait_until, Recorder, TestBackend};

/// Tasks in one claim besides the special one.
const QUICK: usize = 20;

/// One partition, so that tasks due at one instant come in one claim.
fn one_partition() -> delayq_engine::config::Config {
    let mut config = fast_config();
    config.queue_defaults.partitions = 1;
    config
}

async fn wait_owned(node: &delayq_engine::Scheduler) {
    wait_until(Duration::from_secs(10), "the partition is owned", || {
        node.owned_partitions().len() == 1
    })
    .await;
}

/// Schedules `special` and [`QUICK`] quick tasks due at one instant 400 ms from now.
async fn schedule_claim(node: &delayq_engine::Scheduler, special: &[&str]) {
    let due = node.now_ms() + 400;
    for id in special {
        node.schedule("q", id, When::At(due), "")
            .await
            .expect("schedule");
    }
    for n in 0..QUICK {
        node.schedule("q", &format!("quick-{n}"), When::At(due), "")
            .await
            .expect("schedule");
    }
}

async fn a_long_handler_keeps_its_lease_while_its_claim_settles(backend: TestBackend) {
    let config = one_partition();
    let lease = config.engine.lease;
    let store = backend
        .recording_store(&config, delayq_storage::StoreOptions::default())
        .await;
    let runs = Recorder::new();
    let record = runs.clone();
    let node = backend
        .builder(&config)
        .store(store.clone())
        .handler("q", move |task: Task| {
            record.record(&task);
            async move {
                if task.id == "slow" {
                    // Past two whole leases: only renewals keep it.
                    tokio::time::sleep(lease * 2 + lease / 2).await;
                }
                Ok::<(), std::io::Error>(())
            }
        })
        .start()
        .await
        .expect("node starts");
    wait_owned(&node).await;
    schedule_claim(&node, &["slow"]).await;
    wait_until(Duration::from_secs(5), "all fired", || {
        runs.distinct() == QUICK + 1
    })
    .await;
    let fired = Instant::now();
    // The quick ones settle without waiting for the slow one of their claim.
    wait_until(lease / 2, "only the slow one runs", || {
        node.running_tasks() == 1
    })
    .await;
    wait_until(lease * 4, "the slow one settled", || {
        node.running_tasks() == 0
    })
    .await;
    assert!(
        fired.elapsed() >= lease * 2,
        "the slow handler ran its time"
    );
    // Long enough for a lease taken back to be requeued and run again.
    tokio::time::sleep(config.engine.pull_period * 4).await;
    let counts = runs.counts();
    assert!(counts.values().all(|&n| n == 1), "ran twice: {counts:?}");
    assert_eq!(
        store.requeued(),
        0,
        "the slow handler's lease was taken back"
    );
    assert!(
        store.renewals() >= 2,
        "renewed {} times while it ran",
        store.renewals()
    );
    let stats = node.stats().await.expect("stats");
    let inflight: u64 = stats.values().map(|s| s.inflight + s.pending).sum();
    assert_eq!(inflight, 0, "everything settled: {stats:?}");
    node.shutdown().await.expect("shutdown");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_long_handler_keeps_its_lease_while_its_claim_settles_on_redis() {
    a_long_handler_keeps_its_lease_while_its_claim_settles(TestBackend::redis()).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_long_handler_keeps_its_lease_while_its_claim_settles_on_postgres() {
    a_long_handler_keeps_its_lease_while_its_claim_settles(TestBackend::postgres()).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_long_handler_keeps_its_lease_while_its_claim_settles_in_memory() {
    a_long_handler_keeps_its_lease_while_its_claim_settles(TestBackend::memory()).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_claims_handlers_start_together() {
    let backend = TestBackend::memory();
    let config = one_partition();
    let tasks = QUICK + 1;
    // Every handler waits until all of its claim are running at once.
    let barrier = Arc::new(tokio::sync::Barrier::new(tasks));
    let failures = Arc::new(Mutex::new(Vec::new()));
    let runs = Recorder::new();
    let (record, failed) = (runs.clone(), failures.clone());
    let node = backend
        .builder(&config)
        .handler("q", move |task: Task| {
            record.record(&task);
            let (barrier, failed) = (barrier.clone(), failed.clone());
            async move {
                let waited = tokio::time::timeout(Duration::from_secs(5), barrier.wait()).await;
                if waited.is_err() {
                    failed.lock().push(task.id.clone());
                }
                Ok::<(), std::io::Error>(())
            }
        })
        .start()
        .await
        .expect("node starts");
    wait_owned(&node).await;
    schedule_claim(&node, &["first"]).await;
    wait_until(Duration::from_secs(10), "all settled", || {
        runs.distinct() == tasks && node.running_tasks() == 0
    })
    .await;
    assert_eq!(
        failures.lock().clone(),
        Vec::<String>::new(),
        "handlers waited for others that had not started"
    );
    node.shutdown().await.expect("shutdown");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_timeout_or_a_panic_in_a_claim_fails_that_task_alone() {
    let backend = TestBackend::memory();
    let mut config = one_partition();
    config.queue_defaults.timeout = Duration::from_millis(800);
    let runs = Recorder::new();
    let record = runs.clone();
    let node = backend
        .builder(&config)
        .handler("q", move |task: Task| {
            record.record(&task);
            // Panics while creating its future (the closure itself), on the first attempt.
            assert!(
                !(task.id == "boom" && task.attempt == 1),
                "the handler blew up"
            );
            async move {
                if task.id == "hang" && task.attempt == 1 {
                    futures::future::pending::<()>().await;
                }
                Ok::<(), std::io::Error>(())
            }
        })
        .start()
        .await
        .expect("node starts");
    wait_owned(&node).await;
    schedule_claim(&node, &["hang", "boom"]).await;
    let started = Instant::now();
    wait_until(Duration::from_secs(10), "the retries ran", || {
        runs.len() == QUICK + 4
    })
    .await;
    wait_until(Duration::from_secs(5), "all settled", || {
        node.running_tasks() == 0
    })
    .await;
    let firings = runs.firings();
    let attempts = |id: &str| -> Vec<u32> {
        let mut attempts: Vec<u32> = firings
            .iter()
            .filter(|f| f.id == id)
            .map(|f| f.attempt)
            .collect();
        attempts.sort_unstable();
        attempts
    };
    assert_eq!(attempts("hang"), vec![1, 2], "timed out once, then retried");
    assert_eq!(attempts("boom"), vec![1, 2], "panicked once, then retried");
    for n in 0..QUICK {
        assert_eq!(attempts(&format!("quick-{n}")), vec![1], "quick-{n}");
    }
    assert!(
        started.elapsed() >= Duration::from_millis(700),
        "the hanging one ran until its timeout"
    );
    let stats = node.stats().await.expect("stats");
    let left: u64 = stats
        .values()
        .map(|s| s.inflight + s.pending + s.dead)
        .sum();
    assert_eq!(left, 0, "everything settled: {stats:?}");
    node.shutdown().await.expect("shutdown");
}
