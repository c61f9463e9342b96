//! The executed-set: dedup of schedules that already fired, prune_done, retention.

use std::time::Duration;

use delayq_storage::{
    AckOutcome, ScheduleMode, ScheduleOutcome, StoreOptions, TaskState, MAX_DUE_MS,
};

use super::*;

pub async fn same_id_and_due_after_ack_is_duplicate_and_never_claimable(make: Make) {
    let (store, p) = setup(make).await;
    complete(&store, &p, "a", T0).await;
    let outcome = schedule(&store, &p, "a", T0).await;
    assert_eq!(outcome, ScheduleOutcome::Duplicate);
    assert!(outcome.duplicate() && !outcome.replaced());
    assert!(
        claim_all(&store, &p, MAX_DUE_MS).await.is_empty(),
        "a duplicate never fires"
    );
    assert_eq!(get(&store, &p, "a").await.state, TaskState::Done);
    let stats = store.stats(&p, T0).await.expect("stats");
    assert_eq!((stats.pending, stats.done), (0, 1));
}

pub async fn if_absent_with_the_same_due_after_ack_is_duplicate(make: Make) {
    let (store, p) = setup(make).await;
    complete(&store, &p, "a", T0).await;
    let outcome = store
        .schedule(&p, task("a", T0), ScheduleMode::IfAbsent)
        .await
        .expect("schedule");
    assert_eq!(outcome, ScheduleOutcome::Duplicate);
    assert!(claim_all(&store, &p, MAX_DUE_MS).await.is_empty());
}

pub async fn different_due_after_ack_rearms_the_id(make: Make) {
    let (store, p) = setup(make).await;
    complete(&store, &p, "a", T0).await;
    assert_eq!(
        schedule(&store, &p, "a", T0 + 1).await,
        ScheduleOutcome::Created
    );
    let info = get(&store, &p, "a").await;
    assert_eq!(
        (info.state, info.due_ms, info.attempt),
        (TaskState::Pending, T0 + 1, 1)
    );
    let again = claim_one(&store, &p, T0 + 1).await;
    assert_eq!(
        store.ack(&again.token).await.expect("ack"),
        AckOutcome::Completed
    );
    assert_eq!(
        schedule(&store, &p, "a", T0 + 1).await,
        ScheduleOutcome::Duplicate
    );
}

pub async fn after_prune_done_the_same_due_is_no_longer_duplicate(make: Make) {
    let (store, p) = setup(make).await;
    complete(&store, &p, "a", T0).await;
    assert_eq!(
        store
            .prune_done(&p, MAX_DUE_MS, 100)
            .await
            .expect("prune_done"),
        1
    );
    assert_eq!(store.get(&p, &id("a")).await.expect("get"), None);
    assert_eq!(store.stats(&p, T0).await.expect("stats").done, 0);
    assert_eq!(
        schedule(&store, &p, "a", T0).await,
        ScheduleOutcome::Created
    );
    assert_eq!(claim_one(&store, &p, T0).await.id, id("a"));
}

/// Completes `name` (due at `T0`) and returns its completion stamp, from the store's clock.
async fn complete_stamped(store: &Subject, p: &Partition, name: &str) -> u64 {
    complete(store, p, name, T0).await;
    get(store, p, name)
        .await
        .state_since_ms
        .expect("completion time")
}

pub async fn prune_done_only_forgets_tasks_completed_before_the_cutoff(make: Make) {
    let (store, p) = setup(make).await;
    let first_ms = complete_stamped(&store, &p, "first").await;
    // Completion stamps come from the store's clock; T0 lies before any of them.
    assert_eq!(store.prune_done(&p, T0, 100).await.expect("prune_done"), 0);
    tokio::time::sleep(Duration::from_millis(5)).await;
    let second_ms = complete_stamped(&store, &p, "second").await;
    assert!(
        second_ms > first_ms,
        "the store's clock advanced: {first_ms} then {second_ms}"
    );
    assert_eq!(
        store
            .prune_done(&p, second_ms, 100)
            .await
            .expect("prune_done"),
        1
    );
    assert_eq!(store.get(&p, &id("first")).await.expect("get"), None);
    assert_eq!(get(&store, &p, "second").await.state, TaskState::Done);
    assert_eq!(
        schedule(&store, &p, "second", T0).await,
        ScheduleOutcome::Duplicate
    );
}

