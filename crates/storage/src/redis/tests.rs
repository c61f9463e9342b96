//! Tests of what the conformance suite cannot see: the multi-item script paths (an id twice
//! in one call, tokens acked together) and the batching of concurrent calls.

use std::sync::Arc;

use bytes::Bytes;
use futures::future::join_all;

use crate::error::StorageError;
use crate::model::{
    AckOutcome, NewTask, Partition, QueueName, ScheduleMode, ScheduleOutcome, TaskId, TaskState,
};
use crate::store::TaskStore;

use super::{RedisStore, RedisStoreOptions};

const T0: u64 = 1_700_000_000_000;

async fn start() -> (delayq_testkit::RedisServer, RedisStore, Partition) {
    let server = tokio::task::spawn_blocking(delayq_testkit::RedisServer::start)
        .await
        .expect("start redis-server");
    let store = RedisStore::connect(RedisStoreOptions::standalone(server.url()))
        .await
        .expect("connect");
    let queue = QueueName::new("q").expect("valid");
    store.register_queue(&queue, 1).await.expect("register");
    (server, store, Partition::new(queue, 0))
}

fn task(name: &str, due_ms: u64) -> NewTask {
    NewTask {
        id: TaskId::new(name).expect("valid"),
        due_ms,
        payload: Bytes::from(format!("payload of {name}")),
        traceparent: None,
    }
}

#[tokio::test]
async fn an_id_twice_in_one_schedule_many_call_is_created_then_replaced() {
    let (_server, store, p) = start().await;
    let items = vec![
        (p.clone(), task("a", T0)),
        (p.clone(), task("b", T0)),
        (p.clone(), task("a", T0 + 5)),
    ];
    let outcomes: Vec<_> = store
        .schedule_many(items, ScheduleMode::Upsert)
        .await
        .expect("schedule_many")
        .into_iter()
        .map(|outcome| outcome.expect("stored"))
        .collect();
    assert_eq!(
        outcomes,
        [
            ScheduleOutcome::Created,
            ScheduleOutcome::Created,
            ScheduleOutcome::Replaced {
                previous_due_ms: T0
            }
        ]
    );
    let a = store
        .get(&p, &TaskId::new("a").expect("valid"))
        .await
        .expect("get")
        .expect("exists");
    assert_eq!((a.state, a.due_ms), (TaskState::Pending, T0 + 5));
    assert_eq!(store.stats(&p, T0 + 5).await.expect("stats").pending, 2);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_acks_complete_each_task_once_and_a_repeated_token_goes_stale() {
    let (_server, store, p) = start().await;
    let items = (0..300)
        .map(|n| (p.clone(), task(&format!("t-{n}"), T0)))
        .collect();
    store
        .schedule_many(items, ScheduleMode::Upsert)
        .await
        .expect("schedule_many");
    let claimed = store
        .claim_due(&p, T0, 1_000, T0 + 60_000, "node")
        .await
        .expect("claim")
        .tasks;
    assert_eq!(claimed.len(), 300);
    let store = Arc::new(store);
    // Every token acked twice, all at once: batches carry repeated ids.
    let acks = claimed.iter().chain(&claimed).map(|task| {
        let store = Arc::clone(&store);
        let token = task.token.clone();
        tokio::spawn(async move { store.ack(&token).await })
    });
    let results: Vec<_> = join_all(acks)
        .await
        .into_iter()
        .map(|joined| joined.expect("no panic"))
        .collect();
    let completed = results
        .iter()
        .filter(|result| matches!(result, Ok(AckOutcome::Completed)))
        .count();
    let stale = results
        .iter()
        .filter(|result| matches!(result, Err(StorageError::StaleLease { .. })))
        .count();
    assert_eq!((completed, stale), (300, 300), "{results:?}");
    let stats = store.stats(&p, T0).await.expect("stats");
    assert_eq!((stats.inflight, stats.done), (0, 300));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_single_schedules_are_each_reported() {
    let (_server, store, p) = start().await;
    let store = Arc::new(store);
    let schedules = (0..200).map(|n| {
        let store = Arc::clone(&store);
        let p = p.clone();
        // Two producers per id: one creates, the other replaces (in either order).
        tokio::spawn(async move {
            store
                .schedule(
                    &p,
                    task(&format!("t-{}", n / 2), T0 + n),
                    ScheduleMode::Upsert,
                )
                .await
        })
    });
    let outcomes: Vec<_> = join_all(schedules)
        .await
        .into_iter()
        .map(|joined| joined.expect("no panic").expect("stored"))
        .collect();
    let created = outcomes
        .iter()
        .filter(|outcome| **outcome == ScheduleOutcome::Created)
        .count();
    let replaced = outcomes.iter().filter(|outcome| outcome.replaced()).count();
    assert_eq!((created, replaced), (100, 100));
    assert_eq!(store.stats(&p, T0).await.expect("stats").pending, 100);
}
