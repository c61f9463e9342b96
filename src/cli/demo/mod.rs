//! `delayq demo`: an in-process cluster (in memory, or on a Redis given with `--redis`, an
//! explicit `--config` or the environment: one server, a Redis Cluster or Sentinel; or on a
//! PostgreSQL given with `--postgres` or `backend: postgres`) that shows tasks firing on time,
//! a node dying, and its partitions and in-flight tasks taken over.
//!
//! On a real server the demo keeps to itself: on Redis its keys live under a fresh prefix, on
//! PostgreSQL its tables in a fresh schema (`<postgres.schema>_demo_<hex>`); both are removed
//! afterwards.
//!
//! Timeline (seconds after the tasks are scheduled): tasks are due from 1 s to 4 s; at 2 s the
//! first node is killed (a simulated crash: it stops heartbeating and does not leave). About
//! one heartbeat TTL later (1 s) the others notice, and its partitions move to them; the tasks
//! it was running come back when their lease (2 s) runs out and fire again on another node.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::io::Write;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use delayq_engine::config::{Backend, Config, QueueConfig};
use delayq_engine::{MemoryBackend, Scheduler, Task, When};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use serde::Serialize;

mod report;

use super::bench::masters::Masters;
use super::harness::{
    demo_backend, drop_schema, histogram, lock, remove_run_keys, unique_prefix, BoxError,
};
use report::*;

/// The demo's queue.
const QUEUE: &str = "demo";

/// Its partitions: few, so that the takeover can be shown partition by partition.
const PARTITIONS: u32 = 12;

/// The first task is due this long after scheduling starts...
const FIRST_DUE: Duration = Duration::from_millis(1_000);

/// ...and the last one this long.
const LAST_DUE: Duration = Duration::from_millis(4_000);

/// When the first node is killed, after scheduling starts.
const KILL_AT: Duration = Duration::from_millis(2_000);

/// The demo gives up waiting for the tasks this long after scheduling them.
const DEADLINE: Duration = Duration::from_secs(12);

/// Arguments of `delayq demo`.
#[derive(clap::Args, Debug)]
#[command(after_help = "Examples:
  delayq demo                                    # three nodes in memory, no Redis needed
  delayq demo --tasks 1000 --nodes 5 --quiet
  delayq demo --redis redis://127.0.0.1:6379/0   # the same on a real Redis (keys removed afterwards)
  delayq demo --postgres postgres://user:pw@127.0.0.1/app   # on PostgreSQL (its schema dropped afterwards)
  delayq --config cluster.yaml demo              # on the file's Redis (redis.url, redis.cluster or redis.sentinel)
  delayq demo --json                             # only the summary, as JSON")]
pub struct DemoArgs {
    /// Run the demo on this Redis instead of in memory (under a fresh key prefix, removed
    /// afterwards).
    #[arg(long, value_name = "URL", conflicts_with = "postgres")]
    pub redis: Option<String>,
    /// Run the demo on this PostgreSQL instead of in memory (in a fresh schema, dropped
    /// afterwards).
    #[arg(long, value_name = "URL")]
    pub postgres: Option<String>,
    /// How many tasks to schedule (due 1 s to 4 s after they are scheduled).
    #[arg(long, default_value_t = 300, value_parser = clap::value_parser!(u32).range(1..=20_000))]
    pub tasks: u32,
    /// How many in-process nodes; the first one is killed mid-run.
    #[arg(long, default_value_t = 3, value_parser = clap::value_parser!(u32).range(2..=16))]
    pub nodes: u32,
    /// Seed of the random due times (same seed, same schedule).
    #[arg(long, default_value_t = 7)]
    pub seed: u64,
    /// Print only the events and the summary, not one line per firing.
    #[arg(long)]
    pub quiet: bool,
    /// Whether the demo runs on Redis (set by `run`).
    #[arg(skip)]
    pub on_redis: bool,
}

