//! Dead letters: fail(DeadLetter), list_dead, peek_dead, retry_dead, purge_dead, cancel of a
//! dead task.

use bytes::Bytes;
use delayq_storage::TaskState;

use super::*;

pub async fn fail_dead_letter_moves_the_task_to_dead_with_its_last_error(make: Make) {
    let (store, p) = setup(make).await;
    schedule_dead(&store, &p, "a", T0, "gave up").await;
    let info = get(&store, &p, "a").await;
    assert_eq!(info.state, TaskState::Dead);
    assert_eq!(info.last_error.as_deref(), Some("gave up"));
    assert_eq!(
        info.payload,
        Bytes::from("payload of a"),
        "dead letters keep the payload"
    );
    assert!(
        info.state_since_ms.is_some(),
        "dead letters carry their failure time"
    );
    let dead = store.list_dead(&p, 10).await.expect("list_dead");
    assert_eq!(dead.len(), 1);
    assert_eq!(dead[0].id, id("a"));
    assert_eq!((dead[0].due_ms, dead[0].attempt), (T0, 1));
    assert_eq!(dead[0].last_error.as_deref(), Some("gave up"));
    assert_eq!(dead[0].payload, Bytes::from("payload of a"));
    assert_eq!(Some(dead[0].failed_ms), info.state_since_ms);
    let stats = store.stats(&p, T0).await.expect("stats");
    assert_eq!((stats.pending, stats.inflight, stats.dead), (0, 0, 1));
    assert!(claim_all(&store, &p, delayq_storage::MAX_DUE_MS)
        .await
        .is_empty());
    assert!(store
        .requeue_expired(&p, delayq_storage::MAX_DUE_MS, 10)
        .await
        .expect("requeue")
        .is_empty());
}

pub async fn list_dead_is_oldest_first_and_respects_the_limit(make: Make) {
    let (store, p) = setup(make).await;
    for n in 0..4 {
        schedule_dead(&store, &p, &format!("d-{n}"), T0 + n, "boom").await;
        // Distinct failure stamps, so the order is by time and not only by id.
        tokio::time::sleep(std::time::Duration::from_millis(3)).await;
    }
    let all = store.list_dead(&p, 10).await.expect("list_dead");
    let names: Vec<_> = all.iter().map(|d| d.id.as_str()).collect();
    assert_eq!(names, ["d-0", "d-1", "d-2", "d-3"]);
    assert!(all.windows(2).all(|w| w[0].failed_ms <= w[1].failed_ms));
    let two = store.list_dead(&p, 2).await.expect("list_dead");
    let names: Vec<_> = two.iter().map(|d| d.id.as_str()).collect();
    assert_eq!(names, ["d-0", "d-1"]);
}

pub async fn peek_dead_lists_ids_and_failure_times_oldest_first_within_the_limit(make: Make) {
    let (store, p) = setup(make).await;
    assert!(store.peek_dead(&p, 10).await.expect("peek_dead").is_empty());
    for n in 0..4 {
        schedule_dead(&store, &p, &format!("d-{n}"), T0 + n, "boom").await;
        tokio::time::sleep(std::time::Duration::from_millis(3)).await;
    }
    let listed = store.list_dead(&p, 10).await.expect("list_dead");
    let peeked = store.peek_dead(&p, 10).await.expect("peek_dead");
    let expected: Vec<_> = listed.iter().map(|d| (d.id.clone(), d.failed_ms)).collect();
    assert_eq!(
        peeked, expected,
        "the ids and failure times list_dead reports"
    );
    let names: Vec<_> = peeked.iter().map(|(id, _)| id.as_str()).collect();
    assert_eq!(names, ["d-0", "d-1", "d-2", "d-3"]);
    let two = store.peek_dead(&p, 2).await.expect("peek_dead");
    assert_eq!(two, expected[..2]);
    assert!(store.peek_dead(&p, 0).await.expect("peek_dead").is_empty());
    // Reads only: the dead letters stay.
    assert_eq!(store.stats(&p, T0).await.expect("stats").dead, 4);
    // A retried dead letter is no longer listed; pending and other partitions never are.
    assert!(store
        .retry_dead(&p, &id("d-0"), T0 + 500)
        .await
        .expect("retry_dead"));
    schedule(&store, &p, "pending", T0).await;
    let other = register(&store, "other-queue", 1).await;
    schedule_dead(&store, &other, "elsewhere", T0, "boom").await;
    let names: Vec<_> = store
        .peek_dead(&p, 10)
        .await
        .expect("peek_dead")
        .into_iter()
        .map(|(id, _)| id.as_str().to_owned())
        .collect();
    assert_eq!(names, ["d-1", "d-2", "d-3"]);
}

