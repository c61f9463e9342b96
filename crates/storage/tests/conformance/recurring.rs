//! Recurring schedules: the compare-and-set of a schedule's record, the due look at a shard,
//! what is learnt of fires, and the tick ledger that makes creating a tick idempotent.

use std::sync::Arc;

use delayq_storage::{
    recurring_shard, AckOutcome, StoreOptions, TaskState, TickOutcome, RECURRING_SHARDS,
};

use super::*;

/// A name of `shard`, distinct per `index`.
fn name_in_shard(shard: u32, index: usize) -> String {
    (0..)
        .map(|n| format!("sched-{index}-{n}"))
        .find(|name| recurring_shard(name) == shard)
        .expect("some name lands in every shard")
}

pub async fn swap_creates_only_when_absent_and_replaces_only_the_expected_record(make: Make) {
    let (store, _) = setup(make).await;
    assert!(store.recurring_get("s").await.expect("get").is_none());
    assert!(store
        .recurring_swap("s", None, Some("v1"), Some(T0))
        .await
        .expect("create"));
    assert!(
        !store
            .recurring_swap("s", None, Some("other"), Some(T0))
            .await
            .expect("create again"),
        "a second create loses"
    );
    assert!(
        !store
            .recurring_swap("s", Some("stale"), Some("v2"), Some(T0))
            .await
            .expect("stale swap"),
        "a swap from a record that is no longer there loses"
    );
    assert!(store
        .recurring_swap("s", Some("v1"), Some("v2"), Some(T0 + 1))
        .await
        .expect("swap"));
    let stored = store
        .recurring_get("s")
        .await
        .expect("get")
        .expect("exists");
    assert_eq!((stored.name.as_str(), stored.record.as_str()), ("s", "v2"));
    assert_eq!(stored.last_fired, None);
}

pub async fn due_returns_active_schedules_by_next_tick_and_the_earliest_after_them(make: Make) {
    let (store, _) = setup(make).await;
    let shard = 5;
    let names: Vec<String> = (0..4).map(|index| name_in_shard(shard, index)).collect();
    let nexts = [T0 + 300, T0 + 100, T0 + 200, T0 + 5_000];
    for (name, next) in names.iter().zip(nexts) {
        assert!(store
            .recurring_swap(name, None, Some(&format!("record of {name}")), Some(next))
            .await
            .expect("create"));
    }
    // Paused (no next tick): counted, never due.
    let paused = name_in_shard(shard, 9);
    assert!(store
        .recurring_swap(&paused, None, Some("paused"), None)
        .await
        .expect("create paused"));
    // Another shard's schedule is not this shard's business.
    let elsewhere = name_in_shard(shard + 1, 0);
    assert!(store
        .recurring_swap(&elsewhere, None, Some("elsewhere"), Some(T0))
        .await
        .expect("create elsewhere"));

    let look = store
        .recurring_due(shard, T0 + 300, 100)
        .await
        .expect("due");
    let due: Vec<&str> = look.due.iter().map(|s| s.name.as_str()).collect();
    assert_eq!(due, [&names[1], &names[2], &names[0]], "earliest first");
    assert_eq!(look.due[0].record, format!("record of {}", names[1]));
    assert_eq!(look.next_ms, Some(T0 + 5_000));
    assert_eq!(look.schedules, 5);

    let limited = store.recurring_due(shard, T0 + 300, 1).await.expect("due");
    assert_eq!(limited.due.len(), 1);
    let none_due = store.recurring_due(shard, T0, 100).await.expect("due");
    assert!(none_due.due.is_empty());
    assert_eq!(none_due.next_ms, Some(T0 + 100));
    assert!(store.recurring_due(RECURRING_SHARDS, T0, 1).await.is_err());
}

pub async fn swap_without_a_next_tick_takes_the_schedule_out_of_the_due_set(make: Make) {
    let (store, _) = setup(make).await;
    let name = name_in_shard(2, 0);
    store
        .recurring_swap(&name, None, Some("active"), Some(T0))
        .await
        .expect("create");
    assert_eq!(
        store.recurring_due(2, T0, 10).await.expect("due").due.len(),
        1
    );
    assert!(store
        .recurring_swap(&name, Some("active"), Some("paused"), None)
        .await
        .expect("pause"));
    let look = store
        .recurring_due(2, T0 + 1_000_000, 10)
        .await
        .expect("due");
    assert!(look.due.is_empty() && look.next_ms.is_none());
    assert_eq!(look.schedules, 1);
    assert_eq!(
        store
            .recurring_get(&name)
            .await
            .expect("get")
            .expect("kept")
            .record,
        "paused"
    );
}

