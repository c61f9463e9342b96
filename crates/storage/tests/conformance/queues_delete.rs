//! Deleting a whole queue (`delayq queue delete`): every task of every partition and the
//! registry entry go, other queues stay, including one whose name starts with the deleted
//! name.

use super::*;

/// `<main queue><suffix>`: a queue of the case's own (on a cluster, cases share a server).
fn named(store: &Subject, suffix: &str) -> String {
    format!("{}{suffix}", store.queue)
}

/// Partition `index` of `queue`.
fn part(queue: &str, index: u32) -> Partition {
    Partition::new(QueueName::new(queue).expect("valid queue name"), index)
}

pub async fn delete_queue_removes_every_task_and_the_registry_entry(make: Make) {
    let store = make(StoreOptions::default()).await;
    let doomed = named(&store, "");
    let lookalike = named(&store, "-eu");
    let longer = named(&store, "0");
    register(&store, &doomed, 4).await;
    register(&store, &lookalike, 2).await;
    register(&store, &longer, 1).await;

    // Of the doomed queue: two pending, one in flight, one dead, one done, and paused.
    schedule(&store, &part(&doomed, 0), "a", T0 + 10_000).await;
    schedule(&store, &part(&doomed, 0), "b", T0).await;
    schedule(&store, &part(&doomed, 1), "c", T0).await;
    let running = claim_one(&store, &part(&doomed, 1), T0).await;
    schedule_dead(&store, &part(&doomed, 2), "d", T0, "boom").await;
    complete(&store, &part(&doomed, 3), "e", T0).await;
    // Of the others: the same ids, one lookalike queue paused.
    schedule(&store, &part(&lookalike, 0), "a", T0).await;
    schedule(&store, &part(&lookalike, 1), "c", T0).await;
    schedule(&store, &part(&longer, 0), "b", T0).await;
    store
        .set_paused(&QueueName::new(&doomed).expect("name"), 4, true)
        .await
        .expect("pause");
    store
        .set_paused(&QueueName::new(&lookalike).expect("name"), 2, true)
        .await
        .expect("pause");

    let removed = store
        .delete_queue(&QueueName::new(&doomed).expect("name"), 4)
        .await
        .expect("delete_queue");
    assert_eq!(
        removed, 4,
        "two pending, one in flight, one dead (done does not count)"
    );

    let queues: Vec<String> = store
        .queues()
        .await
        .expect("queues")
        .into_iter()
        .map(|(queue, _)| queue.as_str().to_owned())
        .collect();
    assert!(!queues.contains(&doomed), "{queues:?}");
    assert!(
        queues.contains(&lookalike) && queues.contains(&longer),
        "{queues:?}"
    );
    let paused: Vec<String> = store
        .paused_queues()
        .await
        .expect("paused_queues")
        .into_iter()
        .map(|(queue, _)| queue.as_str().to_owned())
        .collect();
    assert_eq!(
        paused,
        vec![lookalike.clone()],
        "the other queue stays paused"
    );

    for index in 0..4 {
        let partition = part(&doomed, index);
        let stats = store.stats(&partition, T0).await.expect("stats");
        assert_eq!(stats, PartitionStats::default(), "partition {index}");
        for name in ["a", "b", "c", "d", "e"] {
            assert!(
                store
                    .get(&partition, &id(name))
                    .await
                    .expect("get")
                    .is_none(),
                "{name} in partition {index}"
            );
        }
    }
    // The handler that was running finds its task gone.
    assert!(!matches!(
        store.ack(&running.token).await,
        Ok(AckOutcome::Completed)
    ));

    assert_eq!(get(&store, &part(&lookalike, 0), "a").await.due_ms, T0);
    assert_eq!(get(&store, &part(&lookalike, 1), "c").await.due_ms, T0);
    assert_eq!(get(&store, &part(&longer, 0), "b").await.due_ms, T0);
    let batch = store
        .claim_due(&part(&longer, 0), T0, 10, LEASE, "conformance")
        .await
        .expect("claim");
    assert_eq!(ids(&batch.tasks), ["b"], "the other queue still fires");

    // Deleting again removes nothing.
    let again = store
        .delete_queue(&QueueName::new(&doomed).expect("name"), 4)
        .await
        .expect("delete_queue again");
    assert_eq!(again, 0);
}

pub async fn a_deleted_queue_starts_afresh(make: Make) {
    let store = make(StoreOptions::default()).await;
    let queue = named(&store, "");
    register(&store, &queue, 2).await;
    complete(&store, &part(&queue, 0), "x", T0).await;
    let removed = store
        .delete_queue(&QueueName::new(&queue).expect("name"), 2)
        .await
        .expect("delete_queue");
    assert_eq!(removed, 0, "a done record is not a task to remove");
    // The partition count was forgotten, and so was the done set: the same id and due
    // is a new task, not a duplicate.
    register(&store, &queue, 3).await;
    assert_eq!(
        schedule(&store, &part(&queue, 0), "x", T0).await,
        ScheduleOutcome::Created
    );
    let batch = store
        .claim_due(&part(&queue, 0), T0, 10, LEASE, "conformance")
        .await
        .expect("claim");
    assert_eq!(ids(&batch.tasks), ["x"]);
    assert!(!batch.paused);
}
