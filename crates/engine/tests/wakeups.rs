//! Wake-ups are validated and bounded: a flood of them (churn, a bug, anybody who can
//! PUBLISH) keeps the node's mailbox within its capacity and does not stop the node from
//! firing on time; wake-ups for partitions out of range or for unknown queues are ignored.
//!
//! The pull period is 30 s here, so only a wake-up can get a task fired on time.

mod support;

use std::sync::Arc;
use std::time::{Duration, Instant};

use delayq_coordinator::{LocalClock, SystemClock, WAKEUP_CAPACITY};
use delayq_engine::config::Config;
use delayq_engine::{Scheduler, Task, When};
use delayq_testkit::RedisServer;
use parking_lot::Mutex;
use support::{fast_config, wait_for_ownership, wait_until};

/// Publishes `count` wake-ups to `node`'s channel, 10,000 at once (one server-side script)
/// every 300 ms: a third for unknown queues, a third for partitions of `orders` out of range
/// (it has 16), a third for real partitions of `orders` due in an hour.
///
/// Paced, because Redis hands a subscriber its messages in order: a wake-up published
/// behind a backlog waits until the backlog is read, whatever the node does with them.
fn flood(server: &RedisServer, config: &Config, node: &Scheduler, count: u64) {
    const SCRIPT: &str = r"
        local from, to, later = tonumber(ARGV[2]), tonumber(ARGV[3]), tonumber(ARGV[4])
        for i = from, to - 1 do
          local payload
          if i % 3 == 0 then
            payload = string.format('flood-%d\n%d\n%d', i % 5000, i % 4, later + i)
          elseif i % 3 == 1 then
            payload = string.format('orders\n%d\n%d', 16 + i, later + i)
          else
            payload = string.format('orders\n%d\n%d', i % 16, later + i)
          end
          redis.call('PUBLISH', ARGV[1], payload)
        end";
    let channel = format!(
        "{}:{{cluster}}:wake:{}",
        config.redis.key_prefix,
        node.node_id()
    );
    let later = (SystemClock.now_ms() + 3_600_000).to_string();
    for from in (0..count).step_by(10_000) {
        let to = (from + 10_000).min(count);
        let (from, to) = (from.to_string(), to.to_string());
        server
            .command(&["EVAL", SCRIPT, "0", &channel, &from, &to, &later])
            .expect("PUBLISH script");
        std::thread::sleep(Duration::from_millis(300));
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_flood_of_100k_wakeups_stays_bounded_and_a_task_still_fires_on_time() {
    let server = RedisServer::start();
    let mut config = fast_config();
    config.redis.url = server.url();
    config.engine.pull_period = Duration::from_secs(30);
    config.engine.prefetch_window = Duration::from_secs(30);
    // Configured, so the node serves `orders` from the start.
    config
        .queues
        .insert("orders".to_owned(), config.queue_defaults);
    let fired: Arc<Mutex<Vec<(u64, u64)>>> = Arc::default();
    let record = fired.clone();
    // A default handler, like `delayq node`: unknown queues are looked up, not just ignored.
    let node = Scheduler::builder(config.clone())
        .default_handler(move |task: Task| {
            record.lock().push((task.due_ms, SystemClock.now_ms()));
            futures::future::ready(Ok::<(), std::io::Error>(()))
        })
        .start()
        .await
        .expect("node starts");
    let producer = Scheduler::builder(config.clone())
        .start()
        .await
        .expect("producer starts");
    wait_for_ownership(std::slice::from_ref(&node), 1).await;

    let total = 100_000;
    let flooding = {
        let node = node.clone();
        let config = config.clone();
        tokio::task::spawn_blocking(move || {
            flood(&server, &config, &node, total);
            server
        })
    };
    // While the flood arrives, tasks due in 1 s fire on time: their wake-ups get through.
    let mut scheduled = 0;
    let started = Instant::now();
    let mut most_pending = 0;
    while !flooding.is_finished() || scheduled == 0 {
        let due = SystemClock.now_ms() + 1_000;
        producer
            .schedule("orders", &format!("on-time-{scheduled}"), When::At(due), "")
            .await
            .expect("scheduled");
        scheduled += 1;
        for _ in 0..10 {
            let stats = node.coordinator().wakeup_stats().expect("a member");
            most_pending = most_pending.max(stats.pending);
            assert!(stats.pending <= WAKEUP_CAPACITY, "{stats:?}");
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        assert!(
            started.elapsed() < Duration::from_secs(60),
            "the flood took too long"
        );
    }
    let server = flooding.await.expect("the flood was published");
    wait_until(Duration::from_secs(10), "every on-time task fired", || {
        fired.lock().len() == scheduled
    })
    .await;
    for (due, real) in fired.lock().iter() {
        let lateness = *real as i64 - *due as i64;
        assert!(
            (-5..=200).contains(&lateness),
            "fired {lateness} ms from its due time during the flood"
        );
    }
    // Everything arrived, and the node got through all of it (nothing piles up).
    let stats = || node.coordinator().wakeup_stats().expect("a member");
    wait_until(Duration::from_secs(20), "the flood is drained", || {
        let stats = stats();
        stats.received >= total && stats.pending == 0
    })
    .await;
    let stats = stats();
    assert_eq!(stats.malformed, 0);
    assert_eq!(
        stats.received,
        stats.delivered + stats.coalesced + stats.dropped,
        "{stats:?}"
    );
    eprintln!("flood: {stats:?}, most pending at once: {most_pending}");
    // No bogus queue or partition was adopted.
    let owned = node.owned_partitions();
    assert_eq!(owned.len(), 16);
    assert!(owned
        .iter()
        .all(|p| p.queue.as_str() == "orders" && p.index < 16));
    for scheduler in [&node, &producer] {
        scheduler.shutdown().await.expect("shutdown");
    }
    drop(server);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_wakeup_for_a_partition_out_of_range_is_ignored() {
    let server = RedisServer::start();
    let mut config = fast_config();
    config.redis.url = server.url();
    config.engine.pull_period = Duration::from_secs(30);
    config.engine.prefetch_window = Duration::from_secs(30);
    let fired: Arc<Mutex<Vec<String>>> = Arc::default();
    let record = fired.clone();
    let node = Scheduler::builder(config.clone())
        .handler("orders", move |task: Task| {
            record.lock().push(task.id.clone());
            futures::future::ready(Ok::<(), std::io::Error>(()))
        })
        .start()
        .await
        .expect("node starts");
    wait_for_ownership(std::slice::from_ref(&node), 1).await;
    let channel = format!(
        "{}:{{cluster}}:wake:{}",
        config.redis.key_prefix,
        node.node_id()
    );
    let now = SystemClock.now_ms().to_string();
    for payload in [
        format!("orders\n16\n{now}"),
        format!("orders\n{}\n{now}", u32::MAX),
        format!("nobody-knows\n0\n{now}"),
        "orders\nnot a number\n1".to_owned(),
    ] {
        server
            .command(&["PUBLISH", &channel, &payload])
            .expect("PUBLISH");
    }
    let stats = || node.coordinator().wakeup_stats().expect("a member");
    wait_until(Duration::from_secs(5), "the wake-ups were handled", || {
        let stats = stats();
        stats.received == 3 && stats.delivered == 3 && stats.malformed == 1
    })
    .await;
    // The node goes on as before: same partitions, and a real wake-up still works.
    let producer = Scheduler::builder(config.clone())
        .start()
        .await
        .expect("producer starts");
    let due = SystemClock.now_ms() + 300;
    producer
        .schedule("orders", "after", When::At(due), "")
        .await
        .expect("scheduled");
    wait_until(Duration::from_secs(3), "the task fired", || {
        fired.lock().len() == 1
    })
    .await;
    assert!(node.owned_partitions().iter().all(|p| p.index < 16));
    assert_eq!(node.owned_partitions().len(), 16);
    for scheduler in [&node, &producer] {
        scheduler.shutdown().await.expect("shutdown");
    }
}
