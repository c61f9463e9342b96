//! ack, fail (retry), renew, requeue_expired, and what cancel and reschedule do to a task in
//! flight.

use bytes::Bytes;
use delayq_storage::{
    AckOutcome, Cancel, FailAction, FailOutcome, ScheduleOutcome, StorageError, TaskState,
    MAX_DUE_MS,
};

use super::*;

fn assert_stale(result: Result<impl std::fmt::Debug, StorageError>, name: &str) {
    match result {
        Err(StorageError::StaleLease { id, partition }) => {
            assert_eq!(id, name);
            assert!(partition.starts_with("conformance"), "{partition}");
        }
        other => panic!("expected StaleLease for {name}, got {other:?}"),
    }
}

pub async fn ack_completes_and_keeps_a_done_record_without_payload(make: Make) {
    let (store, p) = setup(make).await;
    schedule(&store, &p, "a", T0).await;
    let claimed = claim_one(&store, &p, T0).await;
    assert_eq!(
        store.ack(&claimed.token).await.expect("ack"),
        AckOutcome::Completed
    );
    let done = get(&store, &p, "a").await;
    assert_eq!(done.state, TaskState::Done);
    assert_eq!(done.due_ms, T0);
    assert_eq!(done.attempt, 1);
    assert_eq!(done.generation, claimed.generation);
    assert_eq!(done.payload, Bytes::new(), "done records drop the payload");
    assert!(
        done.state_since_ms.is_some(),
        "done records carry their completion time"
    );
    let stats = store.stats(&p, T0).await.expect("stats");
    assert_eq!((stats.pending, stats.inflight, stats.done), (0, 0, 1));
    assert!(claim_all(&store, &p, MAX_DUE_MS).await.is_empty());
}

pub async fn ack_with_a_token_from_before_requeue_and_reclaim_is_stale_and_changes_nothing(
    make: Make,
) {
    let (store, p) = setup(make).await;
    let lost = lose_lease(&store, &p, "a").await;
    let current = claim_one(&store, &p, T0 + 2_000).await;
    let before = get(&store, &p, "a").await;
    assert_stale(store.ack(&lost.token).await, "a");
    assert_eq!(
        get(&store, &p, "a").await,
        before,
        "a stale ack changes nothing"
    );
    assert_eq!(
        store.ack(&current.token).await.expect("ack"),
        AckOutcome::Completed
    );
}

pub async fn ack_after_requeue_without_reclaim_is_stale(make: Make) {
    let (store, p) = setup(make).await;
    let lost = lose_lease(&store, &p, "a").await;
    assert_stale(store.ack(&lost.token).await, "a");
    assert_eq!(get(&store, &p, "a").await.state, TaskState::Pending);
    assert_eq!(claim_all(&store, &p, T0 + 2_000).await.len(), 1);
}

pub async fn fail_with_a_stale_token_is_rejected_and_changes_nothing(make: Make) {
    let (store, p) = setup(make).await;
    let lost = lose_lease(&store, &p, "a").await;
    let current = claim_one(&store, &p, T0 + 2_000).await;
    let before = get(&store, &p, "a").await;
    let retry = FailAction::RetryAt(T0 + 5_000);
    assert_stale(store.fail(&lost.token, "late", retry).await, "a");
    assert_stale(
        store
            .fail(&lost.token, "late", FailAction::DeadLetter)
            .await,
        "a",
    );
    assert_eq!(get(&store, &p, "a").await, before);
    assert!(store.list_dead(&p, 10).await.expect("list_dead").is_empty());
    assert_eq!(
        store.ack(&current.token).await.expect("ack"),
        AckOutcome::Completed
    );
}

pub async fn renew_with_a_stale_token_is_rejected(make: Make) {
    let (store, p) = setup(make).await;
    let lost = lose_lease(&store, &p, "a").await;
    let current = claim_one_until(&store, &p, T0 + 2_000, T0 + 9_000).await;
    assert_stale(store.renew(&lost.token, T0 + 99_000).await, "a");
    assert_eq!(get(&store, &p, "a").await.state_since_ms, Some(T0 + 9_000));
    assert_eq!(ack(&store, &current).await, AckOutcome::Completed);
}