/// Runs the demo: start the nodes, schedule, kill one, wait for everything to fire, summarize.
pub async fn run(mut args: DemoArgs, json: bool, config: Option<PathBuf>) -> Result<(), BoxError> {
    let print = Printer {
        lines: !json,
        firings: !json && !args.quiet,
        start: Instant::now(),
    };
    let redis = demo_backend(
        args.redis.as_deref(),
        args.postgres.as_deref(),
        config.as_deref(),
    )?;
    args.on_redis = redis.is_some();
    let prefix = match &redis {
        Some(base) if base.backend == Backend::Postgres => {
            format!(
                "{}_demo_{:08x}",
                base.postgres.schema,
                rand::rng().random::<u32>()
            )
        }
        Some(base) => unique_prefix(&format!("{}:demo", base.redis.key_prefix)),
        None => unique_prefix("delayq-demo"),
    };
    let backend = MemoryBackend::new();
    let record = Arc::new(Record::default());
    // A bad --redis URL is a usage error (exit 2), reported before any node starts.
    demo_config(&node_name(0), redis.as_ref(), &prefix).validate()?;
    let mut nodes = Vec::new();
    for index in 0..args.nodes {
        let name = node_name(index);
        let config = demo_config(&name, redis.as_ref(), &prefix);
        let mut builder = Scheduler::builder(config)
            .handler(QUEUE, firing_handler(record.clone(), print.clone()));
        if redis.is_none() {
            builder = builder.memory(backend.clone());
        }
        let scheduler = builder
            .start()
            .await
            .map_err(|error| format!("starting {name}: {error}"))?;
        lock(&record.names).insert(scheduler.node_id().to_string(), name.clone());
        nodes.push(Node {
            name,
            scheduler,
            alive: true,
            owned: Vec::new(),
        });
    }
    let backend_name = match &redis {
        Some(base) if base.backend == Backend::Postgres => format!(
            "PostgreSQL at {} (tables in schema {prefix})",
            base.postgres.redacted_url()
        ),
        Some(base) => format!(
            "Redis at {} (keys under {prefix}:)",
            base.connect_options().topology.describe()
        ),
        None => "the in-memory backend".to_owned(),
    };
    print.event(format!("started {} nodes on {backend_name}", nodes.len()));
    let outcome = drive(&args, &mut nodes, &record, &print).await;
    for node in nodes.iter().filter(|node| node.alive) {
        if let Err(error) = node.scheduler.shutdown().await {
            tracing::warn!(node = %node.name, %error, "shutting the node down failed");
        }
    }
    let cleanup = match (&redis, nodes.last()) {
        (Some(base), Some(node)) if base.backend == Backend::Postgres => {
            drop_schema(&node.scheduler.config().postgres_settings()).await
        }
        (Some(_), Some(node)) => {
            let config = node.scheduler.config();
            let masters = Masters::discover(config.connect_options()).await.ok();
            remove_run_keys(masters.as_ref(), config, node.scheduler.store(), &[QUEUE]).await
        }
        _ => Ok(()),
    };
    let summary = outcome?;
    if json {
        println!("{}", serde_json::to_string_pretty(&summary)?);
    } else {
        summary.print(&backend_name);
    }
    cleanup.map_err(|error| format!("removing the demo's data under {prefix}: failed: {error}"))?;
    if summary.lost > 0 {
        return Err(format!("{} of {} tasks never fired", summary.lost, summary.tasks).into());
    }
    Ok(())
}

/// One in-process node.
struct Node {
    name: String,
    scheduler: Scheduler,
    alive: bool,
    owned: Vec<u32>,
}

