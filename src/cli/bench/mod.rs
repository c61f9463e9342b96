//! `delayq bench`: the engine benchmark of the engine issue, from the command line.
//!
//! `--nodes N` in-process nodes with no-op handlers, on the Redis of `--redis URL`, else of the
//! configuration (`--config FILE` or ./cluster.yaml, and the environment: one server, a Redis
//! Cluster or a Sentinel-watched master), under a fresh key prefix `<key_prefix>:bench-<hex>`
//! (so an ACL user limited to `~<key_prefix>:*` can run it), whose keys are removed afterwards
//! master by master. Each scenario also reports every master's share of the script calls and
//! its CPU time per task (`INFO commandstats`, `INFO cpu`). With `--postgres URL` (or
//! `backend: postgres`) the nodes run on PostgreSQL instead, in a fresh schema
//! `<postgres.schema>_bench_<hex>` dropped afterwards; the per-master figures are Redis's
//! only. Four scenarios:
//!
//! - **precision**: tasks due uniformly over `--min-delay..--spread`, each scheduled with one
//!   `schedule` call from one of the nodes; the lateness (`fired - due`, cluster clock) of
//!   every delivery goes into an HDR histogram. Also the rate of single schedules.
//! - **streaming**: single `schedule` calls at a steady `--rate` for `--duration`, paced by a
//!   1 ms ticker and spread round-robin over the nodes, each task due uniformly
//!   `--min-delay..--spread` ahead, while the earlier ones fire: the lateness of the fires
//!   during the stream (issue 18's target, p99 <= 5 ms at 10,000 schedules/s), the achieved
//!   rate, and the bench process's CPU (producer and nodes share it).
//! - **burst**: `--burst` tasks due at one instant, loaded beforehand with `schedule_many`;
//!   the time from that instant to the last fire gives the fire rate.
//! - **memory**: the process RSS with `--memory-tasks` tasks pending an hour ahead (outside
//!   every prefetch window): a node holds only its window, so it must stay small.

pub(crate) mod masters;
mod pinger;
mod report;
mod scenarios;
mod streaming;

use std::io::IsTerminal;
use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use bytes::Bytes;
use delayq_engine::config::{Backend, Config, QueueConfig};
use delayq_engine::{ScheduleRequest, Scheduler, Task, When};
use futures::stream::{self, StreamExt};
use hdrhistogram::Histogram;
use indicatif::{ProgressBar, ProgressStyle};
use rand::{Rng, SeedableRng};
use serde::Serialize;

use super::harness::{
    drop_schema, histogram, lock, remove_run_keys, run_config, unique_prefix, BoxError,
};
use masters::Masters;
use report::*;
use scenarios::*;
use streaming::*;

const PRECISION: &str = "bench-precision";

const STREAMING: &str = "bench-streaming";

const BURST: &str = "bench-burst";

const MEMORY: &str = "bench-memory";

const QUEUES: [&str; 4] = [PRECISION, STREAMING, BURST, MEMORY];

/// Which scenarios to run.
#[derive(clap::ValueEnum, Clone, Copy, Debug, PartialEq, Eq)]
pub enum Scenario {
    /// Lateness of tasks due over a few seconds.
    Precision,
    /// Lateness while single schedules stream in at a steady rate.
    Streaming,
    /// Fire rate of tasks all due at one instant.
    Burst,
    /// Memory with far-future tasks pending.
    Memory,
    /// All four, in this order (streaming included: at the defaults it adds about
    /// `--duration` + `--spread`, 25 s, to a run that loads a million tasks anyway).
    All,
}

/// Arguments of `delayq bench`.
#[derive(clap::Args, Debug)]
#[command(after_help = "Examples:
  delayq bench --redis redis://127.0.0.1:6379/0
  delayq bench --config cluster.yaml          # redis.cluster / redis.sentinel / redis.tls of the file
  DELAYQ_REDIS_CLUSTER=redis://10.0.0.1:7000,redis://10.0.0.2:7000 delayq bench --scenario burst
  delayq bench --scenario precision --tasks 20000 --json
  delayq bench --scenario burst --burst 200000 --nodes 4
  delayq bench --scenario streaming --rate 10000 --duration 20s

