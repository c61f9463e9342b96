//! claim_due and peek_window.

use std::collections::HashSet;

use bytes::Bytes;
use delayq_storage::{partition_of, AckOutcome, Partition, ScheduleMode, StoreOptions, TaskState};

use super::*;

pub async fn claim_due_returns_due_tasks_oldest_first_with_payloads(make: Make) {
    let (store, p) = setup(make).await;
    schedule(&store, &p, "c", T0 - 10).await;
    schedule(&store, &p, "a", T0 - 30).await;
    schedule(&store, &p, "b", T0 - 20).await;
    let batch = store
        .claim_due(&p, T0, 10, LEASE, "node-a")
        .await
        .expect("claim_due");
    assert_eq!(ids(&batch.tasks), ["a", "b", "c"]);
    let dues: Vec<_> = batch.tasks.iter().map(|t| t.due_ms).collect();
    assert_eq!(dues, [T0 - 30, T0 - 20, T0 - 10]);
    for claimed in &batch.tasks {
        assert_eq!(
            claimed.payload,
            Bytes::from(format!("payload of {}", claimed.id))
        );
        assert_eq!(claimed.token.id, claimed.id);
        assert_eq!(claimed.token.partition, p);
        assert_eq!(claimed.token.generation, claimed.generation);
    }
    assert_eq!(batch.next_due_ms, None);
}

pub async fn claim_due_respects_the_limit_and_reports_the_next_due(make: Make) {
    let (store, p) = setup(make).await;
    for n in 0..5 {
        schedule(&store, &p, &format!("t-{n}"), T0 + n).await;
    }
    schedule(&store, &p, "future", T0 + 10_000).await;
    let first = store
        .claim_due(&p, T0 + 100, 2, LEASE, "a")
        .await
        .expect("claim_due");
    assert_eq!(ids(&first.tasks), ["t-0", "t-1"]);
    assert_eq!(
        first.next_due_ms,
        Some(T0 + 2),
        "the limit left due tasks behind"
    );
    let rest = store
        .claim_due(&p, T0 + 100, 10, LEASE, "a")
        .await
        .expect("claim_due");
    assert_eq!(ids(&rest.tasks), ["t-2", "t-3", "t-4"]);
    assert_eq!(rest.next_due_ms, Some(T0 + 10_000));
    let none = store
        .claim_due(&p, T0 + 100, 0, LEASE, "a")
        .await
        .expect("claim_due");
    assert!(none.tasks.is_empty());
    assert_eq!(none.next_due_ms, Some(T0 + 10_000));
}

pub async fn claim_due_never_takes_future_tasks(make: Make) {
    let (store, p) = setup(make).await;
    schedule(&store, &p, "now", T0).await;
    schedule(&store, &p, "soon", T0 + 1).await;
    let batch = store
        .claim_due(&p, T0, 10, LEASE, "a")
        .await
        .expect("claim_due");
    assert_eq!(
        ids(&batch.tasks),
        ["now"],
        "due == now is due; due == now + 1 is not"
    );
    assert_eq!(batch.next_due_ms, Some(T0 + 1));
    assert_eq!(get(&store, &p, "soon").await.state, TaskState::Pending);
}

pub async fn claim_due_on_an_empty_partition_returns_nothing(make: Make) {
    let (store, p) = setup(make).await;
    let batch = store
        .claim_due(&p, T0, 10, LEASE, "a")
        .await
        .expect("claim_due");
    assert!(batch.tasks.is_empty());
    assert_eq!(batch.next_due_ms, None);
}

pub async fn claimed_task_is_inflight_until_its_lease_deadline(make: Make) {
    let (store, p) = setup(make).await;
    schedule(&store, &p, "a", T0).await;
    store
        .claim_due(&p, T0, 1, T0 + 30_000, "a")
        .await
        .expect("claim_due");
    let info = get(&store, &p, "a").await;
    assert_eq!(info.state, TaskState::Inflight);
    assert_eq!(info.state_since_ms, Some(T0 + 30_000));
    assert_eq!(info.due_ms, T0);
    assert_eq!(info.payload, Bytes::from("payload of a"));
    assert!(
        claim_all(&store, &p, T0 + 60_000).await.is_empty(),
        "in flight is not claimable"
    );
    let stats = store.stats(&p, T0).await.expect("stats");
    assert_eq!((stats.pending, stats.inflight), (0, 1));
}

