//! `Scheduler::pending` and `Scheduler::dead_letters` read at most `limit` records from Redis
//! overall, whatever the number of partitions (DESIGN.md: "Lists (`pending`, `dead`) read at
//! most `limit` records from Redis overall"), measured as the bytes Redis sent
//! (`total_net_output_bytes`); and they list the same entries, in the same order, as a read
//! of every record would. `limit` is 1..=1,000, else a typed error naming it.

mod support;

use std::collections::BTreeMap;

use bytes::Bytes;
use delayq_engine::admin::MAX_LIST_LIMIT;
use delayq_engine::{EngineError, Scheduler};
use delayq_storage::{
    partition_of, FailAction, NewTask, Partition, QueueName, ScheduleMode, TaskId, TaskStore,
};
use delayq_testkit::RedisServer;
use support::{fast_config, TestBackend};

const PARTITIONS: u32 = 16;
const PAYLOAD_BYTES: usize = 50_000;
/// Well under the 16 × 50 KB a read of one record per partition sends.
const MOST_SENT: u64 = 120_000;

/// One id per partition of a queue of [`PARTITIONS`], named `{prefix}-{n}`.
fn one_id_per_partition(prefix: &str) -> BTreeMap<u32, TaskId> {
    let mut ids = BTreeMap::new();
    let mut n = 0;
    while ids.len() < PARTITIONS as usize {
        let id = TaskId::new(format!("{prefix}-{n}")).expect("a task id");
        ids.entry(partition_of(&id, PARTITIONS)).or_insert(id);
        n += 1;
    }
    ids
}

async fn dead_letter(store: &dyn TaskStore, partition: &Partition, id: &TaskId, now_ms: u64) {
    let due_ms = now_ms - 1_000;
    let task = NewTask {
        id: id.clone(),
        due_ms,
        payload: Bytes::from(vec![b'd'; PAYLOAD_BYTES]),
        traceparent: None,
    };
    store
        .schedule(partition, task, ScheduleMode::Upsert)
        .await
        .expect("schedule");
    let batch = store
        .claim_due(partition, now_ms, 1, now_ms + 60_000, "list-cost")
        .await
        .expect("claim_due");
    let [claimed] = &batch.tasks[..] else {
        panic!("claimed {:?}", batch.tasks);
    };
    store
        .fail(
            &claimed.token,
            &format!("boom {id}"),
            FailAction::DeadLetter,
        )
        .await
        .expect("fail");
}

/// The bytes Redis sent while `read` ran.
async fn sent_during<T>(
    server: &RedisServer,
    read: impl std::future::Future<Output = T>,
) -> (T, u64) {
    let before = server.net_output_bytes();
    let value = read.await;
    (value, server.net_output_bytes() - before)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn listings_of_16_partitions_of_50_kb_tasks_read_limit_records_from_redis() {
    let backend = TestBackend::redis();
    let TestBackend::Redis(server) = &backend else {
        unreachable!("a Redis backend")
    };
    let scheduler: Scheduler = backend
        .builder(&fast_config())
        .start()
        .await
        .expect("a producer");
    let store = scheduler.store();
    let queue = QueueName::new("big").expect("a queue name");
    store
        .register_queue(&queue, PARTITIONS)
        .await
        .expect("register");
    let now_ms = scheduler.now_ms();
    for (index, id) in one_id_per_partition("dead") {
        let partition = Partition::new(queue.clone(), index);
        dead_letter(store.as_ref(), &partition, &id, now_ms).await;
        // Distinct failure times, so the order is by time and not only by id.
        tokio::time::sleep(std::time::Duration::from_millis(2)).await;
    }
    for (index, id) in one_id_per_partition("pending") {
        let task = NewTask {
            id,
            due_ms: now_ms + 3_600_000 + u64::from(index),
            payload: Bytes::from(vec![b'p'; PAYLOAD_BYTES]),
            traceparent: None,
        };
        store
            .schedule(
                &Partition::new(queue.clone(), index),
                task,
                ScheduleMode::Upsert,
            )
            .await
            .expect("schedule");
    }

    let (dead, sent) = sent_during(server, scheduler.dead_letters("big", 1)).await;
    let dead = dead.expect("dead_letters");
    eprintln!("dead_letters(limit = 1) over {PARTITIONS} partitions of 50 KB dead letters: Redis sent {sent} bytes");
    assert_eq!(dead.len(), 1);
    assert_eq!(
        dead[0].payload.len(),
        PAYLOAD_BYTES,
        "the record shown is whole"
    );
    assert!(
        sent < MOST_SENT,
        "dead_letters(limit = 1) made Redis send {sent} bytes"
    );

    let (pending, sent) = sent_during(server, scheduler.pending("big", 1)).await;
    let pending = pending.expect("pending");
    eprintln!(
        "pending(limit = 1) over {PARTITIONS} partitions of 50 KB tasks: Redis sent {sent} bytes"
    );
    assert_eq!(pending.len(), 1);
    assert_eq!(pending[0].payload.len(), PAYLOAD_BYTES);
    assert!(
        sent < MOST_SENT,
        "pending(limit = 1) made Redis send {sent} bytes"
    );

    // Every limit lists the same entries as reading every record and cutting would.
    let mut every_dead = Vec::new();
    for index in 0..PARTITIONS {
        every_dead.extend(
            store
                .list_dead(&Partition::new(queue.clone(), index), MAX_LIST_LIMIT)
                .await
                .expect("list_dead"),
        );
    }
    every_dead.sort_by(|a, b| (a.failed_ms, &a.id).cmp(&(b.failed_ms, &b.id)));
    for limit in [1, 2, 5, 16, MAX_LIST_LIMIT] {
        let (listed, sent) = sent_during(server, scheduler.dead_letters("big", limit)).await;
        let listed = listed.expect("dead_letters");
        let shown = limit.min(every_dead.len());
        assert_eq!(listed, every_dead[..shown], "dead_letters(limit = {limit})");
        // The records shown, plus ids and scores.
        assert!(
            sent < (shown * PAYLOAD_BYTES) as u64 + MOST_SENT,
            "dead_letters(limit = {limit}) made Redis send {sent} bytes"
        );
        let pending = scheduler.pending("big", limit).await.expect("pending");
        let dues: Vec<u64> = pending.iter().map(|task| task.due_ms).collect();
        let expected: Vec<u64> = (0..PARTITIONS)
            .map(|index| now_ms + 3_600_000 + u64::from(index))
            .take(limit)
            .collect();
        assert_eq!(dues, expected, "pending(limit = {limit})");
    }

    // A limit outside 1..=1000 is refused, naming it.
    for limit in [0, MAX_LIST_LIMIT + 1] {
        for result in [
            scheduler.dead_letters("big", limit).await.map(|_| ()),
            scheduler.pending("big", limit).await.map(|_| ()),
        ] {
            match result {
                Err(error @ EngineError::InvalidLimit { .. }) => assert_eq!(
                    error.to_string(),
                    format!("invalid limit {limit}: expected 1..=1000")
                ),
                other => panic!("limit {limit}: {other:?}"),
            }
        }
    }
    scheduler.shutdown().await.expect("shutdown");
}