/// A prune that found nothing does not hide what is older than the next cutoff: the
/// PostgreSQL store skips prunes that cannot find anything, from the earliest completion
/// left (not from its clock at the prune, which is later than that completion here).
pub async fn a_prune_that_found_nothing_does_not_hide_a_record_older_than_the_next_cutoff(
    make: Make,
) {
    let (store, p) = setup(make).await;
    let first_ms = complete_stamped(&store, &p, "first").await;
    tokio::time::sleep(Duration::from_millis(20)).await;
    assert_eq!(store.prune_done(&p, T0, 100).await.expect("prune_done"), 0);
    assert_eq!(
        store
            .prune_done(&p, first_ms + 1, 100)
            .await
            .expect("prune_done"),
        1,
        "the record completed at {first_ms} is older than the cutoff"
    );
    assert_eq!(store.get(&p, &id("first")).await.expect("get"), None);
}

pub async fn prune_done_respects_the_limit(make: Make) {
    let (store, p) = setup(make).await;
    for n in 0..5 {
        complete(&store, &p, &format!("t-{n}"), T0 + n).await;
    }
    assert_eq!(
        store
            .prune_done(&p, MAX_DUE_MS, 2)
            .await
            .expect("prune_done"),
        2
    );
    assert_eq!(store.stats(&p, T0).await.expect("stats").done, 3);
    assert_eq!(
        store
            .prune_done(&p, MAX_DUE_MS, 100)
            .await
            .expect("prune_done"),
        3
    );
    assert_eq!(
        store
            .prune_done(&p, MAX_DUE_MS, 100)
            .await
            .expect("prune_done"),
        0
    );
}

pub async fn dedup_ends_after_the_executed_retention(make: Make) {
    let options = StoreOptions {
        executed_retention_ms: 300,
        ..StoreOptions::default()
    };
    let (store, p) = setup_with(make, options).await;
    complete(&store, &p, "a", T0).await;
    assert_eq!(
        schedule(&store, &p, "a", T0).await,
        ScheduleOutcome::Duplicate
    );
    // Each attempt that is still a duplicate stores nothing, so retrying is harmless.
    eventually(
        Duration::from_secs(5),
        "the same (id, due) is accepted again",
        || async { schedule(&store, &p, "a", T0).await == ScheduleOutcome::Created },
    )
    .await;
    assert_eq!(claim_one(&store, &p, T0).await.id, id("a"));
}

pub async fn requeued_task_dedups_on_the_due_it_was_scheduled_with(make: Make) {
    let (store, p) = setup(make).await;
    lose_lease(&store, &p, "a").await;
    let claimed = claim_one(&store, &p, T0 + 2_000).await;
    assert_eq!(
        store.ack(&claimed.token).await.expect("ack"),
        AckOutcome::Completed
    );
    assert_eq!(
        schedule(&store, &p, "a", T0).await,
        ScheduleOutcome::Duplicate
    );
}

pub async fn retried_task_dedups_on_the_due_it_was_scheduled_with(make: Make) {
    let (store, p) = setup(make).await;
    schedule(&store, &p, "a", T0).await;
    let first = claim_one(&store, &p, T0).await;
    retry_at(&store, &first, "boom", T0 + 1_000).await;
    let second = claim_one(&store, &p, T0 + 1_000).await;
    assert_eq!(
        store.ack(&second.token).await.expect("ack"),
        AckOutcome::Completed
    );
    assert_eq!(
        get(&store, &p, "a").await.due_ms,
        T0 + 1_000,
        "get reports the due that fired"
    );
    assert_eq!(
        schedule(&store, &p, "a", T0).await,
        ScheduleOutcome::Duplicate,
        "the producer re-sends the due it scheduled, not the retry's"
    );
}