pub async fn renew_extends_the_lease_past_requeue_expired(make: Make) {
    let (store, p) = setup(make).await;
    schedule(&store, &p, "a", T0).await;
    let claimed = claim_one_until(&store, &p, T0, T0 + 1_000).await;
    store
        .renew(&claimed.token, T0 + 10_000)
        .await
        .expect("renew");
    assert_eq!(get(&store, &p, "a").await.state_since_ms, Some(T0 + 10_000));
    assert!(store
        .requeue_expired(&p, T0 + 5_000, 10)
        .await
        .expect("requeue")
        .is_empty());
    assert_eq!(get(&store, &p, "a").await.state, TaskState::Inflight);
    assert_eq!(
        store.ack(&claimed.token).await.expect("ack"),
        AckOutcome::Completed
    );
}

pub async fn requeue_expired_puts_lapsed_leases_back_without_spending_an_attempt(make: Make) {
    let (store, p) = setup(make).await;
    schedule(&store, &p, "a", T0).await;
    let first = claim_one(&store, &p, T0).await;
    retry_at(&store, &first, "boom", T0 + 100).await;
    let second = store
        .claim_due(&p, T0 + 100, 1, T0 + 1_000, "crashed")
        .await
        .expect("claim");
    assert_eq!(second.tasks[0].attempt, 2);
    let requeued = store
        .requeue_expired(&p, T0 + 1_001, 10)
        .await
        .expect("requeue");
    assert_eq!(requeued, [id("a")]);
    let info = get(&store, &p, "a").await;
    assert_eq!(
        (info.state, info.attempt),
        (TaskState::Pending, 2),
        "the attempt is not spent"
    );
    assert_eq!(info.last_error.as_deref(), Some("boom"));
    assert_eq!(info.due_ms, T0 + 1_001, "due at once: at the requeue time");
    let window = store.peek_window(&p, 0, MAX_DUE_MS, 10).await;
    assert_eq!(window.expect("peek_window"), [(id("a"), T0 + 1_001)]);
    let third = claim_one(&store, &p, T0 + 1_001).await;
    assert_eq!(third.attempt, 2);
    assert_eq!(third.generation, first.generation);
}

pub async fn requeue_expired_respects_the_limit_and_leaves_live_leases(make: Make) {
    let (store, p) = setup(make).await;
    for n in 0..5 {
        schedule(&store, &p, &format!("short-{n}"), T0 + n).await;
    }
    schedule(&store, &p, "long", T0 + 10).await;
    store
        .claim_due(&p, T0 + 4, 5, T0 + 1_000, "a")
        .await
        .expect("claim");
    store
        .claim_due(&p, T0 + 10, 1, T0 + 50_000, "b")
        .await
        .expect("claim");
    let first = store
        .requeue_expired(&p, T0 + 2_000, 3)
        .await
        .expect("requeue");
    assert_eq!(first.len(), 3);
    let rest = store
        .requeue_expired(&p, T0 + 2_000, 100)
        .await
        .expect("requeue");
    assert_eq!(rest.len(), 2);
    let mut all: Vec<_> = first.iter().chain(&rest).map(|id| id.to_string()).collect();
    all.sort();
    assert_eq!(all, ["short-0", "short-1", "short-2", "short-3", "short-4"]);
    assert_eq!(get(&store, &p, "long").await.state, TaskState::Inflight);
    let stats = store.stats(&p, T0 + 2_000).await.expect("stats");
    assert_eq!((stats.pending, stats.due_now, stats.inflight), (5, 5, 1));
}

