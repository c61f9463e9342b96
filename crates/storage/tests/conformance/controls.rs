//! Queue controls in the store: a paused queue claims nothing, keeps its schedules, and
//! claims its backlog once resumed (guarantee 11).

use delayq_storage::{Cancel, MAX_DUE_MS};

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
