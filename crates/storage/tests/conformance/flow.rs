//! Flow keys (DESIGN.md, "Flow keys: per-key limits and order"): the layout is fixed at the
//! first registration, and a claim keeps each key's concurrency, rate and FIFO order while
//! the other keys of the partition go on. Run on every backend that has flow keys
//! ([`flow_conformance_suite!`]).

// The PostgreSQL suite does not run these cases (flow keys are refused there, see its file), so
// its build would call them unused; the other suites list each one in the macro below.
#![allow(dead_code)]

use delayq_storage::{
    Cancel, FlowLimits, KeyRate, QueueLayout, StorageError, TaskState, MAX_DUE_MS,
};

use super::*;

/// A fresh store with the queue registered with flow keys (one partition) and `limits`.
async fn keyed(make: Make, limits: FlowLimits) -> (Subject, Partition) {
    let store = make(StoreOptions::default()).await;
    let queue = QueueName::new(store.queue.clone()).expect("valid queue name");
    let layout = store
        .register_layout(&queue, 1, Some(true))
        .await
        .expect("register with flow keys");
    assert!(layout.flow_keys);
    store
        .set_flow_limits(&queue, limits)
        .await
        .expect("set_flow_limits");
    (store, Partition::new(queue, 0))
}

fn concurrency(n: u32) -> FlowLimits {
    FlowLimits {
        concurrency: Some(n),
        ..FlowLimits::default()
    }
}

/// `<key>:{<key>}:<n>`.
fn kid(key: &str, n: u32) -> String {
    format!("{key}:{{{key}}}:{n}")
}

/// Claims up to `limit` tasks due at `now`.
async fn claim(store: &Subject, p: &Partition, now: u64, limit: usize) -> Vec<ClaimedTask> {
    store
        .claim_due(p, now, limit, LEASE, "conformance")
        .await
        .expect("claim_due")
        .tasks
}

pub async fn register_layout_records_flow_keys_and_refuses_the_other_setting(make: Make) {
    let store = make(StoreOptions::default()).await;
    let keyed = QueueName::new("conformance-keyed").expect("valid");
    let plain = QueueName::new("conformance-plain").expect("valid");
    let layout = store
        .register_layout(&keyed, 4, Some(true))
        .await
        .expect("register");
    assert_eq!(
        layout,
        QueueLayout {
            partitions: 4,
            flow_keys: true
        }
    );
    // Again with the same setting, or without asking: the record.
    for asked in [Some(true), None] {
        let again = store
            .register_layout(&keyed, 4, asked)
            .await
            .expect("again");
        assert!(again.flow_keys, "{asked:?}");
    }
    assert_eq!(
        store.register_queue(&keyed, 4).await.expect("plain call"),
        4
    );
    let refused = store
        .register_layout(&keyed, 4, Some(false))
        .await
        .expect_err("the other setting");
    assert!(
        matches!(refused, StorageError::FlowKeysMismatch { ref queue, configured: false, recorded: true } if queue == "conformance-keyed"),
        "{refused:?}"
    );
    assert!(
        refused.to_string().contains("conformance-keyed"),
        "{refused}"
    );
    // A queue registered without flow keys keeps them off.
    store.register_queue(&plain, 2).await.expect("plain");
    let refused = store
        .register_layout(&plain, 2, Some(true))
        .await
        .expect_err("flow keys on a plain queue");
    assert!(
        matches!(
            refused,
            StorageError::FlowKeysMismatch {
                configured: true,
                recorded: false,
                ..
            }
        ),
        "{refused:?}"
    );
    let mut layouts = store.queue_layouts().await.expect("layouts");
    layouts.retain(|(name, _)| name == &keyed || name == &plain);
    assert_eq!(
        layouts,
        [
            (
                keyed.clone(),
                QueueLayout {
                    partitions: 4,
                    flow_keys: true
                }
            ),
            (plain.clone(), QueueLayout::plain(2)),
        ]
    );
    // Per-key limits need flow keys, and no zero limit.
    let refused = store
        .set_flow_limits(&plain, concurrency(1))
        .await
        .expect_err("limits without flow keys");
    assert!(
        matches!(refused, StorageError::FlowKeysRequired { ref queue } if queue == "conformance-plain"),
        "{refused:?}"
    );
    let refused = store
        .set_flow_limits(&keyed, concurrency(0))
        .await
        .expect_err("zero");
    assert!(
        matches!(refused, StorageError::InvalidFlowLimits { .. }),
        "{refused:?}"
    );
    store
        .set_flow_limits(&plain, FlowLimits::default())
        .await
        .expect("no limits is fine anywhere");
}