pub async fn fail_retry_at_increments_the_attempt_and_keeps_the_last_error(make: Make) {
    let (store, p) = setup(make).await;
    schedule(&store, &p, "a", T0).await;
    let first = claim_one(&store, &p, T0).await;
    let outcome = retry_at(&store, &first, "connection refused", T0 + 1_000).await;
    assert_eq!(
        outcome,
        FailOutcome::Retrying {
            attempt: 2,
            due_ms: T0 + 1_000
        }
    );
    let info = get(&store, &p, "a").await;
    assert_eq!(
        (info.state, info.due_ms, info.attempt),
        (TaskState::Pending, T0 + 1_000, 2)
    );
    assert_eq!(info.last_error.as_deref(), Some("connection refused"));
    assert_eq!(
        info.payload,
        Bytes::from("payload of a"),
        "a retry keeps the payload"
    );
    let second = claim_one(&store, &p, T0 + 1_000).await;
    let outcome = retry_at(&store, &second, "timeout", T0 + 3_000).await;
    assert_eq!(
        outcome,
        FailOutcome::Retrying {
            attempt: 3,
            due_ms: T0 + 3_000
        }
    );
    assert_eq!(
        get(&store, &p, "a").await.last_error.as_deref(),
        Some("timeout")
    );
}

pub async fn fail_requeue_at_keeps_the_attempt_the_error_and_the_dedup_key(make: Make) {
    // An attempt that never ran (the node lacked a resource to start it) is put back as it
    // was claimed: same attempt, same generation, same scheduled due.
    let (store, p) = setup(make).await;
    schedule(&store, &p, "a", T0).await;
    let first = claim_one(&store, &p, T0).await;
    let outcome = requeue_at(&store, &first, "Too many open files", T0 + 1_000).await;
    assert_eq!(
        outcome,
        FailOutcome::Retrying {
            attempt: 1,
            due_ms: T0 + 1_000
        },
        "a requeue keeps the attempt"
    );
    let info = get(&store, &p, "a").await;
    assert_eq!(
        (info.state, info.due_ms, info.attempt),
        (TaskState::Pending, T0 + 1_000, 1)
    );
    assert_eq!(info.last_error.as_deref(), Some("Too many open files"));
    assert_eq!(info.payload, Bytes::from("payload of a"));
    assert!(
        claim_all(&store, &p, T0 + 999).await.is_empty(),
        "not before the requeue's due"
    );
    // Requeued again and again, it never spends an attempt; a real failure then does.
    let second = claim_one(&store, &p, T0 + 1_000).await;
    assert_eq!((second.attempt, second.generation), (1, first.generation));
    requeue_at(
        &store,
        &second,
        "Resource temporarily unavailable",
        T0 + 2_000,
    )
    .await;
    let third = claim_one(&store, &p, T0 + 2_000).await;
    assert_eq!(third.attempt, 1);
    assert_eq!(
        retry_at(&store, &third, "boom", T0 + 3_000).await,
        FailOutcome::Retrying {
            attempt: 2,
            due_ms: T0 + 3_000
        }
    );
    assert_eq!(
        schedule(&store, &p, "a", T0).await,
        ScheduleOutcome::Duplicate,
        "the scheduled due stayed the dedup key through the requeues"
    );
}

pub async fn fail_keeps_at_most_4096_bytes_of_the_error_text(make: Make) {
    let (store, p) = setup(make).await;
    schedule(&store, &p, "a", T0).await;
    let claimed = claim_one(&store, &p, T0).await;
    let long = "é".repeat(3_000); // 6,000 bytes of two-byte characters
    retry_at(&store, &claimed, &long, T0 + 10).await;
    let kept = get(&store, &p, "a").await.last_error.expect("an error");
    assert!(long.starts_with(&kept), "a prefix of the error is kept");
    assert_eq!(kept.len(), 4_096);
}

pub async fn fail_retry_at_is_claimable_at_the_new_time_only(make: Make) {
    let (store, p) = setup(make).await;
    schedule(&store, &p, "a", T0).await;
    let first = claim_one(&store, &p, T0).await;
    retry_at(&store, &first, "boom", T0 + 1_000).await;
    let early = store
        .claim_due(&p, T0 + 999, 10, LEASE, "a")
        .await
        .expect("claim");
    assert!(early.tasks.is_empty());
    assert_eq!(early.next_due_ms, Some(T0 + 1_000));
    let retried = claim_one(&store, &p, T0 + 1_000).await;
    assert_eq!((retried.attempt, retried.due_ms), (2, T0 + 1_000));
}