Targets (reported PASS/FAIL): lateness p50 <= 2 ms and p99 <= 10 ms; while schedules stream in,
lateness p99 <= 5 ms at the asked rate (at least 95 % of it achieved); burst >= 50,000 tasks/s;
RSS <= 64 MiB with 1,000,000 far-future tasks pending. Use a release build.")]
pub struct BenchArgs {
    /// One Redis server to benchmark against, instead of the configuration's topology
    /// [default: redis.url, redis.cluster or redis.sentinel of --config / the environment].
    #[arg(long, value_name = "URL", conflicts_with = "postgres")]
    pub redis: Option<String>,
    /// A PostgreSQL to benchmark against (`backend: postgres`), instead of the configuration's
    /// backend; the bench's tables go into a fresh schema, dropped afterwards.
    #[arg(long, value_name = "URL")]
    pub postgres: Option<String>,
    /// In-process nodes sharing the work.
    #[arg(long, default_value_t = 3, value_parser = clap::value_parser!(u32).range(1..=64))]
    pub nodes: u32,
    /// Which scenario to run.
    #[arg(long, value_enum, default_value_t = Scenario::All)]
    pub scenario: Scenario,
    /// precision: how many tasks.
    #[arg(long, default_value_t = 10_000, value_parser = clap::value_parser!(u64).range(1..))]
    pub tasks: u64,
    /// streaming: single schedules per second (over all nodes).
    #[arg(long, default_value_t = 10_000, value_parser = clap::value_parser!(u64).range(1..=1_000_000))]
    pub rate: u64,
    /// streaming: how long the schedules stream in.
    #[arg(long, default_value = "20s", value_parser = humantime::parse_duration)]
    pub duration: Duration,
    /// precision and streaming: the shortest delay.
    #[arg(long, default_value = "500ms", value_parser = humantime::parse_duration)]
    pub min_delay: Duration,
    /// precision and streaming: the longest delay (delays are uniform in --min-delay..--spread).
    #[arg(long, default_value = "5s", value_parser = humantime::parse_duration)]
    pub spread: Duration,
    /// burst: how many tasks due at one instant.
    #[arg(long, default_value_t = 100_000, value_parser = clap::value_parser!(u64).range(1..))]
    pub burst: u64,
    /// memory: how many tasks pending an hour ahead.
    #[arg(long, default_value_t = 1_000_000, value_parser = clap::value_parser!(u64).range(1..))]
    pub memory_tasks: u64,
    /// Handler concurrency of the bench queues on each node.
    #[arg(long, default_value_t = 512, value_parser = clap::value_parser!(u32).range(1..))]
    pub concurrency: u32,
    /// Most tasks one claim takes (engine.claim_batch).
    #[arg(long, default_value_t = 256)]
    pub claim_batch: usize,
    /// Seed of the random delays.
    #[arg(long, default_value_t = 1)]
    pub seed: u64,
    /// Leave the benchmark's keys in Redis (default: remove them).
    #[arg(long)]
    pub keep_keys: bool,
}

/// Runs the selected scenarios and prints the report.
pub async fn run(args: BenchArgs, json: bool, config: Option<PathBuf>) -> Result<(), BoxError> {
    if args.min_delay >= args.spread {
        // A usage error: clap prints it and exits with code 2, like any other bad flag.
        clap::Error::raw(
            clap::error::ErrorKind::ValueValidation,
            format!(
                "--min-delay ({}) must be shorter than --spread ({})\n",
                humantime::format_duration(args.min_delay),
                humantime::format_duration(args.spread)
            ),
        )
        .exit();
    }
    if args.duration.is_zero() {
        clap::Error::raw(
            clap::error::ErrorKind::ValueValidation,
            "--duration must be longer than 0 s\n",
        )
        .exit();
    }
    let rss_at_start = rss_mib();
    let config = bench_config(&args, config)?;
    let probe = Arc::new(Probe::default());
    let mut nodes = Vec::new();
    for index in 0..args.nodes {
        let mut node_config = config.clone();
        node_config.node.name = format!("bench-{index}");
        let scheduler = Scheduler::builder(node_config)
            .handler(PRECISION, precision_handler(probe.clone()))
            .handler(STREAMING, streaming_handler(probe.clone()))
            .handler(BURST, burst_handler(probe.clone()))
            .handler(MEMORY, |_task: Task| async {
                Ok::<(), std::convert::Infallible>(())
            })
            .start()
            .await?;
        nodes.push(scheduler);
    }
    let masters = match config.backend {
        Backend::Postgres => None,
        Backend::Redis => match Masters::discover(config.connect_options()).await {
            Ok(masters) => Some(masters),
            Err(error) => {
                tracing::warn!(%error, "no per-master figures: the masters could not be listed");
                None
            }
        },
    };
    let outcome = run_scenarios(
        &args,
        &config,
        &nodes,
        &probe,
        masters.as_ref(),
        rss_at_start,
        json,
    )
    .await;
    for node in &nodes {
        if let Err(error) = node.shutdown().await {
            tracing::warn!(%error, "shutting a bench node down failed");
        }
    }
    let cleanup = match nodes.first() {
        Some(node) if !args.keep_keys => {
            let cleaning = Instant::now();
            let removed = match config.backend {
                Backend::Postgres => drop_schema(&config.postgres_settings()).await,
                Backend::Redis => {
                    remove_run_keys(masters.as_ref(), &config, node.store(), &QUEUES).await
                }
            };
            tracing::info!(
                elapsed_ms = cleaning.elapsed().as_millis() as u64,
                "benchmark data removed"
            );
            removed
        }
        _ => Ok(()),
    };
    let report = outcome?;
    if json {
        println!("{}", serde_json::to_string_pretty(&report)?);
    } else {
        report.print();
    }
    cleanup.map_err(|error| {
        format!(
            "removing the benchmark's data under {}: failed: {error}",
            run_namespace(&config)
        )
    })?;
    Ok(())
}

