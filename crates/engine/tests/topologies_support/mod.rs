//! Helpers of `topologies.rs`: nodes on any topology, command statistics, and a failover
//! run (nodes firing while a producer schedules with `wait_replicas: 1`, then the checks of
//! what a failover may and may not do).

#![allow(dead_code)]

use std::collections::BTreeMap;
use std::future::Future;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use delayq_engine::config::{Config, QueueConfig};
use delayq_engine::{Scheduler, Task, When};

use crate::support::{fast_config, Firing, Recorder};

/// The queue of the failover runs.
pub const FAILOVER_QUEUE: &str = "failover";

/// How long one handler run takes in the failover runs (so that some tasks are in flight).
const HANDLER_WORK: Duration = Duration::from_millis(20);

/// Polls the async `condition` every 50 ms until it holds; panics with `what` after `within`.
pub async fn eventually<F, Fut>(within: Duration, what: &str, mut condition: F)
where
    F: FnMut() -> Fut,
    Fut: Future<Output = bool>,
{
    let deadline = Instant::now() + within;
    while !condition().await {
        assert!(
            Instant::now() < deadline,
            "timed out after {within:?} waiting until {what}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// Starts `count` nodes running `recorder`'s handler for every queue.
pub async fn start_nodes(config: &Config, recorder: &Recorder, count: usize) -> Vec<Scheduler> {
    let mut nodes = Vec::new();
    for index in 0..count {
        let mut config = config.clone();
        config.node.name = format!("node-{index}");
        nodes.push(
            Scheduler::builder(config)
                .default_handler(recorder.handler())
                .start()
                .await
                .expect("a node starts"),
        );
    }
    nodes
}

/// Waits until every node sees all of them and they own `partitions` between them.
pub async fn nodes_owning(nodes: &[Scheduler], partitions: usize) {
    crate::support::wait_until(Duration::from_secs(20), "the partitions are shared", || {
        nodes
            .iter()
            .all(|node| node.membership().members.len() == nodes.len())
            && nodes
                .iter()
                .map(|node| node.owned_partitions().len())
                .sum::<usize>()
                == partitions
    })
    .await;
}

/// Waits until `queue` has nothing pending or in flight and at least `done` completed.
pub async fn settled(node: &Scheduler, queue: &str, done: u64, within: Duration) {
    eventually(within, "the queue settles", || async {
        node.stats().await.is_ok_and(|stats| {
            stats.get(queue).is_some_and(|stats| {
                stats.pending == 0 && stats.inflight == 0 && stats.done >= done
            })
        })
    })
    .await;
}

/// The `calls=` of `cmdstat_<command>` in an `INFO commandstats` text (0 when absent).
pub fn calls_of(info: &str, command: &str) -> u64 {
    delayq_testkit::command_calls(info, command)
}

/// Script calls (`EVALSHA`, `EVAL`, `FCALL`) in an `INFO commandstats` text.
pub fn script_calls(info: &str) -> u64 {
    ["evalsha", "eval", "fcall"]
        .iter()
        .map(|command| calls_of(info, command))
        .sum()
}

/// The failover runs' config: `wait_replicas: 1`, a lease that outlives the failover's
/// retries, heartbeats that outlive a failover of the coordinator's master.
pub fn failover_config() -> Config {
    let mut config = fast_config();
    config.redis.wait_replicas = 1;
    config.redis.wait_timeout = Duration::from_millis(500);
    config.redis.response_timeout = Duration::from_secs(1);
    config.engine.lease = Duration::from_secs(4);
    config.node.heartbeat_period = Duration::from_millis(200);
    config.node.heartbeat_ttl = Duration::from_secs(3);
    config.queues.insert(
        FAILOVER_QUEUE.to_owned(),
        QueueConfig {
            partitions: 16,
            ..config.queue_defaults
        },
    );
    config
}

/// One topology change during a run, on the cluster clock.
pub struct Failover {
    /// What happened, for messages.
    pub what: &'static str,
    /// When it began (the kill, the request).
    pub from_ms: u64,
    /// When the harness saw the new master in charge.
    pub to_ms: u64,
}

/// A schedule the store acknowledged.
#[derive(Clone, Debug)]
struct Acknowledged {
    id: String,
    due_ms: u64,
    at_ms: u64,
}

/// Three nodes firing a queue while a producer schedules into it, all with `wait_replicas`.
pub struct FailoverRun {
    nodes: Vec<Scheduler>,
    producer: Scheduler,
    recorder: Recorder,
    stop: Arc<AtomicBool>,
    producing: tokio::task::JoinHandle<(Vec<Acknowledged>, Vec<String>)>,
    lease_ms: u64,
}

impl FailoverRun {
    /// Starts the nodes and the producer, and begins producing: one task every few ms, due
    /// 0.3 to 1.8 s ahead.
    pub async fn start(config: Config) -> Self {
        let recorder = Recorder::new();
        let mut nodes = Vec::new();
        for index in 0..3 {
            let mut config = config.clone();
            config.node.name = format!("node-{index}");
            let recorder = recorder.clone();
            nodes.push(
                Scheduler::builder(config)
                    .handler(FAILOVER_QUEUE, move |task: Task| {
                        recorder.record(&task);
                        async {
                            tokio::time::sleep(HANDLER_WORK).await;
                            Ok::<(), std::io::Error>(())
                        }
                    })
                    .start()
                    .await
                    .expect("a node starts"),
            );
        }
        nodes_owning(&nodes, 16).await;
        let producer = Scheduler::builder(config.clone())
            .start()
            .await
            .expect("the producer starts");
        let stop = Arc::new(AtomicBool::new(false));
        let producing = tokio::spawn(produce(producer.clone(), stop.clone()));
        FailoverRun {
            nodes,
            producer,
            recorder,
            stop,
            producing,
            lease_ms: config.engine.lease.as_millis() as u64,
        }
    }

    /// Now on the cluster clock.
    pub fn now_ms(&self) -> u64 {
        self.producer.now_ms()
    }

    /// Waits until tasks have been firing for more than a lease (so that the first ones can
    /// no longer count as in flight at a failover) and 200 more fired.
    pub async fn wait_for_steady_firing(&self) {
        let fired = self.recorder.len();
        let since = Instant::now();
        let lease = Duration::from_millis(self.lease_ms);
        crate::support::wait_until(Duration::from_secs(60), "tasks fire steadily", || {
            self.recorder.len() >= fired + 200 && since.elapsed() > lease
        })
        .await;
    }

    /// Produces a little longer, stops, waits until every acknowledged schedule fired and the
    /// queue settled, then checks the run against `failovers`:
    /// - every acknowledged schedule fired, none before its due;
    /// - firing resumed within a few seconds of each failover;
    /// - a task fired twice only if its first run began at most a lease before a failover
    ///   and before that failover completed (it was in flight).
    pub async fn finish(self, failovers: &[Failover]) {
        tokio::time::sleep(Duration::from_secs(3)).await;
        self.stop.store(true, Ordering::Relaxed);
        let (acknowledged, errors) = self.producing.await.expect("the producer ran");
        let total = acknowledged.len();
        crate::support::wait_until(
            Duration::from_secs(60),
            "every acknowledged schedule fires",
            || {
                let fired = self.recorder.counts();
                acknowledged.iter().all(|task| fired.contains_key(&task.id))
            },
        )
        .await;
        settled(
            &self.nodes[0],
            FAILOVER_QUEUE,
            total as u64,
            Duration::from_secs(30),
        )
        .await;
        let firings = self.recorder.firings();
        let mut by_id: BTreeMap<&str, Vec<&Firing>> = BTreeMap::new();
        for firing in &firings {
            by_id.entry(firing.id.as_str()).or_default().push(firing);
        }

        let early: Vec<_> = firings.iter().filter(|f| f.fired_ms < f.due_ms).collect();
        assert!(early.is_empty(), "fired before their due: {early:?}");

        let first_kill_ms = failovers.iter().map(|f| f.from_ms).min().unwrap_or(0);
        let before_kill = acknowledged
            .iter()
            .filter(|task| task.at_ms < first_kill_ms)
            .count();
        assert!(before_kill >= 200, "only {before_kill} acknowledged before");

        // Resumed: the latest first run is at most a few seconds after its due plus the
        // longest failover.
        let longest = failovers
            .iter()
            .map(|f| f.to_ms - f.from_ms)
            .max()
            .unwrap_or(0);
        let worst = acknowledged
            .iter()
            .map(|task| {
                let first = by_id[task.id.as_str()][0];
                first.fired_ms.saturating_sub(task.due_ms)
            })
            .max()
            .unwrap_or(0);
        assert!(
            worst <= longest + 5_000,
            "a task fired {worst} ms late; the longest failover took {longest} ms"
        );

        let lease_ms = self.lease_ms;
        let in_flight_at = |first_ms: u64| {
            failovers
                .iter()
                .any(|f| first_ms + lease_ms >= f.from_ms && first_ms <= f.to_ms)
        };
        let repeated: Vec<(&str, Vec<u64>)> = by_id
            .iter()
            .filter(|(_, runs)| runs.len() > 1)
            .map(|(id, runs)| (*id, runs.iter().map(|run| run.fired_ms).collect()))
            .collect();
        let outside: Vec<_> = repeated
            .iter()
            .filter(|(_, runs)| !in_flight_at(runs[0]))
            .collect();
        assert!(
            outside.is_empty(),
            "tasks repeated that were not in flight at a failover: {outside:?}"
        );
        let summary: Vec<String> = failovers
            .iter()
            .map(|f| format!("{} took {} ms", f.what, f.to_ms - f.from_ms))
            .collect();
        eprintln!(
            "{total} schedules acknowledged ({before_kill} before the first failover, {} refused: \
             {:?}), {} firings, {} tasks repeated (in flight at a failover), worst lateness \
             {worst} ms; {}",
            errors.len(),
            errors.iter().take(3).collect::<Vec<_>>(),
            firings.len(),
            repeated.len(),
            summary.join(", ")
        );
        for scheduler in self.nodes.iter().chain([&self.producer]) {
            let _ = scheduler.shutdown().await;
        }
    }
}

/// Schedules one task after another until `stop`; returns the acknowledged ones and the
/// errors of the refused ones (a failover refuses some: they are not acknowledged).
async fn produce(producer: Scheduler, stop: Arc<AtomicBool>) -> (Vec<Acknowledged>, Vec<String>) {
    let mut acknowledged = Vec::new();
    let mut errors = Vec::new();
    let mut next = 0u64;
    while !stop.load(Ordering::Relaxed) {
        let id = format!("t{next}");
        let delay = Duration::from_millis(300 + next * 7_919 % 1_500);
        next += 1;
        match producer
            .schedule(FAILOVER_QUEUE, &id, When::In(delay), "")
            .await
        {
            Ok(scheduled) => acknowledged.push(Acknowledged {
                id,
                due_ms: scheduled.due_ms,
                at_ms: producer.now_ms(),
            }),
            Err(error) => {
                errors.push(error.to_string());
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    (acknowledged, errors)
}
