//! The connection layer on one server: `WAIT` with and without replicas, scripts reloaded
//! after `SCRIPT FLUSH`, a subscriber restored after its connection is killed, and a clear
//! error when nothing answers before the start timeout.

mod support;

use std::time::{Duration, Instant};

use delayq_redis::{Error, RedisConnection, Script, ScriptCall, Topology};
use delayq_testkit::{RedisOptions, RedisServer};
use support::{options, publish_until_received};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn wait_without_a_replica_fails_clearly_once_the_wait_timeout_passed() {
    let server = RedisServer::start();
    let redis = RedisConnection::connect(options(Topology::standalone(server.url())))
        .await
        .expect("connect");
    let _: () = redis
        .query("SET", redis::cmd("SET").arg("delayq:{q:0}:k").arg("v"))
        .await
        .expect("SET");
    let started = Instant::now();
    let error = redis
        .wait_replicas("delayq:{q:0}:k", 1, Duration::from_millis(300))
        .await
        .expect_err("no replica can confirm");
    let took = started.elapsed();
    assert!(
        matches!(
            error,
            Error::ReplicasNotConfirmed {
                wanted: 1,
                confirmed: 0,
                timeout_ms: 300
            }
        ),
        "{error:?}"
    );
    assert!(
        error.to_string().contains("only 0 of 1 replicas"),
        "{error}"
    );
    assert!(
        took >= Duration::from_millis(290),
        "WAIT returned early: {took:?}"
    );
    assert!(took < Duration::from_millis(1500), "WAIT took {took:?}");
    assert_eq!(
        redis
            .wait_replicas("k", 0, Duration::from_millis(300))
            .await
            .ok(),
        Some(0)
    );
    let too_long = redis
        .wait_replicas("k", 1, Duration::from_secs(5))
        .await
        .expect_err("a wait longer than the response timeout");
    assert!(
        too_long.to_string().contains("redis.wait_timeout"),
        "{too_long}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn wait_with_a_replica_confirms_the_write() {
    let master = RedisServer::start();
    let _replica = RedisServer::start_with(RedisOptions {
        extra_args: vec![(
            "replicaof".to_owned(),
            format!("127.0.0.1 {}", master.port()),
        )],
        ..RedisOptions::default()
    });
    let redis = RedisConnection::connect(options(Topology::standalone(master.url())))
        .await
        .expect("connect");
    let confirmed = support::eventually(Duration::from_secs(10), || async {
        let _: () = redis
            .query("SET", redis::cmd("SET").arg("k").arg("v"))
            .await
            .ok()?;
        redis
            .wait_replicas("k", 1, Duration::from_millis(500))
            .await
            .ok()
    })
    .await;
    assert_eq!(
        confirmed,
        Some(1),
        "the replica never confirmed\n{}",
        master.log()
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn scripts_are_loaded_again_after_script_flush() {
    let server = RedisServer::start();
    let redis = RedisConnection::connect(options(Topology::standalone(server.url())))
        .await
        .expect("connect");
    let script = Script::new("return redis.call('INCR', KEYS[1])");
    let calls: Vec<ScriptCall<'_>> = (0..5)
        .map(|p| ScriptCall::new(&script).key(format!("delayq:{{q:{p}}}:n")))
        .collect();
    for reply in redis.run_scripts(&calls).await {
        assert_eq!(reply.expect("first calls"), redis::Value::Int(1));
    }
    server.command(&["SCRIPT", "FLUSH"]).expect("SCRIPT FLUSH");
    for reply in redis.run_scripts(&calls).await {
        assert_eq!(
            reply.expect("calls after SCRIPT FLUSH"),
            redis::Value::Int(2)
        );
    }
    server.command(&["SCRIPT", "FLUSH"]).expect("SCRIPT FLUSH");
    let reply = redis.run_script(&calls[0]).await.expect("a single call");
    assert_eq!(reply, redis::Value::Int(3), "applied exactly once");
    let error = redis
        .run_script(&ScriptCall::new(&Script::new(
            "return redis.error_reply('DELAYQ_STALE lease')",
        )))
        .await
        .expect_err("a script's error reply");
    assert!(
        matches!(error, Error::Command { code: Some(ref code), transient: false, .. } if code == "DELAYQ_STALE"),
        "{error:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_subscriber_whose_connection_is_killed_subscribes_again() {
    let server = RedisServer::start();
    let redis = RedisConnection::connect(options(Topology::standalone(server.url())))
        .await
        .expect("connect");
    let mut subscriber = redis.subscriber().await.expect("a subscriber");
    subscriber
        .subscribe("delayq:wake")
        .await
        .expect("SUBSCRIBE");
    assert!(publish_until_received(
        &redis,
        &mut subscriber,
        "delayq:wake",
        b"a",
        Duration::from_secs(5)
    )
    .await
    .is_some());
    server
        .command(&["CLIENT", "KILL", "TYPE", "pubsub"])
        .expect("CLIENT KILL");
    let (_, restored) = publish_until_received(
        &redis,
        &mut subscriber,
        "delayq:wake",
        b"b",
        Duration::from_secs(10),
    )
    .await
    .unwrap_or_else(|| panic!("not subscribed again\n{}", server.log()));
    assert_eq!(restored, vec!["delayq:wake".to_owned()]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn nothing_listening_is_unreachable_after_the_start_timeout() {
    let port = delayq_testkit::free_port();
    let mut options = options(Topology::standalone(format!(
        "redis://:pw-77@127.0.0.1:{port}/0"
    )));
    options.timeouts.start = Duration::from_millis(800);
    let started = Instant::now();
    let error = RedisConnection::connect(options)
        .await
        .expect_err("nothing listens");
    let took = started.elapsed();
    assert!(matches!(error, Error::Unreachable { .. }), "{error:?}");
    assert!(error.is_transient());
    assert!(!error.to_string().contains("pw-77"), "{error}");
    assert!(
        took >= Duration::from_millis(700) && took < Duration::from_secs(3),
        "{took:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_write_refused_as_readonly_is_sent_again_until_the_server_is_writable() {
    let server = RedisServer::start();
    let redis = RedisConnection::connect(options(Topology::standalone(server.url())))
        .await
        .expect("connect");
    let nowhere = delayq_testkit::free_port().to_string();
    server
        .command(&["REPLICAOF", "127.0.0.1", &nowhere])
        .expect("make the server a read-only replica");
    let port = server.port();
    let promote = std::thread::spawn(move || {
        std::thread::sleep(Duration::from_millis(700));
        let client = redis::Client::open(format!("redis://127.0.0.1:{port}/")).expect("client");
        let mut connection = client.get_connection().expect("connect");
        redis::cmd("REPLICAOF")
            .arg("NO")
            .arg("ONE")
            .query::<()>(&mut connection)
            .expect("REPLICAOF NO ONE");
    });
    let started = Instant::now();
    let _: () = redis
        .query("SET", redis::cmd("SET").arg("k").arg("v"))
        .await
        .expect("the write waits out READONLY");
    assert!(
        started.elapsed() >= Duration::from_millis(600),
        "{:?}",
        started.elapsed()
    );
    promote.join().expect("promote");
}