pub async fn cancel_of_an_inflight_task_answers_inflight_and_lets_it_finish(make: Make) {
    let (store, p) = setup(make).await;
    schedule(&store, &p, "a", T0).await;
    let claimed = claim_one_until(&store, &p, T0, T0 + 1_000).await;
    let outcome = store.cancel(&p, &id("a")).await.expect("cancel");
    assert_eq!(outcome, Cancel::InFlight);
    assert!(!outcome.cancelled());
    assert_eq!(outcome.state(), Some("inflight"));
    assert_eq!(
        get(&store, &p, "a").await.state,
        TaskState::Inflight,
        "it still runs"
    );
    store
        .renew(&claimed.token, T0 + 2_000)
        .await
        .expect("a cancelled task's running attempt keeps its lease");
    assert_eq!(
        store.cancel(&p, &id("a")).await.expect("cancel again"),
        Cancel::InFlight
    );
    assert!(
        store
            .requeue_expired(&p, T0 + 3_000, 10)
            .await
            .expect("requeue")
            .is_empty(),
        "a lapsed lease of a cancelled task is dropped, not requeued"
    );
    assert_eq!(store.get(&p, &id("a")).await.expect("get"), None);
    let stats = store.stats(&p, T0).await.expect("stats");
    assert_eq!((stats.pending, stats.inflight), (0, 0));
    assert!(claim_all(&store, &p, MAX_DUE_MS).await.is_empty());
}

pub async fn cancel_of_a_task_waiting_for_a_retry_is_cancelled(make: Make) {
    let (store, p) = setup(make).await;
    schedule(&store, &p, "a", T0).await;
    let claimed = claim_one(&store, &p, T0).await;
    retry_at(&store, &claimed, "boom", T0 + 1_000).await;
    assert_eq!(
        store.cancel(&p, &id("a")).await.expect("cancel"),
        Cancel::Cancelled
    );
    assert_eq!(store.get(&p, &id("a")).await.expect("get"), None);
    assert!(claim_all(&store, &p, MAX_DUE_MS).await.is_empty());
}

pub async fn cancel_after_claim_makes_ack_superseded(make: Make) {
    let (store, p) = setup(make).await;
    schedule(&store, &p, "a", T0).await;
    let claimed = claim_one(&store, &p, T0).await;
    assert_eq!(
        store.cancel(&p, &id("a")).await.expect("cancel"),
        Cancel::InFlight
    );
    assert_eq!(
        store.ack(&claimed.token).await.expect("ack"),
        AckOutcome::Superseded
    );
    assert_eq!(
        store.get(&p, &id("a")).await.expect("get"),
        None,
        "no done record: the task is gone once its last attempt ended"
    );
    assert_eq!(store.stats(&p, T0).await.expect("stats").inflight, 0);
    assert_eq!(
        schedule(&store, &p, "a", T0).await,
        ScheduleOutcome::Created,
        "a superseded ack records nothing for dedup"
    );
}

pub async fn cancel_after_claim_makes_fail_superseded(make: Make) {
    let (store, p) = setup(make).await;
    schedule(&store, &p, "a", T0).await;
    let claimed = claim_one(&store, &p, T0).await;
    assert_eq!(
        store.cancel(&p, &id("a")).await.expect("cancel"),
        Cancel::InFlight
    );
    let retry = store
        .fail(&claimed.token, "boom", FailAction::RetryAt(T0 + 10))
        .await;
    assert_eq!(retry.expect("fail"), FailOutcome::Superseded);
    let dead = store
        .fail(&claimed.token, "boom", FailAction::DeadLetter)
        .await;
    assert_eq!(dead.expect("fail"), FailOutcome::Superseded);
    assert_eq!(store.get(&p, &id("a")).await.expect("get"), None);
    assert!(store.list_dead(&p, 10).await.expect("list_dead").is_empty());
}

