//! The streaming scenario: single `schedule` calls arriving at a steady rate while the tasks
//! scheduled before them fire, and the lateness of every fire (issue 18's precision target).
//!
//! A ticker of [`TICK`] issues, on each tick, the calls the rate owes by then (so a late tick
//! catches up, but with at most four ticks' worth of calls per tick), round-robin
//! over the nodes, each call in its own task; at most [`MAX_IN_FLIGHT`] calls are outstanding
//! (a call that would exceed it is not made, and the achieved rate shows the shortfall). Each
//! task is due uniformly `--min-delay..--spread` after it is scheduled.
//!
//! The fires are split by when they happen: those while the stream runs (the figure the
//! target is held to) and those after it ended (no schedule load competing).

use tokio::sync::Semaphore;
use tokio::time::MissedTickBehavior;

use super::masters::MasterSample;
use super::*;

/// The ticker's period.
const TICK: Duration = Duration::from_millis(1);

/// Schedule calls outstanding at most (over all nodes).
const MAX_IN_FLIGHT: usize = 2_048;

/// What the streaming handler measures.
pub(super) struct StreamProbe {
    /// Lateness of the fires while the stream ran.
    pub(super) during: Mutex<Histogram<u64>>,
    /// Lateness of the fires after the stream ended.
    pub(super) after: Mutex<Histogram<u64>>,
    pub(super) deliveries: AtomicU64,
    pub(super) early: AtomicU64,
    /// When the stream ended (cluster ms; `u64::MAX` until then, so no fire counts as after).
    pub(super) ended_ms: AtomicU64,
    /// When the stream started (cluster ms; 0 until then).
    pub(super) started_ms: AtomicU64,
    /// Lateness by the second (since the stream started) each fire happened in.
    pub(super) by_second: Mutex<Vec<Histogram<u64>>>,
}

impl Default for StreamProbe {
    fn default() -> Self {
        StreamProbe {
            during: Mutex::new(histogram()),
            after: Mutex::new(histogram()),
            deliveries: AtomicU64::new(0),
            early: AtomicU64::new(0),
            ended_ms: AtomicU64::new(u64::MAX),
            started_ms: AtomicU64::new(0),
            by_second: Mutex::new(Vec::new()),
        }
    }
}

/// The no-op handler of the streaming queue: records each fire's lateness.
pub(super) fn streaming_handler(
    probe: Arc<Probe>,
) -> impl Fn(Task) -> std::future::Ready<NoOpResult> + Send + Sync {
    move |task: Task| {
        let stream = &probe.streaming;
        if task.fired_ms < task.due_ms {
            stream.early.fetch_add(1, Ordering::Relaxed);
        }
        let lateness = task.fired_ms.saturating_sub(task.due_ms);
        let after = task.fired_ms >= stream.ended_ms.load(Ordering::Relaxed);
        let phase = if after { &stream.after } else { &stream.during };
        lock(phase).saturating_record(lateness);
        let second = task
            .fired_ms
            .saturating_sub(stream.started_ms.load(Ordering::Relaxed))
            / 1_000;
        // Seconds beyond an hour are not kept (the stream is seconds long).
        if let Ok(second @ 0..=3_600) = usize::try_from(second) {
            let mut seconds = lock(&stream.by_second);
            if seconds.len() <= second {
                seconds.resize_with(second + 1, histogram);
            }
            seconds[second].saturating_record(lateness);
        }
        stream.deliveries.fetch_add(1, Ordering::Relaxed);
        std::future::ready(Ok(()))
    }
}

/// What the producer did.
struct Produced {
    scheduled: u64,
    failed: u64,
    /// Calls not made because [`MAX_IN_FLIGHT`] were outstanding.
    skipped: u64,
    secs: f64,
    /// Latency of the schedule calls, µs.
    call_us: Histogram<u64>,
    /// How late the ticker's ticks ran, µs: the bench runtime's own delay.
    tick_lag_us: Histogram<u64>,
}