pub async fn per_key_concurrency_bounds_the_held_tasks_of_each_key(make: Make) {
    let (store, p) = keyed(make, concurrency(2)).await;
    for n in 0..5 {
        schedule(&store, &p, &kid("a", n), T0 + u64::from(n)).await;
    }
    for n in 0..3 {
        schedule(&store, &p, &kid("b", n), T0 + 10 + u64::from(n)).await;
    }
    schedule(&store, &p, "plain", T0 + 20).await;
    let first = claim(&store, &p, T0 + 100, 100).await;
    assert_eq!(
        ids(&first),
        [
            kid("a", 0),
            kid("a", 1),
            kid("b", 0),
            kid("b", 1),
            "plain".to_owned()
        ],
        "two of each key, oldest first, and the unkeyed task"
    );
    let stats = store.stats(&p, T0 + 100).await.expect("stats");
    assert_eq!(
        (
            stats.held_back,
            stats.pending,
            stats.due_now,
            stats.inflight
        ),
        (4, 4, 4, 5)
    );
    let held = store.held_keys(&p, 10).await.expect("held_keys");
    assert_eq!(held.len(), 2, "{held:?}");
    assert_eq!(
        (held[0].key.as_str(), held[0].running, held[0].waiting),
        ("a", 2, 3)
    );
    assert_eq!(held[0].oldest_due_ms, T0 + 2);
    assert_eq!(
        (held[1].key.as_str(), held[1].running, held[1].waiting),
        ("b", 2, 1)
    );
    assert_eq!(store.held_keys(&p, 1).await.expect("held_keys").len(), 1);
    // A held-back task is pending for get, and nothing more is claimed.
    let parked = get(&store, &p, &kid("a", 2)).await;
    assert_eq!((parked.state, parked.due_ms), (TaskState::Pending, T0 + 2));
    assert!(claim(&store, &p, T0 + 200, 100).await.is_empty());
    // One of a's tasks ends: the next of a, in due order, and only it.
    assert_eq!(ack(&store, &first[0]).await, AckOutcome::Completed);
    let next = claim(&store, &p, T0 + 300, 100).await;
    assert_eq!(ids(&next), [kid("a", 2)]);
    assert_eq!(
        next[0].due_ms,
        T0 + 2,
        "it fires with its own due (the wait is lateness)"
    );
    // b's slot freed by a dead letter, then a's by a retry (which takes a slot again).
    assert_eq!(
        dead_letter(&store, &first[2], "boom").await,
        FailOutcome::DeadLettered
    );
    assert_eq!(ids(&claim(&store, &p, T0 + 400, 100).await), [kid("b", 2)]);
    retry_at(&store, &first[1], "again", T0 + 500).await;
    assert_eq!(ids(&claim(&store, &p, T0 + 450, 100).await), [kid("a", 3)]);
    assert!(
        claim(&store, &p, T0 + 600, 100).await.is_empty(),
        "a holds 2 again"
    );
    let stats = store.stats(&p, T0 + 600).await.expect("stats");
    assert_eq!(stats.held_back, 2, "a's retry and a:4 wait");
}

