//! Memory-only tests: what needs a clock that the test moves by hand, and what only the
//! memory backend promises. The shared behaviour is in `tests/conformance`.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use super::MemoryStore;
use crate::error::StorageError;
use crate::model::{
    AckOutcome, FailAction, NewTask, Partition, QueueName, ScheduleMode, ScheduleOutcome,
    StoreOptions, TaskId, TaskState,
};
use crate::store::TaskStore;

const RETENTION_MS: u64 = 1_000;

/// A store whose clock reads `clock`, with a one-second retention.
fn store_on(clock: &Arc<AtomicU64>) -> MemoryStore {
    let clock = Arc::clone(clock);
    let options = StoreOptions {
        executed_retention_ms: RETENTION_MS,
        ..StoreOptions::default()
    };
    MemoryStore::with_clock(options, Arc::new(move || clock.load(Ordering::SeqCst)))
}

fn partition() -> Partition {
    Partition::new(QueueName::new("memory").expect("valid queue"), 0)
}

fn id(name: &str) -> TaskId {
    TaskId::new(name).expect("valid id")
}

fn task(name: &str, due_ms: u64) -> NewTask {
    NewTask {
        id: id(name),
        due_ms,
        payload: "p".into(),
        traceparent: None,
    }
}

async fn schedule(store: &MemoryStore, name: &str, due_ms: u64) -> ScheduleOutcome {
    store
        .schedule(&partition(), task(name, due_ms), ScheduleMode::Upsert)
        .await
        .expect("schedule")
}

/// Schedules, claims and acks `name`.
async fn complete(store: &MemoryStore, name: &str, due_ms: u64) {
    schedule(store, name, due_ms).await;
    let batch = store
        .claim_due(&partition(), due_ms, 1, due_ms + 1_000, "test")
        .await
        .expect("claim");
    let ack = store.ack(&batch.tasks[0].token).await.expect("ack");
    assert_eq!(ack, AckOutcome::Completed);
}

#[tokio::test]
async fn dedup_ends_exactly_when_the_retention_runs_out() {
    let clock = Arc::new(AtomicU64::new(10_000));
    let store = store_on(&clock);
    complete(&store, "a", 500).await;
    clock.store(10_000 + RETENTION_MS - 1, Ordering::SeqCst);
    assert_eq!(schedule(&store, "a", 500).await, ScheduleOutcome::Duplicate);
    clock.store(10_000 + RETENTION_MS, Ordering::SeqCst);
    assert_eq!(schedule(&store, "a", 500).await, ScheduleOutcome::Created);
}

#[tokio::test]
async fn get_hides_done_records_past_the_retention_until_they_are_pruned() {
    let clock = Arc::new(AtomicU64::new(10_000));
    let store = store_on(&clock);
    complete(&store, "a", 500).await;
    let info = store.get(&partition(), &id("a")).await.expect("get");
    assert_eq!(info.map(|i| i.state), Some(TaskState::Done));
    clock.store(10_000 + RETENTION_MS, Ordering::SeqCst);
    assert_eq!(store.get(&partition(), &id("a")).await.expect("get"), None);
    let stats = store.stats(&partition(), 0).await.expect("stats");
    assert_eq!(stats.done, 1, "counted until prune_done forgets it");
    let pruned = store.prune_done(&partition(), 10_001, 10).await;
    assert_eq!(pruned.expect("prune"), 1);
}

#[tokio::test]
async fn completion_and_failure_stamps_come_from_the_clock() {
    let clock = Arc::new(AtomicU64::new(5_000));
    let store = store_on(&clock);
    complete(&store, "done", 1).await;
    schedule(&store, "dead", 2).await;
    let batch = store
        .claim_due(&partition(), 2, 1, 9_000, "test")
        .await
        .expect("claim");
    clock.store(5_600, Ordering::SeqCst);
    let failed = store
        .fail(&batch.tasks[0].token, "boom", FailAction::DeadLetter)
        .await;
    failed.expect("fail");
    let done = store.get(&partition(), &id("done")).await.expect("get");
    assert_eq!(done.and_then(|i| i.state_since_ms), Some(5_000));
    let dead = store.list_dead(&partition(), 10).await.expect("list_dead");
    assert_eq!(dead[0].failed_ms, 5_600);
}

