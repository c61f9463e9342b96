//! `delayq bench`: the engine benchmark of the engine issue, from the command line.
//!
//! `--nodes N` in-process nodes on one Redis, with no-op handlers, under a fresh key prefix
//! (removed afterwards). Three scenarios:
//!
//! - **precision**: tasks due uniformly over `--min-delay..--spread`, each scheduled with one
//!   `schedule` call from one of the nodes; the lateness (`fired - due`, cluster clock) of
//!   every delivery goes into an HDR histogram. Also the rate of single schedules.
//! - **burst**: `--burst` tasks due at one instant, loaded beforehand with `schedule_many`;
//!   the time from that instant to the last fire gives the fire rate.
//! - **memory**: the process RSS with `--memory-tasks` tasks pending an hour ahead (outside
//!   every prefetch window): a node holds only its window, so it must stay small.

use std::collections::BTreeMap;
use std::io::IsTerminal;
use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::{Duration, Instant};

use bytes::Bytes;
use delayq_engine::config::{Config, QueueConfig};
use delayq_engine::{ScheduleRequest, Scheduler, Task, When};
use delayq_storage::{Partition, TaskStore};
use futures::stream::{self, StreamExt};
use hdrhistogram::Histogram;
use indicatif::{ProgressBar, ProgressStyle};
use rand::{Rng, SeedableRng};
use serde::Serialize;

/// The error `demo` and `bench` return: its text is the one line the command prints.
pub type BoxError = Box<dyn std::error::Error + Send + Sync>;

const PRECISION: &str = "bench-precision";
const BURST: &str = "bench-burst";
const MEMORY: &str = "bench-memory";
const QUEUES: [&str; 3] = [PRECISION, BURST, MEMORY];
/// Tasks per `schedule_many` call.
const CHUNK: usize = 5_000;
/// Single `schedule` calls in flight per node.
const SCHEDULE_CONCURRENCY: usize = 64;

/// Targets of the engine issue.
const TARGET_P50_MS: u64 = 2;
const TARGET_P99_MS: u64 = 10;
const TARGET_BURST_PER_S: f64 = 50_000.0;
const TARGET_RSS_MIB: f64 = 64.0;

/// Which scenarios to run.
#[derive(clap::ValueEnum, Clone, Copy, Debug, PartialEq, Eq)]
pub enum Scenario {
    /// Lateness of tasks due over a few seconds.
    Precision,
    /// Fire rate of tasks all due at one instant.
    Burst,
    /// Memory with far-future tasks pending.
    Memory,
    /// All three, in this order.
    All,
}

/// Arguments of `delayq bench`.
#[derive(clap::Args, Debug)]
#[command(after_help = "Examples:
  delayq bench --redis redis://127.0.0.1:6379/0
  delayq bench --scenario precision --tasks 20000 --json
  delayq bench --scenario burst --burst 200000 --nodes 4

Targets (reported PASS/FAIL): lateness p50 <= 2 ms and p99 <= 10 ms; burst >= 50,000 tasks/s;
RSS <= 64 MiB with 1,000,000 far-future tasks pending. Use a release build.")]
pub struct BenchArgs {
    /// Redis to benchmark against [default: redis.url of the configuration].
    #[arg(long, value_name = "URL")]
    pub redis: Option<String>,
    /// In-process nodes sharing the work.
    #[arg(long, default_value_t = 3, value_parser = clap::value_parser!(u32).range(1..=64))]
    pub nodes: u32,
    /// Which scenario to run.
    #[arg(long, value_enum, default_value_t = Scenario::All)]
    pub scenario: Scenario,
    /// precision: how many tasks.
    #[arg(long, default_value_t = 10_000, value_parser = clap::value_parser!(u64).range(1..))]
    pub tasks: u64,
    /// precision: the shortest delay.
    #[arg(long, default_value = "500ms", value_parser = humantime::parse_duration)]
    pub min_delay: Duration,
    /// precision: the longest delay (delays are uniform in --min-delay..--spread).
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
    let rss_at_start = rss_mib();
    let config = bench_config(&args, config)?;
    let probe = Arc::new(Probe::default());
    let mut nodes = Vec::new();
    for index in 0..args.nodes {
        let mut node_config = config.clone();
        node_config.node.name = format!("bench-{index}");
        let scheduler = Scheduler::builder(node_config)
            .handler(PRECISION, precision_handler(probe.clone()))
            .handler(BURST, burst_handler(probe.clone()))
            .handler(MEMORY, |_task: Task| async {
                Ok::<(), std::convert::Infallible>(())
            })
            .start()
            .await?;
        nodes.push(scheduler);
    }
    let outcome = run_scenarios(&args, &config, &nodes, &probe, rss_at_start, json).await;
    for node in &nodes {
        if let Err(error) = node.shutdown().await {
            tracing::warn!(%error, "shutting a bench node down failed");
        }
    }
    let cleanup = match nodes.first() {
        Some(node) if !args.keep_keys => {
            let cleaning = Instant::now();
            let removed = remove_run_data(node.store(), &QUEUES).await;
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
            "removing the benchmark's keys under {}: failed: {error}",
            config.redis.key_prefix
        )
    })?;
    Ok(())
}

