//! schedule (in each mode: replace, if-absent, earlier, later), cancel, get, schedule_many.

use bytes::Bytes;
use delayq_storage::{
    partition_of, AckOutcome, Cancel, NewTask, Partition, ScheduleMode, ScheduleOutcome,
    StorageError, StoreOptions, TaskState, MAX_DUE_MS,
};

use super::*;

pub async fn schedule_creates_a_pending_task_visible_in_get(make: Make) {
    let (store, p) = setup(make).await;
    assert_eq!(
        schedule(&store, &p, "a", T0 + 5_000).await,
        ScheduleOutcome::Created
    );
    let info = get(&store, &p, "a").await;
    assert_eq!(info.id, id("a"));
    assert_eq!(info.state, TaskState::Pending);
    assert_eq!(info.due_ms, T0 + 5_000);
    assert_eq!(info.attempt, 1);
    assert_eq!(info.payload, Bytes::from("payload of a"));
    assert_eq!(info.last_error, None);
    assert_eq!(info.state_since_ms, None);
}

pub async fn schedule_in_the_past_is_claimable_at_once(make: Make) {
    let (store, p) = setup(make).await;
    schedule(&store, &p, "late", T0 - 3_600_000).await;
    let claimed = claim_one(&store, &p, T0).await;
    assert_eq!(claimed.id, id("late"));
    assert_eq!(claimed.due_ms, T0 - 3_600_000);
}

pub async fn schedule_again_replaces_and_reports_the_previous_due(make: Make) {
    let (store, p) = setup(make).await;
    schedule(&store, &p, "a", T0 + 1_000).await;
    let outcome = store
        .schedule(
            &p,
            NewTask {
                id: id("a"),
                due_ms: T0 + 9_000,
                payload: "second".into(),
                traceparent: None,
            },
            ScheduleMode::Upsert,
        )
        .await
        .expect("schedule");
    assert_eq!(
        outcome,
        ScheduleOutcome::Replaced {
            previous_due_ms: T0 + 1_000
        }
    );
    assert!(outcome.replaced() && !outcome.duplicate());
    let info = get(&store, &p, "a").await;
    assert_eq!(
        (info.due_ms, info.payload),
        (T0 + 9_000, Bytes::from("second"))
    );
    let stats = store.stats(&p, T0).await.expect("stats");
    assert_eq!(stats.pending, 1, "a replaced task is stored once");
}

pub async fn replace_bumps_the_generation_and_resets_attempt_and_error(make: Make) {
    let (store, p) = setup(make).await;
    schedule(&store, &p, "a", T0).await;
    let first = claim_one(&store, &p, T0).await;
    retry_at(&store, &first, "boom", T0 + 1_000).await;
    let retried = get(&store, &p, "a").await;
    assert_eq!(retried.attempt, 2);
    assert_eq!(
        retried.generation, first.generation,
        "a retry is the same generation"
    );

    schedule(&store, &p, "a", T0 + 2_000).await;
    let replaced = get(&store, &p, "a").await;
    assert!(
        replaced.generation > first.generation,
        "{replaced:?} after {first:?}"
    );
    assert_eq!(replaced.attempt, 1);
    assert_eq!(replaced.last_error, None);
    schedule(&store, &p, "a", T0 + 3_000).await;
    assert!(get(&store, &p, "a").await.generation > replaced.generation);
}

pub async fn replace_moves_the_task_to_its_new_due(make: Make) {
    let (store, p) = setup(make).await;
    schedule(&store, &p, "later", T0 + 1_000).await;
    schedule(&store, &p, "earlier", T0 + 9_000).await;
    schedule(&store, &p, "later", T0 + 5_000).await;
    schedule(&store, &p, "earlier", T0 + 2_000).await;
    assert!(
        claim_all(&store, &p, T0 + 1_999).await.is_empty(),
        "old due of `later` must not fire"
    );
    assert_eq!(ids(&claim_all(&store, &p, T0 + 2_000).await), ["earlier"]);
    assert!(claim_all(&store, &p, T0 + 4_999).await.is_empty());
    assert_eq!(ids(&claim_all(&store, &p, T0 + 5_000).await), ["later"]);
}