pub async fn a_blocked_key_never_holds_back_the_other_keys(make: Make) {
    let (store, p) = keyed(make, concurrency(1)).await;
    // 700 tasks of one hot key due first, then 10 tasks of 10 other keys.
    let mut items = Vec::new();
    for n in 0..700 {
        items.push((p.clone(), task(&kid("hot", n), T0 + u64::from(n))));
    }
    for n in 0..10 {
        items.push((p.clone(), task(&kid(&format!("k{n}"), 0), T0 + 1_000)));
    }
    create_all(&store, items).await;
    let mut claimed = Vec::new();
    let mut calls = 0;
    while claimed.len() < 11 {
        calls += 1;
        assert!(
            calls <= 6,
            "the other keys waited behind the hot one: {claimed:?}"
        );
        claimed.extend(
            claim(&store, &p, T0 + 2_000, 20)
                .await
                .into_iter()
                .map(|task| task.id.to_string()),
        );
    }
    assert_eq!(
        claimed.iter().filter(|id| id.starts_with("hot:")).count(),
        1,
        "{claimed:?}"
    );
    assert_eq!(claimed[0], kid("hot", 0));
    assert_eq!(
        store.stats(&p, T0 + 2_000).await.expect("stats").held_back,
        699
    );
    // Parked tasks are not looked at again: the next claim finds nothing at all.
    assert!(claim(&store, &p, T0 + 2_000, 20).await.is_empty());
}

pub async fn per_key_rate_bounds_the_fires_of_each_key_in_any_period(make: Make) {
    let rate = FlowLimits {
        rate: Some(KeyRate {
            limit: 2,
            period_ms: 1_000,
        }),
        ..FlowLimits::default()
    };
    let (store, p) = keyed(make, rate).await;
    for n in 0..6 {
        schedule(&store, &p, &kid("a", n), T0).await;
    }
    let first = claim(&store, &p, T0, 100).await;
    assert_eq!(ids(&first), [kid("a", 0), kid("a", 1)]);
    for task in &first {
        ack(&store, task).await;
    }
    // Within the period: nothing of a, but another key goes on; the claim names when a may
    // fire again.
    schedule(&store, &p, &kid("b", 0), T0 + 500).await;
    let batch = store
        .claim_due(&p, T0 + 500, 100, LEASE, "conformance")
        .await
        .expect("claim");
    assert_eq!(ids(&batch.tasks), [kid("b", 0)]);
    assert_eq!(batch.next_due_ms, Some(T0 + 1_000));
    assert!(claim(&store, &p, T0 + 999, 100).await.is_empty());
    let second = claim_until_empty(&store, &p, T0 + 1_000).await;
    assert_eq!(ids(&second), [kid("a", 2), kid("a", 3)], "a sliding period");
    assert!(second.iter().all(|task| task.due_ms == T0), "due kept");
    assert!(claim(&store, &p, T0 + 1_999, 100).await.is_empty());
    let third = claim_until_empty(&store, &p, T0 + 2_000).await;
    assert_eq!(ids(&third), [kid("a", 4), kid("a", 5)]);
}

/// Claims at `now` until a claim comes back empty (a key's next parked task is back in the
/// pending index for the claim after the one that fired the task before it).
async fn claim_until_empty(store: &Subject, p: &Partition, now: u64) -> Vec<ClaimedTask> {
    let mut all = Vec::new();
    for _ in 0..20 {
        let batch = claim(store, p, now, 100).await;
        if batch.is_empty() {
            return all;
        }
        all.extend(batch);
    }
    panic!("claims at {now} never ran dry: {all:?}");
}

pub async fn fifo_runs_a_key_one_at_a_time_in_due_order_through_its_retries(make: Make) {
    let fifo = FlowLimits {
        fifo: true,
        ..FlowLimits::default()
    };
    let (store, p) = keyed(make, fifo).await;
    for n in 0..3 {
        schedule(&store, &p, &kid("acct", n), T0 + u64::from(n)).await;
    }
    schedule(&store, &p, &kid("other", 0), T0 + 5).await;
    let first = claim(&store, &p, T0 + 10, 100).await;
    assert_eq!(ids(&first), [kid("acct", 0), kid("other", 0)]);
    ack(&store, &first[1]).await;
    // acct:0 fails and waits for its retry: acct's later tasks wait with it.
    retry_at(&store, &first[0], "down", T0 + 100).await;
    assert!(claim(&store, &p, T0 + 50, 100).await.is_empty());
    let retried = claim(&store, &p, T0 + 100, 100).await;
    assert_eq!(ids(&retried), [kid("acct", 0)]);
    assert_eq!(retried[0].attempt, 2);
    assert_eq!(ack(&store, &retried[0]).await, AckOutcome::Completed);
    let second = claim(&store, &p, T0 + 110, 100).await;
    assert_eq!(ids(&second), [kid("acct", 1)]);
    // A lost lease keeps the turn too: the requeued task runs before acct:2.
    store
        .requeue_expired(&p, LEASE + 1, 10)
        .await
        .expect("requeue_expired");
    let again = claim(&store, &p, LEASE + 2, 100).await;
    assert_eq!(ids(&again), [kid("acct", 1)]);
    ack(&store, &again[0]).await;
    assert_eq!(
        ids(&claim(&store, &p, LEASE + 3, 100).await),
        [kid("acct", 2)]
    );
}