pub async fn rearming_an_id_forgets_its_done_record(make: Make) {
    let (store, p) = setup(make).await;
    complete(&store, &p, "a", T0).await;
    assert_eq!(
        schedule(&store, &p, "a", T0 + 1).await,
        ScheduleOutcome::Created
    );
    assert_eq!(store.stats(&p, T0).await.expect("stats").done, 0);
    assert_eq!(
        schedule(&store, &p, "a", T0).await,
        ScheduleOutcome::Replaced {
            previous_due_ms: T0 + 1
        },
        "a live task is replaced, whatever fired before"
    );
    assert_eq!(
        store.cancel(&p, &id("a")).await.expect("cancel"),
        delayq_storage::Cancel::Cancelled
    );
    assert_eq!(store.get(&p, &id("a")).await.expect("get"), None);
}

pub async fn with_zero_retention_ack_keeps_no_done_record(make: Make) {
    let options = StoreOptions {
        executed_retention_ms: 0,
        ..StoreOptions::default()
    };
    let (store, p) = setup_with(make, options).await;
    complete(&store, &p, "a", T0).await;
    assert_eq!(store.get(&p, &id("a")).await.expect("get"), None);
    assert_eq!(store.stats(&p, T0).await.expect("stats").done, 0);
    assert_eq!(
        schedule(&store, &p, "a", T0).await,
        ScheduleOutcome::Created
    );
}

pub async fn same_id_and_due_while_inflight_is_duplicate_and_changes_nothing(make: Make) {
    let (store, p) = setup(make).await;
    schedule(&store, &p, "a", T0).await;
    let claimed = claim_one(&store, &p, T0).await;
    let before = get(&store, &p, "a").await;
    assert_eq!(
        schedule(&store, &p, "a", T0).await,
        ScheduleOutcome::Duplicate,
        "a resend of the fire that is running"
    );
    assert_eq!(get(&store, &p, "a").await, before, "no new generation");
    assert!(
        claim_all(&store, &p, MAX_DUE_MS).await.is_empty(),
        "nothing new to run"
    );
    assert_eq!(ack(&store, &claimed).await, AckOutcome::Completed);
    assert_eq!(
        schedule(&store, &p, "a", T0).await,
        ScheduleOutcome::Duplicate
    );
}

pub async fn same_id_and_due_while_a_retry_runs_is_duplicate(make: Make) {
    let (store, p) = setup(make).await;
    schedule(&store, &p, "a", T0).await;
    let first = claim_one(&store, &p, T0).await;
    retry_at(&store, &first, "boom", T0 + 1_000).await;
    let second = claim_one(&store, &p, T0 + 1_000).await;
    assert_eq!(second.attempt, 2);
    assert_eq!(
        schedule(&store, &p, "a", T0).await,
        ScheduleOutcome::Duplicate,
        "the scheduled due, not the retry's, is the dedup key"
    );
    assert_eq!(ack(&store, &second).await, AckOutcome::Completed);
}

pub async fn another_due_while_inflight_replaces_and_fires_at_the_new_due(make: Make) {
    let (store, p) = setup(make).await;
    schedule(&store, &p, "a", T0).await;
    let claimed = claim_one(&store, &p, T0).await;
    assert_eq!(
        schedule(&store, &p, "a", T0 + 5_000).await,
        ScheduleOutcome::Replaced {
            previous_due_ms: T0
        }
    );
    let info = get(&store, &p, "a").await;
    assert_eq!((info.state, info.due_ms), (TaskState::Pending, T0 + 5_000));
    assert_ne!(info.generation, claimed.generation);
    assert_eq!(ack(&store, &claimed).await, AckOutcome::Superseded);
    assert_eq!(claim_all(&store, &p, T0 + 5_000).await.len(), 1);
}