pub async fn claimed_tasks_carry_attempt_one_and_distinct_fencing_tokens(make: Make) {
    let (store, p) = setup(make).await;
    for n in 0..10 {
        schedule(&store, &p, &format!("t-{n}"), T0).await;
    }
    let tasks = claim_all(&store, &p, T0).await;
    assert_eq!(tasks.len(), 10);
    assert!(tasks.iter().all(|t| t.attempt == 1));
    let tokens: HashSet<_> = tasks.iter().map(|t| t.token.clone()).collect();
    assert_eq!(tokens.len(), 10);
    // The same task claimed again (after its lease ran out) gets a new claim number.
    let requeued = store
        .requeue_expired(&p, LEASE + 1, 100)
        .await
        .expect("requeue");
    assert_eq!(requeued.len(), 10);
    let again = claim_all(&store, &p, T0).await;
    for task in &again {
        let before = tasks.iter().find(|t| t.id == task.id).expect("same ids");
        assert_eq!(task.generation, before.generation);
        assert_ne!(
            task.token.claim, before.token.claim,
            "a new claim is a new fence"
        );
    }
}

pub async fn peek_window_returns_pairs_within_inclusive_bounds_in_due_order(make: Make) {
    let (store, p) = setup(make).await;
    schedule(&store, &p, "before", T0 - 1).await;
    schedule(&store, &p, "to", T0 + 100).await;
    schedule(&store, &p, "from", T0).await;
    schedule(&store, &p, "middle", T0 + 50).await;
    schedule(&store, &p, "after", T0 + 101).await;
    let window = store
        .peek_window(&p, T0, T0 + 100, 100)
        .await
        .expect("peek_window");
    assert_eq!(
        window,
        [
            (id("from"), T0),
            (id("middle"), T0 + 50),
            (id("to"), T0 + 100)
        ]
    );
}

pub async fn peek_window_respects_the_limit_and_claims_nothing(make: Make) {
    let (store, p) = setup(make).await;
    for n in 0..20 {
        schedule(&store, &p, &format!("t-{n:02}"), T0 + n).await;
    }
    let window = store
        .peek_window(&p, 0, T0 + 1_000, 5)
        .await
        .expect("peek_window");
    let names: Vec<_> = window.iter().map(|(id, _)| id.as_str()).collect();
    assert_eq!(names, ["t-00", "t-01", "t-02", "t-03", "t-04"]);
    let stats = store.stats(&p, T0 + 1_000).await.expect("stats");
    assert_eq!((stats.pending, stats.inflight), (20, 0));
    assert_eq!(claim_all(&store, &p, T0 + 1_000).await.len(), 20);
}

pub async fn peek_window_skips_inflight_tasks(make: Make) {
    let (store, p) = setup(make).await;
    schedule(&store, &p, "a", T0).await;
    schedule(&store, &p, "b", T0 + 10).await;
    claim_one(&store, &p, T0).await;
    let window = store
        .peek_window(&p, 0, T0 + 1_000, 10)
        .await
        .expect("peek_window");
    assert_eq!(window, [(id("b"), T0 + 10)]);
}

pub async fn partitions_are_independent(make: Make) {
    let store = make(StoreOptions::default()).await;
    let first = register(&store, "two", 2).await;
    let (mut zero, mut one) = (None, None);
    for n in 0.. {
        let name = format!("t-{n}");
        match partition_of(&id(&name), 2) {
            0 if zero.is_none() => zero = Some(name),
            1 if one.is_none() => one = Some(name),
            _ => {}
        }
        if zero.is_some() && one.is_some() {
            break;
        }
    }
    let (zero, one) = (
        zero.expect("an id of partition 0"),
        one.expect("an id of partition 1"),
    );
    let p0 = Partition::new(first.queue.clone(), 0);
    let p1 = Partition::new(first.queue.clone(), 1);
    schedule(&store, &p0, &zero, T0).await;
    schedule(&store, &p1, &one, T0 + 5).await;
    assert_eq!(ids(&claim_all(&store, &p0, T0 + 10).await), [zero.as_str()]);
    assert_eq!(store.stats(&p0, T0 + 10).await.expect("stats").pending, 0);
    assert_eq!(store.stats(&p1, T0 + 10).await.expect("stats").pending, 1);
    assert_eq!(ids(&claim_all(&store, &p1, T0 + 10).await), [one.as_str()]);
}

pub async fn claim_due_returns_at_most_max_claim_bytes_but_at_least_one_task(make: Make) {
    let options = StoreOptions {
        max_claim_bytes: 250,
        ..StoreOptions::default()
    };
    let (store, p) = setup_with(make, options).await;
    for (k, name) in ["a", "b", "c", "d"].iter().enumerate() {
        let task = NewTask {
            id: id(name),
            due_ms: T0 + k as u64,
            payload: Bytes::from(vec![b'x'; 100]),
            traceparent: None,
        };
        store
            .schedule(&p, task, ScheduleMode::Upsert)
            .await
            .expect("schedule");
    }
    let first = store
        .claim_due(&p, T0 + 10, 100, LEASE, "conformance")
        .await
        .expect("claim");
    assert_eq!(
        ids(&first.tasks),
        ["a", "b"],
        "two payloads of 100 fit in 250 bytes"
    );
    assert_eq!(first.next_due_ms, Some(T0 + 2));
    let big = NewTask {
        id: id("big"),
        due_ms: T0,
        payload: Bytes::from(vec![b'y'; 1_000]),
        traceparent: None,
    };
    store
        .schedule(&p, big, ScheduleMode::Upsert)
        .await
        .expect("schedule");
    let second = store
        .claim_due(&p, T0 + 10, 100, LEASE, "conformance")
        .await
        .expect("claim");
    assert_eq!(
        ids(&second.tasks),
        ["big"],
        "one task over the budget still comes alone"
    );
    assert_eq!(claim_all(&store, &p, T0 + 10).await.len(), 2);
}

