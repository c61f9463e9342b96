//! Trace context: a task scheduled with a `traceparent` hands it back with every claim of its
//! generation (retries and recovered claims included); a new schedule of the id replaces it or,
//! without one, drops it; a task that completes, is cancelled or purged leaves none behind.

use delayq_storage::{AckOutcome, Cancel, FailAction, ScheduleMode, TaskState, TraceParent};

use super::*;

fn trace(span: u8) -> TraceParent {
    TraceParent::parse(&format!(
        "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902{span:02x}-01"
    ))
    .expect("a valid traceparent")
}

fn traced(name: &str, due_ms: u64, span: Option<u8>) -> NewTask {
    NewTask {
        traceparent: span.map(trace),
        ..task(name, due_ms)
    }
}

async fn schedule_traced(
    store: &Subject,
    p: &Partition,
    name: &str,
    due_ms: u64,
    span: Option<u8>,
) {
    store
        .schedule(p, traced(name, due_ms, span), ScheduleMode::Upsert)
        .await
        .expect("schedule");
}

fn traces(tasks: &[ClaimedTask]) -> Vec<(&str, Option<&TraceParent>)> {
    tasks
        .iter()
        .map(|task| (task.id.as_str(), task.traceparent.as_ref()))
        .collect()
}

pub async fn a_traceparent_comes_back_with_each_claim_of_its_task(make: Make) {
    let (store, p) = setup(make).await;
    schedule_traced(&store, &p, "a", T0 - 2, Some(1)).await;
    schedule_traced(&store, &p, "b", T0 - 1, None).await;
    let claimed = claim_all(&store, &p, T0).await;
    assert_eq!(traces(&claimed), [("a", Some(&trace(1))), ("b", None)]);
    // Its retry is the same generation: the same trace.
    retry_at(&store, &claimed[0], "boom", T0 + 10).await;
    let again = claim_one(&store, &p, T0 + 10).await;
    assert_eq!(again.traceparent, Some(trace(1)));
    // As is a dead letter sent back.
    store
        .fail(&again.token, "boom", FailAction::DeadLetter)
        .await
        .expect("fail");
    assert!(store
        .retry_dead(&p, &id("a"), T0 + 20)
        .await
        .expect("retry_dead"));
    assert_eq!(
        claim_one(&store, &p, T0 + 20).await.traceparent,
        Some(trace(1))
    );
}

pub async fn many_traced_and_untraced_schedules_keep_their_own(make: Make) {
    let (store, p) = setup(make).await;
    let items = (0..6u8)
        .map(|n| {
            let span = (n % 2 == 0).then_some(n + 1);
            (
                p.clone(),
                traced(&format!("t-{n}"), T0 + u64::from(n), span),
            )
        })
        .collect();
    create_all(&store, items).await;
    let claimed = claim_all(&store, &p, T0 + 10).await;
    for task in &claimed {
        let n: u8 = task.id.as_str()[2..].parse().expect("t-<n>");
        let expected = (n % 2 == 0).then(|| trace(n + 1));
        assert_eq!(task.traceparent, expected, "{}", task.id);
    }
}

pub async fn a_new_schedule_replaces_or_drops_the_traceparent(make: Make) {
    let (store, p) = setup(make).await;
    schedule_traced(&store, &p, "a", T0 + 5, Some(1)).await;
    schedule_traced(&store, &p, "a", T0 + 6, Some(2)).await;
    schedule_traced(&store, &p, "b", T0 + 5, Some(3)).await;
    schedule_traced(&store, &p, "b", T0 + 6, None).await;
    // Kept: the live task keeps its trace.
    store
        .schedule(&p, traced("c", T0 + 5, Some(4)), ScheduleMode::Upsert)
        .await
        .expect("schedule");
    store
        .schedule(&p, traced("c", T0 + 9, Some(5)), ScheduleMode::IfAbsent)
        .await
        .expect("schedule");
    let claimed = claim_all(&store, &p, T0 + 10).await;
    // Due order: c (T0 + 5), then a and b (T0 + 6).
    assert_eq!(
        traces(&claimed),
        [("c", Some(&trace(4))), ("a", Some(&trace(2))), ("b", None)]
    );
    // Rescheduled while in flight: the new generation has the new schedule's trace.
    schedule_traced(&store, &p, "a", T0 + 20, Some(6)).await;
    assert_eq!(ack(&store, &claimed[1]).await, AckOutcome::Superseded);
    assert_eq!(
        claim_one(&store, &p, T0 + 20).await.traceparent,
        Some(trace(6))
    );
}