pub async fn if_absent_creates_when_no_task_exists(make: Make) {
    let (store, p) = setup(make).await;
    let outcome = store
        .schedule(&p, task("a", T0), ScheduleMode::IfAbsent)
        .await
        .expect("schedule");
    assert_eq!(outcome, ScheduleOutcome::Created);
    assert_eq!(get(&store, &p, "a").await.state, TaskState::Pending);
}

pub async fn if_absent_keeps_a_pending_task_and_reports_its_due(make: Make) {
    let (store, p) = setup(make).await;
    schedule(&store, &p, "a", T0 + 1_000).await;
    let before = get(&store, &p, "a").await;
    let outcome = store
        .schedule(
            &p,
            NewTask {
                id: id("a"),
                due_ms: T0 + 7_000,
                payload: "other".into(),
                traceparent: None,
            },
            ScheduleMode::IfAbsent,
        )
        .await
        .expect("schedule");
    assert_eq!(outcome, ScheduleOutcome::Kept { due_ms: T0 + 1_000 });
    assert_eq!(
        get(&store, &p, "a").await,
        before,
        "a kept task is untouched"
    );
}

pub async fn if_absent_keeps_an_inflight_task(make: Make) {
    let (store, p) = setup(make).await;
    schedule(&store, &p, "a", T0).await;
    let claimed = claim_one(&store, &p, T0).await;
    let outcome = store
        .schedule(&p, task("a", T0 + 7_000), ScheduleMode::IfAbsent)
        .await
        .expect("schedule");
    assert_eq!(outcome, ScheduleOutcome::Kept { due_ms: T0 });
    assert_eq!(get(&store, &p, "a").await.state, TaskState::Inflight);
    let acked = store.ack(&claimed.token).await.expect("ack");
    assert_eq!(acked, delayq_storage::AckOutcome::Completed);
}

pub async fn if_absent_keeps_a_dead_task(make: Make) {
    let (store, p) = setup(make).await;
    schedule(&store, &p, "a", T0).await;
    let claimed = claim_one(&store, &p, T0).await;
    dead_letter(&store, &claimed, "boom").await;
    let outcome = store
        .schedule(&p, task("a", T0 + 7_000), ScheduleMode::IfAbsent)
        .await
        .expect("schedule");
    assert_eq!(outcome, ScheduleOutcome::Kept { due_ms: T0 });
    assert_eq!(get(&store, &p, "a").await.state, TaskState::Dead);
}

pub async fn upsert_replaces_a_dead_task_with_a_pending_one(make: Make) {
    let (store, p) = setup(make).await;
    schedule(&store, &p, "a", T0).await;
    let claimed = claim_one(&store, &p, T0).await;
    dead_letter(&store, &claimed, "boom").await;
    let outcome = schedule(&store, &p, "a", T0 + 7_000).await;
    assert_eq!(
        outcome,
        ScheduleOutcome::Replaced {
            previous_due_ms: T0
        }
    );
    let info = get(&store, &p, "a").await;
    assert_eq!(
        (info.state, info.due_ms, info.attempt),
        (TaskState::Pending, T0 + 7_000, 1)
    );
    assert!(store.list_dead(&p, 10).await.expect("list_dead").is_empty());
    assert_eq!(store.stats(&p, T0).await.expect("stats").dead, 0);
}

pub async fn cancel_removes_a_pending_task(make: Make) {
    let (store, p) = setup(make).await;
    schedule(&store, &p, "a", T0).await;
    assert_eq!(
        store.cancel(&p, &id("a")).await.expect("cancel"),
        Cancel::Cancelled
    );
    assert_eq!(store.get(&p, &id("a")).await.expect("get"), None);
    assert!(claim_all(&store, &p, T0 + 60_000).await.is_empty());
    assert_eq!(
        store.cancel(&p, &id("a")).await.expect("cancel again"),
        Cancel::NotFound
    );
}

pub async fn cancel_of_an_unknown_id_returns_false(make: Make) {
    let (store, p) = setup(make).await;
    let outcome = store.cancel(&p, &id("never-scheduled")).await;
    assert_eq!(outcome.expect("cancel"), Cancel::NotFound);
    assert!(!Cancel::NotFound.cancelled() && Cancel::NotFound.state().is_none());
}

pub async fn get_of_an_unknown_id_returns_none(make: Make) {
    let (store, p) = setup(make).await;
    schedule(&store, &p, "other", T0).await;
    assert_eq!(
        store.get(&p, &id("never-scheduled")).await.expect("get"),
        None
    );
}