pub async fn with_zero_retention_a_resend_while_inflight_replaces(make: Make) {
    let options = StoreOptions {
        executed_retention_ms: 0,
        ..StoreOptions::default()
    };
    let (store, p) = setup_with(make, options).await;
    schedule(&store, &p, "a", T0).await;
    claim_one(&store, &p, T0).await;
    assert_eq!(
        schedule(&store, &p, "a", T0).await,
        ScheduleOutcome::Replaced {
            previous_due_ms: T0
        },
        "dedup is off"
    );
}

pub async fn same_id_and_due_while_waiting_for_a_retry_is_duplicate_and_changes_nothing(
    make: Make,
) {
    let (store, p) = setup(make).await;
    schedule(&store, &p, "a", T0).await;
    let first = claim_one(&store, &p, T0).await;
    retry_at(&store, &first, "boom", T0 + 5_000).await;
    let before = get(&store, &p, "a").await;
    assert_eq!((before.state, before.attempt), (TaskState::Pending, 2));
    assert_eq!(
        schedule(&store, &p, "a", T0).await,
        ScheduleOutcome::Duplicate,
        "a resend of the due that fired while its retry waits"
    );
    let after = get(&store, &p, "a").await;
    assert_eq!(
        (after.attempt, after.generation, after.due_ms),
        (2, before.generation, T0 + 5_000),
        "no reset of the attempts, the generation or the backoff"
    );
    assert!(
        claim_all(&store, &p, T0 + 4_999).await.is_empty(),
        "it does not fire before its retry time"
    );
    // Another due re-arms it as a new schedule.
    assert!(schedule(&store, &p, "a", T0 + 1).await.replaced());
    assert_eq!(get(&store, &p, "a").await.attempt, 1);
}

/// Found by the twin model (seed 1796325823767982356): a retry due at the very scheduled due
/// (an immediate retry of a task claimed at its due) left the Redis record's scheduled due
/// implicit, and a resend of that due replaced the waiting retry instead of being a duplicate.
pub async fn same_id_and_due_while_an_immediate_retry_waits_is_duplicate(make: Make) {
    let (store, p) = setup(make).await;
    schedule(&store, &p, "a", T0).await;
    let first = claim_one(&store, &p, T0).await;
    retry_at(&store, &first, "boom", T0).await;
    let before = get(&store, &p, "a").await;
    assert_eq!((before.state, before.attempt), (TaskState::Pending, 2));
    assert_eq!(
        schedule(&store, &p, "a", T0).await,
        ScheduleOutcome::Duplicate,
        "a resend of the due that fired while its immediate retry waits"
    );
    let after = get(&store, &p, "a").await;
    assert_eq!(
        (after.attempt, after.generation),
        (2, before.generation),
        "no reset of the attempts or the generation"
    );
}

pub async fn same_id_and_due_once_dead_is_duplicate_and_the_dead_letter_stays(make: Make) {
    let (store, p) = setup(make).await;
    schedule_dead(&store, &p, "a", T0, "gave up").await;
    let before = get(&store, &p, "a").await;
    assert_eq!(
        schedule(&store, &p, "a", T0).await,
        ScheduleOutcome::Duplicate
    );
    let after = get(&store, &p, "a").await;
    assert_eq!(after.state, TaskState::Dead);
    assert_eq!(after.generation, before.generation);
    assert_eq!(store.stats(&p, T0).await.expect("stats").dead, 1);
    assert!(claim_all(&store, &p, MAX_DUE_MS).await.is_empty());
}