/// The demo proper, once the nodes run.
async fn drive(
    args: &DemoArgs,
    nodes: &mut [Node],
    record: &Arc<Record>,
    print: &Printer,
) -> Result<Summary, BoxError> {
    wait_for_assignment(nodes).await?;
    for node in nodes.iter_mut() {
        node.owned = owned_indexes(&node.scheduler);
        print.event(format!("{} owns partitions {:?}", node.name, node.owned));
    }
    let started = Instant::now();
    let ids = schedule_tasks(args, nodes).await?;
    print.event(format!(
        "scheduled {} tasks of queue {QUEUE:?} from {} nodes in {} ms, due over the next {} s",
        ids.len(),
        nodes.len(),
        started.elapsed().as_millis(),
        LAST_DUE.as_secs()
    ));
    let mut killed: Option<Killed> = None;
    loop {
        tokio::time::sleep(Duration::from_millis(20)).await;
        if killed.is_none() && started.elapsed() >= KILL_AT {
            killed = Some(kill_first(nodes, record, print));
        }
        if let Some(killed) = killed.as_mut() {
            watch_takeover(nodes, killed, print);
            if record.all_fired(&ids) && settled(&nodes[1].scheduler).await? {
                break;
            }
        }
        if started.elapsed() > DEADLINE {
            print.event("deadline reached before every task fired".to_owned());
            break;
        }
    }
    Ok(record.summary(args, &ids, killed, print.start.elapsed()))
}