pub async fn schedule_many_stores_every_item_and_reports_in_order(make: Make) {
    let (store, p) = setup(make).await;
    schedule(&store, &p, "existing", T0 + 50).await;
    let mut items: Vec<_> = (0..500)
        .map(|n| (p.clone(), task(&format!("bulk-{n}"), T0 + n)))
        .collect();
    items.push((p.clone(), task("existing", T0 + 600)));
    let results = store
        .schedule_many(items, ScheduleMode::Upsert)
        .await
        .expect("schedule_many");
    assert_eq!(results.len(), 501);
    for result in &results[..500] {
        assert_eq!(result.as_ref().ok(), Some(&ScheduleOutcome::Created));
    }
    assert_eq!(
        results[500].as_ref().ok(),
        Some(&ScheduleOutcome::Replaced {
            previous_due_ms: T0 + 50
        })
    );
    assert_eq!(store.stats(&p, T0).await.expect("stats").pending, 501);
    assert_eq!(get(&store, &p, "bulk-499").await.due_ms, T0 + 499);
}

pub async fn schedule_many_honours_if_absent(make: Make) {
    let (store, p) = setup(make).await;
    schedule(&store, &p, "a", T0 + 1).await;
    let items = vec![
        (p.clone(), task("a", T0 + 2)),
        (p.clone(), task("b", T0 + 3)),
    ];
    let results = store
        .schedule_many(items, ScheduleMode::IfAbsent)
        .await
        .expect("schedule_many");
    let outcomes: Vec<_> = results.iter().map(|r| r.as_ref().ok().copied()).collect();
    assert_eq!(
        outcomes,
        [
            Some(ScheduleOutcome::Kept { due_ms: T0 + 1 }),
            Some(ScheduleOutcome::Created)
        ]
    );
    assert_eq!(get(&store, &p, "a").await.due_ms, T0 + 1);
}

pub async fn schedule_many_fails_invalid_items_alone(make: Make) {
    let options = StoreOptions {
        max_payload: 16,
        ..StoreOptions::default()
    };
    let (store, p) = setup_with(make, options).await;
    let too_large = NewTask {
        id: id("too-large"),
        due_ms: T0,
        payload: Bytes::from(vec![b'x'; 17]),
        traceparent: None,
    };
    let too_late = NewTask {
        id: id("too-late"),
        due_ms: delayq_storage::MAX_DUE_MS + 1,
        payload: Bytes::new(),
        traceparent: None,
    };
    let items = vec![
        (p.clone(), task("ok-1", T0)),
        (p.clone(), too_large),
        (p.clone(), task("ok-2", T0 + 1)),
        (p.clone(), too_late),
        (p.clone(), task("ok-3", T0 + 2)),
    ];
    let results = store
        .schedule_many(items, ScheduleMode::Upsert)
        .await
        .expect("schedule_many");
    assert_eq!(results.len(), 5);
    for index in [0, 2, 4] {
        assert_eq!(
            results[index].as_ref().ok(),
            Some(&ScheduleOutcome::Created),
            "item {index}"
        );
    }
    assert!(
        matches!(&results[1], Err(StorageError::PayloadTooLarge { id, size: 17, max: 16 }) if id == "too-large"),
        "{:?}",
        results[1]
    );
    assert!(
        matches!(results[3], Err(StorageError::InvalidDue { due_ms }) if due_ms == delayq_storage::MAX_DUE_MS + 1),
        "{:?}",
        results[3]
    );
    assert_eq!(
        ids(&claim_all(&store, &p, T0 + 2).await),
        ["ok-1", "ok-2", "ok-3"]
    );
    assert_eq!(store.get(&p, &id("too-large")).await.expect("get"), None);
    assert_eq!(store.get(&p, &id("too-late")).await.expect("get"), None);
}

pub async fn schedule_many_spreads_over_partitions(make: Make) {
    let store = make(StoreOptions::default()).await;
    let first = register(&store, "spread", 8).await;
    let items: Vec<_> = (0..200)
        .map(|n| {
            let task = task(&format!("t-{n}"), T0 + n);
            let index = partition_of(&task.id, 8);
            (Partition::new(first.queue.clone(), index), task)
        })
        .collect();
    let expected: Vec<_> = items.clone();
    create_all(&store, items).await;
    let mut total = 0;
    for index in 0..8 {
        let partition = Partition::new(first.queue.clone(), index);
        total += store.stats(&partition, T0).await.expect("stats").pending;
    }
    assert_eq!(total, 200);
    for (partition, task) in expected.iter().step_by(37) {
        let info = store
            .get(partition, &task.id)
            .await
            .expect("get")
            .expect("stored");
        assert_eq!(info.due_ms, task.due_ms);
    }
}

