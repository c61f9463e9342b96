//! What only the PostgreSQL backend has, and its faults: scheduling and cancelling inside the
//! application's transaction (the task exists if and only if it commits), the error on
//! another backend, and a burst that survives the server being killed and restarted.

mod support;

use std::time::Duration;

use delayq_engine::config::Config;
use delayq_engine::{Cancel, EngineError, ScheduleRequest, Scheduler, When};
use delayq_postgres::tokio_postgres::{self, Client, NoTls};
use support::{fast_config, schema_of, wait_for_ownership, wait_until, Recorder, TestBackend};

const QUEUE: &str = "orders";

/// The application's own connection to the test server.
async fn application_connection(url: &str) -> Client {
    let (client, connection) = tokio_postgres::connect(url, NoTls)
        .await
        .expect("the application connects");
    tokio::spawn(connection);
    client
}

fn server_url(backend: &mut TestBackend) -> String {
    backend
        .postgres_server()
        .expect("a PostgreSQL backend")
        .url()
}

async fn node(backend: &TestBackend, config: &Config, recorder: &Recorder) -> Scheduler {
    backend
        .builder(config)
        .handler(QUEUE, recorder.handler())
        .start()
        .await
        .expect("node starts")
}

fn timeout_in(id: &str, after: Duration) -> ScheduleRequest {
    ScheduleRequest::new(id, When::In(after), format!("{{\"id\":\"{id}\"}}"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_task_scheduled_in_a_transaction_exists_if_and_only_if_it_commits() {
    let mut backend = TestBackend::postgres();
    let url = server_url(&mut backend);
    let config = fast_config();
    let schema = schema_of(&config);
    let recorder = Recorder::new();
    let scheduler = node(&backend, &config, &recorder).await;
    wait_for_ownership(std::slice::from_ref(&scheduler), 1).await;
    let mut app = application_connection(&url).await;
    app.batch_execute(&format!(
        "CREATE TABLE {schema}.orders (id text PRIMARY KEY)"
    ))
    .await
    .expect("the application's table");

    // Committed: the order and its timeout.
    let tx = app.transaction().await.expect("begin");
    tx.execute(&format!("INSERT INTO {schema}.orders VALUES ('kept')"), &[])
        .await
        .expect("insert");
    let scheduled = scheduler
        .schedule_in_tx(&tx, QUEUE, timeout_in("kept", Duration::from_millis(300)))
        .await
        .expect("scheduled in the transaction");
    assert!(!scheduled.replaced && !scheduled.duplicate);
    tx.commit().await.expect("commit");

    // Rolled back after the schedule: neither the order nor the timeout.
    let tx = app.transaction().await.expect("begin");
    tx.execute(
        &format!("INSERT INTO {schema}.orders VALUES ('dropped')"),
        &[],
    )
    .await
    .expect("insert");
    scheduler
        .schedule_in_tx(
            &tx,
            QUEUE,
            timeout_in("dropped", Duration::from_millis(300)),
        )
        .await
        .expect("scheduled in the transaction");
    tx.rollback().await.expect("rollback");

    // Dropped with the transaction, without a rollback call (the application's task ended).
    {
        let tx = app.transaction().await.expect("begin");
        scheduler
            .schedule_in_tx(
                &tx,
                QUEUE,
                timeout_in("abandoned", Duration::from_millis(300)),
            )
            .await
            .expect("scheduled in the transaction");
    }

    // A cancel that rolls back leaves the task; one that commits takes it.
    for (id, commit) in [("cancel-undone", false), ("cancel-done", true)] {
        scheduler
            .schedule_request(QUEUE, timeout_in(id, Duration::from_millis(800)))
            .await
            .expect("scheduled");
        let tx = app.transaction().await.expect("begin");
        let cancel = scheduler
            .cancel_in_tx(&tx, QUEUE, id)
            .await
            .expect("cancelled in the transaction");
        assert_eq!(cancel, Cancel::Cancelled, "{id}");
        if commit {
            tx.commit().await.expect("commit");
        } else {
            tx.rollback().await.expect("rollback");
        }
    }

    wait_until(Duration::from_secs(20), "the committed tasks fired", || {
        let counts = recorder.counts();
        counts.contains_key("kept") && counts.contains_key("cancel-undone")
    })
    .await;
    // Past every due and a few pull periods: nothing else fires.
    tokio::time::sleep(Duration::from_millis(1_500)).await;
    let mut fired: Vec<String> = recorder.counts().into_keys().collect();
    fired.sort();
    assert_eq!(
        fired,
        ["cancel-undone", "kept"],
        "only committed work fired"
    );
    for id in ["dropped", "abandoned", "cancel-done"] {
        assert!(
            scheduler.get(QUEUE, id).await.expect("get").is_none(),
            "{id} left nothing behind"
        );
    }
    let orders = app
        .query(&format!("SELECT id FROM {schema}.orders"), &[])
        .await
        .expect("orders");
    assert_eq!(orders.len(), 1, "only the committed order exists");
    scheduler.shutdown().await.expect("shutdown");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_transactional_schedule_wakes_its_owner_at_commit_not_at_its_next_look() {
    // An idle node looks at its partitions only every `idle_pull_period` (here 30 s): a task
    // due 200 ms after a commit fires in time only if the commit woke the owner.
    let mut backend = TestBackend::postgres();
    let url = server_url(&mut backend);
    let mut config = fast_config();
    config.engine.idle_pull_period = Duration::from_secs(30);
    let recorder = Recorder::new();
    let scheduler = node(&backend, &config, &recorder).await;
    wait_for_ownership(std::slice::from_ref(&scheduler), 1).await;
    // Let the partitions go idle.
    tokio::time::sleep(Duration::from_secs(3)).await;
    let mut app = application_connection(&url).await;
    let tx = app.transaction().await.expect("begin");
    scheduler
        .schedule_in_tx(&tx, QUEUE, timeout_in("woken", Duration::from_millis(200)))
        .await
        .expect("scheduled in the transaction");
    // Held open longer than the task's delay: it must not fire before the commit.
    tokio::time::sleep(Duration::from_millis(600)).await;
    assert_eq!(recorder.len(), 0, "nothing fires before the commit");
    tx.commit().await.expect("commit");
    wait_until(
        Duration::from_secs(5),
        "the task fired after the commit",
        || recorder.len() == 1,
    )
    .await;
    scheduler.shutdown().await.expect("shutdown");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn schedule_in_tx_on_another_backend_is_a_typed_error() {
    let mut postgres = TestBackend::postgres();
    let url = server_url(&mut postgres);
    let memory = TestBackend::memory();
    let recorder = Recorder::new();
    let scheduler = node(&memory, &fast_config(), &recorder).await;
    let mut app = application_connection(&url).await;
    let tx = app.transaction().await.expect("begin");
    let error = scheduler
        .schedule_in_tx(&tx, QUEUE, timeout_in("x", Duration::from_secs(1)))
        .await
        .expect_err("not on memory");
    assert!(matches!(error, EngineError::NotPostgres), "{error:?}");
    let error = scheduler
        .cancel_in_tx(&tx, QUEUE, "x")
        .await
        .expect_err("not on memory");
    assert!(matches!(error, EngineError::NotPostgres), "{error:?}");
    scheduler.shutdown().await.expect("shutdown");
}

/// Tasks of the burst tests: due from 300 ms to 3.3 s after they are scheduled.
const BURST: usize = 1_000;

/// Two nodes, and [`BURST`] tasks scheduled through the first.
async fn start_burst(backend: &TestBackend, recorder: &Recorder) -> Vec<Scheduler> {
    let config = fast_config();
    let mut nodes = Vec::new();
    for _ in 0..2 {
        nodes.push(node(backend, &config, recorder).await);
    }
    wait_for_ownership(&nodes, 2).await;
    let requests: Vec<ScheduleRequest> = (0..BURST)
        .map(|n| {
            let due = Duration::from_millis(300 + (n as u64 * 3_000) / BURST as u64);
            timeout_in(&format!("task-{n}"), due)
        })
        .collect();
    for chunk in requests.chunks(250) {
        for result in nodes[0]
            .schedule_many(QUEUE, chunk.to_vec())
            .await
            .expect("batch stored")
        {
            result.expect("item stored");
        }
    }
    nodes
}

/// Waits for every burst task; fails when more fired twice than were in flight at once.
async fn every_burst_task_fired(recorder: &Recorder) {
    wait_until(Duration::from_secs(60), "every task fired", || {
        recorder.distinct() == BURST
    })
    .await;
    let twice = recorder
        .counts()
        .into_values()
        .filter(|count| *count > 1)
        .count();
    // Twice only for what was running when the server or the connections went (its ack
    // was lost): at most the two nodes' concurrency of 128 each.
    assert!(twice <= 256, "{twice} tasks fired twice");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_burst_survives_the_server_killed_and_restarted() {
    let mut backend = TestBackend::postgres();
    let recorder = Recorder::new();
    let nodes = start_burst(&backend, &recorder).await;
    // Mid-burst: a crash of the server (no shutdown), down for a second.
    wait_until(Duration::from_secs(10), "the burst started", || {
        recorder.distinct() > 50
    })
    .await;
    let server = backend.postgres_server().expect("postgres");
    server.kill();
    tokio::time::sleep(Duration::from_secs(1)).await;
    server.restart();
    every_burst_task_fired(&recorder).await;
    for node in &nodes {
        node.shutdown().await.expect("graceful shutdown");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_burst_survives_every_connection_being_dropped_twice() {
    let mut backend = TestBackend::postgres();
    let recorder = Recorder::new();
    let nodes = start_burst(&backend, &recorder).await;
    // Twice mid-burst, every connection of the nodes (pools and LISTEN) is terminated, as a
    // proxy restart or an idle-connection reaper would.
    let server = backend.postgres_server().expect("postgres");
    for after in [50, 500] {
        wait_until(Duration::from_secs(10), "the burst went on", || {
            recorder.distinct() > after
        })
        .await;
        // After the first round, the nodes must have connected again.
        wait_until(Duration::from_secs(10), "the nodes reconnected", || {
            server
                .psql("SELECT count(*) FROM pg_stat_activity WHERE application_name LIKE 'delayq%'")
                .is_ok_and(|count| count.trim() != "0")
        })
        .await;
        let terminated = server
            .psql(
                "SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity \
                 WHERE application_name LIKE 'delayq%'",
            )
            .expect("terminate the nodes' connections");
        assert_ne!(terminated.trim(), "0", "the nodes had connections");
    }
    every_burst_task_fired(&recorder).await;
    // The membership came back too: both nodes still own their shares.
    wait_for_ownership(&nodes, 2).await;
    for node in &nodes {
        node.shutdown().await.expect("graceful shutdown");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_schema_of_the_previous_migration_set_is_upgraded_by_a_starting_node() {
    // The release before the coordinator existed stopped at migration 3: its tasks are
    // in the database when the first node of this release starts and applies migrations 4
    // and 5 (5: the pause on the partition rows).
    let mut backend = TestBackend::postgres();
    let url = server_url(&mut backend);
    let config = fast_config();
    let settings =
        delayq_postgres::PostgresConfig::new(url.clone()).with_schema(schema_of(&config));
    let database = delayq_postgres::Database::new(&settings).expect("database");
    let previous = &delayq_postgres::MIGRATIONS[..3];
    delayq_postgres::Migrator::with_migrations(&database, previous)
        .apply()
        .await
        .expect("the previous release's schema");
    // The previous release's rows, written as its statements wrote them (this release's store
    // needs the columns of the newer migrations).
    let now = delayq_coordinator::SystemClock.now_ms();
    use delayq_coordinator::LocalClock;
    let client = database
        .client("previous release")
        .await
        .expect("a connection");
    let schema = database.schema().clone();
    let partitions = i32::try_from(config.queue_defaults.partitions).expect("partitions");
    client
        .execute(
            &schema.substitute("INSERT INTO {schema}.queues (queue, partitions) VALUES ($1, $2)"),
            &[&QUEUE, &partitions],
        )
        .await
        .expect("registered by the previous release");
    for n in 0..20u32 {
        let id = delayq_storage::TaskId::new(format!("old-{n}")).expect("id");
        let idx = i32::try_from(delayq_storage::partition_of(
            &id,
            config.queue_defaults.partitions,
        ))
        .expect("index");
        let due = i64::try_from(now + 500).expect("due");
        client
            .execute(
                &schema.substitute(
                    "INSERT INTO {schema}.partitions (queue, idx) VALUES ($1, $2) \
                     ON CONFLICT DO NOTHING",
                ),
                &[&QUEUE, &idx],
            )
            .await
            .expect("the partition's row");
        client
            .execute(
                &schema.substitute(
                    "INSERT INTO {schema}.tasks (queue, idx, id, state, at_ms, due_ms, \
                     scheduled_due_ms, attempt, generation, payload) \
                     VALUES ($1, $2, $3, 'pending', $4, $4, $4, 1, $5, ''::bytea)",
                ),
                &[&QUEUE, &idx, &id.as_str(), &due, &(i64::from(n) + 1)],
            )
            .await
            .expect("scheduled by the previous release");
    }
    drop(client);
    let recorder = Recorder::new();
    let scheduler = node(&backend, &config, &recorder).await;
    let status = delayq_postgres::Migrator::new(&database)
        .check()
        .await
        .expect("current after the node started");
    assert_eq!(status.version() as usize, delayq_postgres::MIGRATIONS.len());
    wait_until(Duration::from_secs(20), "the old tasks fired", || {
        recorder.distinct() == 20
    })
    .await;
    scheduler.shutdown().await.expect("shutdown");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn no_transaction_stays_open_while_handlers_run() {
    // 64 handlers of 2 s each: were a claim's transaction held across its handlers, the
    // server would show it open (idle in transaction) for seconds.
    let mut backend = TestBackend::postgres();
    let config = fast_config();
    let recorder = Recorder::new();
    let record = recorder.clone();
    let scheduler = backend
        .builder(&config)
        .handler(QUEUE, move |task: delayq_engine::Task| {
            record.record(&task);
            async {
                tokio::time::sleep(Duration::from_secs(2)).await;
                Ok::<(), std::io::Error>(())
            }
        })
        .start()
        .await
        .expect("node starts");
    wait_for_ownership(std::slice::from_ref(&scheduler), 1).await;
    let requests: Vec<ScheduleRequest> = (0..64)
        .map(|n| timeout_in(&format!("slow-{n}"), Duration::from_millis(200)))
        .collect();
    scheduler
        .schedule_many(QUEUE, requests)
        .await
        .expect("batch stored");
    wait_until(Duration::from_secs(10), "the handlers started", || {
        recorder.distinct() == 64
    })
    .await;
    let server = backend.postgres_server().expect("postgres");
    let mut samples = 0;
    for _ in 0..15 {
        let open = server
            .psql(
                "SELECT count(*) FROM pg_stat_activity WHERE application_name LIKE 'delayq%' \
                 AND xact_start < clock_timestamp() - interval '1 second'",
            )
            .expect("pg_stat_activity");
        assert_eq!(open.trim(), "0", "a transaction open for over a second");
        samples += 1;
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert_eq!(samples, 15);
    scheduler.shutdown().await.expect("shutdown");
}