pub async fn with_zero_retention_a_resend_while_waiting_for_a_retry_replaces(make: Make) {
    let options = StoreOptions {
        executed_retention_ms: 0,
        ..StoreOptions::default()
    };
    let (store, p) = setup_with(make, options).await;
    schedule(&store, &p, "a", T0).await;
    let first = claim_one(&store, &p, T0).await;
    retry_at(&store, &first, "boom", T0 + 5_000).await;
    assert!(
        schedule(&store, &p, "a", T0).await.replaced(),
        "dedup is off with no retention"
    );
    assert_eq!(get(&store, &p, "a").await.attempt, 1);
}

/// One `schedule_many` batch over one partition mixing what a load meets (the PostgreSQL
/// store learns which ids are new in one read and writes those without reading them):
/// new ids, one id twice, a done id at its due (duplicate) and at another due (re-armed,
/// its done record forgotten), a pending id (replaced) and one in flight (replaced, the old
/// claim superseded). Each item answers as a single schedule would.
pub async fn a_mixed_schedule_many_batch_answers_as_single_schedules(make: Make) {
    let (store, p) = setup(make).await;
    complete(&store, &p, "done-same", T0).await;
    complete(&store, &p, "done-other", T0).await;
    schedule(&store, &p, "pending", T0 + 50).await;
    schedule(&store, &p, "running", T0).await;
    let running = claim_one(&store, &p, T0).await;
    assert_eq!(running.id, id("running"));
    let items = [
        ("new-1", T0 + 10),
        ("twice", T0 + 20),
        ("done-same", T0),
        ("done-other", T0 + 30),
        ("twice", T0 + 40),
        ("pending", T0 + 60),
        ("running", T0 + 70),
        ("new-2", T0 + 80),
    ]
    .map(|(name, due)| (p.clone(), task(name, due)));
    let outcomes: Vec<ScheduleOutcome> = store
        .schedule_many(items.to_vec(), ScheduleMode::Upsert)
        .await
        .expect("schedule_many")
        .into_iter()
        .map(|item| item.expect("item"))
        .collect();
    assert_eq!(
        outcomes,
        [
            ScheduleOutcome::Created,
            ScheduleOutcome::Created,
            ScheduleOutcome::Duplicate,
            ScheduleOutcome::Created,
            ScheduleOutcome::Replaced {
                previous_due_ms: T0 + 20
            },
            ScheduleOutcome::Replaced {
                previous_due_ms: T0 + 50
            },
            ScheduleOutcome::Replaced {
                previous_due_ms: T0
            },
            ScheduleOutcome::Created,
        ]
    );
    let due_of = |info: delayq_storage::TaskInfo| (info.state, info.due_ms);
    assert_eq!(
        due_of(get(&store, &p, "twice").await),
        (TaskState::Pending, T0 + 40)
    );
    assert_eq!(
        due_of(get(&store, &p, "done-same").await),
        (TaskState::Done, T0)
    );
    assert_eq!(
        due_of(get(&store, &p, "done-other").await),
        (TaskState::Pending, T0 + 30)
    );
    assert_eq!(
        due_of(get(&store, &p, "running").await),
        (TaskState::Pending, T0 + 70)
    );
    // The superseded claim's ack changes nothing; the re-armed id fires at its new due.
    assert_ne!(
        store.ack(&running.token).await.expect("ack"),
        AckOutcome::Completed
    );
    let mut fired: Vec<(String, u64)> = claim_all(&store, &p, MAX_DUE_MS)
        .await
        .into_iter()
        .map(|task| (task.id.as_str().to_owned(), task.due_ms))
        .collect();
    fired.sort();
    assert_eq!(
        fired,
        [
            ("done-other".to_owned(), T0 + 30),
            ("new-1".to_owned(), T0 + 10),
            ("new-2".to_owned(), T0 + 80),
            ("pending".to_owned(), T0 + 60),
            ("running".to_owned(), T0 + 70),
            ("twice".to_owned(), T0 + 40),
        ]
    );
    let stats = store.stats(&p, T0).await.expect("stats");
    assert_eq!(stats.done, 1, "only done-same keeps its done record");
}