pub async fn a_dead_letter_does_not_block_its_key(make: Make) {
    let fifo = FlowLimits {
        fifo: true,
        ..FlowLimits::default()
    };
    let (store, p) = keyed(make, fifo).await;
    schedule(&store, &p, &kid("acct", 0), T0).await;
    schedule(&store, &p, &kid("acct", 1), T0 + 1).await;
    let first = claim_one(&store, &p, T0 + 10).await;
    assert_eq!(first.id.as_str(), kid("acct", 0));
    assert_eq!(
        dead_letter(&store, &first, "poison").await,
        FailOutcome::DeadLettered
    );
    assert_eq!(
        ids(&claim(&store, &p, T0 + 20, 100).await),
        [kid("acct", 1)]
    );
}

pub async fn every_way_a_held_task_ends_frees_its_slot(make: Make) {
    let (store, p) = keyed(make, concurrency(1)).await;
    for n in 0..4 {
        schedule(&store, &p, &kid("a", n), T0 + u64::from(n)).await;
    }
    // Cancelled while it runs: its slot comes back when its handler reports.
    let running = claim_one(&store, &p, T0 + 10).await;
    assert_eq!(
        store.cancel(&p, &running.id).await.expect("cancel"),
        Cancel::InFlight
    );
    assert!(claim(&store, &p, T0 + 10, 10).await.is_empty());
    assert_eq!(ack(&store, &running).await, AckOutcome::Superseded);
    // Its lease runs out (not FIFO: the slot comes back, the task competes again).
    let running = claim_one_until(&store, &p, T0 + 20, T0 + 1_000).await;
    assert_eq!(running.id.as_str(), kid("a", 1));
    store
        .requeue_expired(&p, T0 + 2_000, 10)
        .await
        .expect("requeue_expired");
    let next = claim(&store, &p, T0 + 2_000, 10).await;
    assert_eq!(next.len(), 1, "one of a at a time: {next:?}");
    // Cancel of a held-back task removes it; a new schedule of one moves it.
    assert_eq!(
        store.cancel(&p, &id(&kid("a", 3))).await.expect("cancel"),
        Cancel::Cancelled
    );
    let waiting = if next[0].id.as_str() == kid("a", 1) {
        kid("a", 2)
    } else {
        kid("a", 1)
    };
    assert!(store
        .get(&p, &id(&kid("a", 3)))
        .await
        .expect("get")
        .is_none());
    schedule(&store, &p, &waiting, T0 + 5_000).await;
    assert_eq!(
        store.stats(&p, T0 + 2_000).await.expect("stats").held_back,
        0
    );
    assert_eq!(get(&store, &p, &waiting).await.due_ms, T0 + 5_000);
    ack(&store, &next[0]).await;
    assert!(claim(&store, &p, T0 + 4_999, 10).await.is_empty());
    assert_eq!(ids(&claim(&store, &p, T0 + 5_000, 10).await), [waiting]);
}