/// Found by the twin model: the Redis backend counted each record's header (and last error)
/// against `max_claim_bytes`, which bounds the payload bytes a claim returns.
pub async fn max_claim_bytes_counts_payload_bytes_only(make: Make) {
    let options = StoreOptions {
        max_claim_bytes: 20,
        ..StoreOptions::default()
    };
    let (store, p) = setup_with(make, options).await;
    let with_payload = |name: &str, size: usize| NewTask {
        id: id(name),
        due_ms: T0,
        payload: Bytes::from(vec![b'x'; size]),
        traceparent: None,
    };
    // "a" waits for a retry with a long last error: that error is not payload either.
    store
        .schedule(&p, with_payload("a", 10), ScheduleMode::Upsert)
        .await
        .expect("schedule");
    let first = claim_one(&store, &p, T0).await;
    retry_at(&store, &first, &"e".repeat(100), T0).await;
    for (name, size) in [("b", 0), ("c", 10), ("d", 1)] {
        store
            .schedule(&p, with_payload(name, size), ScheduleMode::Upsert)
            .await
            .expect("schedule");
    }
    let batch = store
        .claim_due(&p, T0, 100, LEASE, "conformance")
        .await
        .expect("claim");
    assert_eq!(
        ids(&batch.tasks),
        ["a", "b", "c"],
        "payloads of 10 + 0 + 10 bytes fit in 20; the next byte does not"
    );
    assert_eq!(claim_one(&store, &p, T0).await.id, id("d"));
}

pub async fn recover_claim_returns_the_tasks_of_a_lost_reply_with_their_tokens(make: Make) {
    let (store, p) = setup(make).await;
    for (k, name) in ["a", "b", "c"].iter().enumerate() {
        schedule(&store, &p, name, T0 + k as u64).await;
    }
    let lost = store
        .claim_due(&p, T0 + 10, 10, LEASE, "node-1")
        .await
        .expect("claim");
    let recovered = store
        .recover_claim(&p, "node-1", LEASE)
        .await
        .expect("recover");
    assert_eq!(
        recovered.tasks, lost.tasks,
        "the same tasks, payloads and tokens"
    );
    assert_eq!(
        ack(&store, &recovered.tasks[0]).await,
        AckOutcome::Completed
    );
    assert_eq!(
        store.cancel(&p, &id("b")).await.expect("cancel"),
        delayq_storage::Cancel::InFlight
    );
    let again = store
        .recover_claim(&p, "node-1", LEASE)
        .await
        .expect("recover");
    assert_eq!(
        ids(&again.tasks),
        ["c"],
        "acked and cancelled tasks are not handed out"
    );
}

pub async fn recover_claim_of_another_claim_is_empty(make: Make) {
    let (store, p) = setup(make).await;
    schedule(&store, &p, "a", T0).await;
    schedule(&store, &p, "b", T0 + 1).await;
    assert!(store
        .recover_claim(&p, "node-1", LEASE)
        .await
        .expect("recover before any claim")
        .tasks
        .is_empty());
    let first = store
        .claim_due(&p, T0, 10, LEASE, "node-1")
        .await
        .expect("claim");
    assert_eq!(ids(&first.tasks), ["a"]);
    for (owner, deadline) in [("node-2", LEASE), ("node-1", LEASE + 1)] {
        let other = store
            .recover_claim(&p, owner, deadline)
            .await
            .expect("recover");
        assert!(other.tasks.is_empty(), "{owner} with {deadline}");
    }
    store
        .claim_due(&p, T0 + 1, 10, LEASE, "node-2")
        .await
        .expect("claim");
    assert!(
        store
            .recover_claim(&p, "node-1", LEASE)
            .await
            .expect("recover")
            .tasks
            .is_empty(),
        "a later claim replaced node-1's receipt: its tasks come back by lease expiry"
    );
    let requeued = store
        .requeue_expired(&p, LEASE + 1, 10)
        .await
        .expect("requeue");
    assert_eq!(requeued.len(), 2);
}