pub async fn reschedule_during_inflight_makes_ack_superseded_and_the_new_schedule_stands(
    make: Make,
) {
    let (store, p) = setup(make).await;
    schedule(&store, &p, "a", T0).await;
    let claimed = claim_one(&store, &p, T0).await;
    let outcome = schedule(&store, &p, "a", T0 + 5_000).await;
    assert_eq!(
        outcome,
        ScheduleOutcome::Replaced {
            previous_due_ms: T0
        }
    );
    let stats = store.stats(&p, T0).await.expect("stats");
    assert_eq!(
        (stats.pending, stats.inflight),
        (1, 1),
        "the superseded handler still runs"
    );
    assert_eq!(
        store.ack(&claimed.token).await.expect("ack"),
        AckOutcome::Superseded
    );
    let stats = store.stats(&p, T0).await.expect("stats");
    assert_eq!((stats.pending, stats.inflight), (1, 0));
    let info = get(&store, &p, "a").await;
    assert_eq!(
        (info.state, info.due_ms, info.attempt),
        (TaskState::Pending, T0 + 5_000, 1)
    );
    assert!(info.generation > claimed.generation);
    assert!(claim_all(&store, &p, T0 + 4_999).await.is_empty());
    let again = claim_one(&store, &p, T0 + 5_000).await;
    assert_eq!(again.generation, info.generation);
    assert_eq!(
        store.ack(&again.token).await.expect("ack"),
        AckOutcome::Completed
    );
}

pub async fn reschedule_during_inflight_makes_fail_superseded(make: Make) {
    let (store, p) = setup(make).await;
    schedule(&store, &p, "a", T0).await;
    let claimed = claim_one(&store, &p, T0).await;
    schedule(&store, &p, "a", T0 + 5_000).await;
    let outcome = dead_letter(&store, &claimed, "boom").await;
    assert_eq!(outcome, FailOutcome::Superseded);
    let info = get(&store, &p, "a").await;
    assert_eq!(
        (info.state, info.due_ms, info.last_error),
        (TaskState::Pending, T0 + 5_000, None)
    );
    assert!(store.list_dead(&p, 10).await.expect("list_dead").is_empty());
}

pub async fn ack_after_cancel_and_schedule_again_is_superseded_and_keeps_the_new_task(make: Make) {
    let (store, p) = setup(make).await;
    schedule(&store, &p, "a", T0).await;
    let claimed = claim_one(&store, &p, T0).await;
    assert_eq!(
        store.cancel(&p, &id("a")).await.expect("cancel"),
        Cancel::InFlight
    );
    assert_eq!(
        schedule(&store, &p, "a", T0).await,
        ScheduleOutcome::Created,
        "after a cancel, the same id and due is a new schedule, not a resend"
    );
    assert_eq!(
        store.ack(&claimed.token).await.expect("ack"),
        AckOutcome::Superseded
    );
    let info = get(&store, &p, "a").await;
    assert_eq!((info.state, info.due_ms), (TaskState::Pending, T0));
    assert_ne!(
        info.generation, claimed.generation,
        "a generation is never reused"
    );
    assert_eq!(claim_all(&store, &p, T0).await.len(), 1);
}

pub async fn requeue_expired_drops_a_superseded_lease_and_keeps_the_new_schedule(make: Make) {
    let (store, p) = setup(make).await;
    schedule(&store, &p, "a", T0).await;
    let claimed = claim_one_until(&store, &p, T0, T0 + 1_000).await;
    schedule(&store, &p, "a", T0 + 5_000).await;
    let requeued = store.requeue_expired(&p, T0 + 2_000, 10).await;
    assert!(
        requeued.expect("requeue_expired").is_empty(),
        "a is pending already"
    );
    let stats = store.stats(&p, T0).await.expect("stats");
    assert_eq!((stats.pending, stats.inflight), (1, 0));
    let info = get(&store, &p, "a").await;
    assert_eq!((info.state, info.due_ms), (TaskState::Pending, T0 + 5_000));
    assert_eq!(ack(&store, &claimed).await, AckOutcome::Superseded);
    assert!(claim_all(&store, &p, T0 + 4_999).await.is_empty());
}
