//! What firing costs the database through the PostgreSQL store alone (no engine): statements
//! and explicit transactions (`COMMIT`s; a statement outside one is a transaction of its own)
//! per fired task for claims of 256 and one ack per task (one at a time, and all of a claim at
//! once as a node's concurrent handlers send them), counted by `pg_stat_statements` on a
//! private server (the cumulative statistics of `pg_stat_database` reach the view up to
//! seconds late). Printed, and held under a bound so that a change that adds round trips to
//! the hot path is noticed.

use delayq_storage::{
    NewTask, Partition, PostgresStore, PostgresStoreOptions, QueueName, ScheduleMode, TaskId,
    TaskStore,
};
use delayq_testkit::PostgresServer;

const T0: u64 = 1_700_000_000_000;
const TASKS: usize = 2_048;
const CLAIM: usize = 256;

fn counter(server: &PostgresServer, sql: &str) -> f64 {
    server
        .psql(sql)
        .unwrap_or_else(|error| panic!("{sql}: {error}"))
        .parse()
        .unwrap_or_else(|error| panic!("{sql}: {error}"))
}

/// Schedules tasks `t-000`, `t-001`, ... (`count` of them) into `partition`, task `n` due at
/// `due_of(n)` with `payload`, in one `schedule_many`.
async fn schedule_tasks(
    store: &PostgresStore,
    partition: &Partition,
    count: u64,
    due_of: impl Fn(u64) -> u64,
    payload: &str,
) {
    let items = (0..count)
        .map(|n| {
            let task = NewTask {
                id: TaskId::new(format!("t-{n:03}")).expect("valid id"),
                due_ms: due_of(n),
                payload: payload.to_owned().into(),
                traceparent: None,
            };
            (partition.clone(), task)
        })
        .collect();
    store
        .schedule_many(items, ScheduleMode::Upsert)
        .await
        .expect("schedule_many");
}

/// Statements and transactions per fired task: `TASKS` due tasks, claimed `CLAIM` at a time,
/// each claim's acks sent one after the other or all at once.
async fn cost_of_firing(concurrent_acks: bool) -> (f64, f64) {
    let server = PostgresServer::start();
    assert!(
        server.has_pg_stat_statements(),
        "the PostgreSQL package ships pg_stat_statements: run `cargo xtask setup`"
    );
    let store = PostgresStore::connect(PostgresStoreOptions::new(server.url()))
        .await
        .expect("connect");
    let queue = QueueName::new("cost").expect("valid queue");
    store.register_queue(&queue, 1).await.expect("register");
    let partition = Partition::new(queue, 0);
    schedule_tasks(&store, &partition, TASKS as u64, |_| T0, &"x".repeat(50)).await;

    let statements = "SELECT coalesce(sum(calls), 0) FROM pg_stat_statements s \
                      JOIN pg_roles r ON r.oid = s.userid WHERE r.rolname = 'delayq'";
    let commits = "SELECT coalesce(sum(calls), 0) FROM pg_stat_statements s \
                   JOIN pg_roles r ON r.oid = s.userid WHERE r.rolname = 'delayq' \
                   AND s.query ILIKE 'commit%'";
    server
        .psql("SELECT pg_stat_statements_reset()")
        .expect("reset the counters");
    let (statements_before, commits_before) =
        (counter(&server, statements), counter(&server, commits));
    let mut fired = 0;
    loop {
        let batch = store
            .claim_due(&partition, T0, CLAIM, T0 + 60_000, "node-a")
            .await
            .expect("claim");
        if batch.tasks.is_empty() {
            break;
        }
        if concurrent_acks {
            let acks = batch.tasks.iter().map(|task| store.ack(&task.token));
            for outcome in futures::future::join_all(acks).await {
                outcome.expect("ack");
                fired += 1;
            }
        } else {
            for task in &batch.tasks {
                store.ack(&task.token).await.expect("ack");
                fired += 1;
            }
        }
    }
    assert_eq!(fired, TASKS);
    // The counters are updated when a statement ends; the harness's psql runs as `postgres`,
    // so its reads are not counted.
    let statements_per_task = (counter(&server, statements) - statements_before) / TASKS as f64;
    let transactions_per_task = (counter(&server, commits) - commits_before) / TASKS as f64;
    eprintln!(
        "postgres store: {statements_per_task:.3} statements and {transactions_per_task:.3} \
         explicit transactions per fired task (claims of {CLAIM}, {} acks, {TASKS} tasks)",
        if concurrent_acks {
            "concurrent"
        } else {
            "sequential"
        }
    );
    (statements_per_task, transactions_per_task)
}