/// The configuration: the file's (or the defaults) with the environment, `--redis` instead of
/// its topology when given, the bench's key prefix (under the configured one), and the bench
/// queues with a high concurrency.
fn bench_config(args: &BenchArgs, path: Option<PathBuf>) -> Result<Config, BoxError> {
    let mut config = run_config(path.as_deref(), args.redis.as_deref())?;
    if args.redis.is_some() {
        config.backend = Backend::Redis;
    }
    if let Some(url) = &args.postgres {
        config.backend = Backend::Postgres;
        config.postgres.url = url.clone();
    }
    match config.backend {
        Backend::Postgres => {
            config.postgres.schema = format!(
                "{}_bench_{:08x}",
                config.postgres.schema,
                rand::rng().random::<u32>()
            );
        }
        Backend::Redis => {
            config.redis.key_prefix = unique_prefix(&format!("{}:bench", config.redis.key_prefix));
        }
    }
    config.engine.claim_batch = args.claim_batch;
    for queue in QUEUES {
        let settings = QueueConfig {
            concurrency: args.concurrency as usize,
            ..config.queue_defaults
        };
        config.queues.insert(queue.to_owned(), settings);
    }
    config.validate()?;
    Ok(config)
}

/// Where a run's data lives: the key prefix on Redis, the schema on PostgreSQL.
fn run_namespace(config: &Config) -> String {
    match config.backend {
        Backend::Postgres => config.postgres.schema.clone(),
        Backend::Redis => config.redis.key_prefix.clone(),
    }
}

async fn run_scenarios(
    args: &BenchArgs,
    config: &Config,
    nodes: &[Scheduler],
    probe: &Probe,
    masters: Option<&Masters>,
    rss_at_start: Option<f64>,
    json: bool,
) -> Result<Report, BoxError> {
    wait_for_assignment(config, nodes).await?;
    let wanted = |scenario: Scenario| args.scenario == scenario || args.scenario == Scenario::All;
    let topology = config.connect_options().topology;
    let (server, topology) = match config.backend {
        Backend::Postgres => (config.postgres.redacted_url(), "postgres".to_owned()),
        Backend::Redis => (
            topology.describe(),
            format!("{:?}", topology.kind()).to_lowercase(),
        ),
    };
    let mut report = Report {
        redis: server,
        topology,
        masters: masters.map_or(0, Masters::len),
        key_prefix: run_namespace(config),
        nodes: args.nodes,
        cpus: std::thread::available_parallelism().map_or(0, |n| n.get()),
        cpu_model: cpu_model(),
        precision: None,
        streaming: None,
        burst: None,
        memory: None,
    };
    if !json {
        println!(
            "delayq bench: {} nodes on {} ({} master(s); keys under {}:), {} CPUs ({})",
            report.nodes,
            report.redis,
            report.masters,
            report.key_prefix,
            report.cpus,
            report.cpu_model
        );
    }
    if wanted(Scenario::Precision) {
        report.precision = Some(precision(args, nodes, probe, masters).await?);
    }
    if wanted(Scenario::Streaming) {
        report.streaming = Some(streaming(args, config, nodes, probe, masters).await?);
    }
    if wanted(Scenario::Burst) {
        report.burst = Some(burst(args, nodes, probe, masters).await?);
    }
    if wanted(Scenario::Memory) {
        report.memory = Some(memory(args, config, nodes, rss_at_start).await?);
    }
    Ok(report)
}

/// Waits until every node sees all the others and every partition of the bench queues is owned.
async fn wait_for_assignment(config: &Config, nodes: &[Scheduler]) -> Result<(), BoxError> {
    let partitions: usize = QUEUES
        .iter()
        .map(|queue| config.queue(queue).partitions as usize)
        .sum();
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let members = nodes
            .iter()
            .all(|node| node.membership().members.len() >= nodes.len());
        let owned: usize = nodes.iter().map(|node| node.owned_partitions().len()).sum();
        if members && owned == partitions {
            return Ok(());
        }
        if Instant::now() > deadline {
            return Err(format!(
                "the {} nodes did not agree on the partitions within 30 s ({owned} of {partitions} owned)",
                nodes.len()
            )
            .into());
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}