pub async fn delete_removes_the_schedule_and_what_was_learnt_of_its_fires(make: Make) {
    let (store, _) = setup(make).await;
    store
        .recurring_swap("gone", None, Some("r"), Some(T0))
        .await
        .expect("create");
    store
        .recurring_fired("gone", T0, T0 + 2)
        .await
        .expect("fired");
    assert!(!store
        .recurring_swap("gone", Some("other"), None, None)
        .await
        .expect("stale delete"));
    assert!(store
        .recurring_swap("gone", Some("r"), None, None)
        .await
        .expect("delete"));
    assert!(store.recurring_get("gone").await.expect("get").is_none());
    let shard = recurring_shard("gone");
    let look = store.recurring_due(shard, T0 + 10, 10).await.expect("due");
    assert!(look.due.is_empty());
    // Created again, it starts with nothing learnt.
    store
        .recurring_swap("gone", None, Some("again"), Some(T0))
        .await
        .expect("create again");
    let again = store
        .recurring_get("gone")
        .await
        .expect("get")
        .expect("exists");
    assert_eq!(again.last_fired, None);
}

pub async fn fired_is_learnt_only_for_an_existing_schedule_and_only_forward(make: Make) {
    let (store, _) = setup(make).await;
    store
        .recurring_fired("nobody", T0, T0 + 1)
        .await
        .expect("fired");
    assert!(store.recurring_get("nobody").await.expect("get").is_none());
    store
        .recurring_swap("s", None, Some("r"), Some(T0))
        .await
        .expect("create");
    store
        .recurring_fired("s", T0 + 1_000, T0 + 1_002)
        .await
        .expect("fired");
    store
        .recurring_fired("s", T0, T0 + 5_000)
        .await
        .expect("an older tick, reported late");
    let stored = store
        .recurring_get("s")
        .await
        .expect("get")
        .expect("exists");
    assert_eq!(stored.last_fired, Some((T0 + 1_000, T0 + 1_002)));
    // A swap (an update, a pause) keeps what was learnt.
    store
        .recurring_swap("s", Some("r"), Some("r2"), None)
        .await
        .expect("swap");
    let listed = store.recurring_list().await.expect("list");
    assert_eq!(listed.len(), 1);
    assert_eq!(listed[0].last_fired, Some((T0 + 1_000, T0 + 1_002)));
}

pub async fn list_spans_every_shard_sorted_by_name(make: Make) {
    let (store, _) = setup(make).await;
    let mut names: Vec<String> = (0..RECURRING_SHARDS)
        .map(|shard| name_in_shard(shard, shard as usize))
        .collect();
    for name in &names {
        store
            .recurring_swap(name, None, Some(name), Some(T0))
            .await
            .expect("create");
    }
    names.sort();
    let listed: Vec<String> = store
        .recurring_list()
        .await
        .expect("list")
        .into_iter()
        .map(|stored| stored.name)
        .collect();
    assert_eq!(listed, names);
}

pub async fn create_tick_is_a_no_op_once_in_the_ledger_even_with_no_retention(make: Make) {
    // executed_retention 0: dedup is off, so only the ledger stands between a repeated
    // creation and a second fire.
    let options = StoreOptions {
        executed_retention_ms: 0,
        ..StoreOptions::default()
    };
    let (store, p) = setup_with(make, options).await;
    let tick = task("nightly@1700000000000", T0);
    assert_eq!(
        store.create_tick(&p, tick.clone()).await.expect("create"),
        TickOutcome::Created
    );
    assert_eq!(
        store.create_tick(&p, tick.clone()).await.expect("again"),
        TickOutcome::AlreadyCreated,
        "while pending"
    );
    let claimed = claim_one(&store, &p, T0).await;
    assert_eq!(claimed.id.as_str(), "nightly@1700000000000");
    assert_eq!(ack(&store, &claimed).await, AckOutcome::Completed);
    assert!(
        store.get(&p, &tick.id).await.expect("get").is_none(),
        "no done record"
    );
    assert_eq!(
        store
            .create_tick(&p, tick.clone())
            .await
            .expect("after it fired"),
        TickOutcome::AlreadyCreated
    );
    assert!(
        claim_all(&store, &p, T0 + 60_000).await.is_empty(),
        "never fires twice"
    );

    // Once forgotten (the schedule moved past it), the ledger no longer guards the id.
    store
        .forget_ticks(&p, std::slice::from_ref(&tick.id))
        .await
        .expect("forget");
    assert_eq!(
        store.create_tick(&p, tick).await.expect("after forget"),
        TickOutcome::Created
    );
}

