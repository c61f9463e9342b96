//! A partition's claims start small and grow only while they come back full
//! (`claim_size.rs`): a partition that finds a few tasks due asks for 32, not for
//! `claim_batch`, so it holds few handler slots while its claim waits; a burst ramps up to
//! `claim_batch` (and never beyond it). Behind a backlog, a queue whose handler slots are
//! all busy claims in shares of its slots, not a few tasks per partition
//! (`partition.rs`, `BUSY_GATHERERS`).

mod support;

use std::time::Duration;

use delayq_engine::config::Config;
use delayq_engine::When;
use support::{fast_config, wait_until, Recorder, TestBackend};

/// The first claim's size (`claim_size::FIRST_CLAIM`).
const FIRST_CLAIM: usize = 32;
/// `engine.claim_batch` here: the upper bound.
const CLAIM_BATCH: usize = 256;

/// One partition with far more handler slots than `claim_batch`, so that the free slots
/// never decide a claim's size.
fn one_roomy_partition() -> Config {
    let mut config = fast_config();
    config.engine.claim_batch = CLAIM_BATCH;
    config.node.max_running = 8_192;
    config.queue_defaults.partitions = 1;
    config.queue_defaults.concurrency = 4_096;
    config
}

/// Puts a burst of `count` tasks of queue `q` in place, all due, before any can be claimed:
/// the queue is paused while they are scheduled (due now) and resumed after, so the burst
/// arrives whole however long scheduling takes on a loaded machine (a due instant 3 s ahead
/// was passed by 3,000 single schedules on PostgreSQL under a CI build's load).
async fn schedule_burst(node: &delayq_engine::Scheduler, count: usize) {
    node.pause_queue("q").await.expect("pause");
    let due = node.now_ms();
    // All at once, as a burst arrives: the single schedules share store calls.
    let ids: Vec<String> = (0..count).map(|n| format!("t-{n}")).collect();
    let scheduled = futures::future::join_all(
        ids.iter()
            .map(|id| node.schedule("q", id, When::At(due), "")),
    )
    .await;
    for outcome in scheduled {
        outcome.expect("schedule");
    }
    node.resume_queue("q").await.expect("resume");
}

/// Puts `count` due tasks in place at once ([`schedule_burst`]) and waits until all fired.
async fn fire_at_once(backend: TestBackend, count: usize) -> Vec<support::ClaimCall> {
    let config = one_roomy_partition();
    let store = backend
        .recording_store(&config, delayq_storage::StoreOptions::default())
        .await;
    let recorder = Recorder::new();
    let node = backend
        .builder(&config)
        .store(store.clone())
        .handler("q", recorder.handler())
        .start()
        .await
        .expect("node starts");
    wait_until(Duration::from_secs(10), "the partition is owned", || {
        node.owned_partitions().len() == 1
    })
    .await;
    schedule_burst(&node, count).await;
    wait_until(Duration::from_secs(20), "every task fired", || {
        recorder.distinct() == count
    })
    .await;
    assert_eq!(recorder.len(), count, "a task fired twice");
    node.shutdown().await.expect("node stops");
    store.claim_calls()
}

async fn a_partition_with_a_few_tasks_due_asks_for_a_small_claim(backend: TestBackend) {
    let calls = fire_at_once(backend, 3).await;
    assert!(calls.iter().any(|call| call.got > 0), "no claim got a task");
    for call in &calls {
        assert!(
            call.limit <= FIRST_CLAIM,
            "a claim asked for {} tasks with 3 due (claims: {calls:?})",
            call.limit
        );
    }
}

