//! The node's own resources, on the memory twin and on Redis: `node.max_running` bounds the
//! handlers running at once over all queues (each queue's `concurrency` still applies), and
//! a handler that cannot start for lack of resources ([`ResourceExhausted`]) puts its task
//! back without spending an attempt, so no task is dead-lettered because of the node.

mod support;

use std::collections::HashMap;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use delayq_engine::{HandlerError, ResourceExhausted, ScheduleRequest, Task, When};
use parking_lot::Mutex;
use support::{fast_config, wait_until, TestBackend};

/// Queues of the bound test, each allowing far more handlers than the node may run.
const QUEUES: usize = 8;
const PER_QUEUE_CONCURRENCY: usize = 64;
const MAX_RUNNING: usize = 12;
const TASKS_PER_QUEUE: usize = 40;

/// Counts the handlers running at once and the peak, and every run by `(queue, id)`.
#[derive(Clone, Default)]
struct Gauge {
    running: Arc<AtomicUsize>,
    peak: Arc<AtomicUsize>,
    runs: Arc<Mutex<HashMap<(String, String), usize>>>,
}

impl Gauge {
    fn handler(
        &self,
        hold: Duration,
    ) -> impl Fn(
        Task,
    ) -> std::pin::Pin<
        Box<dyn std::future::Future<Output = Result<(), HandlerError>> + Send>,
    > + Send
           + Sync
           + 'static {
        let gauge = self.clone();
        move |task: Task| {
            let gauge = gauge.clone();
            Box::pin(async move {
                let now = gauge.running.fetch_add(1, Ordering::SeqCst) + 1;
                gauge.peak.fetch_max(now, Ordering::SeqCst);
                tokio::time::sleep(hold).await;
                gauge.running.fetch_sub(1, Ordering::SeqCst);
                *gauge.runs.lock().entry((task.queue, task.id)).or_default() += 1;
                Ok(())
            })
        }
    }

    fn distinct(&self) -> usize {
        self.runs.lock().len()
    }
}

async fn max_running_bounds_the_handlers_over_all_queues(backend: TestBackend) {
    let mut config = fast_config();
    config.node.max_running = MAX_RUNNING;
    config.queue_defaults.concurrency = PER_QUEUE_CONCURRENCY;
    config.queue_defaults.partitions = 4;
    let gauge = Gauge::default();
    let node = backend
        .builder(&config)
        .default_handler(gauge.handler(Duration::from_millis(40)))
        .start()
        .await
        .expect("node starts");
    let due = node.now_ms() + 300;
    for queue in 0..QUEUES {
        let requests = (0..TASKS_PER_QUEUE)
            .map(|index| ScheduleRequest::new(format!("t{index}"), When::At(due), ""))
            .collect();
        for result in node
            .schedule_many(&format!("wide-{queue}"), requests)
            .await
            .expect("schedule_many")
        {
            result.expect("scheduled");
        }
    }
    let total = QUEUES * TASKS_PER_QUEUE;
    wait_until(Duration::from_secs(60), "every task ran", || {
        gauge.distinct() == total
    })
    .await;
    let peak = gauge.peak.load(Ordering::SeqCst);
    eprintln!("{total} tasks over {QUEUES} queues: at most {peak} handlers at once (max_running {MAX_RUNNING})");
    assert!(
        peak <= MAX_RUNNING,
        "{peak} handlers ran at once with node.max_running {MAX_RUNNING}"
    );
    assert!(
        peak >= MAX_RUNNING / 2,
        "the bound is used, not starved: at most {peak} at once"
    );
    let runs = gauge.runs.lock().clone();
    assert!(
        runs.values().all(|&count| count == 1),
        "each task ran once: {runs:?}"
    );
    let stats = node.stats().await.expect("stats");
    for queue in 0..QUEUES {
        let counts = &stats[&format!("wide-{queue}")];
        assert_eq!(
            (counts.pending, counts.inflight, counts.dead),
            (0, 0, 0),
            "wide-{queue}: {counts:?}"
        );
    }
    node.shutdown().await.expect("shutdown");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn max_running_bounds_the_handlers_over_all_queues_on_memory() {
    max_running_bounds_the_handlers_over_all_queues(TestBackend::memory()).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn max_running_bounds_the_handlers_over_all_queues_on_redis() {
    max_running_bounds_the_handlers_over_all_queues(TestBackend::redis()).await;
}

/// The `(attempt, cluster ms)` of each call of a handler, by task id.
type Calls = HashMap<String, Vec<(u32, u64)>>;

/// Every task's handler reports "no resources" for its first `starved` calls, then succeeds.
async fn a_task_the_node_could_not_start_is_put_back_without_spending_an_attempt(
    backend: TestBackend,
) {
    const TASKS: usize = 20;
    const STARVED: usize = 2;
    let mut config = fast_config();
    config.queue_defaults.max_attempts = 1;
    let calls: Arc<Mutex<Calls>> = Arc::default();
    let clock = Arc::new(std::sync::OnceLock::<Arc<delayq_coordinator::ClusterClock>>::new());
    let handler = {
        let calls = calls.clone();
        let clock = clock.clone();
        move |task: Task| {
            let now = clock.get().map_or(0, |clock| clock.now_ms());
            let mut calls = calls.lock();
            let seen = calls.entry(task.id.clone()).or_default();
            seen.push((task.attempt, now));
            let result: Result<(), HandlerError> = if seen.len() <= STARVED {
                Err(Box::new(ResourceExhausted::new(
                    "cannot run \"sh\": Too many open files (os error 24)",
                )))
            } else {
                Ok(())
            };
            futures::future::ready(result)
        }
    };
    let node = backend
        .builder(&config)
        .handler("starved", handler)
        .start()
        .await
        .expect("node starts");
    let _ = clock.set(node.clock());
    let due = node.now_ms() + 200;
    for index in 0..TASKS {
        node.schedule("starved", &format!("s{index}"), When::At(due), "")
            .await
            .expect("schedule");
    }
    wait_until(Duration::from_secs(30), "every task ran", || {
        let calls = calls.lock();
        calls.len() == TASKS && calls.values().all(|seen| seen.len() > STARVED)
    })
    .await;
    let settled = || async {
        let stats = node.stats().await.expect("stats");
        stats
            .get("starved")
            .map(|counts| (counts.pending, counts.inflight, counts.dead, counts.done))
    };
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    while settled().await != Some((0, 0, 0, TASKS as u64)) {
        assert!(
            tokio::time::Instant::now() < deadline,
            "not settled: {:?}",
            settled().await
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let calls = calls.lock().clone();
    for (id, seen) in &calls {
        assert_eq!(seen.len(), STARVED + 1, "{id}: {seen:?}");
        assert!(
            seen.iter().all(|&(attempt, _)| attempt == 1),
            "{id}: the attempt is never spent: {seen:?}"
        );
        // Put back about a second later each time, not at once (and not after the queue's
        // 50 ms backoff).
        for pair in seen.windows(2) {
            let gap = pair[1].1.saturating_sub(pair[0].1);
            assert!(
                (900..=3_000).contains(&gap),
                "{id}: due again {gap} ms later: {seen:?}"
            );
        }
    }
    node.shutdown().await.expect("shutdown");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_task_the_node_could_not_start_is_put_back_without_spending_an_attempt_on_memory() {
    a_task_the_node_could_not_start_is_put_back_without_spending_an_attempt(TestBackend::memory())
        .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_task_the_node_could_not_start_is_put_back_without_spending_an_attempt_on_redis() {
    a_task_the_node_could_not_start_is_put_back_without_spending_an_attempt(TestBackend::redis())
        .await;
}
