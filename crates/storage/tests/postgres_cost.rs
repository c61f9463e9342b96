//! What firing costs the database through the PostgreSQL store alone (no engine): statements
//! and transactions per fired task for claims of 256 and one ack per task (one at a time, and
//! all of a claim at once as a node's concurrent handlers send them), counted by
//! `pg_stat_statements` on a private server (a transaction is a `COMMIT`: the cumulative
//! statistics of `pg_stat_database` reach the view up to seconds late). Printed, and held under a
//! bound so that a change that adds round trips to the hot path is noticed.

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
    let items = (0..TASKS)
        .map(|n| {
            let task = NewTask {
                id: TaskId::new(format!("t-{n}")).expect("valid id"),
                due_ms: T0,
                payload: "x".repeat(50).into(),
                traceparent: None,
            };
            (partition.clone(), task)
        })
        .collect();
    store
        .schedule_many(items, ScheduleMode::Upsert)
        .await
        .expect("schedule_many");

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
         transactions per fired task (claims of {CLAIM}, {} acks, {TASKS} tasks)",
        if concurrent_acks {
            "concurrent"
        } else {
            "sequential"
        }
    );
    (statements_per_task, transactions_per_task)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sequential_acks_cost_a_bounded_number_of_statements_per_fired_task() {
    let (statements, transactions) = cost_of_firing(false).await;
    assert!(statements <= 5.0, "{statements:.3} statements per task");
    assert!(
        transactions <= 1.5,
        "{transactions:.3} transactions per task"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_acks_share_transactions() {
    let (statements, transactions) = cost_of_firing(true).await;
    assert!(statements <= 0.5, "{statements:.3} statements per task");
    assert!(
        transactions <= 0.2,
        "{transactions:.3} transactions per task"
    );
}