pub async fn a_new_schedule_of_a_running_id_waits_for_the_old_run(make: Make) {
    // Two slots: the new schedule waits for the old run of its id, not for a slot.
    let (store, p) = keyed(make, concurrency(2)).await;
    let name = kid("a", 0);
    schedule(&store, &p, &name, T0).await;
    let old = claim_one(&store, &p, T0).await;
    schedule(&store, &p, &name, T0 + 1).await;
    assert!(
        claim(&store, &p, T0 + 10, 10).await.is_empty(),
        "the new schedule waits while the old run holds the key"
    );
    assert_eq!(ack(&store, &old).await, AckOutcome::Superseded);
    let new = claim_one(&store, &p, T0 + 20).await;
    assert_eq!((new.id.as_str(), new.due_ms), (name.as_str(), T0 + 1));
    // Each run took one slot and gave it back once: two more of the key run together.
    ack(&store, &new).await;
    for n in 1..4 {
        schedule(&store, &p, &kid("a", n), T0 + 30).await;
    }
    assert_eq!(claim(&store, &p, T0 + 30, 10).await.len(), 2);
}

pub async fn concurrent_claimers_never_exceed_a_key_limit(make: Make) {
    let (store, p) = keyed(make, concurrency(3)).await;
    let mut items = Vec::new();
    for key in 0..4 {
        for n in 0..50 {
            items.push((
                p.clone(),
                task(&kid(&format!("k{key}"), n), T0 + u64::from(n)),
            ));
        }
    }
    create_all(&store, items).await;
    let shared = store.shared();
    let claimers: Vec<_> = (0..6)
        .map(|claimer| {
            let store = Arc::clone(&shared);
            let p = p.clone();
            tokio::spawn(async move {
                store
                    .claim_due(&p, T0 + 1_000, 5, LEASE, &format!("claimer-{claimer}"))
                    .await
                    .expect("claim")
                    .tasks
            })
        })
        .collect();
    let mut per_key = std::collections::HashMap::new();
    for claimer in claimers {
        for task in claimer.await.expect("claimer") {
            *per_key
                .entry(task.id.flow_key().expect("keyed").to_owned())
                .or_insert(0) += 1;
        }
    }
    assert_eq!(per_key.len(), 4, "{per_key:?}");
    assert!(per_key.values().all(|&n| n == 3), "{per_key:?}");
}

pub async fn delete_queue_removes_held_back_tasks(make: Make) {
    let (store, p) = keyed(make, concurrency(1)).await;
    for n in 0..3 {
        schedule(&store, &p, &kid("a", n), T0).await;
    }
    assert_eq!(claim(&store, &p, T0, 10).await.len(), 1);
    assert_eq!(store.delete_queue(&p.queue, 1).await.expect("delete"), 3);
    // Afresh: nothing held, nothing parked.
    keyed_again(&store, &p).await;
    schedule(&store, &p, &kid("a", 9), T0).await;
    assert_eq!(ids(&claim(&store, &p, MAX_DUE_MS, 10).await), [kid("a", 9)]);
}

async fn keyed_again(store: &Subject, p: &Partition) {
    store
        .register_layout(&p.queue, 1, Some(true))
        .await
        .expect("register again");
}

/// Stamps out the flow-key cases for one backend, as [`conformance_suite!`] does.
#[macro_export]
macro_rules! flow_conformance_suite {
    (cases) => {
        $crate::flow_conformance_suite!(@list @cases)
    };
    ($make:ident) => {
        $crate::flow_conformance_suite!(@list @groups $make);
    };
    (@list @$then:ident $($make:ident)?) => {
        $crate::conformance_suite! {@$then $($make)?;
            flow: [
                register_layout_records_flow_keys_and_refuses_the_other_setting,
                per_key_concurrency_bounds_the_held_tasks_of_each_key,
                a_blocked_key_never_holds_back_the_other_keys,
                per_key_rate_bounds_the_fires_of_each_key_in_any_period,
                fifo_runs_a_key_one_at_a_time_in_due_order_through_its_retries,
                a_dead_letter_does_not_block_its_key,
                every_way_a_held_task_ends_frees_its_slot,
                a_new_schedule_of_a_running_id_waits_for_the_old_run,
                concurrent_claimers_never_exceed_a_key_limit,
                delete_queue_removes_held_back_tasks,
            ],
        }
    };
}
