//! Issue 17 item 4: `redis.wait_replicas: 1` with the only replica gone. An ack whose `WAIT`
//! sees no replica is applied on the master and done for the node: firing goes on at full
//! speed (it used to be retried while the lease held, keeping its settling slot, so a burst
//! stalled after `concurrency x 5` fires until the lease ran out), and each such ack is
//! counted in `delayq_writes_unconfirmed_total{operation="ack"}`.

mod support;

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, OnceLock};
use std::time::{Duration, Instant};

use delayq_engine::config::QueueConfig;
use delayq_engine::{ScheduleMode, ScheduleRequest, Scheduler, When};
use delayq_testkit::RedisServer;
use metrics::{Counter, CounterFn, Gauge, Histogram, Key, KeyName, Metadata, SharedString, Unit};
use support::{fast_config, wait_until, Recorder};
use tokio::task::block_in_place;

const QUEUE: &str = "burst";
const BURST: usize = 2_000;

/// Counts `delayq_writes_unconfirmed_total{operation="ack"}`; every other metric is a no-op.
#[derive(Default)]
struct UnconfirmedAcks(Arc<AtomicCounter>);

#[derive(Default)]
struct AtomicCounter(AtomicU64);

impl CounterFn for AtomicCounter {
    fn increment(&self, value: u64) {
        self.0.fetch_add(value, Ordering::Relaxed);
    }

    fn absolute(&self, value: u64) {
        self.0.fetch_max(value, Ordering::Relaxed);
    }
}

impl metrics::Recorder for UnconfirmedAcks {
    fn describe_counter(&self, _: KeyName, _: Option<Unit>, _: SharedString) {}
    fn describe_gauge(&self, _: KeyName, _: Option<Unit>, _: SharedString) {}
    fn describe_histogram(&self, _: KeyName, _: Option<Unit>, _: SharedString) {}

    fn register_counter(&self, key: &Key, _: &Metadata<'_>) -> Counter {
        let ack = key
            .labels()
            .any(|label| label.key() == "operation" && label.value() == "ack");
        if key.name() == "delayq_writes_unconfirmed_total" && ack {
            Counter::from_arc(self.0.clone())
        } else {
            Counter::noop()
        }
    }

    fn register_gauge(&self, _: &Key, _: &Metadata<'_>) -> Gauge {
        Gauge::noop()
    }

    fn register_histogram(&self, _: &Key, _: &Metadata<'_>) -> Histogram {
        Histogram::noop()
    }
}

/// The process-wide count of unconfirmed acks (the recorder is installed once).
fn unconfirmed_acks() -> u64 {
    static COUNTER: OnceLock<Arc<AtomicCounter>> = OnceLock::new();
    COUNTER
        .get_or_init(|| {
            let recorder = UnconfirmedAcks::default();
            let counter = recorder.0.clone();
            metrics::set_global_recorder(recorder).expect("the only recorder of this binary");
            counter
        })
        .0
        .load(Ordering::Relaxed)
}

