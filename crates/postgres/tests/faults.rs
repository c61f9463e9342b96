//! Error classes on a real server: a real `statement_timeout`, a real serialization failure,
//! a killed server (transient), the pool recovering after a restart, a standby that refuses
//! writes and a failover pair with `target_session_attrs=read-write`, a refused login.

mod support;

use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::Arc;
use std::time::Duration;

use delayq_postgres::tokio_postgres::IsolationLevel;
use delayq_postgres::{Database, ErrorClass, PostgresConfig, RetryPolicy};
use delayq_testkit::{PostgresOptions, PostgresServer};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_statement_timeout_is_transient() {
    let server = PostgresServer::start();
    let mut config = support::config(&server, "delayq");
    config.statement_timeout = Duration::from_millis(200);
    let database = Database::new(&config)
        .expect("valid settings")
        .with_retry(RetryPolicy::none());
    let error = database
        .run("sleep", |client| {
            Box::pin(async move { client.batch_execute("SELECT pg_sleep(5)").await })
        })
        .await
        .expect_err("cancelled by statement_timeout");
    assert_eq!(error.code(), Some("57014"), "{error}");
    assert_eq!(error.class(), ErrorClass::Transient);
    assert!(error.to_string().contains("statement timeout"), "{error}");
    // The connection is fine afterwards.
    assert_eq!(support::scalar::<i32>(&database, "SELECT 1").await, 1);
}

