//! The benchmark's scenarios (precision, burst, memory; streaming has its own module), their no-op handlers and the probe
//! that records every delivery.

use super::masters::{work, MasterSample, MasterWork};
use super::*;

/// Tasks per `schedule_many` call.
pub(super) const CHUNK: usize = 5_000;

/// Single `schedule` calls in flight per node.
pub(super) const SCHEDULE_CONCURRENCY: usize = 64;

/// What the handlers measure.
pub(super) struct Probe {
    pub(super) precision: Mutex<Histogram<u64>>,
    pub(super) precision_deliveries: AtomicU64,
    pub(super) precision_early: AtomicU64,
    /// Lateness of the tasks due after the scheduling ended (no load competing with firing).
    pub(super) precision_quiet: Mutex<Histogram<u64>>,
    /// When the scheduling ended (cluster ms; `u64::MAX` until then).
    pub(super) precision_quiet_from_ms: AtomicU64,
    /// What the streaming scenario measures.
    pub(super) streaming: StreamProbe,
    pub(super) burst: Mutex<Histogram<u64>>,
    pub(super) burst_deliveries: AtomicU64,
    pub(super) burst_first_ms: AtomicU64,
    pub(super) burst_last_ms: AtomicU64,
    /// The instant every burst task is due at.
    pub(super) burst_due_ms: AtomicU64,
    /// Burst deliveries whose task carried another due time, or a later attempt.
    pub(super) burst_moved: AtomicU64,
}

impl Default for Probe {
    fn default() -> Self {
        Probe {
            precision: Mutex::new(histogram()),
            precision_deliveries: AtomicU64::new(0),
            precision_early: AtomicU64::new(0),
            precision_quiet: Mutex::new(histogram()),
            precision_quiet_from_ms: AtomicU64::new(u64::MAX),
            streaming: StreamProbe::default(),
            burst: Mutex::new(histogram()),
            burst_deliveries: AtomicU64::new(0),
            burst_first_ms: AtomicU64::new(u64::MAX),
            burst_last_ms: AtomicU64::new(0),
            burst_due_ms: AtomicU64::new(0),
            burst_moved: AtomicU64::new(0),
        }
    }
}

pub(super) type NoOpResult = Result<(), std::convert::Infallible>;

pub(super) fn precision_handler(
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

pub(super) fn burst_handler(
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

pub(super) async fn precision(
    args: &BenchArgs,
    nodes: &[Scheduler],
    probe: &Probe,
    masters: Option<&Masters>,
) -> Result<PrecisionReport, BoxError> {
    let before = sample_masters(masters).await;
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
    let redis_masters = master_work(before, sample_masters(masters).await, args.tasks);
    let lateness = Quantiles::of(&lock(&probe.precision));
    let deliveries = probe.precision_deliveries.load(Ordering::Relaxed);
    Ok(PrecisionReport {
        redis_masters,
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

pub(super) async fn burst(
    args: &BenchArgs,
    nodes: &[Scheduler],
    probe: &Probe,
    masters: Option<&Masters>,
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
    // The fire phase's work: from the end of the loading to the last ack.
    let before = sample_masters(masters).await;
    let cpu_before = process_cpu_ms();
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
    let nodes_cpu_us_per_task = process_cpu_ms()
        .zip(cpu_before)
        .map(|(after, before)| round1((after - before) * 1_000.0 / args.burst as f64));
    let redis_masters = master_work(before, sample_masters(masters).await, args.burst);
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
        redis_masters,
        nodes_cpu_us_per_task,
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

/// Every master's counters, when the masters are known (a failed sample only costs the
/// per-master figures).
pub(super) async fn sample_masters(masters: Option<&Masters>) -> Option<Vec<MasterSample>> {
    match masters?.sample().await {
        Ok(samples) => Some(samples),
        Err(error) => {
            tracing::warn!(%error, "sampling the Redis masters failed");
            None
        }
    }
}

/// Each master's work between two samples, for `tasks` tasks.
pub(super) fn master_work(
    before: Option<Vec<MasterSample>>,
    after: Option<Vec<MasterSample>>,
    tasks: u64,
) -> Option<Vec<MasterWork>> {
    Some(work(&before?, &after?, tasks))
}

/// Polls the stats until nothing of `queue` is pending or in flight; returns when (cluster ms).
pub(super) async fn drained(
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
pub(super) async fn load(
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
                    mode: Default::default(),
                    traceparent: None,
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

pub(super) async fn memory(
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

/// A progress bar on stderr when it is a terminal, else a hidden one.
pub(super) fn progress(len: u64, message: &'static str) -> ProgressBar {
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
