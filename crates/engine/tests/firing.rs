//! Firing: every task exactly once and never early across several nodes; cancel and
//! reschedule after prefetch; a node whose clock is wrong still fires on time.

mod support;

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use delayq_coordinator::{LocalClock, SkewedClock, SystemClock};
use delayq_engine::config::Config;
use delayq_engine::{ScheduleRequest, Scheduler, Task, When};
use rand::{Rng, SeedableRng};
use support::{fast_config, wait_for_ownership, wait_until, Recorder, TestBackend};

async fn start_nodes(
    backend: &TestBackend,
    config: &Config,
    count: usize,
    recorder: &Recorder,
) -> Vec<Scheduler> {
    let mut nodes = Vec::new();
    for _ in 0..count {
        let node = backend
            .builder(config)
            .handler("orders", recorder.handler())
            .start()
            .await
            .expect("node starts");
        nodes.push(node);
    }
    wait_for_ownership(&nodes, count).await;
    nodes
}

fn lateness_summary(recorder: &Recorder) -> (u64, u64, u64) {
    let mut lateness: Vec<u64> = recorder
        .firings()
        .iter()
        .map(|f| f.fired_ms.saturating_sub(f.due_ms))
        .collect();
    lateness.sort_unstable();
    let at = |q: f64| lateness[((lateness.len() - 1) as f64 * q) as usize];
    (at(0.5), at(0.99), *lateness.last().unwrap_or(&0))
}

