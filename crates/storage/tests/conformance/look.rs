//! look: an owner's one call per look at a partition (sweep, prune, window, what comes next).

use delayq_storage::{LookReport, LookRequest, TaskState, MAX_DUE_MS};

use super::*;

fn request(now_ms: u64, window_end_ms: u64, window_limit: usize) -> LookRequest {
    LookRequest {
        now_ms,
        window_end_ms,
        window_limit,
        requeue_limit: 100,
        prune_before_ms: None,
        prune_limit: 100,
    }
}

async fn look(store: &Subject, p: &Partition, request: &LookRequest) -> LookReport {
    store.look(p, request).await.expect("look")
}

fn window_ids(report: &LookReport) -> Vec<(&str, u64)> {
    report
        .window
        .iter()
        .map(|(id, due)| (id.as_str(), *due))
        .collect()
}

pub async fn look_reports_the_window_and_the_next_due_after_it(make: Make) {
    let (store, p) = setup(make).await;
    schedule(&store, &p, "late", T0 + 10_000).await;
    schedule(&store, &p, "a", T0 + 10).await;
    schedule(&store, &p, "b", T0 + 1_000).await;
    let report = look(&store, &p, &request(T0, T0 + 1_000, 10)).await;
    assert_eq!(window_ids(&report), [("a", T0 + 10), ("b", T0 + 1_000)]);
    assert_eq!(report.next_due_after_window_ms, Some(T0 + 10_000));
    assert_eq!(report.earliest_lease_deadline_ms, None);
    assert!(report.requeued.is_empty());
    assert_eq!(report.pruned, 0);
    // It claims nothing: the tasks are still pending.
    let a = store.get(&p, &id("a")).await.expect("get").expect("a");
    assert_eq!(a.state, TaskState::Pending);
}

pub async fn look_with_a_full_window_reports_no_next_due(make: Make) {
    let (store, p) = setup(make).await;
    schedule(&store, &p, "a", T0 + 10).await;
    schedule(&store, &p, "b", T0 + 20).await;
    schedule(&store, &p, "late", T0 + 10_000).await;
    let report = look(&store, &p, &request(T0, T0 + 1_000, 1)).await;
    assert_eq!(window_ids(&report), [("a", T0 + 10)]);
    assert_eq!(
        report.next_due_after_window_ms, None,
        "a full window says nothing about what lies after it"
    );
}

pub async fn look_at_an_empty_partition_reports_nothing(make: Make) {
    let (store, p) = setup(make).await;
    let report = look(&store, &p, &request(T0, T0 + 5_000, 10)).await;
    assert_eq!(report, LookReport::default());
}

pub async fn look_requeues_expired_leases_and_reports_the_earliest_lease_left(make: Make) {
    let (store, p) = setup(make).await;
    schedule(&store, &p, "short", T0 - 20).await;
    schedule(&store, &p, "long", T0 - 10).await;
    let first = store
        .claim_due(&p, T0, 1, T0 + 100, "node-a")
        .await
        .expect("claim");
    assert_eq!(ids(&first.tasks), ["short"]);
    let second = store
        .claim_due(&p, T0, 1, T0 + 5_000, "node-a")
        .await
        .expect("claim");
    assert_eq!(ids(&second.tasks), ["long"]);
    let before = look(&store, &p, &request(T0 + 50, T0 + 1_000, 10)).await;
    assert!(before.requeued.is_empty(), "no lease ran out yet");
    assert!(before.window.is_empty(), "in flight is not in the window");
    assert_eq!(before.earliest_lease_deadline_ms, Some(T0 + 100));

    let after = look(&store, &p, &request(T0 + 200, T0 + 1_200, 10)).await;
    assert_eq!(after.requeued, [id("short")]);
    assert_eq!(
        window_ids(&after),
        [("short", T0 + 200)],
        "a requeued task is pending at once, in this look's window"
    );
    assert_eq!(after.earliest_lease_deadline_ms, Some(T0 + 5_000));
    let short = store
        .get(&p, &id("short"))
        .await
        .expect("get")
        .expect("short");
    assert_eq!(short.state, TaskState::Pending);
    assert_eq!(short.attempt, 1, "a lease that ran out spends no attempt");
}

pub async fn look_prunes_completed_records_only_when_asked(make: Make) {
    let (store, p) = setup(make).await;
    complete(&store, &p, "a", T0).await;
    let kept = look(&store, &p, &request(T0, T0 + 1_000, 10)).await;
    assert_eq!(kept.pruned, 0);
    assert!(store.get(&p, &id("a")).await.expect("get").is_some());
    let mut pruning = request(T0, T0 + 1_000, 10);
    pruning.prune_before_ms = Some(MAX_DUE_MS);
    let pruned = look(&store, &p, &pruning).await;
    assert_eq!(pruned.pruned, 1);
    assert_eq!(store.get(&p, &id("a")).await.expect("get"), None);
}

pub async fn pending_head_is_the_earliest_pending_due_after_each_write(make: Make) {
    let (store, p) = setup(make).await;
    let other = register(&store, "other-queue", 4).await;
    assert_eq!(store.pending_head(&p).await.expect("head"), None);
    assert_eq!(store.pending_head(&other).await.expect("head"), None);
    schedule(&store, &p, "later", T0 + 500).await;
    assert_eq!(store.pending_head(&p).await.expect("head"), Some(T0 + 500));
    assert_eq!(
        store.pending_head(&other).await.expect("head"),
        None,
        "another partition's task is not this one's head"
    );
    schedule(&store, &p, "sooner", T0 - 10).await;
    assert_eq!(store.pending_head(&p).await.expect("head"), Some(T0 - 10));
    let claimed = store
        .claim_due(&p, T0, 10, T0 + 5_000, "node-a")
        .await
        .expect("claim");
    assert_eq!(ids(&claimed.tasks), ["sooner"]);
    assert_eq!(
        store.pending_head(&p).await.expect("head"),
        Some(T0 + 500),
        "a task in flight is not pending"
    );
    assert!(store
        .cancel(&p, &id("later"))
        .await
        .expect("cancel")
        .cancelled());
    assert_eq!(store.pending_head(&p).await.expect("head"), None);
}
