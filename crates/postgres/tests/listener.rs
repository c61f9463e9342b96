//! The LISTEN/NOTIFY listener on a real server: transactional delivery, survival of
//! `pg_terminate_backend`, of a restart and of a crash, channels added later kept across a
//! reconnect, and a slow reader told it lagged.

mod support;

use std::time::Duration;

use delayq_postgres::{Database, Listener, ListenerEvent, ListenerOptions, ResumeReason};
use delayq_testkit::PostgresServer;

const LIMIT: Duration = Duration::from_secs(15);

async fn next(listener: &mut Listener) -> ListenerEvent {
    tokio::time::timeout(LIMIT, listener.next())
        .await
        .expect("an event within the limit")
        .expect("the listener lives")
}

async fn payload(listener: &mut Listener) -> (String, String) {
    match next(listener).await {
        ListenerEvent::Notification(note) => (note.channel, note.payload),
        other => panic!("expected a notification, got {other:?}"),
    }
}

async fn notify(database: &Database, channel: &'static str, payload: &'static str) {
    database
        .run("notify", move |client| {
            Box::pin(async move {
                client
                    .execute("SELECT pg_notify($1, $2)", &[&channel, &payload])
                    .await
                    .map(|_| ())
            })
        })
        .await
        .expect("notify");
}

fn listener_pid(server: &PostgresServer) -> String {
    let pid = server
        .psql("SELECT pid FROM pg_stat_activity WHERE application_name = 'delayq-listener'")
        .expect("read pg_stat_activity");
    assert!(
        !pid.is_empty() && !pid.contains('\n'),
        "one listener session: {pid:?}"
    );
    pid
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn only_a_committed_notify_is_delivered() {
    let server = PostgresServer::start();
    let database = support::database(&server);
    let mut listener = Listener::start(&database, ListenerOptions::new(["wake"]))
        .await
        .expect("listen");
    database
        .run("rolled back notify", |client| {
            Box::pin(async move {
                client
                    .batch_execute("BEGIN; NOTIFY wake, 'rolled back'; ROLLBACK")
                    .await
            })
        })
        .await
        .expect("rolled back");
    database
        .transaction("committed notify", |transaction| {
            Box::pin(async move {
                transaction
                    .execute("SELECT pg_notify('wake', 'committed')", &[])
                    .await
                    .map(|_| ())
            })
        })
        .await
        .expect("committed");
    // Notifications arrive in commit order: had the rolled-back one been sent, it came first.
    assert_eq!(
        payload(&mut listener).await,
        ("wake".to_owned(), "committed".to_owned())
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_terminated_listener_reconnects_listens_again_and_says_resumed() {
    let server = PostgresServer::start();
    let database = support::database(&server);
    let mut listener = Listener::start(&database, ListenerOptions::new(["wake"]))
        .await
        .expect("listen");
    listener
        .listen("Added Later")
        .await
        .expect("listen on a second channel");
    let first = listener_pid(&server);
    server
        .psql(&format!("SELECT pg_terminate_backend({first})"))
        .expect("terminate the listener's backend");
    assert_eq!(
        next(&mut listener).await,
        ListenerEvent::Resumed(ResumeReason::Reconnected)
    );
    assert_ne!(listener_pid(&server), first);
    notify(&database, "wake", "after terminate").await;
    assert_eq!(payload(&mut listener).await.1, "after terminate");
    notify(&database, "Added Later", "second channel").await;
    assert_eq!(
        payload(&mut listener).await,
        ("Added Later".to_owned(), "second channel".to_owned())
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_listener_survives_a_restart_and_a_crash() {
    let mut server = PostgresServer::start();
    let database = support::database(&server);
    let mut listener = Listener::start(&database, ListenerOptions::new(["wake"]))
        .await
        .expect("listen");
    for (round, crash) in [("restart", false), ("crash", true)] {
        if crash {
            server.kill();
        }
        server.restart();
        assert_eq!(
            next(&mut listener).await,
            ListenerEvent::Resumed(ResumeReason::Reconnected),
            "{round}"
        );
        notify(&database, "wake", round).await;
        assert_eq!(payload(&mut listener).await.1, round);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unlisten_stops_delivery() {
    let server = PostgresServer::start();
    let database = support::database(&server);
    let mut listener = Listener::start(&database, ListenerOptions::new(["a", "b"]))
        .await
        .expect("listen");
    listener.unlisten("a").await.expect("unlisten");
    notify(&database, "a", "not for us").await;
    notify(&database, "b", "for us").await;
    assert_eq!(
        payload(&mut listener).await,
        ("b".to_owned(), "for us".to_owned())
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_slow_reader_is_told_it_lagged() {
    let server = PostgresServer::start();
    let database = support::database(&server);
    let mut options = ListenerOptions::new(["burst"]);
    options.capacity = 2;
    let mut listener = Listener::start(&database, options).await.expect("listen");
    database
        .transaction("burst", |transaction| {
            Box::pin(async move {
                for n in 0..10 {
                    transaction
                        .execute("SELECT pg_notify('burst', $1)", &[&n.to_string()])
                        .await?;
                }
                Ok(())
            })
        })
        .await
        .expect("ten notifications");
    // A command on the listener's connection returns after the notifications that were sent
    // to it before: all ten have been handed to the listener by now.
    listener.listen("sync").await.expect("listen");
    assert_eq!(
        next(&mut listener).await,
        ListenerEvent::Resumed(ResumeReason::Lagged)
    );
    assert_eq!(payload(&mut listener).await.1, "0");
    assert_eq!(payload(&mut listener).await.1, "1");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_bad_channel_name_is_refused() {
    let server = PostgresServer::start();
    let database = support::database(&server);
    let error = Listener::start(&database, ListenerOptions::new([""]))
        .await
        .expect_err("empty channel");
    assert!(error.to_string().contains("channel"), "{error}");
}
