//! The compactor on a real server: after a backlog came and went, the indexes of `tasks`
//! stay at their high-water mark and the `partitions` heap stays spread until the compactor
//! rebuilds them; it keeps the indexes' names and validity, drops what an interrupted
//! rebuild left, does nothing on a schema that needs nothing, and stands back while another
//! session holds its lock.

mod support;

use delayq_postgres::{CompactAction, Compactor, Database, Migrator};
use delayq_testkit::PostgresServer;

/// The size of `relation` (of schema `delayq`), main fork, in bytes.
fn size(server: &PostgresServer, relation: &str) -> u64 {
    server
        .psql(&format!("SELECT pg_relation_size('delayq.{relation}')"))
        .expect("size")
        .trim()
        .parse()
        .expect("a number")
}

/// A migrated schema whose `tasks` held 60,000 pending tasks that are gone (vacuumed), and
/// whose 64 `partitions` rows were each rewritten 30 times with a ~1.5 kB receipt.
async fn after_a_backlog(server: &PostgresServer) -> Database {
    let database = support::database(server);
    Migrator::new(&database).apply().await.expect("migrate");
    server
        .psql(
            "INSERT INTO delayq.tasks (queue, idx, id, state, at_ms, due_ms, scheduled_due_ms, \
             attempt, generation, claim, payload) \
             SELECT 'q', n % 64, 'order-' || lpad(n::text, 8, '0'), 'pending', n, n, n, 1, 1, 0, \
             '\\x00'::bytea FROM generate_series(1, 60000) n",
        )
        .expect("a backlog");
    server.psql("DELETE FROM delayq.tasks").expect("fired");
    server
        .psql(
            "INSERT INTO delayq.partitions (queue, idx) SELECT 'q', n FROM generate_series(0, 63) n",
        )
        .expect("partitions");
    for round in 0..30 {
        server
            .psql(&format!(
                "UPDATE delayq.partitions SET receipt_ids = ARRAY(SELECT md5(idx::text || '-{round}-' || k) \
                 FROM generate_series(1, 40) k)"
            ))
            .expect("claims");
    }
    for step in [
        "VACUUM delayq.tasks",
        "VACUUM delayq.partitions",
        "ANALYZE delayq.tasks",
    ] {
        server.psql(step).expect(step);
    }
    database
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_compactor_gives_back_what_a_backlog_left() {
    let server = PostgresServer::start();
    let database = after_a_backlog(&server).await;
    let pkey_before = size(&server, "tasks_pkey");
    let due_before = size(&server, "tasks_pending_due");
    let partitions_before = size(&server, "partitions");
    assert!(
        pkey_before > 2 << 20 && due_before > 2 << 20,
        "the backlog left the indexes large: pkey {pkey_before}, pending_due {due_before}"
    );
    assert!(
        partitions_before > 512 << 10,
        "the claims left the partitions heap spread: {partitions_before}"
    );

    let report = Compactor::new(&database).run().await.expect("compacts");
    assert!(!report.busy);
    assert!(report.failed.is_empty(), "{report:?}");
    let reindexed: Vec<&str> = report
        .done
        .iter()
        .filter_map(|action| match action {
            CompactAction::Reindex { index, .. } => Some(index.as_str()),
            _ => None,
        })
        .collect();
    assert!(
        reindexed.contains(&"tasks_pkey") && reindexed.contains(&"tasks_pending_due"),
        "{report:?}"
    );
    assert!(
        report.done.contains(&CompactAction::Rewrite {
            table: "partitions".to_owned(),
            bytes: partitions_before
        }),
        "{report:?}"
    );
    assert!(size(&server, "tasks_pkey") <= 64 << 10);
    assert!(size(&server, "tasks_pending_due") <= 64 << 10);
    assert!(
        size(&server, "partitions") < 128 << 10,
        "{}",
        size(&server, "partitions")
    );
    // The same indexes, valid, and the rows kept.
    let indexes = server
        .psql(
            "SELECT string_agg(c.relname || ':' || i.indisvalid, ',' ORDER BY c.relname) \
             FROM pg_index i JOIN pg_class c ON c.oid = i.indexrelid \
             JOIN pg_class t ON t.oid = i.indrelid WHERE t.relname = 'tasks' \
             AND t.relnamespace = 'delayq'::regnamespace",
        )
        .expect("indexes");
    assert_eq!(
        indexes.trim(),
        "tasks_dead_failed:true,tasks_inflight_lease:true,tasks_pending_due:true,tasks_pkey:true"
    );
    assert_eq!(
        server
            .psql("SELECT count(*) FROM delayq.partitions WHERE cardinality(receipt_ids) = 40")
            .expect("rows")
            .trim(),
        "64"
    );

    // Nothing more to do: the look finds nothing, and nothing is done.
    let again = Compactor::new(&database).run().await.expect("runs");
    assert!(
        again.done.is_empty() && again.failed.is_empty(),
        "{again:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_interrupted_rebuilds_leftover_is_dropped() {
    let server = PostgresServer::start();
    let database = support::database(&server);
    Migrator::new(&database).apply().await.expect("migrate");
    server
        .psql(
            "INSERT INTO delayq.tasks (queue, idx, id, state, at_ms, due_ms, scheduled_due_ms, \
             attempt, generation, claim, payload) VALUES \
             ('q', 0, 'a', 'pending', 1, 1, 1, 1, 1, 0, ''), ('q', 0, 'b', 'pending', 1, 1, 1, 1, 1, 0, '')",
        )
        .expect("two tasks");
    // A concurrent build that fails (duplicate keys) leaves its index behind, invalid, as
    // an interrupted REINDEX CONCURRENTLY leaves `<name>_ccnew`.
    let failed = server
        .psql("CREATE UNIQUE INDEX CONCURRENTLY tasks_pending_due_ccnew ON delayq.tasks (queue)");
    assert!(failed.is_err(), "the build fails on duplicates");
    assert_eq!(
        server
            .psql("SELECT indisvalid FROM pg_index WHERE indexrelid = 'delayq.tasks_pending_due_ccnew'::regclass")
            .expect("left behind")
            .trim(),
        "f",
        "{failed:?}"
    );
    let report = Compactor::new(&database).run().await.expect("compacts");
    assert_eq!(
        report.done,
        [CompactAction::DropLeftover {
            index: "tasks_pending_due_ccnew".to_owned()
        }]
    );
    assert_eq!(
        server
            .psql("SELECT to_regclass('delayq.tasks_pending_due_ccnew') IS NULL")
            .expect("gone")
            .trim(),
        "t"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_compactor_stands_back_while_its_lock_is_held() {
    let server = PostgresServer::start();
    let database = after_a_backlog(&server).await;
    let compactor = Compactor::new(&database);
    let (holder, connection) = delayq_postgres::tokio_postgres::connect(
        &server.url(),
        delayq_postgres::tokio_postgres::NoTls,
    )
    .await
    .expect("connects");
    tokio::spawn(connection);
    holder
        .execute("SELECT pg_advisory_lock($1)", &[&compactor.lock_key()])
        .await
        .expect("holds the lock");
    let before = size(&server, "tasks_pkey");
    let report = compactor.run().await.expect("runs");
    assert!(report.busy && report.done.is_empty(), "{report:?}");
    assert_eq!(size(&server, "tasks_pkey"), before);
    drop(holder);
}
