//! Queue controls in the store: a paused queue claims nothing, keeps its schedules, and
//! claims its backlog once resumed (guarantee 11).

use delayq_storage::{Cancel, QueueName, MAX_DUE_MS};

use super::*;

pub async fn a_paused_queue_claims_nothing_and_keeps_accepting_schedules(make: Make) {
    let (store, p) = setup(make).await;
    schedule(&store, &p, "a", T0).await;
    schedule(&store, &p, "gone", T0).await;
    store.set_paused(&p.queue, 1, true).await.expect("pause");
    let batch = store
        .claim_due(&p, MAX_DUE_MS, 100, LEASE, "conformance")
        .await
        .expect("claim");
    assert!(batch.paused, "the claim says the queue is paused");
    assert!(batch.tasks.is_empty(), "a paused queue claims nothing");
    // Schedules and cancels go on.
    assert_eq!(
        schedule(&store, &p, "b", T0 + 1).await,
        ScheduleOutcome::Created
    );
    assert_eq!(
        store.cancel(&p, &id("gone")).await.expect("cancel"),
        Cancel::Cancelled
    );
    let paused = store.paused_queues().await.expect("paused_queues");
    assert_eq!(paused.len(), 1);
    assert_eq!(paused[0].0, p.queue);
    assert_eq!(store.stats(&p, T0 + 1).await.expect("stats").pending, 2);

    store.set_paused(&p.queue, 1, false).await.expect("resume");
    assert!(store
        .paused_queues()
        .await
        .expect("paused_queues")
        .is_empty());
    let batch = store
        .claim_due(&p, T0 + 1, 100, LEASE, "conformance")
        .await
        .expect("claim");
    assert!(!batch.paused);
    assert_eq!(ids(&batch.tasks), ["a", "b"], "the backlog, in due order");
}

pub async fn pause_and_resume_are_idempotent_and_per_queue(make: Make) {
    let (store, p) = setup(make).await;
    let other = register(&store, "conformance-other", 2).await;
    schedule(&store, &other, "x", T0).await;
    for _ in 0..2 {
        store.set_paused(&p.queue, 1, true).await.expect("pause");
    }
    let since = store.paused_queues().await.expect("paused")[0].1;
    store
        .set_paused(&p.queue, 1, true)
        .await
        .expect("pause again");
    assert_eq!(
        store.paused_queues().await.expect("paused")[0].1,
        since,
        "pausing again keeps the time it was paused"
    );
    let batch = store
        .claim_due(&other, T0, 100, LEASE, "conformance")
        .await
        .expect("claim");
    assert_eq!(ids(&batch.tasks), ["x"], "another queue is not paused");
    for _ in 0..2 {
        store.set_paused(&p.queue, 1, false).await.expect("resume");
    }
    schedule(&store, &p, "a", T0).await;
    assert_eq!(claim_all(&store, &p, T0).await.len(), 1);
}

pub async fn rate_tokens_of_a_window_never_add_up_to_more_than_the_limit(make: Make) {
    let (store, p) = setup(make).await;
    let queue = &p.queue;
    let mut granted = 0;
    for wanted in [30, 30, 30, 30] {
        granted += store
            .take_rate_tokens(queue, T0, 1_000, 100, wanted)
            .await
            .expect("take");
    }
    assert_eq!(granted, 100, "four asks of 30 share a limit of 100");
    assert_eq!(
        store
            .take_rate_tokens(queue, T0, 1_000, 100, 1)
            .await
            .expect("take"),
        0,
        "the window is used up"
    );
    assert_eq!(
        store
            .take_rate_tokens(queue, T0 + 1_000, 1_000, 100, 70)
            .await
            .expect("take"),
        70,
        "the next window starts afresh"
    );
    let other = QueueName::new("conformance-other").expect("valid");
    assert_eq!(
        store
            .take_rate_tokens(&other, T0, 1_000, 100, 100)
            .await
            .expect("take"),
        100,
        "another queue has its own windows"
    );
}

pub async fn global_slots_are_bounded_across_holders_and_come_back_when_released(make: Make) {
    let (store, p) = setup(make).await;
    let queue = &p.queue;
    let lease = 60_000;
    let a = store
        .acquire_global_slots(queue, "node-a", 5, 3, lease)
        .await
        .expect("a");
    let b = store
        .acquire_global_slots(queue, "node-b", 5, 3, lease)
        .await
        .expect("b");
    assert_eq!((a, b), (3, 2), "5 slots in all");
    let c = store
        .acquire_global_slots(queue, "node-c", 5, 1, lease)
        .await
        .expect("c");
    assert_eq!(c, 0, "none left");
    store
        .release_global_slots(queue, "node-a", 2)
        .await
        .expect("release");
    let c = store
        .acquire_global_slots(queue, "node-c", 5, 4, lease)
        .await
        .expect("c");
    assert_eq!(c, 2, "what node-a gave back");
    // Renewing (asking for none) grants nothing.
    assert_eq!(
        store
            .acquire_global_slots(queue, "node-a", 5, 0, lease)
            .await
            .expect("renew"),
        0
    );
}

pub async fn global_slots_of_a_holder_whose_lease_ran_out_come_back(make: Make) {
    let (store, p) = setup(make).await;
    let queue = &p.queue;
    // A dead node: its lease is 1 ms long and never renewed.
    assert_eq!(
        store
            .acquire_global_slots(queue, "dead", 4, 4, 1)
            .await
            .expect("dead"),
        4
    );
    tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    assert_eq!(
        store
            .acquire_global_slots(queue, "alive", 4, 4, 60_000)
            .await
            .expect("alive"),
        4,
        "the dead holder's slots came back"
    );
}