pub async fn retry_dead_makes_it_pending_at_the_due_with_attempt_one(make: Make) {
    let (store, p) = setup(make).await;
    schedule(&store, &p, "a", T0).await;
    let first = claim_one(&store, &p, T0).await;
    retry_at(&store, &first, "one", T0 + 10).await;
    let second = claim_one(&store, &p, T0 + 10).await;
    dead_letter(&store, &second, "two").await;
    assert_eq!(
        store.list_dead(&p, 10).await.expect("list_dead")[0].attempt,
        2
    );

    assert!(store
        .retry_dead(&p, &id("a"), T0 + 500)
        .await
        .expect("retry_dead"));
    let info = get(&store, &p, "a").await;
    assert_eq!(
        (info.state, info.due_ms, info.attempt),
        (TaskState::Pending, T0 + 500, 1)
    );
    assert_eq!(info.payload, Bytes::from("payload of a"));
    assert!(store.list_dead(&p, 10).await.expect("list_dead").is_empty());
    assert!(claim_all(&store, &p, T0 + 499).await.is_empty());
    let again = claim_one(&store, &p, T0 + 500).await;
    assert_eq!(again.attempt, 1);
    assert_eq!(
        store.ack(&again.token).await.expect("ack"),
        delayq_storage::AckOutcome::Completed
    );
}

pub async fn retry_dead_of_a_task_that_is_not_dead_returns_false(make: Make) {
    let (store, p) = setup(make).await;
    schedule(&store, &p, "pending", T0 + 100).await;
    let before = get(&store, &p, "pending").await;
    assert!(!store
        .retry_dead(&p, &id("pending"), T0)
        .await
        .expect("retry_dead"));
    assert_eq!(get(&store, &p, "pending").await, before);
    assert!(!store
        .retry_dead(&p, &id("unknown"), T0)
        .await
        .expect("retry_dead"));
    assert_eq!(store.get(&p, &id("unknown")).await.expect("get"), None);
}

pub async fn purge_dead_of_one_id_deletes_only_that_dead_letter(make: Make) {
    let (store, p) = setup(make).await;
    schedule_dead(&store, &p, "a", T0, "boom").await;
    schedule_dead(&store, &p, "b", T0, "boom").await;
    schedule(&store, &p, "pending", T0 + 100).await;
    assert_eq!(
        store
            .purge_dead(&p, Some(&id("a")))
            .await
            .expect("purge_dead"),
        1
    );
    assert_eq!(
        store
            .purge_dead(&p, Some(&id("a")))
            .await
            .expect("purge_dead"),
        0
    );
    assert_eq!(
        store
            .purge_dead(&p, Some(&id("pending")))
            .await
            .expect("purge_dead"),
        0
    );
    assert_eq!(store.get(&p, &id("a")).await.expect("get"), None);
    assert_eq!(get(&store, &p, "b").await.state, TaskState::Dead);
    assert_eq!(get(&store, &p, "pending").await.state, TaskState::Pending);
}

pub async fn purge_dead_of_all_deletes_every_dead_letter_of_the_partition(make: Make) {
    let (store, p) = setup(make).await;
    for n in 0..3 {
        schedule_dead(&store, &p, &format!("d-{n}"), T0, "boom").await;
    }
    schedule(&store, &p, "pending", T0 + 100).await;
    assert_eq!(store.purge_dead(&p, None).await.expect("purge_dead"), 3);
    assert!(store.list_dead(&p, 10).await.expect("list_dead").is_empty());
    let stats = store.stats(&p, T0).await.expect("stats");
    assert_eq!((stats.dead, stats.pending), (0, 1));
    assert_eq!(store.get(&p, &id("d-1")).await.expect("get"), None);
    assert_eq!(store.purge_dead(&p, None).await.expect("purge_dead"), 0);
}

pub async fn cancel_removes_a_dead_task(make: Make) {
    let (store, p) = setup(make).await;
    schedule_dead(&store, &p, "a", T0, "boom").await;
    assert_eq!(
        store.cancel(&p, &id("a")).await.expect("cancel"),
        delayq_storage::Cancel::Cancelled
    );
    assert_eq!(store.get(&p, &id("a")).await.expect("get"), None);
    assert!(store.list_dead(&p, 10).await.expect("list_dead").is_empty());
}
