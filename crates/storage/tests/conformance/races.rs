//! Races: many claimers on one partition, cancel against claim, ack against lease expiry,
//! upserts of one id. Every racer is a spawned task, so on a multi-threaded runtime they run
//! in parallel against the store (and, for Redis, interleave on the server).

use std::collections::HashSet;

use delayq_storage::{AckOutcome, Cancel, ScheduleMode, ScheduleOutcome, StorageError, TaskState};
use tokio::task::JoinSet;

use super::*;

const CLAIMERS: usize = 16;
const TASKS: usize = 2_000;
const ROUNDS: usize = 200;

pub async fn concurrent_claimers_never_share_a_task(make: Make) {
    let (store, p) = setup(make).await;
    let items: Vec<_> = (0..TASKS)
        .map(|n| (p.clone(), task(&format!("t-{n}"), T0 - (n % 97) as u64)))
        .collect();
    create_all(&store, items).await;

    let mut claimers = JoinSet::new();
    for claimer in 0..CLAIMERS {
        let (store, p) = (store.shared(), p.clone());
        claimers.spawn(async move {
            let owner = format!("claimer-{claimer}");
            let mut claimed = Vec::new();
            loop {
                let batch = store
                    .claim_due(&p, T0, 7, LEASE, &owner)
                    .await
                    .expect("claim_due");
                if batch.tasks.is_empty() {
                    return claimed;
                }
                claimed.extend(batch.tasks.into_iter().map(|task| task.id.to_string()));
            }
        });
    }
    let mut union = HashSet::new();
    let mut total = 0;
    while let Some(claimed) = claimers.join_next().await {
        for id in claimed.expect("claimer") {
            total += 1;
            assert!(union.insert(id.clone()), "{id} was claimed twice");
        }
    }
    let expected: HashSet<_> = (0..TASKS).map(|n| format!("t-{n}")).collect();
    assert_eq!(total, TASKS);
    assert_eq!(union, expected);
    let stats = store.stats(&p, T0).await.expect("stats");
    assert_eq!((stats.pending, stats.inflight), (0, TASKS as u64));
}

pub async fn cancel_racing_claim_never_both_cancels_and_completes(make: Make) {
    let (store, p) = setup(make).await;
    let (mut cancel_won, mut claim_won) = (0, 0);
    for round in 0..ROUNDS {
        let name = format!("race-{round}");
        schedule(&store, &p, &name, T0).await;
        let canceller = {
            let (store, p, name) = (store.shared(), p.clone(), name.clone());
            async move { store.cancel(&p, &id(&name)).await.expect("cancel") }
        };
        let worker = {
            let (store, p) = (store.shared(), p.clone());
            async move {
                let batch = store
                    .claim_due(&p, T0, 1, LEASE, "worker")
                    .await
                    .expect("claim_due");
                match batch.tasks.first() {
                    Some(task) => Some(store.ack(&task.token).await.expect("ack")),
                    None => None,
                }
            }
        };
        // Alternate which racer is spawned first.
        let (cancelled, acked) = if round % 2 == 0 {
            let canceller = tokio::spawn(canceller);
            let worker = tokio::spawn(worker);
            (
                canceller.await.expect("canceller"),
                worker.await.expect("worker"),
            )
        } else {
            let worker = tokio::spawn(worker);
            let canceller = tokio::spawn(canceller);
            (
                canceller.await.expect("canceller"),
                worker.await.expect("worker"),
            )
        };
        let completed = acked == Some(AckOutcome::Completed);
        let claimed = acked.is_some();
        match cancelled {
            Cancel::Cancelled => assert!(!claimed, "round {round}: cancelled, yet claimed"),
            Cancel::InFlight => assert_eq!(
                acked,
                Some(AckOutcome::Superseded),
                "round {round}: cancelled while running: its ack ends it"
            ),
            Cancel::NotFound => assert!(completed, "round {round}: not found, yet not done"),
        }
        assert!(
            cancelled.cancelled() != claimed,
            "round {round}: cancelled={cancelled:?}, ack={acked:?}: exactly one of them must win"
        );
        let state = store
            .get(&p, &id(&name))
            .await
            .expect("get")
            .map(|info| info.state);
        if completed {
            claim_won += 1;
            assert_eq!(state, Some(TaskState::Done), "round {round}");
        } else {
            cancel_won += 1;
            assert_eq!(state, None, "round {round}");
        }
    }
    assert_eq!(cancel_won + claim_won, ROUNDS);
}

pub async fn ack_racing_requeue_expired_is_all_or_nothing(make: Make) {
    let (store, p) = setup(make).await;
    for round in 0..ROUNDS {
        let name = format!("race-{round}");
        schedule(&store, &p, &name, T0).await;
        let batch = store
            .claim_due(&p, T0, 1, T0 + 1_000, "worker")
            .await
            .expect("claim_due");
        let token = batch.tasks[0].token.clone();
        let acker = {
            let store = store.shared();
            tokio::spawn(async move { store.ack(&token).await })
        };
        let requeuer = {
            let (store, p) = (store.shared(), p.clone());
            tokio::spawn(async move { store.requeue_expired(&p, T0 + 2_000, 10).await })
        };
        let acked = acker.await.expect("acker");
        let requeued = requeuer.await.expect("requeuer").expect("requeue_expired");
        let state = get(&store, &p, &name).await.state;
        match (acked, requeued.as_slice()) {
            (Ok(AckOutcome::Completed), []) => assert_eq!(state, TaskState::Done),
            (Err(StorageError::StaleLease { .. }), [requeued]) if requeued.as_str() == name => {
                assert_eq!(state, TaskState::Pending);
                // Leave the partition empty for the next round.
                assert!(store
                    .cancel(&p, &id(&name))
                    .await
                    .expect("cancel")
                    .cancelled());
            }
            (acked, requeued) => {
                panic!(
                    "round {round}: ack {acked:?} and requeue {requeued:?} both (or neither) won"
                )
            }
        }
    }
}

pub async fn concurrent_upserts_of_one_id_leave_exactly_one_pending_task(make: Make) {
    let (store, p) = setup(make).await;
    let mut writers = JoinSet::new();
    for writer in 0..CLAIMERS as u64 {
        let (store, p) = (store.shared(), p.clone());
        writers.spawn(async move {
            let mut outcomes = Vec::new();
            for n in 0..20 {
                let outcome = store
                    .schedule(
                        &p,
                        task("same", T0 + writer * 100 + n),
                        ScheduleMode::Upsert,
                    )
                    .await
                    .expect("schedule");
                outcomes.push(outcome);
            }
            outcomes
        });
    }
    let mut created = 0;
    while let Some(outcomes) = writers.join_next().await {
        for outcome in outcomes.expect("writer") {
            match outcome {
                ScheduleOutcome::Created => created += 1,
                ScheduleOutcome::Replaced { .. } => {}
                other => panic!("unexpected {other:?}"),
            }
        }
    }
    assert_eq!(created, 1, "only the first upsert creates");
    let stats = store.stats(&p, T0).await.expect("stats");
    assert_eq!(stats.pending, 1);
    let claimed = claim_all(&store, &p, T0 + 10_000).await;
    assert_eq!(ids(&claimed), ["same"]);
    assert!(
        (T0..T0 + 1_600).contains(&claimed[0].due_ms),
        "{:?}",
        claimed[0]
    );
}