async fn every_task_fires_exactly_once_never_early(backend: TestBackend, tasks: usize) {
    let recorder = Recorder::new();
    let nodes = start_nodes(&backend, &fast_config(), 3, &recorder).await;
    let mut rng = rand::rngs::StdRng::seed_from_u64(7);
    // Each node schedules a third of the tasks, in batches, concurrently.
    let mut batches: Vec<Vec<ScheduleRequest>> = vec![Vec::new(); nodes.len()];
    for n in 0..tasks {
        batches[n % nodes.len()].push(ScheduleRequest {
            id: format!("task-{n}"),
            when: When::In(Duration::from_millis(rng.random_range(200..3_000))),
            payload: bytes::Bytes::new(),
            mode: Default::default(),
            traceparent: None,
        });
    }
    let mut producers = Vec::new();
    for (node, batch) in nodes.iter().zip(batches) {
        let node = node.clone();
        producers.push(tokio::spawn(async move {
            for chunk in batch.chunks(250) {
                for result in node
                    .schedule_many("orders", chunk.to_vec())
                    .await
                    .expect("batch stored")
                {
                    result.expect("item stored");
                }
            }
        }));
    }
    let loading = std::time::Instant::now();
    for producer in producers {
        producer.await.expect("producer finished");
    }
    eprintln!("scheduled {tasks} tasks in {:?}", loading.elapsed());
    wait_until(Duration::from_secs(30), "every task fired", || {
        recorder.distinct() == tasks
    })
    .await;
    // Let in-flight acks settle, then check nothing fired twice.
    let probe = nodes[0].clone();
    let mut settled = false;
    for _ in 0..100 {
        let stats = probe.stats().await.expect("stats");
        let orders = stats.get("orders").copied().unwrap_or_default();
        if orders.pending == 0 && orders.inflight == 0 {
            settled = true;
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert!(settled, "queue drained");
    let twice: Vec<_> = recorder
        .counts()
        .into_iter()
        .filter(|(_, count)| *count > 1)
        .collect();
    assert!(twice.is_empty(), "fired more than once: {twice:?}");
    let early: Vec<_> = recorder
        .firings()
        .into_iter()
        .filter(|f| f.fired_ms < f.due_ms)
        .collect();
    assert!(
        early.is_empty(),
        "fired early: {:?}",
        &early[..early.len().min(5)]
    );
    let per_node: BTreeMap<String, usize> =
        recorder.firings().iter().fold(BTreeMap::new(), |mut m, f| {
            *m.entry(f.node.clone()).or_insert(0) += 1;
            m
        });
    assert_eq!(
        per_node.len(),
        3,
        "all three nodes fired tasks: {per_node:?}"
    );
    let (p50, p99, max) = lateness_summary(&recorder);
    eprintln!("lateness ms: p50 {p50}, p99 {p99}, max {max}; per node {per_node:?}");
    for node in &nodes {
        node.shutdown().await.expect("graceful shutdown");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn three_redis_nodes_fire_5000_tasks_exactly_once_never_early() {
    every_task_fires_exactly_once_never_early(TestBackend::redis(), 5_000).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn three_postgres_nodes_fire_5000_tasks_exactly_once_never_early() {
    every_task_fires_exactly_once_never_early(TestBackend::postgres(), 5_000).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn three_memory_nodes_fire_5000_tasks_exactly_once_never_early() {
    every_task_fires_exactly_once_never_early(TestBackend::memory(), 5_000).await;
}

async fn cancel_and_reschedule_win_over_prefetch(backend: TestBackend) {
    let recorder = Recorder::new();
    let config = fast_config();
    let nodes = start_nodes(&backend, &config, 2, &recorder).await;
    // A producer that runs no handler: the owners learn of the tasks by wake-up or pull.
    let producer = backend
        .builder(&config)
        .start()
        .await
        .expect("producer starts");
    let due = producer.now_ms() + 1_500;
    for id in ["cancelled", "moved-later", "moved-earlier", "unchanged"] {
        producer
            .schedule("orders", id, When::At(due), "")
            .await
            .expect("scheduled");
    }
    // The prefetch window is 2 s and the pull period 250 ms: within 600 ms every owner has
    // pulled the tasks into its timer.
    let owners_pulled = nodes.clone();
    wait_until(
        Duration::from_secs(5),
        "owners prefetched the tasks",
        || owners_pulled.iter().map(|n| n.prefetched()).sum::<usize>() > 0,
    )
    .await;
    tokio::time::sleep(Duration::from_millis(600)).await;
    assert!(producer
        .cancel("orders", "cancelled")
        .await
        .expect("cancel")
        .cancelled());
    let later = due + 1_000;
    let earlier = producer.now_ms() + 200;
    producer
        .schedule("orders", "moved-later", When::At(later), "")
        .await
        .expect("moved later");
    producer
        .schedule("orders", "moved-earlier", When::At(earlier), "")
        .await
        .expect("moved earlier");
    wait_until(Duration::from_secs(10), "the other tasks fired", || {
        let counts = recorder.counts();
        counts.contains_key("moved-later") && counts.contains_key("unchanged")
    })
    .await;
    let firings = recorder.firings();
    let find = |id: &str| firings.iter().find(|f| f.id == id).cloned();
    assert!(find("cancelled").is_none(), "a cancelled task fired");
    let moved_later = find("moved-later").expect("fired");
    assert!(
        moved_later.fired_ms >= later,
        "moved-later fired at its old time: {moved_later:?}"
    );
    let moved_earlier = find("moved-earlier").expect("fired");
    assert!(moved_earlier.fired_ms >= earlier);
    assert!(
        moved_earlier.fired_ms < due,
        "moved-earlier waited for its old time: {moved_earlier:?}"
    );
    assert_eq!(recorder.len(), 3, "{firings:?}");
    for node in nodes.iter().chain([&producer]) {
        node.shutdown().await.expect("shutdown");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn cancel_and_reschedule_after_prefetch_win_on_redis() {
    cancel_and_reschedule_win_over_prefetch(TestBackend::redis()).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn cancel_and_reschedule_after_prefetch_win_on_postgres() {
    cancel_and_reschedule_win_over_prefetch(TestBackend::postgres()).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn cancel_and_reschedule_after_prefetch_win_in_memory() {
    cancel_and_reschedule_win_over_prefetch(TestBackend::memory()).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_node_whose_clock_is_5s_off_fires_on_time() {
    nodes_whose_clocks_are_5s_off_fire_on_time(TestBackend::redis()).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_node_whose_clock_is_5s_off_fires_on_time_on_postgres() {
    // The cluster clock is the database's clock_timestamp() (this machine's clock).
    nodes_whose_clocks_are_5s_off_fire_on_time(TestBackend::postgres()).await;
}

async fn nodes_whose_clocks_are_5s_off_fire_on_time(backend: TestBackend) {
    let fired_at_real_ms = Arc::new(parking_lot::Mutex::new(Vec::<(u64, u64)>::new()));
    let record = fired_at_real_ms.clone();
    let config = fast_config();
    let mut nodes = Vec::new();
    for skew_ms in [5_000i64, -5_000] {
        let record = record.clone();
        let node = backend
            .builder(&config)
            .local_clock(Arc::new(SkewedClock { skew_ms }))
            .handler("orders", move |task: Task| {
                record.lock().push((task.due_ms, SystemClock.now_ms()));
                futures::future::ready(Ok::<(), std::io::Error>(()))
            })
            .start()
            .await
            .expect("skewed node starts");
        nodes.push(node);
    }
    wait_for_ownership(&nodes, 2).await;
    // Both skewed nodes read the cluster clock, not their own.
    let truth = SystemClock.now_ms() as i64;
    for node in &nodes {
        let error = node.now_ms() as i64 - truth;
        assert!(error.abs() < 50, "cluster clock off by {error} ms");
    }
    // Due times on the cluster clock (Redis TIME, which is this machine's clock).
    let count = 40;
    for n in 0..count {
        let due = SystemClock.now_ms() + 500 + n * 25;
        nodes[(n % 2) as usize]
            .schedule("orders", &format!("t{n}"), When::At(due), "")
            .await
            .expect("scheduled");
    }
    wait_until(Duration::from_secs(10), "all fired", || {
        fired_at_real_ms.lock().len() == count as usize
    })
    .await;
    // Never early, and nowhere near the 5 s skew late; the upper bound is generous (half the
    // skew) because a loaded CI machine delays fires (73 ms was seen with builds beside it
    // on Redis, 1.1 s on PostgreSQL with the whole suite and two benchmarks beside it), which
    // is the benchmarks' business, not this test's.
    for (due, real) in fired_at_real_ms.lock().iter() {
        let lateness = *real as i64 - *due as i64;
        assert!(
            (-5..=2_500).contains(&lateness),
            "fired {lateness} ms from its due time on the real clock"
        );
    }
    for node in &nodes {
        node.shutdown().await.expect("shutdown");
    }
}