/// Waits until every node sees every other and the partitions are all owned.
async fn wait_for_assignment(nodes: &[Node]) -> Result<(), BoxError> {
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let everyone = nodes
            .iter()
            .all(|node| node.scheduler.membership().members.len() == nodes.len());
        let owned: usize = nodes
            .iter()
            .map(|node| owned_indexes(&node.scheduler).len())
            .sum();
        if everyone && owned == PARTITIONS as usize {
            return Ok(());
        }
        if Instant::now() > deadline {
            return Err("the nodes did not agree on the partition assignment within 10 s".into());
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// Schedules the tasks, task `i` from node `i % nodes`, due within `FIRST_DUE..=LAST_DUE`.
async fn schedule_tasks(args: &DemoArgs, nodes: &[Node]) -> Result<Vec<String>, BoxError> {
    let mut rng = StdRng::seed_from_u64(args.seed);
    let mut pending = Vec::new();
    let mut ids = Vec::new();
    for index in 0..args.tasks {
        let id = format!("order-{index:04}");
        let delay = rng.random_range(FIRST_DUE..=LAST_DUE);
        let scheduler = nodes[index as usize % nodes.len()].scheduler.clone();
        let task_id = id.clone();
        pending.push(async move {
            scheduler
                .schedule(QUEUE, &task_id, When::In(delay), "")
                .await
        });
        ids.push(id);
    }
    for result in futures::future::join_all(pending).await {
        result?;
    }
    Ok(ids)
}

/// What was killed, and what became of its work.
struct Killed {
    name: String,
    at_ms: u64,
    partitions: Vec<u32>,
    in_flight: Vec<String>,
    /// Partitions of the dead node that no survivor owns yet.
    orphans: HashSet<u32>,
    taken_over_after_ms: Option<u64>,
}

/// Kills the first node: no leave, running handlers aborted, heartbeat stopped.
fn kill_first(nodes: &mut [Node], record: &Record, print: &Printer) -> Killed {
    let node = &mut nodes[0];
    let partitions = owned_indexes(&node.scheduler);
    node.scheduler.kill();
    node.alive = false;
    let mut in_flight: Vec<String> = lock(&record.running)
        .iter()
        .filter(|(_, name)| **name == node.name)
        .map(|(id, _)| id.clone())
        .collect();
    in_flight.sort();
    lock(&record.killed).extend(in_flight.iter().cloned());
    print.event(format!(
        "KILL {} (a simulated crash: no goodbye). It owned partitions {:?} and was running {} tasks {:?}",
        node.name,
        partitions,
        in_flight.len(),
        in_flight
    ));
    print.event(
        "the others notice when its heartbeat expires (ttl 1 s); the tasks it was running \
         come back when their lease (2 s) runs out"
            .to_owned(),
    );
    Killed {
        name: node.name.clone(),
        at_ms: print.elapsed_ms(),
        orphans: partitions.iter().copied().collect(),
        partitions,
        in_flight,
        taken_over_after_ms: None,
    }
}

/// Prints the partitions the survivors gained since the last look.
fn watch_takeover(nodes: &mut [Node], killed: &mut Killed, print: &Printer) {
    for node in nodes.iter_mut().filter(|node| node.alive) {
        let owned = owned_indexes(&node.scheduler);
        let gained: Vec<u32> = owned
            .iter()
            .filter(|partition| !node.owned.contains(partition))
            .copied()
            .collect();
        if !gained.is_empty() {
            print.event(format!(
                "TAKEOVER {} took partitions {:?} of {}",
                node.name, gained, killed.name
            ));
            for partition in &gained {
                killed.orphans.remove(partition);
            }
            if killed.orphans.is_empty() && killed.taken_over_after_ms.is_none() {
                killed.taken_over_after_ms = Some(print.elapsed_ms().saturating_sub(killed.at_ms));
            }
        }
        node.owned = owned;
    }
}

/// Whether nothing of the demo queue is pending or in flight any more.
async fn settled(scheduler: &Scheduler) -> Result<bool, BoxError> {
    let stats = scheduler.stats().await?;
    Ok(stats
        .get(QUEUE)
        .is_none_or(|queue| queue.pending == 0 && queue.inflight == 0))
}

fn owned_indexes(scheduler: &Scheduler) -> Vec<u32> {
    scheduler
        .owned_partitions()
        .into_iter()
        .filter(|partition| partition.queue.as_str() == QUEUE)
        .map(|partition| partition.index)
        .collect()
}

fn node_name(index: u32) -> String {
    let letter = char::from(b'a' + (index % 26) as u8);
    format!("node-{letter}")
}

/// Short timings, so that the whole story fits in a few seconds.
fn demo_config(name: &str, redis: Option<&Config>, prefix: &str) -> Config {
    let mut config = Config::default();
    if let Some(base) = redis {
        config.backend = base.backend;
        config.redis = base.redis.clone();
        config.postgres = base.postgres.clone();
    }
    if config.backend == Backend::Postgres {
        config.postgres.schema = prefix.to_owned();
    } else {
        config.redis.key_prefix = prefix.to_owned();
    }
    config.node.name = name.to_owned();
    config.node.heartbeat_period = Duration::from_millis(200);
    config.node.heartbeat_ttl = Duration::from_secs(1);
    config.engine.pull_period = Duration::from_millis(200);
    config.engine.prefetch_window = Duration::from_secs(2);
    config.engine.lease = Duration::from_secs(2);
    // The lease must exceed three response timeouts (config rule).
    config.redis.response_timeout = Duration::from_millis(600);
    config.postgres.statement_timeout = Duration::from_millis(600);
    config.engine.shutdown_grace = Duration::from_secs(2);
    config.queues.insert(
        QUEUE.to_owned(),
        QueueConfig {
            partitions: PARTITIONS,
            concurrency: 32,
            timeout: Duration::from_secs(2),
            ..QueueConfig::default()
        },
    );
    config
}

type DemoFuture = futures::future::BoxFuture<'static, Result<(), std::convert::Infallible>>;

/// The handler: records the firing, prints it, and "works" 50–400 ms (so that some tasks are
/// running when a node dies).
fn firing_handler(
    record: Arc<Record>,
    print: Printer,
) -> impl Fn(Task) -> DemoFuture + Send + Sync {
    move |task: Task| {
        let record = record.clone();
        let print = print.clone();
        Box::pin(async move {
            let node = record.name_of(&task.node);
            let again = record.fired(&task, &node);
            if print.firings {
                let note = if again {
                    "  <- again: its node died while running it, and the lease ran out"
                } else {
                    ""
                };
                print.line(format!(
                    "{:<10} fired on {node:<7} late {:>4} ms{note}",
                    task.id,
                    task.lateness().as_millis()
                ));
            }
            let work = 50 + delayq_storage::stable_hash(task.id.as_bytes()) % 350;
            tokio::time::sleep(Duration::from_millis(work)).await;
            lock(&record.running).remove(&task.id);
            Ok(())
        })
    }
}