pub async fn a_finished_task_leaves_no_traceparent_behind(make: Make) {
    let (store, p) = setup(make).await;
    for name in ["done", "cancelled", "purged", "cancelled-running"] {
        schedule_traced(&store, &p, name, T0, Some(1)).await;
    }
    store.cancel(&p, &id("cancelled")).await.expect("cancel");
    let claimed = claim_all(&store, &p, T0).await;
    for task in &claimed {
        match task.id.as_str() {
            "done" => assert_eq!(ack(&store, task).await, AckOutcome::Completed),
            "purged" => {
                store
                    .fail(&task.token, "boom", FailAction::DeadLetter)
                    .await
                    .expect("fail");
                assert_eq!(
                    store
                        .purge_dead(&p, Some(&id("purged")))
                        .await
                        .expect("purge"),
                    1
                );
            }
            _ => {
                store.cancel(&p, &task.id).await.expect("cancel");
                ack(&store, task).await;
            }
        }
    }
    // Each id scheduled afresh without a trace (another due, so no dedup) fires without one.
    for name in ["done", "cancelled", "purged", "cancelled-running"] {
        schedule_traced(&store, &p, name, T0 + 100, None).await;
    }
    let again = claim_all(&store, &p, T0 + 100).await;
    assert_eq!(again.len(), 4, "{again:?}");
    assert!(
        again.iter().all(|task| task.traceparent.is_none()),
        "{:?}",
        traces(&again)
    );
}

pub async fn recover_claim_returns_the_traceparents(make: Make) {
    let (store, p) = setup(make).await;
    schedule_traced(&store, &p, "a", T0 - 1, Some(7)).await;
    schedule_traced(&store, &p, "b", T0, None).await;
    let lost = store
        .claim_due(&p, T0, 10, LEASE, "node-1")
        .await
        .expect("claim");
    let recovered = store
        .recover_claim(&p, "node-1", LEASE)
        .await
        .expect("recover");
    assert_eq!(recovered.tasks, lost.tasks);
    assert_eq!(
        traces(&recovered.tasks),
        [("a", Some(&trace(7))), ("b", None)]
    );
}

pub async fn get_shows_the_traceparent_scheduled_with_and_none_without(make: Make) {
    let (store, p) = setup(make).await;
    for (name, span) in [
        ("traced", Some(1)),
        ("untraced", None),
        ("dead", Some(2)),
        ("cancelled-running", Some(3)),
        ("rescheduled", Some(4)),
    ] {
        schedule_traced(&store, &p, name, T0, span).await;
    }
    let trace_of = |info: TaskInfo| (info.state, info.traceparent);
    assert_eq!(
        trace_of(get(&store, &p, "traced").await),
        (TaskState::Pending, Some(trace(1)))
    );
    assert_eq!(
        trace_of(get(&store, &p, "untraced").await),
        (TaskState::Pending, None)
    );
    for task in claim_all(&store, &p, T0).await {
        let name = task.id.as_str();
        match name {
            "traced" => {
                assert_eq!(
                    trace_of(get(&store, &p, name).await),
                    (TaskState::Inflight, Some(trace(1)))
                );
                assert_eq!(ack(&store, &task).await, AckOutcome::Completed);
                // A done task keeps only what dedup needs.
                assert_eq!(
                    trace_of(get(&store, &p, name).await),
                    (TaskState::Done, None)
                );
            }
            "untraced" => assert_eq!(
                trace_of(get(&store, &p, name).await),
                (TaskState::Inflight, None)
            ),
            "dead" => {
                dead_letter(&store, &task, "boom").await;
                assert_eq!(
                    trace_of(get(&store, &p, name).await),
                    (TaskState::Dead, Some(trace(2)))
                );
            }
            "cancelled-running" => {
                assert_eq!(
                    store.cancel(&p, &task.id).await.expect("cancel"),
                    Cancel::InFlight
                );
                // Its running attempt is the last: its trace is gone already.
                assert_eq!(
                    trace_of(get(&store, &p, name).await),
                    (TaskState::Inflight, None)
                );
            }
            "rescheduled" => {
                // Scheduled again while it runs: get shows the new, pending task's trace.
                schedule_traced(&store, &p, name, T0 + 50, Some(5)).await;
                assert_eq!(
                    trace_of(get(&store, &p, name).await),
                    (TaskState::Pending, Some(trace(5)))
                );
                schedule_traced(&store, &p, name, T0 + 60, None).await;
                assert_eq!(
                    trace_of(get(&store, &p, name).await),
                    (TaskState::Pending, None)
                );
            }
            other => panic!("unexpected task {other}"),
        }
    }
}