/// Schedules `name` at `due_ms` with `payload` in `mode` and returns the outcome.
async fn schedule_in(
    store: &Subject,
    p: &Partition,
    name: &str,
    due_ms: u64,
    payload: &str,
    mode: ScheduleMode,
) -> ScheduleOutcome {
    store
        .schedule(
            p,
            NewTask {
                id: id(name),
                due_ms,
                payload: Bytes::from(payload.to_owned()),
                traceparent: None,
            },
            mode,
        )
        .await
        .unwrap_or_else(|error| panic!("schedule {name} in {mode}: {error}"))
}

/// Every mode against a pending task due at `T0 + 5s`, with a new due 2 s earlier and 2 s
/// later: which one wins, with whose payload, and what the answer says.
pub async fn every_mode_against_a_pending_task_with_an_earlier_and_a_later_due(make: Make) {
    use ScheduleMode::{Earlier, IfAbsent, Later, Upsert};
    let (store, p) = setup(make).await;
    let live = T0 + 5_000;
    // (mode, new due, does the new one win)
    let cases = [
        (Upsert, live - 2_000, true),
        (Upsert, live + 2_000, true),
        (IfAbsent, live - 2_000, false),
        (IfAbsent, live + 2_000, false),
        (Earlier, live - 2_000, true),
        (Earlier, live + 2_000, false),
        (Later, live - 2_000, false),
        (Later, live + 2_000, true),
    ];
    for (n, (mode, new_due, wins)) in cases.into_iter().enumerate() {
        let name = format!("{mode}-{n}");
        schedule_in(&store, &p, &name, live, "first", Upsert).await;
        let before = get(&store, &p, &name).await;
        let outcome = schedule_in(&store, &p, &name, new_due, "second", mode).await;
        let after = get(&store, &p, &name).await;
        let what = format!("{mode} with due {new_due} against {live}");
        if wins {
            assert_eq!(
                outcome,
                ScheduleOutcome::Replaced {
                    previous_due_ms: live
                },
                "{what}"
            );
            assert_eq!(
                (after.due_ms, after.payload.clone()),
                (new_due, Bytes::from("second")),
                "{what}: the payload goes with the due that wins"
            );
            assert!(after.generation > before.generation, "{what}");
        } else {
            assert_eq!(outcome, ScheduleOutcome::Kept { due_ms: live }, "{what}");
            assert!(!outcome.replaced() && !outcome.duplicate(), "{what}");
            assert_eq!(after, before, "{what}: a kept task is untouched");
        }
        assert_eq!(after.state, TaskState::Pending, "{what}");
    }
    let stats = store.stats(&p, T0).await.expect("stats");
    assert_eq!(stats.pending, cases.len() as u64, "each id is stored once");
    // The winners fire at their own dues and nowhere else.
    let fired = claim_all(&store, &p, live - 2_000).await;
    let mut fired = ids(&fired);
    fired.sort_unstable();
    assert_eq!(fired, ["earlier-4", "replace-0"]);
}

pub async fn earlier_and_later_keep_a_pending_task_on_a_tie(make: Make) {
    let (store, p) = setup(make).await;
    for mode in [ScheduleMode::Earlier, ScheduleMode::Later] {
        let name = mode.as_str();
        schedule_in(&store, &p, name, T0 + 1_000, "first", ScheduleMode::Upsert).await;
        let before = get(&store, &p, name).await;
        assert_eq!(
            schedule_in(&store, &p, name, T0 + 1_000, "second", mode).await,
            ScheduleOutcome::Kept { due_ms: T0 + 1_000 },
            "{mode}"
        );
        assert_eq!(get(&store, &p, name).await, before, "{mode}");
    }
}

