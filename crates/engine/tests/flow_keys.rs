//! Flow keys through the engine (DESIGN.md, "Flow keys: per-key limits and order"), with
//! several nodes on memory, Redis and a 3-master Redis Cluster: each key's bound holds across
//! the nodes (measured by the handlers' own start and end times), the other keys drain
//! beside a blocked one, FIFO order survives a retry, and a node killed while it runs a
//! key's task keeps the bound (only that task runs again, after its lease).

mod support;

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use bytes::Bytes;
use delayq_engine::config::{Config, QueueConfig, RateLimit};
use delayq_engine::{keyed_id, ScheduleRequest, Scheduler, SchedulerBuilder, Task, When};
use delayq_testkit::RedisCluster;
use parking_lot::Mutex;
use support::{fast_config, wait_until, TestBackend};
use tokio::task::block_in_place;

const QUEUE: &str = "hooks";

/// One handler run: the id, the node, its attempt, and when it started and ended (µs of this
/// machine's clock, shared by the in-process nodes; `None` while it runs or when its node
/// was killed under it).
#[derive(Clone, Debug)]
struct Span {
    id: String,
    node: String,
    attempt: u32,
    started_us: u64,
    ended_us: Option<u64>,
}

fn now_us() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |elapsed| elapsed.as_micros() as u64)
}

/// Records every run's span. `hold` decides how long a run takes (and whether it fails).
#[derive(Clone, Default)]
struct Spans(Arc<Mutex<Vec<Span>>>);

type Hold = Arc<dyn Fn(&Task) -> (Duration, bool) + Send + Sync>;

impl Spans {
    fn handler(
        &self,
        hold: Hold,
    ) -> impl Fn(
        Task,
    ) -> std::pin::Pin<
        Box<dyn std::future::Future<Output = Result<(), std::io::Error>> + Send>,
    > + Send
           + Sync
           + 'static {
        let spans = self.clone();
        move |task: Task| {
            let spans = spans.clone();
            let (duration, fails) = hold(&task);
            Box::pin(async move {
                let index = {
                    let mut all = spans.0.lock();
                    all.push(Span {
                        id: task.id.clone(),
                        node: task.node.clone(),
                        attempt: task.attempt,
                        started_us: now_us(),
                        ended_us: None,
                    });
                    all.len() - 1
                };
                tokio::time::sleep(duration).await;
                spans.0.lock()[index].ended_us = Some(now_us());
                if fails {
                    return Err(std::io::Error::other("asked to fail"));
                }
                Ok(())
            })
        }
    }

    fn all(&self) -> Vec<Span> {
        self.0.lock().clone()
    }

    /// Successful ids.
    fn finished(&self) -> usize {
        self.0
            .lock()
            .iter()
            .filter(|span| span.ended_us.is_some())
            .count()
    }
}

/// The most runs of one key overlapping at any instant, per key (a run still going counts
/// to `until_us`).
fn most_at_once_per_key(spans: &[Span], until_us: u64) -> BTreeMap<String, usize> {
    let mut events: BTreeMap<String, Vec<(u64, i32)>> = BTreeMap::new();
    for span in spans {
        let key = delayq_engine::flow_key_of(&span.id)
            .unwrap_or("-")
            .to_owned();
        let entry = events.entry(key).or_default();
        entry.push((span.started_us, 1));
        entry.push((span.ended_us.unwrap_or(until_us), -1));
    }
    events
        .into_iter()
        .map(|(key, mut events)| {
            // An end and a start at the same µs: the end first.
            events.sort();
            let (mut running, mut most) = (0i32, 0i32);
            for (_, change) in events {
                running += change;
                most = most.max(running);
            }
            (key, most as usize)
        })
        .collect()
}

fn keyed_queue(config: &Config) -> QueueConfig {
    QueueConfig {
        partitions: 8,
        concurrency: 32,
        flow_keys: true,
        ..config.queue_defaults
    }
}

async fn start(builders: Vec<SchedulerBuilder>) -> Vec<Scheduler> {
    let mut nodes = Vec::new();
    for builder in builders {
        nodes.push(builder.start().await.expect("node starts"));
    }
    nodes
}

async fn schedule_keys(node: &Scheduler, keys: usize, per_key: usize, due_in: Duration) {
    let requests = (0..keys)
        .flat_map(|key| {
            (0..per_key).map(move |n| ScheduleRequest {
                id: keyed_id("hook", &format!("host-{key}"), &format!("{n:03}")).expect("valid id"),
                // Due in order within a key, 1 ms apart.
                when: When::In(due_in + Duration::from_millis(n as u64)),
                payload: Bytes::new(),
                mode: Default::default(),
                traceparent: None,
            })
        })
        .collect();
    for result in node
        .schedule_many(QUEUE, requests)
        .await
        .expect("schedule_many")
    {
        result.expect("scheduled");
    }
}