async fn a_burst_ramps_the_claims_up_to_claim_batch(backend: TestBackend) {
    let calls = fire_at_once(backend, 2_000).await;
    let busy: Vec<_> = calls.iter().filter(|call| call.got > 0).collect();
    assert_eq!(
        busy.first().map(|call| call.limit),
        Some(FIRST_CLAIM),
        "the first claim of the burst (claims: {busy:?})"
    );
    let sizes: Vec<usize> = busy.iter().take(4).map(|call| call.limit).collect();
    assert_eq!(sizes, [32, 64, 128, 256], "the ramp (claims: {busy:?})");
    assert!(
        calls.iter().all(|call| call.limit <= CLAIM_BATCH),
        "a claim asked for more than claim_batch (claims: {calls:?})"
    );
    let full = busy.iter().filter(|call| call.limit == CLAIM_BATCH).count();
    assert!(
        full >= 5,
        "the burst was not claimed at claim_batch: {busy:?}"
    );
}

/// Partitions of the saturated queue below: many more than the few that gather at once.
const BUSY_PARTITIONS: u32 = 16;
/// Its `concurrency`: behind a backlog a claim waits for half of it.
const BUSY_CONCURRENCY: usize = 32;

/// A burst on a queue of 16 partitions whose 32 handler slots are the bottleneck (each
/// handler takes 2 ms): the slots that come free go to a few claims at a time, so the claims
/// carry about half of the slots each. With every partition gathering at once, the 32 slots
/// were shared out a few per partition (a median of one or two tasks per claim, each claim
/// and its ack a store call).
async fn a_saturated_queue_claims_in_shares_of_its_slots(backend: TestBackend) {
    const TASKS: usize = 3_000;
    let mut config = fast_config();
    config.node.max_running = 8_192;
    config.queue_defaults.partitions = BUSY_PARTITIONS;
    config.queue_defaults.concurrency = BUSY_CONCURRENCY;
    let store = backend
        .recording_store(&config, delayq_storage::StoreOptions::default())
        .await;
    let recorder = Recorder::new();
    let handler = {
        let recorder = recorder.clone();
        move |task: delayq_engine::Task| {
            recorder.record(&task);
            async {
                tokio::time::sleep(Duration::from_millis(2)).await;
                Ok::<(), std::io::Error>(())
            }
        }
    };
    let node = backend
        .builder(&config)
        .store(store.clone())
        .handler("q", handler)
        .start()
        .await
        .expect("node starts");
    wait_until(Duration::from_secs(10), "the partitions are owned", || {
        node.owned_partitions().len() == BUSY_PARTITIONS as usize
    })
    .await;
    schedule_burst(&node, TASKS).await;
    wait_until(Duration::from_secs(60), "every task fired", || {
        recorder.distinct() == TASKS
    })
    .await;
    node.shutdown().await.expect("node stops");
    let mut sizes: Vec<usize> = store
        .claim_calls()
        .iter()
        .filter(|call| call.got > 0)
        .map(|call| call.got)
        .collect();
    sizes.sort_unstable();
    let median = sizes[sizes.len() / 2];
    assert!(
        median >= BUSY_CONCURRENCY / 4,
        "the median claim carried {median} tasks ({} claims for {TASKS} tasks; sizes: {sizes:?})",
        sizes.len()
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn saturated_queue_claims_in_shares_memory() {
    a_saturated_queue_claims_in_shares_of_its_slots(TestBackend::memory()).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn saturated_queue_claims_in_shares_redis() {
    a_saturated_queue_claims_in_shares_of_its_slots(TestBackend::redis()).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn saturated_queue_claims_in_shares_postgres() {
    a_saturated_queue_claims_in_shares_of_its_slots(TestBackend::postgres()).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn few_due_small_claim_memory() {
    a_partition_with_a_few_tasks_due_asks_for_a_small_claim(TestBackend::memory()).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn few_due_small_claim_redis() {
    a_partition_with_a_few_tasks_due_asks_for_a_small_claim(TestBackend::redis()).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn burst_ramps_up_memory() {
    a_burst_ramps_the_claims_up_to_claim_batch(TestBackend::memory()).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn burst_ramps_up_redis() {
    a_burst_ramps_the_claims_up_to_claim_batch(TestBackend::redis()).await;
}