pub(super) async fn streaming(
    args: &BenchArgs,
    config: &Config,
    nodes: &[Scheduler],
    probe: &Probe,
    masters: Option<&Masters>,
) -> Result<StreamingReport, BoxError> {
    let before: Option<Vec<MasterSample>> = sample_masters(masters).await;
    let cpu_before = process_cpu_ms();
    probe
        .streaming
        .started_ms
        .store(nodes[0].now_ms(), Ordering::Relaxed);
    // The Redis round trip beside the lateness (none on PostgreSQL).
    let pinger = (config.backend == delayq_engine::config::Backend::Redis)
        .then(|| super::pinger::Pinger::start(config.connect_options()));
    let produced = produce(args, nodes).await;
    let stream = &probe.streaming;
    stream.ended_ms.store(nodes[0].now_ms(), Ordering::Relaxed);
    let cpu_stream = process_cpu_ms();
    let ping_us = match pinger {
        Some(pinger) => tokio::task::spawn_blocking(move || pinger.stop())
            .await
            .ok()
            .flatten(),
        None => None,
    };
    let machine = machine_load();
    let during_masters = sample_masters(masters).await;
    let bar = progress(produced.scheduled, "streaming: firing");
    let deadline = Instant::now() + args.spread + Duration::from_secs(30);
    while stream.deliveries.load(Ordering::Relaxed) < produced.scheduled
        && Instant::now() < deadline
    {
        bar.set_position(stream.deliveries.load(Ordering::Relaxed));
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    bar.finish_and_clear();
    let deliveries = stream.deliveries.load(Ordering::Relaxed);
    let during = Quantiles::of(&lock(&stream.during));
    let bench_cpu_pct = cpu_stream
        .zip(cpu_before)
        .map(|(after, before)| round1((after - before) / 10.0 / produced.secs));
    let redis_masters = master_work(before, during_masters, produced.scheduled);
    let achieved_per_s = (produced.scheduled as f64 / produced.secs).round();
    Ok(StreamingReport {
        rate: args.rate,
        duration_secs: args.duration.as_secs_f64(),
        min_delay_ms: args.min_delay.as_millis() as u64,
        max_delay_ms: args.spread.as_millis() as u64,
        scheduled: produced.scheduled,
        failed: produced.failed,
        skipped: produced.skipped,
        achieved_per_s,
        schedule_call_us: Quantiles::of(&produced.call_us),
        tick_lag_us: Quantiles::of(&produced.tick_lag_us),
        ping_us: ping_us.as_ref().map(Quantiles::of),
        deliveries,
        early: stream.early.load(Ordering::Relaxed),
        pass: deliveries >= produced.scheduled
            && during.count > 0
            && during.p99 <= TARGET_STREAM_P99_MS
            && achieved_per_s >= args.rate as f64 * 0.95,
        lateness_ms: during,
        lateness_after_stream_ms: Quantiles::of(&lock(&stream.after)),
        bench_cpu_pct,
        machine,
        by_second: lock(&stream.by_second)
            .iter()
            .enumerate()
            .map(|(second, histogram)| SecondFigures {
                second: second as u64,
                fires: histogram.len(),
                p50_ms: histogram.value_at_quantile(0.5),
                p99_ms: histogram.value_at_quantile(0.99),
                max_ms: histogram.max(),
            })
            .collect(),
        redis_masters,
    })
}

/// Streams the schedule calls for `--duration` at `--rate`; returns when every call answered.
async fn produce(args: &BenchArgs, nodes: &[Scheduler]) -> Produced {
    let mut rng = rand::rngs::StdRng::seed_from_u64(args.seed);
    let in_flight = Arc::new(Semaphore::new(MAX_IN_FLIGHT));
    let call_us = Arc::new(Mutex::new(histogram()));
    let failed = Arc::new(AtomicU64::new(0));
    let total = (args.rate as f64 * args.duration.as_secs_f64()).round() as u64;
    let bar = progress(total, "streaming: scheduling");
    let mut ticker = tokio::time::interval(TICK);
    ticker.set_missed_tick_behavior(MissedTickBehavior::Skip);
    let per_tick = (args.rate as f64 * TICK.as_secs_f64()).ceil() as u64;
    let started = Instant::now();
    let mut issued = 0u64;
    let mut skipped = 0u64;
    let mut tasks = tokio::task::JoinSet::new();
    let mut tick_lag_us = histogram();
    while issued + skipped < total {
        let tick = ticker.tick().await;
        tick_lag_us.saturating_record(tick.elapsed().as_micros() as u64);
        let owed = ((started.elapsed().as_secs_f64() * args.rate as f64) as u64).min(total);
        // Catch up on what the rate owes, but never more than a few ticks' worth at once.
        let now = owed
            .saturating_sub(issued + skipped)
            .min(per_tick.saturating_mul(4));
        for _ in 0..now {
            let Ok(permit) = in_flight.clone().try_acquire_owned() else {
                skipped += 1;
                continue;
            };
            let node = nodes[(issued % nodes.len() as u64) as usize].clone();
            let delay = rng.random_range(args.min_delay..=args.spread);
            let id = format!("s-{issued}");
            let (call_us, failed) = (call_us.clone(), failed.clone());
            tasks.spawn(async move {
                let call = Instant::now();
                let result = node
                    .schedule(STREAMING, &id, When::In(delay), Bytes::new())
                    .await;
                lock(&call_us).saturating_record(call.elapsed().as_micros() as u64);
                if let Err(error) = result {
                    failed.fetch_add(1, Ordering::Relaxed);
                    tracing::warn!(%error, id, "a streamed schedule failed");
                }
                drop(permit);
            });
            issued += 1;
        }
        // Reap the finished calls so the set does not grow with the run.
        while tasks.try_join_next().is_some() {}
        bar.set_position(issued);
    }
    while tasks.join_next().await.is_some() {}
    let secs = started.elapsed().as_secs_f64();
    bar.finish_and_clear();
    let failed = failed.load(Ordering::Relaxed);
    let call_us = lock(&call_us).clone();
    Produced {
        scheduled: issued - failed,
        failed,
        skipped,
        secs,
        call_us,
        tick_lag_us,
    }
}

/// The machine's load at the end of the stream (Linux): the 1-minute load average and the
/// share of the last 10 s in which some runnable task waited for a CPU (`/proc/pressure/cpu`).
fn machine_load() -> MachineLoad {
    let load_avg_1m = std::fs::read_to_string("/proc/loadavg")
        .ok()
        .and_then(|text| text.split_whitespace().next()?.parse().ok());
    let cpu_pressure_some_pct =
        std::fs::read_to_string("/proc/pressure/cpu")
            .ok()
            .and_then(|text| {
                let some = text.lines().find(|line| line.starts_with("some"))?;
                let avg10 = some
                    .split_whitespace()
                    .find_map(|f| f.strip_prefix("avg10="))?;
                avg10.parse().ok()
            });
    MachineLoad {
        load_avg_1m,
        cpu_pressure_some_pct,
    }
}
