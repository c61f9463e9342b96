//! A subscription whose connection went half-open (no reset: a dead host, a dropped route)
//! is noticed by its own probe and made anew, with a catch-up wake-up for the partitions it
//! listens to; the server meanwhile still counts the dead connection as a subscriber, so
//! without this the wake-ups would be lost until the connection died by itself.

mod common;

use std::sync::Arc;
use std::time::{Duration, Instant};

use common::proxy::Proxy;
use common::scenarios::wait_listening;
use common::topology::wake_until_received;
use common::{config, view};
use delayq_coordinator::{Coordinator, RedisCoordinator, SystemClock, Wakeup};
use delayq_redis::{ConnectOptions, Topology};
use delayq_testkit::RedisServer;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_half_open_subscription_is_noticed_and_made_again() {
    let server = RedisServer::start();
    let proxy = Proxy::start(server.port()).await;
    let node = RedisCoordinator::join(
        ConnectOptions::new(Topology::standalone(proxy.url())),
        config("behind-a-proxy", 100, 300),
        Arc::new(SystemClock),
    )
    .await
    .expect("join through the proxy");
    let producer = RedisCoordinator::observe(
        ConnectOptions::new(Topology::standalone(server.url())),
        config("producer", 100, 300),
        Arc::new(SystemClock),
    )
    .await
    .expect("observe");
    let mut wakeups = node.take_wakeups().expect("wake-ups");
    node.listen(vec![("q".to_owned(), 1)]);
    wait_listening(node.as_ref(), 1).await;
    let wakeup = |due_ms: u64| Wakeup {
        queue: "q".to_owned(),
        partition: 1,
        due_ms,
    };
    wake_until_received(
        producer.as_ref(),
        &mut wakeups,
        &wakeup(1),
        Duration::from_secs(2),
    )
    .await
    .expect("a wake-up through the proxy");

    let before = proxy.accepted();
    let frozen_at = node.clock().now_ms();
    assert_eq!(proxy.freeze_subscribers(), 1);
    let started = Instant::now();
    // Nothing is published: the probe finds the connection deaf, a new subscriber takes
    // over, and the node is told to look at its partition (wake-ups may have been lost).
    let caught_up = tokio::time::timeout(Duration::from_secs(5), async {
        loop {
            match wakeups.recv().await {
                Some(w) if w.partition == 1 && w.due_ms >= frozen_at => return w,
                Some(_) => continue,
                None => panic!("the mailbox closed"),
            }
        }
    })
    .await;
    assert!(
        caught_up.is_ok(),
        "the half-open subscription was not noticed"
    );
    eprintln!(
        "a half-open subscription was noticed and replaced within {:?}",
        started.elapsed()
    );
    assert!(proxy.accepted() > before, "a new connection was made");
    wake_until_received(
        producer.as_ref(),
        &mut wakeups,
        &wakeup(2),
        Duration::from_secs(2),
    )
    .await
    .expect("wake-ups heard again");
    assert!(view(node.as_ref()).contains(node.node_id()));
}
