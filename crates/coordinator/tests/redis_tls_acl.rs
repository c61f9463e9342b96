//! The coordinator over TLS (private CA, client certificates) as an ACL user limited to its
//! key prefix (`~t:*`, `&t:*`, the commands delayq calls): it joins, follows the membership,
//! hears wake-ups, and leaves. A wrong password fails at once, without the password in the
//! message.

mod common;

use std::sync::Arc;
use std::time::{Duration, Instant};

use common::scenarios::wait_listening;
use common::topology::{join_on, options};
use common::{agree, config, sorted_ids, view, wait_for};
use delayq_coordinator::{Coordinator, CoordinatorError, RedisCoordinator, SystemClock, Wakeup};
use delayq_redis::{ConnectOptions, TlsOptions, Topology};
use delayq_testkit::TlsRedis;

fn tls_options(server: &TlsRedis, url: String) -> ConnectOptions {
    let files = server.files();
    options(Topology::standalone(url)).with_tls(TlsOptions {
        ca_file: Some(files.ca_file.clone()),
        cert_file: Some(files.client_cert.clone()),
        key_file: Some(files.client_key.clone()),
    })
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_limited_acl_user_over_tls_joins_hears_wakeups_and_leaves() {
    let server = TlsRedis::start("t");
    let redis = tls_options(&server, server.user_url());
    let (mut nodes, producer) = join_on(&redis, 2, 100, 300).await;
    let all = sorted_ids(&nodes);
    wait_for(Duration::from_secs(3), || async { agree(&nodes, &all) })
        .await
        .expect("two members agree over TLS");

    let mut wakeups = nodes[1].take_wakeups().expect("wake-ups");
    nodes[1].listen(vec![("orders".to_owned(), 9)]);
    wait_listening(nodes[1].as_ref(), 1).await;
    let wakeup = Wakeup {
        queue: "orders".to_owned(),
        partition: 9,
        due_ms: 42,
    };
    producer.wake(wakeup.clone()).await.expect("wake");
    let received = tokio::time::timeout(Duration::from_secs(2), wakeups.recv())
        .await
        .expect("a wake-up within 2 s");
    assert_eq!(received, Some(wakeup));

    let registered = RedisCoordinator::read_nodes(redis.clone(), "t")
        .await
        .expect("read nodes as the limited user");
    assert_eq!(registered.len(), 2);
    let leaving = nodes.remove(0);
    leaving.leave().await.expect("leave");
    let rest = sorted_ids(&nodes);
    wait_for(Duration::from_secs(1), || async { agree(&nodes, &rest) })
        .await
        .expect("the leave is announced");
    assert_eq!(view(nodes[0].as_ref()).members.len(), 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_wrong_password_fails_at_once_without_showing_it() {
    let server = TlsRedis::start("t");
    let wrong = "not-the-password-7f3a";
    let redis = tls_options(&server, server.url_as(&server.user().name, wrong));
    let started = Instant::now();
    let result = RedisCoordinator::join(redis, config("n", 100, 300), Arc::new(SystemClock)).await;
    let took = started.elapsed();
    match result {
        Err(error @ CoordinatorError::Authentication { .. }) => {
            let shown = error.to_string();
            assert!(!shown.contains(wrong), "{shown}");
            assert!(shown.contains("refused the login"), "{shown}");
        }
        other => panic!("expected Authentication, got {other:?}"),
    }
    assert!(
        took < Duration::from_secs(3),
        "retried a wrong password for {took:?}"
    );
}
