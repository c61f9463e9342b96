//! TLS with client certificates and an ACL user limited to a prefix: scripts, pub/sub and
//! `WAIT` work; a wrong password fails at once with one clear message and no password.

mod support;

use std::time::{Duration, Instant};

use delayq_redis::{
    ConnectOptions, Error, RedisConnection, Script, ScriptCall, Timeouts, TlsOptions, Topology,
};
use delayq_testkit::TlsRedis;
use support::{options, publish_until_received};

fn tls_options(server: &TlsRedis, url: String) -> ConnectOptions {
    let files = server.files();
    options(Topology::standalone(url)).with_tls(TlsOptions {
        ca_file: Some(files.ca_file.clone()),
        cert_file: Some(files.client_cert.clone()),
        key_file: Some(files.client_key.clone()),
    })
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_limited_user_runs_scripts_and_pubsub_under_its_prefix_over_tls() {
    let server = TlsRedis::start("app");
    let redis = RedisConnection::connect(tls_options(&server, server.user_url()))
        .await
        .expect("the limited user connects over TLS");
    let script = Script::new("return redis.call('INCR', KEYS[1])");
    redis.load_scripts(&[&script]).await.expect("SCRIPT LOAD");
    let reply = redis
        .run_script(&ScriptCall::new(&script).key("app:{q:1}:n"))
        .await
        .expect("a script on a key under the prefix");
    assert_eq!(reply, redis::Value::Int(1));

    let denied = redis
        .run_script(&ScriptCall::new(&script).key("other:n"))
        .await
        .expect_err("a key outside the prefix");
    assert!(!denied.is_transient(), "{denied}");
    assert!(
        denied.to_string().contains("NOPERM") || denied.to_string().contains("permission"),
        "{denied}"
    );

    let mut subscriber = redis.subscriber().await.expect("a subscriber");
    subscriber
        .subscribe("app:wake")
        .await
        .expect("SUBSCRIBE under the prefix");
    assert!(publish_until_received(
        &redis,
        &mut subscriber,
        "app:wake",
        b"x",
        Duration::from_secs(5)
    )
    .await
    .is_some());
    let shown = format!("{redis:?} {}", redis.describe());
    assert!(!shown.contains(&server.user().password), "{shown}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_wrong_password_fails_at_once_without_showing_the_password() {
    let server = TlsRedis::start("app");
    let wrong = "wrong-password-0451";
    let mut options = tls_options(&server, server.url_as("delayq", wrong));
    options.timeouts = Timeouts {
        start: Duration::from_secs(20),
        ..options.timeouts
    };
    let started = Instant::now();
    let error = RedisConnection::connect(options)
        .await
        .expect_err("a wrong password is refused");
    let took = started.elapsed();
    let message = error.to_string();
    eprintln!("{message} (after {took:?})");
    assert!(matches!(error, Error::Authentication { .. }), "{error:?}");
    assert!(!message.contains(wrong), "{message}");
    assert!(!format!("{error:?}").contains(wrong), "{error:?}");
    assert!(
        message.contains("rediss://delayq:***@127.0.0.1"),
        "{message}"
    );
    assert!(!message.contains('\n'), "one line: {message}");
    assert!(
        took < Duration::from_secs(3),
        "a refused login is not retried: {took:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rediss_without_the_client_certificate_is_not_accepted() {
    let server = TlsRedis::start("app");
    let mut options = options(Topology::standalone(server.user_url())).with_tls(TlsOptions {
        ca_file: Some(server.files().ca_file.clone()),
        cert_file: None,
        key_file: None,
    });
    options.timeouts.start = Duration::from_secs(1);
    let error = RedisConnection::connect(options)
        .await
        .expect_err("the server requires a client certificate");
    assert!(
        !error.to_string().contains(&server.user().password),
        "{error}"
    );
}