/// The configuration: the file's (or the defaults), the bench's Redis and key prefix, and the
/// bench queues with a high concurrency.
fn bench_config(args: &BenchArgs, path: Option<PathBuf>) -> Result<Config, BoxError> {
    let mut config = Config::load_or_default(path.as_deref())?;
    if let Some(url) = &args.redis {
        config.redis.url = url.clone();
    }
    config.redis.key_prefix = unique_prefix(&format!("{}-bench", config.redis.key_prefix));
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

async fn run_scenarios(
    args: &BenchArgs,
    config: &Config,
    nodes: &[Scheduler],
    probe: &Probe,
    rss_at_start: Option<f64>,
    json: bool,
) -> Result<Report, BoxError> {
    wait_for_assignment(config, nodes).await?;
    let wanted = |scenario: Scenario| args.scenario == scenario || args.scenario == Scenario::All;
    let mut report = Report {
        redis: super::demo::redact(&config.redis.url),
        key_prefix: config.redis.key_prefix.clone(),
        nodes: args.nodes,
        cpus: std::thread::available_parallelism().map_or(0, |n| n.get()),
        cpu_model: cpu_model(),
        precision: None,
        burst: None,
        memory: None,
    };
    if !json {
        println!(
            "delayq bench: {} nodes on {} (keys under {}:), {} CPUs ({})",
            report.nodes, report.redis, report.key_prefix, report.cpus, report.cpu_model
        );
    }
    if wanted(Scenario::Precision) {
        report.precision = Some(precision(args, nodes, probe).await?);
    }
    if wanted(Scenario::Burst) {
        report.burst = Some(burst(args, nodes, probe).await?);
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

/// What the handlers measure.
struct Probe {
    precision: Mutex<Histogram<u64>>,
    precision_deliveries: AtomicU64,
    precision_early: AtomicU64,
    /// Lateness of the tasks due after the scheduling ended (no load competing with firing).
    precision_quiet: Mutex<Histogram<u64>>,
    /// When the scheduling ended (cluster ms; `u64::MAX` until then).
    precision_quiet_from_ms: AtomicU64,
    burst: Mutex<Histogram<u64>>,
    burst_deliveries: AtomicU64,
    burst_first_ms: AtomicU64,
    burst_last_ms: AtomicU64,
    /// The instant every burst task is due at.
    burst_due_ms: AtomicU64,
    /// Burst deliveries whose task carried another due time, or a later attempt.
    burst_moved: AtomicU64,
}

impl Default for Probe {
    fn default() -> Self {
        Probe {
            precision: Mutex::new(histogram()),
            precision_deliveries: AtomicU64::new(0),
            precision_early: AtomicU64::new(0),
            precision_quiet: Mutex::new(histogram()),
            precision_quiet_from_ms: AtomicU64::new(u64::MAX),
            burst: Mutex::new(histogram()),
            burst_deliveries: AtomicU64::new(0),
            burst_first_ms: AtomicU64::new(u64::MAX),
            burst_last_ms: AtomicU64::new(0),
            burst_due_ms: AtomicU64::new(0),
            burst_moved: AtomicU64::new(0),
        }
    }
}

/// The largest lateness a histogram tracks (larger values count as this): one day, in ms.
const HISTOGRAM_MAX_MS: u64 = 86_400_000;

/// A histogram of milliseconds (0 to a day) with 3 significant figures. Fixed bounds, because
/// `saturating_record` on an auto-resizing histogram clamps to its *current* (tiny) range.
pub(crate) fn histogram() -> Histogram<u64> {
    Histogram::new_with_bounds(1, HISTOGRAM_MAX_MS, 3).expect("constant bounds are valid")
}

/// Locks a mutex, ignoring poisoning (a panicking holder leaves the counts usable).
pub(crate) fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(PoisonError::into_inner)
}

type NoOpResult = Result<(), std::convert::Infallible>;

fn precision_handler(
    probe: Arc<Probe>,
) -> impl Fn(Task) -> std::future::Ready<NoOpResult> + Send + Sync {
    move |task: Task| {
        if task.fired_ms < task.due_ms {
            probe.precision_early.fetch_add(1, Ordering::Relaxed);
        }
        let lateness = task.fired_ms.saturating_sub(task.due_ms);
        lock(&probe.precision).saturating_record(lateness);
        if task.due_ms >= probe.precision_quiet_from_ms.load(Ordering::Relaxed) {
            lock(&probe.precision_quiet).saturating_record(lateness);
        }
        probe.precision_deliveries.fetch_add(1, Ordering::Relaxed);
        std::future::ready(Ok(()))
    }
}

fn burst_handler(
    probe: Arc<Probe>,
) -> impl Fn(Task) -> std::future::Ready<NoOpResult> + Send + Sync {
    move |task: Task| {
        probe
            .burst_first_ms
            .fetch_min(task.fired_ms, Ordering::Relaxed);
        probe
            .burst_last_ms
            .fetch_max(task.fired_ms, Ordering::Relaxed);
        let due_ms = probe.burst_due_ms.load(Ordering::Relaxed);
        if task.due_ms != due_ms || task.attempt > 1 {
            probe.burst_moved.fetch_add(1, Ordering::Relaxed);
        }
        lock(&probe.burst).saturating_record(task.fired_ms.saturating_sub(due_ms));
        probe.burst_deliveries.fetch_add(1, Ordering::Relaxed);
        std::future::ready(Ok(()))
    }
}

/// Lateness quantiles in milliseconds.
#[derive(Serialize)]
struct Quantiles {
    count: u64,
    p50: u64,
    p90: u64,
    p99: u64,
    p99_9: u64,
    max: u64,
    mean: f64,
}

impl Quantiles {
    fn of(histogram: &Histogram<u64>) -> Self {
        Quantiles {
            count: histogram.len(),
            p50: histogram.value_at_quantile(0.5),
            p90: histogram.value_at_quantile(0.9),
            p99: histogram.value_at_quantile(0.99),
            p99_9: histogram.value_at_quantile(0.999),
            max: histogram.max(),
            mean: (histogram.mean() * 100.0).round() / 100.0,
        }
    }
}

#[derive(Serialize)]
struct PrecisionReport {
    tasks: u64,
    min_delay_ms: u64,
    max_delay_ms: u64,
    schedule_secs: f64,
    schedule_per_s: f64,
    deliveries: u64,
    early: u64,
    lateness_ms: Quantiles,
    /// The same for the tasks due after the scheduling ended.
    lateness_after_scheduling_ms: Quantiles,
    pass_p50: bool,
    pass_p99: bool,
}

async fn precision(
    args: &BenchArgs,
    nodes: &[Scheduler],
    probe: &Probe,
) -> Result<PrecisionReport, BoxError> {
    let mut rng = rand::rngs::StdRng::seed_from_u64(args.seed);
    let delays: Vec<Duration> = (0..args.tasks)
        .map(|_| rng.random_range(args.min_delay..=args.spread))
        .collect();
    let bar = progress(args.tasks, "precision: scheduling");
    let started = Instant::now();
    let per_node = nodes.iter().enumerate().map(|(index, node)| {
        let mine: Vec<(u64, Duration)> = delays
            .iter()
            .enumerate()
            .filter(|(task, _)| task % nodes.len() == index)
            .map(|(task, delay)| (task as u64, *delay))
            .collect();
        let bar = bar.clone();
        async move {
            let results: Vec<_> = stream::iter(mine)
                .map(|(task, delay)| {
                    let bar = bar.clone();
                    async move {
                        let result = node
                            .schedule(
                                PRECISION,
                                &format!("p-{task}"),
                                When::In(delay),
                                Bytes::new(),
                            )
                            .await;
                        bar.inc(1);
                        result
                    }
                })
                .buffer_unordered(SCHEDULE_CONCURRENCY)
                .collect()
                .await;
            results.into_iter().collect::<Result<Vec<_>, _>>()
        }
    });
    for result in futures::future::join_all(per_node).await {
        result?;
    }
    let schedule_secs = started.elapsed().as_secs_f64();
    probe
        .precision_quiet_from_ms
        .store(nodes[0].now_ms(), Ordering::Relaxed);
    bar.finish_and_clear();
    let bar = progress(args.tasks, "precision: firing");
    let deadline = started + args.spread + Duration::from_secs(30);
    while probe.precision_deliveries.load(Ordering::Relaxed) < args.tasks
        && Instant::now() < deadline
    {
        bar.set_position(probe.precision_deliveries.load(Ordering::Relaxed));
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    bar.finish_and_clear();
    let lateness = Quantiles::of(&lock(&probe.precision));
    let deliveries = probe.precision_deliveries.load(Ordering::Relaxed);
    Ok(PrecisionReport {
        tasks: args.tasks,
        min_delay_ms: args.min_delay.as_millis() as u64,
        max_delay_ms: args.spread.as_millis() as u64,
        schedule_secs: round3(schedule_secs),
        schedule_per_s: (args.tasks as f64 / schedule_secs).round(),
        deliveries,
        early: probe.precision_early.load(Ordering::Relaxed),
        pass_p50: deliveries >= args.tasks && lateness.p50 <= TARGET_P50_MS,
        pass_p99: deliveries >= args.tasks && lateness.p99 <= TARGET_P99_MS,
        lateness_ms: lateness,
        lateness_after_scheduling_ms: Quantiles::of(&lock(&probe.precision_quiet)),
    })
}

#[derive(Serialize)]
struct BurstReport {
    tasks: u64,
    load_secs: f64,
    load_per_s: f64,
    /// The loading ended this long before the due instant (negative: after it).
    slack_ms: i64,
    deliveries: u64,
    first_fire_after_due_ms: u64,
    last_fire_after_due_ms: u64,
    fire_per_s: f64,
    /// Deliveries of a task whose due time had moved or whose attempt was not the first
    /// (a lease that ran out, a retry): expected 0.
    moved: u64,
    /// When the last task was acknowledged (nothing pending or in flight), after the due instant.
    drained_after_due_ms: Option<u64>,
    lateness_ms: Quantiles,
    pass: bool,
}

async fn burst(
    args: &BenchArgs,
    nodes: &[Scheduler],
    probe: &Probe,
) -> Result<BurstReport, BoxError> {
    let ids: Vec<String> = (0..args.burst).map(|task| format!("b-{task}")).collect();
    // Calibrate: time one chunk (scheduled an hour ahead; the real load replaces it) to pick a
    // due instant that the whole load finishes well before.
    let sample: Vec<String> = ids.iter().take(CHUNK).cloned().collect();
    let calibration = Instant::now();
    let far = nodes[0].now_ms() + 3_600_000;
    load(&nodes[..1], BURST, sample, far, &ProgressBar::hidden()).await?;
    let per_task = calibration.elapsed().as_secs_f64() / CHUNK.min(ids.len()) as f64;
    let estimate = Duration::from_secs_f64(per_task * args.burst as f64);
    let due_ms = nodes[0].now_ms() + (estimate * 2 + Duration::from_secs(2)).as_millis() as u64;
    probe.burst_due_ms.store(due_ms, Ordering::Relaxed);
    let bar = progress(args.burst, "burst: loading");
    let started = Instant::now();
    load(nodes, BURST, ids, due_ms, &bar).await?;
    let load_secs = started.elapsed().as_secs_f64();
    bar.finish_and_clear();
    let slack_ms = due_ms as i64 - nodes[0].now_ms() as i64;
    let bar = progress(args.burst, "burst: firing");
    let deadline =
        Instant::now() + Duration::from_millis(slack_ms.max(0) as u64) + Duration::from_secs(60);
    while probe.burst_deliveries.load(Ordering::Relaxed) < args.burst && Instant::now() < deadline {
        bar.set_position(probe.burst_deliveries.load(Ordering::Relaxed));
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    bar.finish_and_clear();
    let drained_after_due_ms = drained(&nodes[0], BURST, deadline)
        .await?
        .map(|at_ms| at_ms.saturating_sub(due_ms));
    let deliveries = probe.burst_deliveries.load(Ordering::Relaxed);
    let first = probe
        .burst_first_ms
        .load(Ordering::Relaxed)
        .saturating_sub(due_ms);
    let last = probe
        .burst_last_ms
        .load(Ordering::Relaxed)
        .saturating_sub(due_ms);
    let fire_per_s = (deliveries as f64 / (last.max(1) as f64 / 1000.0)).round();
    Ok(BurstReport {
        tasks: args.burst,
        load_secs: round3(load_secs),
        load_per_s: (args.burst as f64 / load_secs).round(),
        slack_ms,
        deliveries,
        first_fire_after_due_ms: first,
        last_fire_after_due_ms: last,
        fire_per_s,
        drained_after_due_ms,
        moved: probe.burst_moved.load(Ordering::Relaxed),
        lateness_ms: Quantiles::of(&lock(&probe.burst)),
        pass: deliveries >= args.burst && slack_ms > 0 && fire_per_s >= TARGET_BURST_PER_S,
    })
}

/// Polls the stats until nothing of `queue` is pending or in flight; returns when (cluster ms).
async fn drained(
    node: &Scheduler,
    queue: &str,
    deadline: Instant,
) -> Result<Option<u64>, BoxError> {
    loop {
        let stats = node.stats().await?;
        if stats
            .get(queue)
            .is_none_or(|s| s.pending == 0 && s.inflight == 0)
        {
            return Ok(Some(node.now_ms()));
        }
        if Instant::now() > deadline {
            return Ok(None);
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

/// Schedules `ids` of `queue` due at `due_ms` with `schedule_many`, split over the nodes, in
/// chunks of [`CHUNK`].
async fn load(
    nodes: &[Scheduler],
    queue: &str,
    ids: Vec<String>,
    due_ms: u64,
    bar: &ProgressBar,
) -> Result<(), BoxError> {
    let mut shares: Vec<Vec<String>> = vec![Vec::new(); nodes.len()];
    for (index, id) in ids.into_iter().enumerate() {
        shares[index % nodes.len()].push(id);
    }
    let per_node = nodes.iter().zip(shares).map(|(node, share)| async move {
        let mut share = share.into_iter().peekable();
        while share.peek().is_some() {
            let requests: Vec<ScheduleRequest> = share
                .by_ref()
                .take(CHUNK)
                .map(|id| ScheduleRequest {
                    id,
                    when: When::At(due_ms),
                    payload: Bytes::new(),
                })
                .collect();
            let count = requests.len() as u64;
            for result in node.schedule_many(queue, requests).await? {
                result?;
            }
            bar.inc(count);
        }
        Ok::<(), BoxError>(())
    });
    for result in futures::future::join_all(per_node).await {
        result?;
    }
    Ok(())
}

#[derive(Serialize)]
struct MemoryReport {
    tasks: u64,
    load_secs: f64,
    load_per_s: f64,
    pending: u64,
    /// RSS of the whole bench process (all nodes and producers), MiB.
    rss_at_start_mib: Option<f64>,
    rss_before_load_mib: Option<f64>,
    rss_peak_mib: Option<f64>,
    rss_settled_mib: Option<f64>,
    pass: bool,
}

async fn memory(
    args: &BenchArgs,
    config: &Config,
    nodes: &[Scheduler],
    rss_at_start: Option<f64>,
) -> Result<MemoryReport, BoxError> {
    let rss_before_load = rss_mib();
    let peak = Arc::new(Mutex::new(rss_before_load));
    let sampler = {
        let peak = peak.clone();
        tokio::spawn(async move {
            loop {
                if let Some(rss) = rss_mib() {
                    let mut peak = lock(&peak);
                    *peak = Some(peak.map_or(rss, |p: f64| p.max(rss)));
                }
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
        })
    };
    let bar = progress(args.memory_tasks, "memory: loading");
    let started = Instant::now();
    let due_ms = nodes[0].now_ms() + 3_600_000;
    // Load in slices so the ids of a million tasks are never all in memory at once.
    let slice = (CHUNK * nodes.len() * 4) as u64;
    let mut next = 0;
    while next < args.memory_tasks {
        let end = (next + slice).min(args.memory_tasks);
        let ids = (next..end).map(|task| format!("m-{task}")).collect();
        load(nodes, MEMORY, ids, due_ms, &bar).await?;
        next = end;
    }
    let load_secs = started.elapsed().as_secs_f64();
    bar.finish_and_clear();
    // Let every node run a few pulls over the loaded partitions before measuring.
    tokio::time::sleep(config.engine.pull_period * 3).await;
    let rss_settled = rss_mib();
    sampler.abort();
    let pending = nodes[0]
        .stats()
        .await?
        .get(MEMORY)
        .map_or(0, |stats| stats.pending);
    let rss_peak = *lock(&peak);
    Ok(MemoryReport {
        tasks: args.memory_tasks,
        load_secs: round3(load_secs),
        load_per_s: (args.memory_tasks as f64 / load_secs).round(),
        pending,
        rss_at_start_mib: rss_at_start.map(round1),
        rss_before_load_mib: rss_before_load.map(round1),
        rss_peak_mib: rss_peak.map(round1),
        rss_settled_mib: rss_settled.map(round1),
        pass: pending >= args.memory_tasks && rss_settled.is_some_and(|rss| rss <= TARGET_RSS_MIB),
    })
}

/// The whole report, as printed (and with `--json`, as JSON).
#[derive(Serialize)]
struct Report {
    redis: String,
    key_prefix: String,
    nodes: u32,
    cpus: usize,
    cpu_model: String,
    precision: Option<PrecisionReport>,
    burst: Option<BurstReport>,
    memory: Option<MemoryReport>,
}

fn verdict(pass: bool) -> &'static str {
    if pass {
        "PASS"
    } else {
        "FAIL"
    }
}

impl Report {
    fn print(&self) {
        if let Some(p) = &self.precision {
            let l = &p.lateness_ms;
            println!(
                "precision  {} tasks due over {}..{} ms, scheduled one by one from {} nodes in {:.2} s ({} tasks/s)",
                p.tasks, p.min_delay_ms, p.max_delay_ms, self.nodes, p.schedule_secs, p.schedule_per_s
            );
            println!(
                "  lateness  p50 {} ms  p90 {} ms  p99 {} ms  p99.9 {} ms  max {} ms  mean {} ms  ({} deliveries, {} early)",
                l.p50, l.p90, l.p99, l.p99_9, l.max, l.mean, p.deliveries, p.early
            );
            let q = &p.lateness_after_scheduling_ms;
            println!(
                "  quiet     p50 {} ms  p90 {} ms  p99 {} ms  p99.9 {} ms  max {} ms  (the {} tasks due after the scheduling ended)",
                q.p50, q.p90, q.p99, q.p99_9, q.max, q.count
            );
            println!(
                "  target    p50 <= {TARGET_P50_MS} ms: {}   p99 <= {TARGET_P99_MS} ms: {}   (all tasks)",
                verdict(p.pass_p50),
                verdict(p.pass_p99)
            );
        }
        if let Some(b) = &self.burst {
            println!(
                "burst      {} tasks due at one instant, loaded with schedule_many in {:.2} s ({} tasks/s), {} ms before due",
                b.tasks, b.load_secs, b.load_per_s, b.slack_ms
            );
            let drained = b
                .drained_after_due_ms
                .map_or("not drained".to_owned(), |ms| format!("all acked +{ms} ms"));
            println!(
                "  fired     first +{} ms, last +{} ms after due: {} tasks/s; {drained}",
                b.first_fire_after_due_ms, b.last_fire_after_due_ms, b.fire_per_s
            );
            let l = &b.lateness_ms;
            println!(
                "  lateness  p50 {} ms  p90 {} ms  p99 {} ms  max {} ms  ({} deliveries, {} with a moved due or a later attempt)",
                l.p50, l.p90, l.p99, l.max, b.deliveries, b.moved
            );
            println!(
                "  target    >= {TARGET_BURST_PER_S} tasks/s: {}",
                verdict(b.pass)
            );
        }
        if let Some(m) = &self.memory {
            let mib = |value: Option<f64>| value.map_or("n/a".to_owned(), |v| format!("{v} MiB"));
            println!(
                "memory     {} tasks pending 1 h ahead ({} counted), loaded in {:.2} s ({} tasks/s)",
                m.tasks, m.pending, m.load_secs, m.load_per_s
            );
            println!(
                "  RSS       at start {}, before loading {}, peak while loading {}, settled {} (whole process: {} nodes and their producers)",
                mib(m.rss_at_start_mib),
                mib(m.rss_before_load_mib),
                mib(m.rss_peak_mib),
                mib(m.rss_settled_mib),
                self.nodes
            );
            println!(
                "  target    settled <= {TARGET_RSS_MIB} MiB: {}",
                verdict(m.pass)
            );
        }
    }
}

/// A progress bar on stderr when it is a terminal, else a hidden one.
fn progress(len: u64, message: &'static str) -> ProgressBar {
    if !std::io::stderr().is_terminal() {
        return ProgressBar::hidden();
    }
    let bar = ProgressBar::new(len).with_message(message);
    if let Ok(style) =
        ProgressStyle::with_template("{msg:24} [{bar:40}] {pos}/{len} {per_sec} {elapsed}")
    {
        bar.set_style(style.progress_chars("=> "));
    }
    bar
}

/// The resident set size of this process in MiB (Linux), from `/proc/self/status`.
fn rss_mib() -> Option<f64> {
    let status = std::fs::read_to_string("/proc/self/status").ok()?;
    let line = status.lines().find(|line| line.starts_with("VmRSS:"))?;
    let kib: f64 = line.split_whitespace().nth(1)?.parse().ok()?;
    Some(kib / 1024.0)
}

fn cpu_model() -> String {
    std::fs::read_to_string("/proc/cpuinfo")
        .ok()
        .and_then(|info| {
            info.lines()
                .find(|line| line.starts_with("model name"))
                .and_then(|line| line.split_once(':'))
                .map(|(_, model)| model.trim().to_owned())
        })
        .unwrap_or_else(|| "unknown CPU".to_owned())
}

fn round1(value: f64) -> f64 {
    (value * 10.0).round() / 10.0
}

fn round3(value: f64) -> f64 {
    (value * 1000.0).round() / 1000.0
}

/// `<base>-<8 hex digits>`: a key prefix no other run uses.
pub(crate) fn unique_prefix(base: &str) -> String {
    format!("{base}-{:08x}", rand::rng().random::<u32>())
}

/// A time after every due time and lease of a run (2^52 ms, exact as a Lua number).
const END_OF_TIME_MS: u64 = 1 << 52;

/// Removes the tasks of `queues` from the store after a run (every node is shut down): pending
/// and in-flight tasks are cancelled, dead letters purged, completion records pruned. What
/// the store API cannot remove stays: the queue registry entry and the cluster's epoch key
/// (a few small keys under the run's unique prefix).
pub(crate) async fn remove_run_data(
    store: Arc<dyn TaskStore>,
    queues: &[&str],
) -> Result<(), BoxError> {
    let known: BTreeMap<String, u32> = store
        .queues()
        .await?
        .into_iter()
        .map(|(queue, partitions)| (queue.as_str().to_owned(), partitions))
        .collect();
    for (queue, partitions) in known
        .into_iter()
        .filter(|(queue, _)| queues.contains(&queue.as_str()))
    {
        let name = delayq_storage::QueueName::new(&queue)?;
        for index in 0..partitions {
            let partition = Partition::new(name.clone(), index);
            // No node runs any more: every lease can be ended, so in-flight tasks become
            // pending and the cancels below take them too.
            while !store
                .requeue_expired(&partition, END_OF_TIME_MS, 10_000)
                .await?
                .is_empty()
            {}
            loop {
                let ids = store
                    .peek_window(&partition, 0, END_OF_TIME_MS, 10_000)
                    .await?;
                if ids.is_empty() {
                    break;
                }
                let cancels: Vec<_> = stream::iter(ids)
                    .map(|(id, _)| {
                        let store = store.clone();
                        let partition = partition.clone();
                        async move { store.cancel(&partition, &id).await }
                    })
                    .buffer_unordered(256)
                    .collect()
                    .await;
                for cancel in cancels {
                    cancel?;
                }
            }
            store.purge_dead(&partition, None).await?;
            while store.prune_done(&partition, END_OF_TIME_MS, 10_000).await? > 0 {}
        }
    }
    Ok(())
}
