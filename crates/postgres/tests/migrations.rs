//! Migrations on a real server: applied once however many migrators race, a re-run does
//! nothing, `check` tells what is pending, and a version of a newer release is left alone.

mod support;

use delayq_postgres::{Database, Migration, Migrator, MIGRATIONS};
use delayq_testkit::PostgresServer;

/// This release's highest version.
fn current() -> u32 {
    MIGRATIONS.len() as u32
}

/// This release's versions, in order.
fn this_release() -> Vec<u32> {
    (1..=current()).collect()
}

/// This release's migrations and one more.
fn plus(extra: Migration) -> &'static [Migration] {
    let mut set = MIGRATIONS.to_vec();
    set.push(extra);
    Box::leak(set.into_boxed_slice())
}

/// This release's migrations and one more, as the next release would have them. The extra one
/// fails if it ever runs twice (no IF NOT EXISTS).
fn next_release() -> &'static [Migration] {
    plus(Migration {
        version: current() + 1,
        name: "next_release_table",
        sql: "CREATE TABLE {schema}.next_release (id int PRIMARY KEY)",
    })
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn racing_migrators_apply_each_version_once() {
    let server = PostgresServer::start();
    let databases: Vec<Database> = (0..4).map(|_| support::database(&server)).collect();
    let migrators: Vec<Migrator> = databases
        .iter()
        .map(|database| Migrator::with_migrations(database, next_release()))
        .collect();
    let reports = futures::future::join_all(migrators.iter().map(Migrator::apply)).await;
    let mut applied_now = Vec::new();
    for report in reports {
        let report = report.expect("every migrator succeeds");
        assert!(report.status.is_current(), "{}", report.status);
        applied_now.extend(report.applied_now);
    }
    applied_now.sort_unstable();
    let all: Vec<u32> = (1..=current() + 1).collect();
    assert_eq!(
        applied_now, all,
        "each version applied by exactly one migrator"
    );
    let recorded: Vec<String> = all.iter().map(u32::to_string).collect();
    assert_eq!(
        server
            .psql("SELECT string_agg(version::text, ',' ORDER BY version) FROM delayq.schema_migrations")
            .expect("read the record"),
        recorded.join(",")
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_second_run_is_a_no_op() {
    let server = PostgresServer::start();
    let database = support::database(&server);
    let migrator = Migrator::new(&database);
    let first = migrator.apply().await.expect("first run");
    assert_eq!(first.applied_now, this_release());
    let recorded_at = server
        .psql("SELECT applied_at FROM delayq.schema_migrations WHERE version = 1")
        .expect("read");
    let second = migrator.apply().await.expect("second run");
    assert!(second.applied_now.is_empty());
    assert_eq!(second.status, first.status);
    assert_eq!(
        server
            .psql("SELECT applied_at FROM delayq.schema_migrations WHERE version = 1")
            .expect("read"),
        recorded_at,
        "nothing was applied again"
    );
    assert_eq!(
        server
            .psql("SELECT value FROM delayq.meta WHERE key = 'created_by'")
            .expect("read"),
        "delayq migration 1"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn check_tells_pending_then_current() {
    let server = PostgresServer::start();
    let database = support::database(&server);
    let migrator = Migrator::new(&database);

    let status = migrator
        .status()
        .await
        .expect("status of an empty database");
    assert!(!status.initialized);
    assert_eq!(status.pending, this_release());
    let error = migrator.check().await.expect_err("pending migrations");
    assert!(!error.is_transient());
    let shown = error.to_string();
    assert!(
        shown.contains("delayq migrate") && shown.contains("delayq"),
        "{shown}"
    );
    assert_eq!(
        server
            .psql("SELECT count(*) FROM pg_namespace WHERE nspname = 'delayq'")
            .expect("read"),
        "0",
        "status and check create nothing"
    );

    migrator.apply().await.expect("apply");
    let status = migrator.check().await.expect("current after apply");
    assert_eq!(status.version(), current());
    assert!(status.to_string().contains("current"), "{status}");

    // The next release's migrator sees its own version pending.
    let next = Migrator::with_migrations(&database, next_release());
    let status = next.status().await.expect("status");
    assert_eq!(status.pending, vec![current() + 1]);
    assert!(next.check().await.is_err());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_newer_release_s_version_is_left_alone_and_reported() {
    let server = PostgresServer::start();
    let database = support::database(&server);
    Migrator::with_migrations(&database, next_release())
        .apply()
        .await
        .expect("the next release migrates");
    // This release (one version fewer) keeps working beside it: apply succeeds and changes
    // nothing; status and check report the unknown version.
    let this_release = Migrator::new(&database);
    let report = this_release
        .apply()
        .await
        .expect("apply beside a newer schema");
    assert!(report.applied_now.is_empty());
    assert_eq!(report.status.unknown, vec![current() + 1]);
    let error = this_release.check().await.expect_err("not current");
    assert!(error.to_string().contains("newer release"), "{error}");
    assert_eq!(
        server
            .psql("SELECT count(*) FROM delayq.next_release")
            .expect("still there"),
        "0"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failing_migration_leaves_nothing_and_two_schemas_are_independent() {
    let broken = plus(Migration {
        version: current() + 1,
        name: "broken",
        sql: "CREATE TABLE {schema}.half (id int); SELECT no_such_function()",
    });
    let server = PostgresServer::start();
    let tenant_a = Database::new(&support::config(&server, "tenant_a")).expect("valid settings");
    let tenant_b =
        Database::new(&support::config(&server, "Tenant \"B\"")).expect("valid settings");
    let error = Migrator::with_migrations(&tenant_a, broken)
        .apply()
        .await
        .expect_err("the extra migration fails");
    assert!(
        matches!(error, delayq_postgres::Error::Migration { version, .. } if version == current() + 1),
        "{error}"
    );
    assert_eq!(error.code(), Some("42883"), "{error}");
    assert_eq!(
        server
            .psql("SELECT to_regclass('tenant_a.half') IS NULL")
            .expect("read"),
        "t",
        "the failed migration's table was rolled back"
    );
    let status = Migrator::new(&tenant_a)
        .check()
        .await
        .expect("this release's versions stay");
    assert_eq!(status.version(), current());

    let report = Migrator::new(&tenant_b)
        .apply()
        .await
        .expect("another schema");
    assert_eq!(report.applied_now, this_release());
    assert_eq!(
        server
            .psql("SELECT count(*) FROM \"Tenant \"\"B\"\"\".meta")
            .expect("quoted schema"),
        "1"
    );
}