/// Write skew under SERIALIZABLE: the transaction under test reads both rows and updates one;
/// meanwhile another reads both and updates the other, and commits first.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_serialization_failure_is_transient_and_retried_in_a_new_transaction() {
    let server = PostgresServer::start();
    server
        .psql("CREATE TABLE doctors (id int PRIMARY KEY, on_call int NOT NULL); INSERT INTO doctors VALUES (1, 1), (2, 1); GRANT ALL ON doctors TO delayq")
        .expect("set up");
    let url = server.url();
    let rival = move || {
        let url = url.clone();
        async move {
            let (client, connection) = delayq_postgres::tokio_postgres::connect(
                &url,
                delayq_postgres::tokio_postgres::NoTls,
            )
            .await
            .expect("rival connects");
            tokio::spawn(connection);
            client
                .batch_execute(
                    "BEGIN ISOLATION LEVEL SERIALIZABLE; \
                     SELECT sum(on_call) FROM doctors; \
                     UPDATE doctors SET on_call = 0 WHERE id = 1; \
                     COMMIT",
                )
                .await
                .expect("the rival commits first");
        }
    };

    for (policy, expect_success) in [(RetryPolicy::none(), false), (RetryPolicy::default(), true)] {
        server
            .psql("UPDATE doctors SET on_call = 1")
            .expect("reset");
        let database = support::database(&server).with_retry(policy);
        let attempts = Arc::new(AtomicU32::new(0));
        let result = database
            .transaction_with("go off call", IsolationLevel::Serializable, |transaction| {
                let attempts = attempts.clone();
                let rival = rival.clone();
                Box::pin(async move {
                    let attempt = attempts.fetch_add(1, Ordering::SeqCst) + 1;
                    let row = transaction
                        .query_one("SELECT sum(on_call)::int4 FROM doctors", &[])
                        .await?;
                    let on_call: i32 = row.get(0);
                    if attempt == 1 {
                        rival().await;
                    }
                    if on_call == 2 {
                        transaction
                            .execute("UPDATE doctors SET on_call = 0 WHERE id = 2", &[])
                            .await?;
                    }
                    Ok(on_call)
                })
            })
            .await;
        if expect_success {
            let on_call = result.expect("retried in a new transaction");
            assert_eq!(attempts.load(Ordering::SeqCst), 2);
            assert_eq!(on_call, 1, "the retry saw the rival's commit");
            assert_eq!(
                server
                    .psql("SELECT sum(on_call) FROM doctors")
                    .expect("read"),
                "1",
                "one doctor stays on call"
            );
        } else {
            let error = result.expect_err("a serialization failure");
            assert_eq!(error.code(), Some("40001"), "{error}");
            assert!(error.is_transient());
            assert_eq!(attempts.load(Ordering::SeqCst), 1);
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_killed_server_is_transient_and_the_pool_recovers_after_the_restart() {
    let mut server = PostgresServer::start();
    let database =
        support::database(&server).with_retry(support::retry_for(Duration::from_millis(300)));
    assert_eq!(support::scalar::<i32>(&database, "SELECT 1").await, 1);

    server.kill();
    let error = database.ping().await.expect_err("the server is gone");
    assert!(error.is_transient(), "{error}");
    assert!(
        !error.to_string().contains(PostgresServer::PASSWORD),
        "{error}"
    );

    server.restart();
    assert_eq!(support::scalar::<i32>(&database, "SELECT 2").await, 2);
    assert!(database.pool_status().size >= 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_call_during_a_restart_is_retried_until_the_server_is_back() {
    let mut server = PostgresServer::start();
    let database =
        support::database(&server).with_retry(support::retry_for(Duration::from_secs(20)));
    assert_eq!(support::scalar::<i32>(&database, "SELECT 1").await, 1);
    server.kill();
    let restarted = tokio::task::spawn_blocking(move || {
        std::thread::sleep(Duration::from_millis(500));
        server.restart();
        server
    });
    let value = support::scalar::<i32>(&database, "SELECT 3").await;
    assert_eq!(value, 3);
    let _server = restarted.await.expect("restarted");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_terminated_pooled_connection_is_replaced() {
    let server = PostgresServer::start();
    let database = support::database(&server);
    let pid: i32 = support::scalar(&database, "SELECT pg_backend_pid()").await;
    server
        .psql(&format!("SELECT pg_terminate_backend({pid})"))
        .expect("terminate");
    // The next call may land on the dead connection first; it is retried on a new one.
    let new_pid: i32 = support::scalar(&database, "SELECT pg_backend_pid()").await;
    assert_ne!(new_pid, pid);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_read_only_standby_is_skipped_and_its_refusals_are_transient() {
    let standby = PostgresServer::start_with(PostgresOptions {
        settings: vec![("default_transaction_read_only".into(), "on".into())],
        ..PostgresOptions::default()
    });
    let primary = PostgresServer::start();

    // A write on the read-only server: 25006, transient (the primary is about to be elsewhere).
    let on_standby = support::database(&standby).with_retry(RetryPolicy::none());
    let error = on_standby
        .run("write", |client| {
            Box::pin(async move { client.batch_execute("CREATE TABLE t (v int)").await })
        })
        .await
        .expect_err("read-only");
    assert_eq!(error.code(), Some("25006"), "{error}");
    assert!(error.is_transient());

    // Both hosts in one URL: read-write picks the primary whichever comes first.
    let url = format!(
        "postgres://{}:{}@127.0.0.1:{},127.0.0.1:{}/{}?target_session_attrs=read-write",
        PostgresServer::USER,
        PostgresServer::PASSWORD,
        standby.port(),
        primary.port(),
        delayq_testkit::POSTGRES_DATABASE
    );
    let pair = Database::new(&PostgresConfig::new(url)).expect("valid settings");
    let port: i32 = support::scalar(&pair, "SELECT current_setting('port')::int4").await;
    assert_eq!(port, i32::from(primary.port()));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_refused_login_is_permanent_and_shows_no_password() {
    let server = PostgresServer::start();
    let url = format!(
        "postgres://{}:wrong-secret-42@127.0.0.1:{}/{}",
        PostgresServer::USER,
        server.port(),
        delayq_testkit::POSTGRES_DATABASE
    );
    let database = Database::new(&PostgresConfig::new(url)).expect("valid settings");
    let error = database.ping().await.expect_err("wrong password");
    assert_eq!(error.code(), Some("28P01"), "{error}");
    assert!(!error.is_transient());
    assert!(!error.to_string().contains("wrong-secret-42"), "{error}");
    assert!(!format!("{database:?}").contains("wrong-secret-42"));
}

/// A TCP proxy to `upstream` that, once, forwards a client's `COMMIT` and then cuts both
/// sides before the server's answer comes back: a commit whose reply is lost.
async fn commit_cutting_proxy(upstream: u16) -> u16 {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind the proxy");
    let port = listener.local_addr().expect("proxy address").port();
    let armed = Arc::new(std::sync::atomic::AtomicBool::new(true));
    tokio::spawn(async move {
        while let Ok((client, _)) = listener.accept().await {
            let armed = armed.clone();
            tokio::spawn(async move {
                let Ok(server) = tokio::net::TcpStream::connect(("127.0.0.1", upstream)).await
                else {
                    return;
                };
                let (mut client_read, mut client_write) = client.into_split();
                let (mut server_read, mut server_write) = server.into_split();
                let cut = std::sync::atomic::AtomicBool::new(false);
                let upward = async {
                    let mut buffer = vec![0u8; 64 * 1024];
                    loop {
                        let read = match client_read.read(&mut buffer).await {
                            Ok(0) | Err(_) => return,
                            Ok(read) => read,
                        };
                        let chunk = &buffer[..read];
                        // The simple-query message of tokio-postgres's COMMIT (not the
                        // "READ COMMITTED" of a START TRANSACTION).
                        const COMMIT: &[u8] = b"Q\0\0\0\x0bCOMMIT\0";
                        let commit = chunk.windows(COMMIT.len()).any(|window| window == COMMIT)
                            && armed.swap(false, Ordering::SeqCst);
                        if commit {
                            // Nothing the server says from now on reaches the client.
                            cut.store(true, Ordering::SeqCst);
                        }
                        if server_write.write_all(chunk).await.is_err() {
                            return;
                        }
                        if commit {
                            // Let the server read and run it, then drop the connection.
                            tokio::time::sleep(Duration::from_millis(200)).await;
                            return;
                        }
                    }
                };
                let downward = async {
                    let mut buffer = vec![0u8; 64 * 1024];
                    loop {
                        let read = match server_read.read(&mut buffer).await {
                            Ok(0) | Err(_) => return,
                            Ok(read) => read,
                        };
                        if cut.load(Ordering::SeqCst) {
                            continue;
                        }
                        if client_write.write_all(&buffer[..read]).await.is_err() {
                            return;
                        }
                    }
                };
                tokio::select! {
                    _ = upward => {}
                    _ = downward => {}
                }
            });
        }
    });
    port
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_commit_whose_reply_is_lost_is_not_run_again_and_says_so() {
    let server = PostgresServer::start();
    server
        .psql("CREATE TABLE applied (n int); GRANT ALL ON applied TO delayq")
        .expect("set up");
    let port = commit_cutting_proxy(server.port()).await;
    let url = format!(
        "postgres://{}:{}@127.0.0.1:{port}/{}?sslmode=disable",
        PostgresServer::USER,
        PostgresServer::PASSWORD,
        delayq_testkit::POSTGRES_DATABASE
    );
    let database = Database::new(&PostgresConfig::new(url)).expect("valid settings");
    let runs = Arc::new(AtomicU32::new(0));
    let error = database
        .transaction("insert once", |transaction| {
            let runs = runs.clone();
            Box::pin(async move {
                runs.fetch_add(1, Ordering::SeqCst);
                transaction
                    .execute("INSERT INTO applied VALUES (1)", &[])
                    .await
                    .map(|_| ())
            })
        })
        .await
        .expect_err("the commit's reply was cut");
    assert!(error.is_transient(), "{error}");
    assert!(
        error.to_string().contains("may have been applied"),
        "{error}"
    );
    assert_eq!(runs.load(Ordering::SeqCst), 1, "not run again");
    // The server did commit it: exactly one row, never two.
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    loop {
        let count = server.psql("SELECT count(*) FROM applied").expect("count");
        if count == "1" {
            break;
        }
        assert_eq!(count, "0", "applied twice");
        assert!(
            std::time::Instant::now() < deadline,
            "the commit never landed"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}
