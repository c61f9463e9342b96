//! The benchmark's report: the figures of each scenario, the targets they are held to, and
//! the text and JSON forms.

use super::masters::MasterWork;
use super::*;

/// Targets of the engine issue.
pub(super) const TARGET_P50_MS: u64 = 2;

pub(super) const TARGET_P99_MS: u64 = 10;

/// Issue 18: lateness p99 while single schedules stream in.
pub(super) const TARGET_STREAM_P99_MS: u64 = 5;

pub(super) const TARGET_BURST_PER_S: f64 = 50_000.0;

pub(super) const TARGET_RSS_MIB: f64 = 64.0;

/// Lateness quantiles in milliseconds.
#[derive(Serialize)]
pub(super) struct Quantiles {
    pub(super) count: u64,
    pub(super) p50: u64,
    pub(super) p90: u64,
    pub(super) p99: u64,
    pub(super) p99_9: u64,
    pub(super) max: u64,
    pub(super) mean: f64,
}

impl Quantiles {
    pub(super) fn of(histogram: &Histogram<u64>) -> Self {
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
pub(super) struct PrecisionReport {
    pub(super) tasks: u64,
    pub(super) min_delay_ms: u64,
    pub(super) max_delay_ms: u64,
    pub(super) schedule_secs: f64,
    pub(super) schedule_per_s: f64,
    pub(super) deliveries: u64,
    pub(super) early: u64,
    pub(super) lateness_ms: Quantiles,
    /// The same for the tasks due after the scheduling ended.
    pub(super) lateness_after_scheduling_ms: Quantiles,
    pub(super) pass_p50: bool,
    pub(super) pass_p99: bool,
    /// Each master's work over the whole scenario (scheduling and firing).
    pub(super) redis_masters: Option<Vec<MasterWork>>,
}

#[derive(Serialize)]
pub(super) struct StreamingReport {
    /// The asked rate of single schedules per second.
    pub(super) rate: u64,
    pub(super) duration_secs: f64,
    pub(super) min_delay_ms: u64,
    pub(super) max_delay_ms: u64,
    /// Schedules that succeeded.
    pub(super) scheduled: u64,
    pub(super) failed: u64,
    /// Calls not made because too many were outstanding (the stores could not keep up).
    pub(super) skipped: u64,
    /// `scheduled` over the time from the first call to the last answer.
    pub(super) achieved_per_s: f64,
    /// Latency of one `schedule` call (from the producer's side), µs.
    pub(super) schedule_call_us: Quantiles,
    /// How late the producer's 1 ms ticks ran, µs: the delay of the bench's own runtime
    /// (nodes and producer share it).
    pub(super) tick_lag_us: Quantiles,
    /// `PING` round trips from a thread and a connection of their own, every 5 ms while
    /// streaming, µs: Redis's own delay in answering (and the OS's in running that thread).
    pub(super) ping_us: Option<Quantiles>,
    pub(super) deliveries: u64,
    pub(super) early: u64,
    /// Lateness of the fires while the stream ran (the target's figure).
    pub(super) lateness_ms: Quantiles,
    /// Lateness of the fires after the stream ended.
    pub(super) lateness_after_stream_ms: Quantiles,
    /// This process's CPU (producer and all nodes) while streaming, % of one core.
    pub(super) bench_cpu_pct: Option<f64>,
    /// How busy the machine was (other processes included) when the stream ended.
    pub(super) machine: MachineLoad,
    /// Lateness by the second of the run each fire happened in (0: the stream's first).
    pub(super) by_second: Vec<SecondFigures>,
    pub(super) pass: bool,
    /// Each master's work while streaming (schedules and the fires meanwhile), per scheduled task.
    pub(super) redis_masters: Option<Vec<MasterWork>>,
}

/// The machine's load at a moment (Linux; `None` where it cannot be read).
#[derive(Serialize)]
pub(super) struct MachineLoad {
    pub(super) load_avg_1m: Option<f64>,
    /// `/proc/pressure/cpu` `some avg10`: % of the last 10 s with a runnable task waiting.
    pub(super) cpu_pressure_some_pct: Option<f64>,
}

/// The fires of one second of a streaming run.
#[derive(Serialize)]
pub(super) struct SecondFigures {
    pub(super) second: u64,
    pub(super) fires: u64,
    pub(super) p50_ms: u64,
    pub(super) p99_ms: u64,
    pub(super) max_ms: u64,
}

#[derive(Serialize)]
pub(super) struct BurstReport {
    pub(super) tasks: u64,
    pub(super) load_secs: f64,
    pub(super) load_per_s: f64,
    /// The loading ended this long before the due instant (negative: after it).
    pub(super) slack_ms: i64,
    pub(super) deliveries: u64,
    pub(super) first_fire_after_due_ms: u64,
    pub(super) last_fire_after_due_ms: u64,
    pub(super) fire_per_s: f64,
    /// Deliveries of a task whose due time had moved or whose attempt was not the first
    /// (a lease that ran out, a retry): expected 0.
    pub(super) moved: u64,
    /// When the last task was acknowledged (nothing pending or in flight), after the due instant.
    pub(super) drained_after_due_ms: Option<u64>,
    pub(super) lateness_ms: Quantiles,
    pub(super) pass: bool,
    /// Each master's work in the fire phase (from the end of the loading to the last ack).
    pub(super) redis_masters: Option<Vec<MasterWork>>,
    /// This process's CPU time (all nodes) per task in the fire phase, µs.
    pub(super) nodes_cpu_us_per_task: Option<f64>,
}

#[derive(Serialize)]
pub(super) struct MemoryReport {
    pub(super) tasks: u64,
    pub(super) load_secs: f64,
    pub(super) load_per_s: f64,
    pub(super) pending: u64,
    /// RSS of the whole bench process (all nodes and producers), MiB.
    pub(super) rss_at_start_mib: Option<f64>,
    pub(super) rss_before_load_mib: Option<f64>,
    pub(super) rss_peak_mib: Option<f64>,
    pub(super) rss_settled_mib: Option<f64>,
    pub(super) pass: bool,
}

/// The whole report, as printed (and with `--json`, as JSON).
#[derive(Serialize)]
pub(super) struct Report {
    /// The topology, without passwords.
    pub(super) redis: String,
    /// `standalone`, `cluster` or `sentinel`.
    pub(super) topology: String,
    /// Masters serving the run (0: unknown).
    pub(super) masters: usize,
    pub(super) key_prefix: String,
    pub(super) nodes: u32,
    pub(super) cpus: usize,
    pub(super) cpu_model: String,
    pub(super) precision: Option<PrecisionReport>,
    pub(super) streaming: Option<StreamingReport>,
    pub(super) burst: Option<BurstReport>,
    pub(super) memory: Option<MemoryReport>,
}

pub(super) fn verdict(pass: bool) -> &'static str {
    if pass {
        "PASS"
    } else {
        "FAIL"
    }
}

impl Report {
    pub(super) fn print(&self) {
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
            print_masters(p.redis_masters.as_deref(), "scheduling and firing");
        }
        if let Some(s) = &self.streaming {
            s.print(self.nodes);
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
            if let Some(cpu) = b.nodes_cpu_us_per_task {
                println!("  nodes     {cpu:.1} us of CPU per task in this process (fire phase)");
            }
            print_masters(b.redis_masters.as_deref(), "fire phase");
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

impl StreamingReport {
    fn print(&self, nodes: u32) {
        println!(
            "streaming  {} schedules/s asked for {} s over {nodes} nodes, due {}..{} ms ahead: {} scheduled ({} tasks/s achieved, {} failed, {} not sent: too many outstanding)",
            self.rate, self.duration_secs, self.min_delay_ms, self.max_delay_ms, self.scheduled,
            self.achieved_per_s, self.failed, self.skipped
        );
        let c = &self.schedule_call_us;
        println!(
            "  schedule  one call p50 {} us  p99 {} us  max {} us",
            c.p50, c.p99, c.max
        );
        let t = &self.tick_lag_us;
        println!(
            "  runtime   1 ms ticks late by p50 {} us  p99 {} us  max {} us (the bench runtime's delay)",
            t.p50, t.p99, t.max
        );
        if let Some(p) = &self.ping_us {
            println!(
                "  redis     PING from a thread of its own p50 {} us  p99 {} us  max {} us",
                p.p50, p.p99, p.max
            );
        }
        let l = &self.lateness_ms;
        println!(
            "  lateness  p50 {} ms  p90 {} ms  p99 {} ms  p99.9 {} ms  max {} ms  mean {} ms  ({} fires while streaming)",
            l.p50, l.p90, l.p99, l.p99_9, l.max, l.mean, l.count
        );
        let a = &self.lateness_after_stream_ms;
        println!(
            "  after     p50 {} ms  p99 {} ms  p99.9 {} ms  max {} ms  ({} fires after the stream; {} deliveries in all, {} early)",
            a.p50, a.p99, a.p99_9, a.max, a.count, self.deliveries, self.early
        );
        if let Some(cpu) = self.bench_cpu_pct {
            println!("  process   {cpu} % of one core while streaming (producer and nodes)");
        }
        let shown = |value: Option<f64>| value.map_or("n/a".to_owned(), |v| v.to_string());
        println!(
            "  machine   load average {}, CPU pressure {} % (some, last 10 s) as the stream ended",
            shown(self.machine.load_avg_1m),
            shown(self.machine.cpu_pressure_some_pct)
        );
        let seconds: Vec<String> = self
            .by_second
            .iter()
            .map(|s| format!("{}:{}", s.second, s.p99_ms))
            .collect();
        println!(
            "  p99/s     {} (second of the run: p99 ms)",
            seconds.join(" ")
        );
        println!(
            "  target    p99 <= {TARGET_STREAM_P99_MS} ms while streaming at >= 95 % of the rate: {}",
            verdict(self.pass)
        );
        print_masters(
            self.redis_masters.as_deref(),
            "while streaming, per scheduled task",
        );
    }
}

/// One line per master: its share of the script calls and its CPU time per task.
fn print_masters(masters: Option<&[MasterWork]>, phase: &str) {
    let Some(masters) = masters else {
        return;
    };
    let total: f64 = masters.iter().map(|m| m.cpu_us_per_task).sum();
    println!("  redis     {total:.1} us of Redis CPU per task ({phase}), by master:");
    for m in masters {
        println!(
            "            {:<21} {:>5.1} % of script calls ({}), {:.1} us CPU per task ({} ms)",
            m.address, m.share_pct, m.script_calls, m.cpu_us_per_task, m.cpu_ms
        );
    }
}

/// The resident set size of this process in MiB (Linux), from `/proc/self/status`.
pub(super) fn rss_mib() -> Option<f64> {
    let status = std::fs::read_to_string("/proc/self/status").ok()?;
    let line = status.lines().find(|line| line.starts_with("VmRSS:"))?;
    let kib: f64 = line.split_whitespace().nth(1)?.parse().ok()?;
    Some(kib / 1024.0)
}

/// The CPU time (user + system, all threads) this process used so far in ms (Linux), from
/// `/proc/self/stat` (in clock ticks, 100 per second on Linux).
pub(super) fn process_cpu_ms() -> Option<f64> {
    let stat = std::fs::read_to_string("/proc/self/stat").ok()?;
    // The fields after the command name (which may hold spaces): state is field 3, utime 14.
    let fields: Vec<&str> = stat.rsplit_once(')')?.1.split_whitespace().collect();
    let ticks = |index: usize| fields.get(index)?.parse::<f64>().ok();
    Some((ticks(11)? + ticks(12)?) * 10.0)
}

pub(super) fn cpu_model() -> String {
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

pub(super) fn round1(value: f64) -> f64 {
    (value * 10.0).round() / 10.0
}

pub(super) fn round3(value: f64) -> f64 {
    (value * 1000.0).round() / 1000.0
}