/// 3 nodes, 6 keys of 10 tasks of 100 ms, `per_key_concurrency: 2`: every task runs, no key
/// ever runs 3 at once across the nodes, and each key uses its 2 slots.
async fn per_key_concurrency_holds_across_nodes(builders: impl Fn(&Config) -> SchedulerBuilder) {
    let mut config = fast_config();
    let mut queue = keyed_queue(&config);
    queue.per_key_concurrency = Some(2);
    config.queues.insert(QUEUE.to_owned(), queue);
    let spans = Spans::default();
    let hold: Hold = Arc::new(|_| (Duration::from_millis(100), false));
    let nodes = start(
        (0..3)
            .map(|_| builders(&config).handler(QUEUE, spans.handler(hold.clone())))
            .collect(),
    )
    .await;
    // The three nodes share the queue's partitions before the tasks come (a key's tasks
    // share one partition, so its owner alone claims them; ownership moving between nodes is
    // the killed-node test's).
    wait_until(Duration::from_secs(30), "the partitions are shared", || {
        nodes
            .iter()
            .all(|node| node.membership().members.len() == 3)
            && nodes
                .iter()
                .map(|node| node.owned_partitions().len())
                .sum::<usize>()
                == 8
    })
    .await;
    schedule_keys(&nodes[0], 6, 10, Duration::from_millis(300)).await;
    wait_until(Duration::from_secs(60), "every task ran", || {
        spans.finished() == 60
    })
    .await;
    let all = spans.all();
    let most = most_at_once_per_key(&all, now_us());
    assert_eq!(most.len(), 6, "{most:?}");
    assert!(most.values().all(|&n| n == 2), "per key at once: {most:?}");
    for node in nodes {
        node.shutdown().await.expect("shutdown");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn per_key_concurrency_holds_across_nodes_on_memory() {
    let backend = TestBackend::memory();
    per_key_concurrency_holds_across_nodes(|config| backend.builder(config)).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn per_key_concurrency_holds_across_nodes_on_redis() {
    let backend = TestBackend::redis();
    per_key_concurrency_holds_across_nodes(|config| backend.builder(config)).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn per_key_concurrency_holds_across_nodes_on_a_three_master_cluster() {
    let cluster = block_in_place(|| RedisCluster::start(0));
    let seeds = cluster.seed_urls();
    per_key_concurrency_holds_across_nodes(|config| {
        let mut config = config.clone();
        config.redis.cluster = seeds.clone();
        Scheduler::builder(config)
    })
    .await;
    drop(cluster);
}

/// FIFO with a retry, and a hot key beside cold ones: one key's 40 tasks run one at a time
/// in due order (its 5th fails once and is retried before the 6th starts), while 20 other
/// keys of one task each all finish long before the hot key drains.
async fn fifo_order_and_other_keys_beside_a_hot_one(
    builders: impl Fn(&Config) -> SchedulerBuilder,
) {
    let mut config = fast_config();
    let mut queue = keyed_queue(&config);
    queue.per_key_fifo = true;
    config.queues.insert(QUEUE.to_owned(), queue);
    let spans = Spans::default();
    let hot_fifth = keyed_id("hook", "host-0", "004").expect("valid");
    let hold: Hold = Arc::new(move |task: &Task| {
        let fails = task.id == hot_fifth && task.attempt == 1;
        (Duration::from_millis(20), fails)
    });
    let nodes = start(
        (0..2)
            .map(|_| builders(&config).handler(QUEUE, spans.handler(hold.clone())))
            .collect(),
    )
    .await;
    schedule_keys(&nodes[0], 1, 40, Duration::from_millis(300)).await;
    // The cold keys are due a little after the hot key's tasks.
    let requests = (1..=20)
        .map(|key| ScheduleRequest {
            id: keyed_id("hook", &format!("host-{key}"), "000").expect("valid"),
            when: When::In(Duration::from_millis(350)),
            payload: Bytes::new(),
            mode: Default::default(),
            traceparent: None,
        })
        .collect();
    nodes[0]
        .schedule_many(QUEUE, requests)
        .await
        .expect("schedule_many");
    wait_until(Duration::from_secs(60), "every task ran", || {
        spans
            .all()
            .iter()
            .filter(|span| span.ended_us.is_some())
            .count()
            == 61
    })
    .await;
    let all = spans.all();
    let most = most_at_once_per_key(&all, now_us());
    assert_eq!(most.get("host-0"), Some(&1), "{most:?}");
    let mut hot: Vec<&Span> = all
        .iter()
        .filter(|span| span.id.contains("{host-0}"))
        .collect();
    hot.sort_by_key(|span| span.started_us);
    let order: Vec<(&str, u32)> = hot
        .iter()
        .map(|span| (span.id.as_str(), span.attempt))
        .collect();
    let mut expected: Vec<(String, u32)> = (0..40)
        .map(|n| {
            (
                keyed_id("hook", "host-0", &format!("{n:03}")).expect("valid"),
                1,
            )
        })
        .collect();
    expected.insert(5, (keyed_id("hook", "host-0", "004").expect("valid"), 2));
    let expected: Vec<(&str, u32)> = expected.iter().map(|(id, a)| (id.as_str(), *a)).collect();
    assert_eq!(order, expected, "due order, the retry before the next task");
    let hot_done = hot
        .iter()
        .filter_map(|span| span.ended_us)
        .max()
        .unwrap_or(0);
    let cold_done = all
        .iter()
        .filter(|span| !span.id.contains("{host-0}"))
        .filter_map(|span| span.ended_us)
        .max()
        .unwrap_or(u64::MAX);
    assert!(
        cold_done + 200_000 < hot_done,
        "the other keys finish while the hot key drains ({} ms before)",
        (hot_done.saturating_sub(cold_done)) / 1_000
    );
    for node in nodes {
        node.shutdown().await.expect("shutdown");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn fifo_order_and_other_keys_beside_a_hot_one_on_memory() {
    let backend = TestBackend::memory();
    fifo_order_and_other_keys_beside_a_hot_one(|config| backend.builder(config)).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn fifo_order_and_other_keys_beside_a_hot_one_on_redis() {
    let backend = TestBackend::redis();
    fifo_order_and_other_keys_beside_a_hot_one(|config| backend.builder(config)).await;
}

/// `per_key_rate: 5/1s`, 3 nodes, one key of 15 tasks due at once: no window of 1 s holds
/// more than 5 starts, and the key takes at least 2 s.
async fn per_key_rate_holds_across_nodes(builders: impl Fn(&Config) -> SchedulerBuilder) {
    let mut config = fast_config();
    let mut queue = keyed_queue(&config);
    queue.per_key_rate = Some(RateLimit::parse("5/1s").expect("valid"));
    config.queues.insert(QUEUE.to_owned(), queue);
    let spans = Spans::default();
    let hold: Hold = Arc::new(|_| (Duration::from_millis(5), false));
    let nodes = start(
        (0..3)
            .map(|_| builders(&config).handler(QUEUE, spans.handler(hold.clone())))
            .collect(),
    )
    .await;
    schedule_keys(&nodes[0], 1, 15, Duration::from_millis(300)).await;
    wait_until(Duration::from_secs(30), "every task ran", || {
        spans.finished() == 15
    })
    .await;
    let mut starts: Vec<u64> = spans.all().iter().map(|span| span.started_us).collect();
    starts.sort_unstable();
    // The store counts fires on its own clock at the claim; a handler starts a little
    // after: a window of the period less a 50 ms margin holds at most 5 starts.
    for (index, &start) in starts.iter().enumerate() {
        let within = starts[index..]
            .iter()
            .take_while(|&&later| later < start + 950_000)
            .count();
        assert!(
            within <= 5,
            "{within} starts within 950 ms from {start}: {starts:?}"
        );
    }
    let took = starts[14] - starts[0];
    assert!(took >= 1_900_000, "15 fires at 5/s took only {took} µs");
    for node in nodes {
        node.shutdown().await.expect("shutdown");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn per_key_rate_holds_across_nodes_on_memory() {
    let backend = TestBackend::memory();
    per_key_rate_holds_across_nodes(|config| backend.builder(config)).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn per_key_rate_holds_across_nodes_on_redis() {
    let backend = TestBackend::redis();
    per_key_rate_holds_across_nodes(|config| backend.builder(config)).await;
}

/// `per_key_concurrency: 1` (or `per_key_order: fifo`): the node running a key's first
/// task is killed (no ack, no release). No other task of the key starts until that task's
/// lease ran out; then the key's tasks run one at a time (with FIFO order the re-run comes
/// first: its hold lasts through the lost lease).
async fn a_killed_node_keeps_its_key_held_until_its_lease_ends(backend: TestBackend, fifo: bool) {
    let mut config = fast_config();
    let mut queue = keyed_queue(&config);
    if fifo {
        queue.per_key_fifo = true;
    } else {
        queue.per_key_concurrency = Some(1);
    }
    config.queues.insert(QUEUE.to_owned(), queue);
    let spans = Spans::default();
    let first = keyed_id("hook", "host-0", "000").expect("valid");
    let first_for_hold = first.clone();
    let hung_once = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let hold: Hold = Arc::new(move |task: &Task| {
        // The first run of the first task hangs (its node is killed under it); its re-run,
        // the same attempt (a lost lease spends none), does not.
        if task.id == first_for_hold && !hung_once.swap(true, std::sync::atomic::Ordering::SeqCst) {
            (Duration::from_secs(3600), false)
        } else {
            (Duration::from_millis(30), false)
        }
    });
    let nodes = start(
        (0..2)
            .map(|_| {
                backend
                    .builder(&config)
                    .handler(QUEUE, spans.handler(hold.clone()))
            })
            .collect(),
    )
    .await;
    schedule_keys(&nodes[0], 1, 5, Duration::from_millis(300)).await;
    wait_until(Duration::from_secs(20), "the first task runs", || {
        spans.all().iter().any(|span| span.id == first)
    })
    .await;
    let hung = spans.all()[0].clone();
    let victim = nodes
        .iter()
        .position(|node| node.node_id().as_str() == hung.node)
        .expect("the node running it");
    nodes[victim].kill();
    wait_until(Duration::from_secs(60), "every task ran", || {
        spans.finished() == 5
    })
    .await;
    let mut all = spans.all();
    all.sort_by_key(|span| span.started_us);
    assert_eq!(all.len(), 6, "the hung run and 5 that finished: {all:?}");
    assert_eq!(all[0].id, first);
    // Nothing of the key started while the killed node held it (its lease).
    let lease = config.engine.lease.as_micros() as u64;
    assert!(
        all[1].started_us >= hung.started_us + lease - 200_000,
        "the next run waited for the lease ({} ms after the first run): {all:?}",
        (all[1].started_us - hung.started_us) / 1_000
    );
    assert!(all.iter().skip(1).all(|span| span.node != hung.node));
    if fifo {
        assert_eq!(
            all[1].id, first,
            "with FIFO order the re-run comes first: {all:?}"
        );
    }
    assert_eq!(
        all.iter().filter(|span| span.id == first).count(),
        2,
        "re-run once"
    );
    // The finished runs never overlap one another.
    let finished: Vec<Span> = all
        .iter()
        .filter(|span| span.ended_us.is_some())
        .cloned()
        .collect();
    let most = most_at_once_per_key(&finished, now_us());
    assert_eq!(most.get("host-0"), Some(&1), "{finished:?}");
    for (index, node) in nodes.into_iter().enumerate() {
        if index != victim {
            node.shutdown().await.expect("shutdown");
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_killed_node_keeps_its_key_held_until_its_lease_ends_on_redis() {
    a_killed_node_keeps_its_key_held_until_its_lease_ends(TestBackend::redis(), false).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_killed_node_keeps_its_fifo_key_held_and_runs_again_first_on_redis() {
    a_killed_node_keeps_its_key_held_until_its_lease_ends(TestBackend::redis(), true).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_killed_node_keeps_its_key_held_until_its_lease_ends_on_memory() {
    a_killed_node_keeps_its_key_held_until_its_lease_ends(TestBackend::memory(), false).await;
}

/// A node configured with the other `flow_keys` setting of a registered queue does not start,
/// and its error names the queue and the key.
#[tokio::test]
async fn a_node_asking_for_the_other_flow_keys_setting_is_refused_by_name() {
    let backend = TestBackend::memory();
    let mut config = fast_config();
    config.queues.insert(QUEUE.to_owned(), keyed_queue(&config));
    let first = backend
        .builder(&config)
        .handler(
            QUEUE,
            Spans::default().handler(Arc::new(|_| (Duration::ZERO, false))),
        )
        .start()
        .await
        .expect("first node");
    let mut other = config.clone();
    if let Some(queue) = other.queues.get_mut(QUEUE) {
        queue.flow_keys = false;
    }
    let refused = backend
        .builder(&other)
        .handler(
            QUEUE,
            Spans::default().handler(Arc::new(|_| (Duration::ZERO, false))),
        )
        .start()
        .await
        .expect_err("the other setting is refused");
    let message = refused.to_string();
    assert!(
        message.contains(QUEUE) && message.contains("flow_keys"),
        "{message}"
    );
    first.shutdown().await.expect("shutdown");
}
