//! Starting a Redis coordinator: bad config, unreachable Redis, a late Redis, and the
//! cluster clock of a node whose own clock is wrong or stepped.

mod common;

use std::sync::Arc;
use std::time::{Duration, Instant};

use common::config;
use delayq_coordinator::{
    Coordinator, CoordinatorConfig, CoordinatorError, LocalClock, RedisCoordinator, SkewedClock,
    SteppingClock, SystemClock,
};
use delayq_redis::{ConnectOptions, Topology};
use delayq_testkit::{free_port, RedisServer};

fn standalone(url: &str) -> ConnectOptions {
    ConnectOptions::new(Topology::standalone(url))
}

fn quick(start_timeout_ms: u64) -> CoordinatorConfig {
    CoordinatorConfig {
        start_timeout: Duration::from_millis(start_timeout_ms),
        ..config("n", 100, 300)
    }
}

#[tokio::test]
async fn unreachable_redis_fails_clearly_after_the_start_timeout() {
    let url = format!("redis://127.0.0.1:{}/0", free_port());
    let started = Instant::now();
    let result = RedisCoordinator::join(standalone(&url), quick(700), Arc::new(SystemClock)).await;
    let took = started.elapsed();
    match result {
        Err(CoordinatorError::Unreachable {
            target,
            waited_ms,
            message,
        }) => {
            assert_eq!(target, url);
            assert!(waited_ms >= 700, "gave up after {waited_ms} ms");
            assert!(!message.is_empty());
        }
        other => panic!("expected Unreachable, got {other:?}"),
    }
    assert!(
        took >= Duration::from_millis(700) && took < Duration::from_secs(3),
        "{took:?}"
    );
}

#[tokio::test]
async fn join_waits_for_a_redis_that_comes_up_late() {
    let mut server = RedisServer::start();
    server.stop();
    let url = server.url();
    let starter = std::thread::spawn(move || {
        std::thread::sleep(Duration::from_millis(400));
        server.restart();
        server
    });
    let node = RedisCoordinator::join(standalone(&url), quick(10_000), Arc::new(SystemClock))
        .await
        .expect("joins once Redis is up");
    let _server = starter.join().expect("server thread");
    assert!(node.membership().borrow().contains(node.node_id()));
    node.leave().await.expect("leave");
}

#[tokio::test]
async fn bad_config_fails_before_connecting() {
    let nowhere = format!("redis://127.0.0.1:{}/0", free_port());
    let started = Instant::now();
    let bad = config("n", 300, 200);
    match RedisCoordinator::join(standalone(&nowhere), bad, Arc::new(SystemClock)).await {
        Err(CoordinatorError::InvalidConfig { key, value, .. }) => {
            assert_eq!(key, "node.heartbeat_ttl");
            assert!(value.starts_with("200ms"), "{value}");
        }
        other => panic!("expected InvalidConfig, got {other:?}"),
    }
    assert!(
        started.elapsed() < Duration::from_millis(200),
        "it tried to connect"
    );
    let nameless = config("", 100, 300);
    match RedisCoordinator::observe(standalone(&nowhere), nameless, Arc::new(SystemClock)).await {
        Err(CoordinatorError::InvalidConfig { key, .. }) => assert_eq!(key, "node.name"),
        other => panic!("expected InvalidConfig, got {other:?}"),
    }
    match RedisCoordinator::join(standalone("not a url"), quick(100), Arc::new(SystemClock)).await {
        Err(CoordinatorError::InvalidConfig { key, .. }) => assert_eq!(key, "redis.url"),
        other => panic!("expected InvalidConfig, got {other:?}"),
    }
}

#[tokio::test]
async fn a_node_whose_clock_is_5s_ahead_reads_the_same_cluster_time() {
    let server = RedisServer::start();
    let url = server.url();
    let honest = RedisCoordinator::join(
        standalone(&url),
        config("honest", 100, 300),
        Arc::new(SystemClock),
    )
    .await
    .expect("join");
    let ahead = RedisCoordinator::join(
        standalone(&url),
        config("ahead", 100, 300),
        Arc::new(SkewedClock { skew_ms: 5_000 }),
    )
    .await
    .expect("join");
    let behind = RedisCoordinator::observe(
        standalone(&url),
        config("behind", 100, 300),
        Arc::new(SkewedClock { skew_ms: -3_000 }),
    )
    .await
    .expect("observe");
    let reference = honest.clock().now_ms() as i64;
    for (name, node) in [("ahead", &ahead), ("behind", &behind)] {
        let error = node.clock().now_ms() as i64 - reference;
        assert!(error.abs() <= 10, "{name} is off by {error} ms");
    }
    // Redis runs on this machine: the offsets cancel the skews.
    assert!((ahead.clock().offset_ms() + 5_000).abs() <= 10);
    assert!((behind.clock().offset_ms() - 3_000).abs() <= 10);
    // And the registry speaks cluster time too.
    let nodes = honest.nodes().await.expect("nodes");
    let started: Vec<u64> = nodes.iter().map(|n| n.started_ms).collect();
    assert!(
        started.iter().all(|s| s.abs_diff(reference as u64) < 5_000),
        "{started:?}"
    );
}

#[tokio::test]
async fn a_step_of_the_wall_clock_never_moves_the_cluster_clock() {
    let server = RedisServer::start();
    let machine = Arc::new(SteppingClock::default());
    // Heartbeats every 100 ms: each one samples the clock again after the step.
    let node = RedisCoordinator::join(
        standalone(&server.url()),
        config("stepped", 100, 300),
        machine.clone(),
    )
    .await
    .expect("join");
    // Redis runs on this machine: its TIME is the unstepped system clock.
    let error_ms = || node.clock().now_us() as i64 / 1_000 - SystemClock.wall_us() as i64 / 1_000;
    assert!(error_ms().abs() <= 10, "off by {} ms", error_ms());
    let offset = node.clock().offset_ms();
    for step_ms in [5_000, -65_000, 3_600_000] {
        machine.step(step_ms);
        // Across many heartbeats (a bounded wait for something that must not happen).
        for _ in 0..10 {
            assert!(
                error_ms().abs() <= 10,
                "after a step of {step_ms} ms the cluster clock is off by {} ms",
                error_ms()
            );
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        let moved = node.clock().offset_ms() - offset;
        assert!(moved.abs() <= 2, "the offset moved by {moved} ms");
    }
    assert!(machine.now_ms() > SystemClock.now_ms() + 3_500_000);
    node.leave().await.expect("leave");
}