pub async fn earlier_and_later_compare_with_the_retry_due_of_a_task_waiting_for_a_retry(
    make: Make,
) {
    let (store, p) = setup(make).await;
    for mode in [ScheduleMode::Earlier, ScheduleMode::Later] {
        let name = mode.as_str();
        schedule_in(&store, &p, name, T0, "first", ScheduleMode::Upsert).await;
        let claimed = claim_one(&store, &p, T0).await;
        retry_at(&store, &claimed, "boom", T0 + 10_000).await;
        // Between the scheduled due and the retry's: earlier wins, later loses.
        let outcome = schedule_in(&store, &p, name, T0 + 5_000, "second", mode).await;
        let info = get(&store, &p, name).await;
        if mode == ScheduleMode::Earlier {
            assert_eq!(
                outcome,
                ScheduleOutcome::Replaced {
                    previous_due_ms: T0 + 10_000
                }
            );
            assert_eq!((info.due_ms, info.attempt), (T0 + 5_000, 1));
        } else {
            assert_eq!(
                outcome,
                ScheduleOutcome::Kept {
                    due_ms: T0 + 10_000
                }
            );
            assert_eq!((info.due_ms, info.attempt), (T0 + 10_000, 2));
        }
    }
}

pub async fn every_mode_creates_when_no_live_task_exists(make: Make) {
    let (store, p) = setup(make).await;
    for mode in ScheduleMode::ALL {
        let fresh = format!("fresh-{mode}");
        assert_eq!(
            schedule_in(&store, &p, &fresh, T0 + 1_000, "new", mode).await,
            ScheduleOutcome::Created,
            "{mode}: an unknown id"
        );
        let info = get(&store, &p, &fresh).await;
        assert_eq!(
            (info.state, info.due_ms, info.payload),
            (TaskState::Pending, T0 + 1_000, Bytes::from("new"))
        );

        let cancelled = format!("cancelled-{mode}");
        schedule(&store, &p, &cancelled, T0 + 9_000).await;
        store.cancel(&p, &id(&cancelled)).await.expect("cancel");
        assert_eq!(
            schedule_in(&store, &p, &cancelled, T0 + 20_000, "new", mode).await,
            ScheduleOutcome::Created,
            "{mode}: a cancelled id"
        );
        assert_eq!(get(&store, &p, &cancelled).await.due_ms, T0 + 20_000);

        let done = format!("done-{mode}");
        complete(&store, &p, &done, T0).await;
        assert_eq!(
            schedule_in(&store, &p, &done, T0 + 20_000, "new", mode).await,
            ScheduleOutcome::Created,
            "{mode}: a completed id with another due"
        );
        assert_eq!(get(&store, &p, &done).await.state, TaskState::Pending);
    }
}

pub async fn earlier_keeps_an_inflight_task_whatever_the_due(make: Make) {
    let (store, p) = setup(make).await;
    schedule(&store, &p, "a", T0).await;
    let claimed = claim_one(&store, &p, T0).await;
    for due in [T0 - 5_000, T0 + 5_000] {
        assert_eq!(
            schedule_in(&store, &p, "a", due, "other", ScheduleMode::Earlier).await,
            ScheduleOutcome::Kept { due_ms: T0 },
            "due {due}"
        );
    }
    assert_eq!(get(&store, &p, "a").await.state, TaskState::Inflight);
    assert!(claim_all(&store, &p, T0 + 60_000).await.is_empty());
    assert_eq!(ack(&store, &claimed).await, AckOutcome::Completed);
}

pub async fn later_rearms_an_inflight_task_only_for_a_later_due(make: Make) {
    let (store, p) = setup(make).await;
    schedule(&store, &p, "a", T0).await;
    let claimed = claim_one(&store, &p, T0).await;
    assert_eq!(
        schedule_in(&store, &p, "a", T0 - 5_000, "older", ScheduleMode::Later).await,
        ScheduleOutcome::Kept { due_ms: T0 },
        "an earlier due than the running one loses"
    );
    assert_eq!(get(&store, &p, "a").await.state, TaskState::Inflight);
    assert_eq!(
        schedule_in(&store, &p, "a", T0 + 5_000, "newer", ScheduleMode::Later).await,
        ScheduleOutcome::Replaced {
            previous_due_ms: T0
        },
        "a later due is armed beside the running attempt"
    );
    let info = get(&store, &p, "a").await;
    assert_eq!(
        (info.state, info.due_ms, info.payload),
        (TaskState::Pending, T0 + 5_000, Bytes::from("newer"))
    );
    assert_eq!(ack(&store, &claimed).await, AckOutcome::Superseded);
    let next = claim_one(&store, &p, T0 + 5_000).await;
    assert_eq!(next.payload, Bytes::from("newer"));
}