#[tokio::test]
async fn clones_share_one_state() {
    let store = MemoryStore::new(StoreOptions::default());
    let other_node = store.clone();
    schedule(&store, "a", 1).await;
    let batch = other_node
        .claim_due(&partition(), 1, 10, 2, "other")
        .await
        .expect("claim");
    assert_eq!(batch.tasks.len(), 1);
    let info = store.get(&partition(), &id("a")).await.expect("get");
    assert_eq!(info.map(|i| i.state), Some(TaskState::Inflight));
}

#[tokio::test]
async fn a_partition_beyond_the_registered_count_does_not_exist() {
    let store = MemoryStore::new(StoreOptions::default());
    let queue = QueueName::new("two").expect("valid queue");
    store.register_queue(&queue, 2).await.expect("register");
    let beyond = Partition::new(queue, 2);
    let result = store
        .schedule(&beyond, task("a", 1), ScheduleMode::Upsert)
        .await;
    assert!(
        matches!(
            result,
            Err(StorageError::NoSuchPartition {
                index: 2,
                partitions: 2,
                ..
            })
        ),
        "{result:?}"
    );
    assert!(store.stats(&beyond, 0).await.is_err());
}

#[tokio::test]
async fn a_token_whose_task_another_claimer_completed_is_stale() {
    let clock = Arc::new(AtomicU64::new(10_000));
    let store = store_on(&clock);
    let p = partition();
    schedule(&store, "a", 1).await;
    let lost = store.claim_due(&p, 1, 1, 100, "a").await.expect("claim");
    store.requeue_expired(&p, 200, 10).await.expect("requeue");
    let current = store.claim_due(&p, 200, 1, 900, "b").await.expect("claim");
    let ack = store.ack(&current.tasks[0].token).await.expect("ack");
    assert_eq!(ack, AckOutcome::Completed);
    let late = store.ack(&lost.tasks[0].token).await;
    assert!(
        matches!(late, Err(StorageError::StaleLease { .. })),
        "{late:?}"
    );
    let again = store.ack(&current.tasks[0].token).await;
    assert!(
        matches!(again, Err(StorageError::StaleLease { .. })),
        "{again:?}"
    );
}

#[tokio::test]
async fn renewing_a_superseded_lease_is_stale() {
    let store = MemoryStore::new(StoreOptions::default());
    let p = partition();
    schedule(&store, "a", 1).await;
    let claimed = store.claim_due(&p, 1, 1, 100, "a").await.expect("claim");
    schedule(&store, "a", 50).await;
    let renewed = store.renew(&claimed.tasks[0].token, 500).await;
    assert!(
        matches!(renewed, Err(StorageError::StaleLease { .. })),
        "{renewed:?}"
    );
}

#[tokio::test]
async fn a_large_partition_is_claimed_in_due_order() {
    const TASKS: u64 = 100_000;
    let store = MemoryStore::new(StoreOptions::default());
    let p = partition();
    // A permutation of the due times, so insertion order is not due order.
    let items = (0..TASKS)
        .map(|n| {
            let due = (n * 7_919) % TASKS;
            (p.clone(), task(&format!("t-{n}"), due))
        })
        .collect();
    let results = store
        .schedule_many(items, ScheduleMode::Upsert)
        .await
        .expect("schedule_many");
    assert!(results.iter().all(|r| r.is_ok()));
    let mut last_due = 0;
    let mut claimed = 0;
    loop {
        let batch = store
            .claim_due(&p, TASKS, 256, TASKS + 1, "bulk")
            .await
            .expect("claim");
        if batch.tasks.is_empty() {
            break;
        }
        for task in &batch.tasks {
            assert!(task.due_ms >= last_due);
            last_due = task.due_ms;
        }
        claimed += batch.tasks.len() as u64;
    }
    assert_eq!(claimed, TASKS);
}
