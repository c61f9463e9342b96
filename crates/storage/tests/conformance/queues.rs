//! register_queue, queues, stats.

use delayq_storage::{Partition, PartitionStats, QueueName, StorageError, StoreOptions};

use super::*;

fn queue(name: &str) -> QueueName {
    QueueName::new(name).expect("valid queue name")
}

pub async fn register_queue_records_the_count_and_accepts_it_again(make: Make) {
    let store = make(StoreOptions::default()).await;
    assert_eq!(
        store
            .register_queue(&queue("q"), 4)
            .await
            .expect("register"),
        4
    );
    assert_eq!(
        store
            .register_queue(&queue("q"), 4)
            .await
            .expect("register again"),
        4
    );
    assert_eq!(store.queues().await.expect("queues"), [(queue("q"), 4)]);
}

pub async fn register_queue_with_another_count_is_a_partition_mismatch(make: Make) {
    let store = make(StoreOptions::default()).await;
    store
        .register_queue(&queue("q"), 4)
        .await
        .expect("register");
    let error = store
        .register_queue(&queue("q"), 8)
        .await
        .expect_err("mismatch");
    match &error {
        StorageError::PartitionMismatch {
            queue,
            configured,
            recorded,
        } => assert_eq!((queue.as_str(), *configured, *recorded), ("q", 8, 4)),
        other => panic!("expected PartitionMismatch, got {other:?}"),
    }
    let message = error.to_string();
    assert!(message.contains('4') && message.contains('8'), "{message}");
    assert_eq!(
        store.queues().await.expect("queues"),
        [(queue("q"), 4)],
        "the record stands"
    );
}

pub async fn register_queue_rejects_zero_and_more_than_65536_partitions(make: Make) {
    let store = make(StoreOptions::default()).await;
    for partitions in [0, 65_537, u32::MAX] {
        match store.register_queue(&queue("bad"), partitions).await {
            Err(StorageError::InvalidPartitionCount {
                queue,
                partitions: given,
            }) => assert_eq!((queue.as_str(), given), ("bad", partitions)),
            other => panic!("expected InvalidPartitionCount for {partitions}, got {other:?}"),
        }
    }
    assert!(
        store.queues().await.expect("queues").is_empty(),
        "nothing recorded"
    );
    assert_eq!(
        store
            .register_queue(&queue("big"), 65_536)
            .await
            .expect("register"),
        65_536
    );
    assert_eq!(
        store
            .register_queue(&queue("bad"), 1)
            .await
            .expect("register"),
        1
    );
}

pub async fn queues_lists_registered_queues_sorted_by_name(make: Make) {
    let store = make(StoreOptions::default()).await;
    assert!(store.queues().await.expect("queues").is_empty());
    for (name, partitions) in [("b", 3), ("a", 1), ("c-2", 2)] {
        store
            .register_queue(&queue(name), partitions)
            .await
            .expect("register");
    }
    assert_eq!(
        store.queues().await.expect("queues"),
        [(queue("a"), 1), (queue("b"), 3), (queue("c-2"), 2)]
    );
}

pub async fn stats_count_pending_due_now_inflight_dead_and_done(make: Make) {
    let (store, p) = setup(make).await;
    for (name, due) in [("due-1", T0 - 5), ("due-2", T0), ("later", T0 + 1)] {
        schedule(&store, &p, name, due).await;
    }
    for name in ["inflight", "dead", "done-1", "done-2"] {
        schedule(&store, &p, name, T0 - 1_000).await;
    }
    let claimed = store
        .claim_due(&p, T0 - 1_000, 10, LEASE, "stats")
        .await
        .expect("claim_due")
        .tasks;
    assert_eq!(claimed.len(), 4);
    for task in &claimed {
        match task.id.as_str() {
            "dead" => {
                dead_letter(&store, task, "boom").await;
            }
            "done-1" | "done-2" => {
                store.ack(&task.token).await.expect("ack");
            }
            _ => {}
        }
    }
    let stats = store.stats(&p, T0).await.expect("stats");
    let expected = PartitionStats {
        pending: 3,
        due_now: 2,
        inflight: 1,
        dead: 1,
        done: 2,
        held_back: 0,
    };
    assert_eq!(stats, expected);
    assert_eq!(store.stats(&p, T0 + 1).await.expect("stats").due_now, 3);
    assert_eq!(store.stats(&p, T0 - 6).await.expect("stats").due_now, 0);
}

pub async fn stats_of_an_untouched_partition_are_zero(make: Make) {
    let store = make(StoreOptions::default()).await;
    let first = register(&store, "empty", 4).await;
    let last = Partition::new(first.queue.clone(), 3);
    assert_eq!(
        store.stats(&last, T0).await.expect("stats"),
        PartitionStats::default()
    );
}