pub async fn earlier_and_later_replace_a_dead_task(make: Make) {
    let (store, p) = setup(make).await;
    for mode in [ScheduleMode::Earlier, ScheduleMode::Later] {
        let name = mode.as_str();
        schedule_dead(&store, &p, name, T0, "boom").await;
        // Later than the dead letter's due, for `earlier` too: a dead letter never fires,
        // so no due of its can win.
        assert_eq!(
            schedule_in(&store, &p, name, T0 + 60_000, "again", mode).await,
            ScheduleOutcome::Replaced {
                previous_due_ms: T0
            },
            "{mode}"
        );
        let info = get(&store, &p, name).await;
        assert_eq!(
            (info.state, info.due_ms, info.attempt, info.payload),
            (TaskState::Pending, T0 + 60_000, 1, Bytes::from("again")),
            "{mode}"
        );
    }
    assert!(store.list_dead(&p, 10).await.expect("list_dead").is_empty());
}

pub async fn every_mode_dedups_the_same_due_after_ack(make: Make) {
    let (store, p) = setup(make).await;
    for mode in ScheduleMode::ALL {
        let name = format!("acked-{mode}");
        complete(&store, &p, &name, T0).await;
        assert_eq!(
            schedule_in(&store, &p, &name, T0, "again", mode).await,
            ScheduleOutcome::Duplicate,
            "{mode}"
        );
        assert_eq!(
            get(&store, &p, &name).await.state,
            TaskState::Done,
            "{mode}"
        );
    }
    assert!(claim_all(&store, &p, MAX_DUE_MS).await.is_empty());
}

pub async fn every_mode_dedups_a_resend_while_inflight(make: Make) {
    let (store, p) = setup(make).await;
    for mode in ScheduleMode::ALL {
        let name = format!("running-{mode}");
        schedule(&store, &p, &name, T0).await;
        let claimed = claim_one(&store, &p, T0).await;
        let before = get(&store, &p, &name).await;
        let outcome = schedule_in(&store, &p, &name, T0, "again", mode).await;
        // If-absent keeps what runs (as it keeps any live task); the others see a resend.
        let expected = if mode == ScheduleMode::IfAbsent {
            ScheduleOutcome::Kept { due_ms: T0 }
        } else {
            ScheduleOutcome::Duplicate
        };
        assert_eq!(outcome, expected, "{mode}");
        assert_eq!(
            get(&store, &p, &name).await,
            before,
            "{mode}: no new generation"
        );
        assert_eq!(ack(&store, &claimed).await, AckOutcome::Completed, "{mode}");
    }
    assert!(claim_all(&store, &p, MAX_DUE_MS).await.is_empty());
}

pub async fn schedule_many_honours_earlier_and_later(make: Make) {
    let (store, p) = setup(make).await;
    for name in ["a", "b"] {
        schedule(&store, &p, name, T0 + 5_000).await;
    }
    for (mode, winner, loser) in [
        (ScheduleMode::Earlier, T0 + 1_000, T0 + 9_000),
        (ScheduleMode::Later, T0 + 9_000, T0 + 1_000),
    ] {
        let items = vec![
            (p.clone(), task("a", winner)),
            (p.clone(), task("b", loser)),
            (p.clone(), task(&format!("new-{mode}"), loser)),
        ];
        let results = store
            .schedule_many(items, mode)
            .await
            .expect("schedule_many");
        let outcomes: Vec<_> = results.iter().map(|r| r.as_ref().ok().copied()).collect();
        let previous_due_ms = if mode == ScheduleMode::Earlier {
            T0 + 5_000
        } else {
            T0 + 1_000
        };
        assert_eq!(
            outcomes,
            [
                Some(ScheduleOutcome::Replaced { previous_due_ms }),
                Some(ScheduleOutcome::Kept { due_ms: T0 + 5_000 }),
                Some(ScheduleOutcome::Created),
            ],
            "{mode}"
        );
        assert_eq!(get(&store, &p, "a").await.due_ms, winner, "{mode}");
        assert_eq!(get(&store, &p, "b").await.due_ms, T0 + 5_000, "{mode}");
    }
}