// A claim and an ack whose tokens all hold their leases are one statement each, committed on
// its own (no COMMIT), so the statements bound the transactions too.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sequential_acks_cost_a_bounded_number_of_statements_per_fired_task() {
    let (statements, explicit_transactions) = cost_of_firing(false).await;
    assert!(statements <= 1.1, "{statements:.3} statements per task");
    assert!(
        explicit_transactions <= 0.01,
        "{explicit_transactions:.3} explicit transactions per task"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_acks_share_statements() {
    let (statements, explicit_transactions) = cost_of_firing(true).await;
    assert!(statements <= 0.05, "{statements:.3} statements per task");
    assert!(
        explicit_transactions <= 0.01,
        "{explicit_transactions:.3} explicit transactions per task"
    );
}

/// Every statement the stores ran so far (the harness's psql runs as `postgres`).
fn delayq_statements(server: &PostgresServer) -> f64 {
    counter(
        server,
        "SELECT coalesce(sum(calls), 0) FROM pg_stat_statements s JOIN pg_roles r \
         ON r.oid = s.userid WHERE r.rolname = 'delayq'",
    )
}

/// The light looks of an idle node: 64 partitions asked for their head, again and again,
/// cost one statement per `HEAD_VIEW_MAX_AGE`, not one per look; a write by another store
/// (another node) is seen once the view is that old, one through this store at once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn light_looks_of_many_partitions_share_one_statement() {
    use delayq_storage::HEAD_VIEW_MAX_AGE;
    let server = PostgresServer::start();
    let url = server.url();
    let store = PostgresStore::connect(PostgresStoreOptions::new(url.clone()))
        .await
        .expect("connect");
    let other_node = PostgresStore::connect(PostgresStoreOptions::new(url))
        .await
        .expect("connect");
    let queue = QueueName::new("idle").expect("valid queue");
    store.register_queue(&queue, 64).await.expect("register");
    let partitions: Vec<Partition> = (0..64).map(|n| Partition::new(queue.clone(), n)).collect();
    let task = |name: &str, due_ms| NewTask {
        id: TaskId::new(name).expect("valid id"),
        due_ms,
        payload: Default::default(),
        traceparent: None,
    };
    for (n, partition) in partitions.iter().enumerate().step_by(3) {
        store
            .schedule(partition, task("far", T0 + n as u64), ScheduleMode::Upsert)
            .await
            .expect("schedule");
    }
    let truth = |n: usize| (n % 3 == 0).then(|| T0 + n as u64);
    // The first round learns which partitions are asked about.
    for partition in &partitions {
        store.pending_head(partition).await.expect("head");
    }
    let before = delayq_statements(&server);
    let started = std::time::Instant::now();
    for _round in 0..5 {
        for (n, partition) in partitions.iter().enumerate() {
            assert_eq!(store.pending_head(partition).await.expect("head"), truth(n));
        }
    }
    let reads = delayq_statements(&server) - before;
    let bound = 1.0 + (started.elapsed().as_secs_f64() / HEAD_VIEW_MAX_AGE.as_secs_f64()).ceil();
    assert!(
        reads <= bound,
        "{reads} head reads for 320 light looks in {:?}",
        started.elapsed()
    );

    // Another node's write into partition 1 (no head before): seen within the view's age.
    other_node
        .schedule(&partitions[1], task("new", T0 + 1), ScheduleMode::Upsert)
        .await
        .expect("schedule");
    let written = std::time::Instant::now();
    loop {
        match store.pending_head(&partitions[1]).await.expect("head") {
            Some(due) => {
                assert_eq!(due, T0 + 1);
                break;
            }
            None => {
                assert!(
                    written.elapsed() < HEAD_VIEW_MAX_AGE + std::time::Duration::from_secs(2),
                    "another node's task unseen after {:?}",
                    written.elapsed()
                );
                tokio::time::sleep(std::time::Duration::from_millis(100)).await;
            }
        }
    }
    // This store's own write into partition 2 is seen at once.
    store
        .schedule(&partitions[2], task("own", T0 + 2), ScheduleMode::Upsert)
        .await
        .expect("schedule");
    assert_eq!(
        store.pending_head(&partitions[2]).await.expect("head"),
        Some(T0 + 2)
    );
}