/// Polls until the master at `server` reports `replicas` replicas online.
async fn replicas_online(server: &RedisServer, replicas: usize) {
    let deadline = Instant::now() + Duration::from_secs(15);
    loop {
        let info: String = server
            .command(&["INFO", "replication"])
            .ok()
            .and_then(|value| delayq_redis::redis::from_redis_value(value).ok())
            .unwrap_or_default();
        let online = info
            .lines()
            .filter(|line| line.starts_with("slave") && line.contains("state=online"))
            .count();
        if online == replicas {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "not {replicas} replicas online: {info}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

async fn schedule_burst(observer: &Scheduler, prefix: &str, count: usize, due_in: Duration) {
    let requests: Vec<ScheduleRequest> = (0..count)
        .map(|index| ScheduleRequest {
            id: format!("{prefix}-{index}"),
            when: When::In(due_in),
            payload: bytes::Bytes::new(),
            mode: ScheduleMode::Upsert,
            traceparent: None,
        })
        .collect();
    let results = observer
        .schedule_many(QUEUE, requests)
        .await
        .expect("schedule_many");
    for result in results {
        result.expect("scheduled");
    }
}

/// Waits until the queue has nothing pending or in flight and `done` completed.
async fn settled(observer: &Scheduler, done: u64, within: Duration) {
    let deadline = Instant::now() + within;
    loop {
        let stats = observer.stats().await.ok();
        let counts = stats.as_ref().and_then(|stats| stats.get(QUEUE));
        if counts.is_some_and(|counts| {
            counts.pending == 0 && counts.inflight == 0 && counts.done == done
        }) {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "not settled with {done} done after {within:?}: {counts:?}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn with_the_replica_gone_unconfirmed_acks_never_hold_a_slot_and_are_counted() {
    let before = unconfirmed_acks();
    let master = block_in_place(RedisServer::start);
    let mut replica = block_in_place(RedisServer::start);
    // Redis waits 5 s for more replicas before a diskless sync by default.
    master
        .command(&["CONFIG", "SET", "repl-diskless-sync-delay", "0"])
        .expect("CONFIG SET");
    replica
        .command(&["REPLICAOF", "127.0.0.1", &master.port().to_string()])
        .expect("REPLICAOF");
    replicas_online(&master, 1).await;

    let mut lax = fast_config();
    lax.redis.url = master.url();
    // Far longer than the bound below: a slot held until the lease runs out shows.
    lax.engine.lease = Duration::from_secs(30);
    lax.queues.insert(
        QUEUE.to_owned(),
        QueueConfig {
            partitions: 16,
            // The default: 64 handler slots and 4 x 64 settling places, so the old code
            // stalled after 320 fires.
            concurrency: 64,
            ..lax.queue_defaults
        },
    );
    let mut strict = lax.clone();
    strict.redis.wait_replicas = 1;
    strict.redis.wait_timeout = Duration::from_millis(50);

    let recorder = Recorder::new();
    let node = Scheduler::builder(strict.clone())
        .handler(QUEUE, recorder.handler())
        .start()
        .await
        .expect("a node starts");
    let observer = Scheduler::builder(lax.clone())
        .start()
        .await
        .expect("an observer starts");

    // With the replica there, acks are confirmed: the same burst, for comparison.
    let due_in = Duration::from_secs(1);
    schedule_burst(&observer, "confirmed", BURST, due_in).await;
    let due = Instant::now() + due_in;
    wait_until(
        due_in + Duration::from_secs(10),
        "the first burst fires",
        || recorder.distinct() == BURST,
    )
    .await;
    let confirmed_fired_in = due.elapsed();
    settled(&observer, BURST as u64, Duration::from_secs(5)).await;
    let confirmed_settled_in = due.elapsed();
    assert_eq!(unconfirmed_acks() - before, 0, "confirmed by the replica");

    // The replica goes away; the master sees its link drop.
    block_in_place(|| replica.stop());
    replicas_online(&master, 0).await;
    schedule_burst(&observer, "outage", BURST, due_in).await;
    let due = Instant::now() + due_in;
    let within = Duration::from_secs(10);
    wait_until(
        due_in + within,
        "every task of the burst fires well within the lease",
        || recorder.distinct() == 2 * BURST,
    )
    .await;
    let fired_in = due.elapsed();
    settled(&observer, 2 * BURST as u64, Duration::from_secs(5)).await;
    let settled_in = due.elapsed();
    // An ack shows as done once its script ran, before its WAIT answered.
    wait_until(Duration::from_secs(5), "the acks' WAITs answered", || {
        unconfirmed_acks() - before >= BURST as u64
    })
    .await;
    let unconfirmed = unconfirmed_acks() - before;
    let counts = recorder.counts();
    let twice: Vec<_> = counts.iter().filter(|(_, fires)| **fires > 1).collect();
    assert!(twice.is_empty(), "fired more than once: {twice:?}");
    // Every ack of the burst is unconfirmed; a few acks of the first burst may be too (their
    // WAIT raced the replica's start), never more than both bursts.
    assert!(
        (BURST as u64..=2 * BURST as u64).contains(&unconfirmed),
        "every ack of the burst is counted as unconfirmed: {unconfirmed}"
    );
    eprintln!(
        "replica stopped: {BURST} tasks due at once all fired {fired_in:?} after their due \
         and were acked after {settled_in:?} (lease {:?}, wait_timeout {:?}); {unconfirmed} \
         unconfirmed acks counted; with the replica up the same burst fired in \
         {confirmed_fired_in:?} and was acked after {confirmed_settled_in:?}",
        strict.engine.lease, strict.redis.wait_timeout
    );
    for scheduler in [node, observer] {
        let _ = scheduler.shutdown().await;
    }
}
