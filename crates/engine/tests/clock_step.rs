//! Guarantee 9, clock steps: a step of a node's wall clock (NTP, an operator, a VM resumed)
//! makes no task fire before its due on the Redis clock and expires no healthy lease.
//!
//! The step goes through the engine's clock seam (`SchedulerBuilder::local_clock`): a
//! [`SteppingClock`] is the machine's clock whose wall reading a test steps while its
//! monotonic reading goes on, which is what NTP does to a real machine.

mod support;

use std::sync::Arc;
use std::time::Duration;

use delayq_coordinator::{LocalClock, SteppingClock, SystemClock};
use delayq_engine::{Task, When};
use delayq_storage::TaskStore;
use parking_lot::Mutex;
use support::{fast_config, wait_for_ownership, wait_until, TestBackend};

/// How far the wall clock is stepped: more than the lease, more than any prefetch.
const STEP_MS: i64 = 5_000;
/// How long a slow handler runs: across the step, and longer than the lease.
const SLOW_HANDLER: Duration = Duration::from_secs(4);

/// One handler run: the id, its due time, and the real time (µs) when it started. Redis runs
/// on this machine, so the real clock is Redis `TIME`.
type Run = (String, u64, u64);

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_5s_step_of_the_wall_clock_fires_nothing_early_and_expires_no_lease() {
    a_wall_clock_step_fires_nothing_early_and_expires_no_lease(TestBackend::redis()).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_5s_step_of_the_wall_clock_fires_nothing_early_and_expires_no_lease_on_postgres() {
    a_wall_clock_step_fires_nothing_early_and_expires_no_lease(TestBackend::postgres()).await;
}

async fn a_wall_clock_step_fires_nothing_early_and_expires_no_lease(backend: TestBackend) {
    let mut config = fast_config();
    // A heartbeat period of 1 s: a clock that followed the step would stay wrong until the
    // next heartbeat re-measured the offset, long enough to fire early and to run leases out.
    config.node.heartbeat_period = Duration::from_secs(1);
    config.node.heartbeat_ttl = Duration::from_secs(3);
    assert!(config.engine.lease < Duration::from_millis(STEP_MS as u64));
    let store = backend
        .recording_store(&config, delayq_storage::StoreOptions::default())
        .await;
    let machine = Arc::new(SteppingClock::default());
    let runs: Arc<Mutex<Vec<Run>>> = Arc::default();
    let record = runs.clone();
    let node = backend
        .builder(&config)
        .store(store.clone() as Arc<dyn TaskStore>)
        .local_clock(machine.clone())
        .handler("orders", move |task: Task| {
            record
                .lock()
                .push((task.id.clone(), task.due_ms, SystemClock.wall_us()));
            async move {
                if task.id.starts_with("slow-") {
                    tokio::time::sleep(SLOW_HANDLER).await;
                }
                Ok::<(), std::io::Error>(())
            }
        })
        .start()
        .await
        .expect("node starts");
    wait_for_ownership(std::slice::from_ref(&node), 1).await;

    // Slow handlers that will be running when the clock steps.
    let slow = 4;
    for n in 0..slow {
        node.schedule("orders", &format!("slow-{n}"), When::In(Duration::ZERO), "")
            .await
            .expect("scheduled");
    }
    wait_until(Duration::from_secs(5), "the slow handlers run", || {
        node.running_tasks() == slow
    })
    .await;
    // Tasks due over the next 6 s (due times on the Redis clock), every 100 ms.
    let quick = 60u64;
    let base_ms = SystemClock.now_ms() + 300;
    for n in 0..quick {
        node.schedule(
            "orders",
            &format!("quick-{n}"),
            When::At(base_ms + n * 100),
            "",
        )
        .await
        .expect("scheduled");
    }

    let cluster_error_ms = || node.now_ms() as i64 - SystemClock.now_ms() as i64;
    assert!(
        cluster_error_ms().abs() < 50,
        "off by {} ms",
        cluster_error_ms()
    );
    machine.step(STEP_MS);
    assert!(
        machine.now_ms() >= SystemClock.now_ms() + 4_900,
        "the wall clock stepped"
    );
    // The cluster clock does not jump, at the step nor after the heartbeats that follow it.
    for _ in 0..30 {
        let error = cluster_error_ms();
        assert!(error.abs() < 50, "the cluster clock moved by {error} ms");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }

    wait_until(Duration::from_secs(15), "every task ran", || {
        runs.lock().len() >= (slow + quick as usize)
    })
    .await;
    // Long enough for a wrongly expired lease to be requeued and claimed again.
    wait_until(Duration::from_secs(10), "the slow handlers finish", || {
        node.running_tasks() == 0
    })
    .await;
    tokio::time::sleep(config.engine.pull_period * 4).await;

    let runs = runs.lock().clone();
    for (id, due_ms, started_us) in &runs {
        let early_us = (*due_ms * 1_000) as i64 - *started_us as i64;
        assert!(
            early_us <= 5_000,
            "{id} started {early_us} µs before its due time on the Redis clock"
        );
    }
    let mut ids: Vec<&str> = runs.iter().map(|(id, ..)| id.as_str()).collect();
    ids.sort_unstable();
    let total = ids.len();
    ids.dedup();
    assert_eq!(total, ids.len(), "a task ran twice: {runs:?}");
    assert_eq!(store.requeued(), 0, "a healthy lease was taken back");
    node.shutdown().await.expect("shutdown");
}