/// A full look at a busy partition (tasks pending in its window, others in flight) that finds
/// nothing to change is one statement outside a transaction, once its prune floor says no done
/// record is old enough; a look that finds a lease run out still puts its task back (in the
/// partition's transaction).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_busy_look_with_nothing_to_change_is_one_statement() {
    use delayq_storage::LookRequest;
    let server = PostgresServer::start();
    let store = PostgresStore::connect(PostgresStoreOptions::new(server.url()))
        .await
        .expect("connect");
    let queue = QueueName::new("busy").expect("valid queue");
    store.register_queue(&queue, 1).await.expect("register");
    let partition = Partition::new(queue, 0);
    schedule_tasks(&store, &partition, 100, |n| T0 + n, "").await;
    let lease = T0 + 60_000;
    let claimed = store
        .claim_due(&partition, T0 + 9, 10, lease, "node-a")
        .await
        .expect("claim");
    assert_eq!(claimed.tasks.len(), 10);
    let look = |now_ms: u64| LookRequest {
        now_ms,
        window_end_ms: now_ms + 5_000,
        window_limit: 50,
        requeue_limit: 100,
        prune_before_ms: Some(T0 - 1),
        prune_limit: 100,
    };
    // The first look prunes (this store knows no floor yet) and learns the floor.
    let first = store
        .look(&partition, &look(T0 + 1_000))
        .await
        .expect("look");
    assert!(first.requeued.is_empty());

    server
        .psql("SELECT pg_stat_statements_reset()")
        .expect("reset the counters");
    let buffers = "SELECT coalesce(sum(shared_blks_hit + shared_blks_read), 0) \
                   FROM pg_stat_statements s JOIN pg_roles r ON r.oid = s.userid \
                   WHERE r.rolname = 'delayq'";
    let (before, buffers_before) = (delayq_statements(&server), counter(&server, buffers));
    let report = store
        .look(&partition, &look(T0 + 1_000))
        .await
        .expect("look");
    assert_eq!(delayq_statements(&server) - before, 1.0, "one statement");
    // Its scalars are read once, not once per window entry (which read ~4 buffers each).
    let read = counter(&server, buffers) - buffers_before;
    eprintln!("{read} buffers for a look of a 50-entry window");
    assert!(
        read < 100.0,
        "{read} buffers for a look of a 50-entry window"
    );
    assert_eq!(
        report, first,
        "the same answer as the look in a transaction"
    );
    assert_eq!(report.window.len(), 50);
    assert_eq!(report.window[0].0.as_str(), "t-010");
    assert_eq!(report.next_due_after_window_ms, None, "the window is full");
    assert_eq!(report.earliest_lease_deadline_ms, Some(lease));

    // A short window reports the next due after it.
    let short = LookRequest {
        window_end_ms: T0 + 19,
        ..look(T0 + 1_000)
    };
    let report = store.look(&partition, &short).await.expect("look");
    assert_eq!(report.window.len(), 10);
    assert_eq!(report.next_due_after_window_ms, Some(T0 + 20));

    // Past the lease: the claimed ten are put back.
    let report = store
        .look(&partition, &look(lease + 1))
        .await
        .expect("look");
    assert_eq!(report.requeued.len(), 10, "{report:?}");
    assert_eq!(report.earliest_lease_deadline_ms, None);
}
