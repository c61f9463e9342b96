//! The PostgreSQL backend when things go wrong: the database unreachable, killed and
//! restarted in the middle of a burst, its connections terminated, a statement stuck on a lock
//! until `statement_timeout` cancels it.

use std::sync::Arc;
use std::time::Duration;

use delayq_postgres::{Database, Migrator, PostgresConfig, RetryPolicy};
use delayq_storage::{
    AckOutcome, NewTask, Partition, PostgresStore, PostgresStoreOptions, QueueName, ScheduleMode,
    StorageError, StoreOptions, TaskId, TaskState, TaskStore,
};
use delayq_testkit::{free_port, PostgresServer};

const T0: u64 = 1_700_000_000_000;

fn task(name: &str, due_ms: u64) -> NewTask {
    NewTask {
        id: TaskId::new(name).expect("valid id"),
        due_ms,
        payload: format!("payload of {name}").into(),
        traceparent: None,
    }
}

async fn store_on(server: &PostgresServer, retry: RetryPolicy) -> (PostgresStore, Partition) {
    let store = PostgresStore::connect(PostgresStoreOptions::new(server.url()))
        .await
        .expect("connect and migrate");
    let database = store.database().clone().with_retry(retry);
    let store = PostgresStore::on(database, StoreOptions::default());
    let queue = QueueName::new("faults").expect("valid queue");
    store.register_queue(&queue, 1).await.expect("register");
    (store, Partition::new(queue, 0))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unreachable_postgres_at_start_is_a_transient_typed_error_without_the_password() {
    let url = format!(
        "postgres://delayq:hunter2-secret@127.0.0.1:{}/delayq",
        free_port()
    );
    let mut options = PostgresStoreOptions::new(url);
    options.postgres.connect_timeout = Duration::from_millis(500);
    let database = Database::new(&options.postgres)
        .expect("valid settings")
        .with_retry(RetryPolicy {
            max_elapsed: Duration::from_millis(300),
            ..RetryPolicy::default()
        });
    let started = std::time::Instant::now();
    let error = Migrator::new(&database)
        .apply()
        .await
        .expect_err("nothing listens there");
    assert!(started.elapsed() < Duration::from_secs(5));
    assert!(error.is_transient(), "{error}");
    let store = PostgresStore::on(database, StoreOptions::default());
    let error = store.queues().await.expect_err("nothing listens there");
    assert!(
        matches!(error, StorageError::ConnectionLost { .. }),
        "{error:?}"
    );
    assert!(error.is_transient());
    assert!(!error.to_string().contains("hunter2-secret"), "{error}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_burst_through_a_crash_loses_no_acknowledged_schedule() {
    let mut server = PostgresServer::start();
    // Long enough to ride out the restart: calls made while the server is down wait for it.
    let (store, partition) = store_on(
        &server,
        RetryPolicy {
            max_elapsed: Duration::from_secs(30),
            ..RetryPolicy::default()
        },
    )
    .await;
    let store = Arc::new(store);
    const BURST: usize = 1_000;
    let writer = {
        let (store, partition) = (store.clone(), partition.clone());
        tokio::spawn(async move {
            let mut acknowledged = Vec::new();
            let mut failed = Vec::new();
            for n in 0..BURST {
                let name = format!("burst-{n}");
                match store
                    .schedule(&partition, task(&name, T0 + n as u64), ScheduleMode::Upsert)
                    .await
                {
                    Ok(_) => acknowledged.push(name),
                    Err(error) => {
                        assert!(error.is_transient(), "{error:?}");
                        failed.push(name);
                    }
                }
            }
            (acknowledged, failed)
        })
    };
    // Crash the server once the burst is under way, and bring it back.
    let deadline = std::time::Instant::now() + Duration::from_secs(20);
    while server
        .psql("SELECT count(*) FROM delayq.tasks")
        .ok()
        .and_then(|count| count.parse::<usize>().ok())
        .unwrap_or(0)
        < BURST / 4
    {
        assert!(
            std::time::Instant::now() < deadline,
            "the burst did not start"
        );
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    let (server, stored_at_crash) = tokio::task::spawn_blocking(move || {
        server.kill();
        std::thread::sleep(Duration::from_millis(300));
        server.restart();
        let stored = server
            .psql("SELECT count(*) FROM delayq.tasks")
            .ok()
            .and_then(|count| count.parse::<usize>().ok())
            .unwrap_or(0);
        (server, stored)
    })
    .await
    .expect("crash and restart");
    assert!(
        stored_at_crash < BURST,
        "the crash came after the burst ({stored_at_crash} stored)"
    );
    let (acknowledged, failed) = writer.await.expect("the writer");
    assert!(
        acknowledged.len() >= BURST / 4,
        "{} acknowledged",
        acknowledged.len()
    );
    for name in &acknowledged {
        let info = store
            .get(&partition, &TaskId::new(name).expect("valid id"))
            .await
            .expect("get after the restart")
            .unwrap_or_else(|| panic!("{name} was acknowledged but is gone"));
        assert_eq!(info.state, TaskState::Pending);
    }
    let stats = store.stats(&partition, T0).await.expect("stats");
    assert!(stats.pending >= acknowledged.len() as u64);
    assert!(
        stats.pending <= (acknowledged.len() + failed.len()) as u64,
        "{stats:?}"
    );
    drop(server);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn terminated_connections_are_replaced_and_claims_go_on() {
    let server = PostgresServer::start();
    let (store, partition) = store_on(&server, RetryPolicy::default()).await;
    for n in 0..10 {
        store
            .schedule(
                &partition,
                task(&format!("t-{n}"), T0),
                ScheduleMode::Upsert,
            )
            .await
            .expect("schedule");
    }
    server
        .psql(
            "SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity \
             WHERE usename = 'delayq' AND pid <> pg_backend_pid()",
        )
        .expect("terminate the pool's connections");
    let batch = store
        .claim_due(&partition, T0, 100, T0 + 60_000, "node-a")
        .await
        .expect("claim after the connections were terminated");
    assert_eq!(batch.tasks.len(), 10);
    for claimed in &batch.tasks {
        assert_eq!(
            store.ack(&claimed.token).await.expect("ack"),
            AckOutcome::Completed
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_statement_stuck_on_a_lock_is_a_transient_timeout_not_a_stall() {
    let server = PostgresServer::start();
    let mut config = PostgresConfig::new(server.url());
    config.statement_timeout = Duration::from_millis(300);
    let database = Database::new(&config)
        .expect("valid settings")
        .with_retry(RetryPolicy::none());
    Migrator::new(&database).apply().await.expect("migrate");
    let store = PostgresStore::on(database, StoreOptions::default());
    let queue = QueueName::new("faults").expect("valid queue");
    store.register_queue(&queue, 1).await.expect("register");
    let partition = Partition::new(queue, 0);
    store
        .schedule(&partition, task("t", T0), ScheduleMode::Upsert)
        .await
        .expect("schedule");

    // Another session holds the partition's lock for a while.
    let (holder, connection) = delayq_postgres::tokio_postgres::connect(
        &server.url(),
        delayq_postgres::tokio_postgres::NoTls,
    )
    .await
    .expect("connect");
    tokio::spawn(connection);
    holder
        .batch_execute(
            "BEGIN; SELECT 1 FROM delayq.partitions WHERE queue = 'faults' AND idx = 0 FOR UPDATE",
        )
        .await
        .expect("hold the lock");
    let started = std::time::Instant::now();
    let error = store
        .claim_due(&partition, T0, 10, T0 + 60_000, "node-a")
        .await
        .expect_err("cancelled by statement_timeout");
    assert!(matches!(error, StorageError::Timeout { .. }), "{error:?}");
    assert!(error.is_transient());
    assert!(started.elapsed() < Duration::from_secs(5));

    holder.batch_execute("ROLLBACK").await.expect("release");
    let batch = store
        .claim_due(&partition, T0, 10, T0 + 60_000, "node-a")
        .await
        .expect("claim once the lock is free");
    assert_eq!(batch.tasks.len(), 1, "the timed-out claim took nothing");
}

/// A claim that started while `pause` held the partition's lock, and waited for it, sees the
/// pause once it gets the lock: it takes nothing. (It reads the other tables as of its start,
/// before the pause committed; the pause is on the partition's row too, migration 5.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_claim_that_waited_for_a_pause_to_commit_sees_the_pause() {
    let server = PostgresServer::start();
    let (store, partition) = store_on(&server, RetryPolicy::default()).await;
    store
        .schedule(&partition, task("due", T0), ScheduleMode::Upsert)
        .await
        .expect("schedule");
    // The pause's own statements, in a transaction held open.
    let database = store.database().clone();
    let mut client = database.client("pause").await.expect("a connection");
    let pause = client.transaction().await.expect("begin");
    pause
        .execute(
            "INSERT INTO delayq.paused (queue, paused_ms) VALUES ($1, 0)",
            &[&"faults"],
        )
        .await
        .expect("insert the pause");
    pause
        .execute(
            "UPDATE delayq.partitions SET paused = true WHERE queue = $1",
            &[&"faults"],
        )
        .await
        .expect("mark and lock the partitions");
    let claimer = store.clone();
    let claiming = tokio::spawn(async move {
        claimer
            .claim_due(&partition, T0 + 1_000, 10, T0 + 60_000, "node-a")
            .await
    });
    // The claim has started and waits for the partition's lock.
    let waiting = "SELECT count(*) FROM pg_stat_activity WHERE wait_event_type = 'Lock' \
                   AND query LIKE 'WITH p AS MATERIALIZED%'";
    let started = std::time::Instant::now();
    while server.psql(waiting).expect("pg_stat_activity") != "1" {
        assert!(
            started.elapsed() < Duration::from_secs(10),
            "the claim never waited for the lock"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    pause.commit().await.expect("commit the pause");
    let batch = claiming.await.expect("joined").expect("claim");
    assert!(batch.paused, "the claim did not see the pause: {batch:?}");
    assert!(batch.tasks.is_empty(), "claimed while paused: {batch:?}");
}