pub async fn create_tick_keeps_a_live_task_of_the_same_id(make: Make) {
    let (store, p) = setup(make).await;
    schedule(&store, &p, "s@1700000000000", T0 + 5).await;
    assert_eq!(
        store
            .create_tick(&p, task("s@1700000000000", T0))
            .await
            .expect("create"),
        TickOutcome::Kept { due_ms: T0 + 5 }
    );
    let info = get(&store, &p, "s@1700000000000").await;
    assert_eq!((info.state, info.due_ms), (TaskState::Pending, T0 + 5));
    assert_eq!(
        store
            .create_tick(&p, task("s@1700000000000", T0))
            .await
            .expect("again"),
        TickOutcome::AlreadyCreated
    );
}

pub async fn create_tick_checks_the_payload_before_writing(make: Make) {
    let options = StoreOptions {
        max_payload: 8,
        ..StoreOptions::default()
    };
    let (store, p) = setup_with(make, options).await;
    let mut tick = task("s@1", T0);
    tick.payload = "too long for eight".into();
    assert!(store.create_tick(&p, tick.clone()).await.is_err());
    tick.payload = "ok".into();
    assert_eq!(
        store.create_tick(&p, tick).await.expect("create"),
        TickOutcome::Created,
        "the refused attempt left no ledger entry"
    );
}

pub async fn concurrent_tick_creations_create_it_once(make: Make) {
    let (store, p) = setup(make).await;
    let shared = store.shared();
    let attempts: Vec<_> = (0..16)
        .map(|_| {
            let store = Arc::clone(&shared);
            let p = p.clone();
            tokio::spawn(async move { store.create_tick(&p, task("race@1", T0)).await })
        })
        .collect();
    let mut created = 0;
    for attempt in attempts {
        match attempt.await.expect("join").expect("create_tick") {
            TickOutcome::Created => created += 1,
            TickOutcome::AlreadyCreated => {}
            other => panic!("unexpected {other:?}"),
        }
    }
    assert_eq!(created, 1);
    assert_eq!(claim_all(&store, &p, T0).await.len(), 1);
}

pub async fn concurrent_swaps_from_one_record_let_exactly_one_win(make: Make) {
    let (store, _) = setup(make).await;
    store
        .recurring_swap("s", None, Some("base"), Some(T0))
        .await
        .expect("create");
    let shared = store.shared();
    let attempts: Vec<_> = (0..16)
        .map(|index| {
            let store = Arc::clone(&shared);
            tokio::spawn(async move {
                let new = format!("writer {index}");
                store
                    .recurring_swap("s", Some("base"), Some(&new), Some(T0 + index))
                    .await
                    .map(|won| won.then_some(new))
            })
        })
        .collect();
    let mut winners = Vec::new();
    for attempt in attempts {
        if let Some(new) = attempt.await.expect("join").expect("swap") {
            winners.push(new);
        }
    }
    assert_eq!(winners.len(), 1, "{winners:?}");
    let stored = store
        .recurring_get("s")
        .await
        .expect("get")
        .expect("exists");
    assert_eq!(stored.record, winners[0]);
}

pub async fn due_many_answers_each_shard_as_its_own_look_would(make: Make) {
    let (store, _) = setup(make).await;
    // Shard 1: two due, one later; shard 3: one later only; shard 7: paused only; shard 0
    // and 12: nothing.
    let plan: [(u32, usize, Option<u64>); 5] = [
        (1, 0, Some(T0 + 100)),
        (1, 1, Some(T0 + 50)),
        (1, 2, Some(T0 + 9_000)),
        (3, 0, Some(T0 + 7_000)),
        (7, 0, None),
    ];
    for (shard, index, next) in plan {
        let name = name_in_shard(shard, index);
        assert!(store
            .recurring_swap(&name, None, Some(&format!("record of {name}")), next)
            .await
            .expect("create"));
    }
    let shards = [0, 1, 3, 7, 12];
    for limit in [1, 100] {
        let many = store
            .recurring_due_many(&shards, T0 + 100, limit)
            .await
            .expect("due many");
        assert_eq!(many.len(), shards.len(), "one look per shard, in order");
        for (shard, look) in shards.iter().zip(&many) {
            let alone = store
                .recurring_due(*shard, T0 + 100, limit)
                .await
                .expect("due");
            assert_eq!(look, &alone, "shard {shard}, limit {limit}");
        }
    }
    let many = store
        .recurring_due_many(&shards, T0 + 100, 100)
        .await
        .expect("due many");
    assert_eq!(many[1].due.len(), 2);
    assert_eq!((many[2].next_ms, many[2].schedules), (Some(T0 + 7_000), 1));
    assert_eq!((many[3].next_ms, many[3].schedules), (None, 1));
    assert_eq!(many[0], delayq_storage::ShardLook::default());
    assert!(store
        .recurring_due_many(&[2, RECURRING_SHARDS], T0, 1)
        .await
        .is_err());
}
