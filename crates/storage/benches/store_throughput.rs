//! Throughput and memory of the Redis task store, next to what the same Redis does raw.
//!
//! ```text
//! cargo bench -p delayq-storage --bench store_throughput
//! ```
//!
//! Each round starts a private `redis-server` (delayq-testkit, no persistence) on this
//! machine and measures:
//! - `schedule`, one at a time, from 64 concurrent callers (a queue of 64 partitions);
//! - `schedule_many` in calls of 1,000 items, one caller, over 64 partitions and into 1;
//! - Redis memory per pending task (50-byte payload, 12-byte ids): `used_memory` delta over
//!   the tasks filled into one partition;
//! - `claim_due` (batch 256) from that partition holding `DELAYQ_BENCH_DUE_TASKS` due tasks:
//!   the first half claimed only, the second half claimed and acked (each batch's acks
//!   concurrently, all on the store's one multiplexed connection).
//!
//! Next to each throughput, the Redis time our scripts took per task (`INFO commandstats`,
//! FCALL and EVALSHA), which says how far Redis itself is from being the bottleneck.
//!
//! After each round, `redis-benchmark` on a fresh server gives the physical limit of the
//! moment: ZADD and `EVAL "return 1" 0`, with and without a pipeline of 16. The medians over
//! the rounds are printed last (per throughput, the median round's figures). Knobs (environment):
//! - `DELAYQ_BENCH_DUE_TASKS` (default 1,000,000): tasks in the claim partition;
//! - `DELAYQ_BENCH_SCHEDULE_TASKS` (default 200,000): tasks per schedule measurement;
//! - `DELAYQ_BENCH_ROUNDS` (default 3);
//! - `DELAYQ_BENCH_PROFILE` (set: print the Redis µs per task of every command the scripts
//!   called, and the rest: Lua and the per-call overhead).

use std::process::Command;
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use delayq_storage::{
    partition_of, NewTask, Partition, QueueName, RedisStore, RedisStoreOptions, ScheduleMode,
    TaskId, TaskStore,
};
use delayq_testkit::RedisServer;
use futures::future::try_join_all;

const T0: u64 = 1_700_000_000_000;
const PAYLOAD_BYTES: usize = 50;
const CALLERS: usize = 64;
const BATCH: usize = 1_000;
const CLAIM_BATCH: usize = 256;
const PARTITIONS: u32 = 64;

struct Config {
    due_tasks: u64,
    schedule_tasks: u64,
    rounds: usize,
}

impl Config {
    fn from_env() -> Self {
        let read = |name: &str, default: u64| {
            std::env::var(name)
                .ok()
                .and_then(|value| value.replace('_', "").parse().ok())
                .unwrap_or(default)
        };
        Config {
            due_tasks: read("DELAYQ_BENCH_DUE_TASKS", 1_000_000).max(2),
            schedule_tasks: read("DELAYQ_BENCH_SCHEDULE_TASKS", 200_000).max(1),
            rounds: read("DELAYQ_BENCH_ROUNDS", 3).max(1) as usize,
        }
    }
}

/// A throughput, and the Redis time it cost (script time from `INFO commandstats`).
#[derive(Clone, Default)]
struct Rate {
    /// Tasks per second seen by the caller.
    tasks_per_second: f64,
    /// Microseconds Redis spent in our scripts per task.
    redis_us_per_task: f64,
    /// Tasks per script call (how well calls were batched).
    tasks_per_call: f64,
    /// Redis µs per task of each command our scripts called, most expensive first.
    profile: Vec<(String, f64)>,
}

/// The figures of one round.
#[derive(Clone, Default)]
struct Round {
    schedule_single: Rate,
    schedule_many_64: Rate,
    schedule_many_1: Rate,
    bytes_per_task: f64,
    claim: Rate,
    claim_ack: Rate,
    ack: f64,
    /// redis-benchmark ops/s on this machine right after the round: ZADD, ZADD -P 16,
    /// EVAL "return 1" 0, the same with -P 16.
    limits: [f64; 4],
}

/// The redis-benchmark runs: label and arguments.
const LIMITS: [(&str, &[&str]); 4] = [
    ("ZADD", &["-t", "zadd", "-r", "1000000"]),
    ("ZADD -P 16", &["-t", "zadd", "-r", "1000000", "-P", "16"]),
    ("EVAL \"return 1\" 0", &["eval", "return 1", "0"]),
    (
        "EVAL \"return 1\" 0 -P 16",
        &["-P", "16", "eval", "return 1", "0"],
    ),
];

type Failure = Box<dyn std::error::Error>;

fn main() -> Result<(), Failure> {
    let config = Config::from_env();
    println!(
        "store_throughput: {} due tasks, {} tasks per schedule run, {} round(s), {}-byte payloads",
        config.due_tasks, config.schedule_tasks, config.rounds, PAYLOAD_BYTES
    );
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()?;
    let mut rounds = Vec::new();
    for number in 1..=config.rounds {
        let load_before = load_average();
        let round = runtime.block_on(run_round(&config))?;
        print_round(
            &format!(
                "round {number} (load average {load_before} before, {} after)",
                load_average()
            ),
            &round,
        );
        rounds.push(round);
    }
    let median = |pick: &dyn Fn(&Round) -> f64| {
        let mut values: Vec<f64> = rounds.iter().map(pick).collect();
        values.sort_by(f64::total_cmp);
        values[values.len() / 2]
    };
    // Per metric, the round with the median throughput, with its own Redis time and profile.
    let median_rate = |pick: fn(&Round) -> &Rate| {
        let mut rates: Vec<&Rate> = rounds.iter().map(pick).collect();
        rates.sort_by(|a, b| a.tasks_per_second.total_cmp(&b.tasks_per_second));
        rates[rates.len() / 2].clone()
    };
    let medians = Round {
        schedule_single: median_rate(|r| &r.schedule_single),
        schedule_many_64: median_rate(|r| &r.schedule_many_64),
        schedule_many_1: median_rate(|r| &r.schedule_many_1),
        bytes_per_task: median(&|r| r.bytes_per_task),
        claim: median_rate(|r| &r.claim),
        claim_ack: median_rate(|r| &r.claim_ack),
        ack: median(&|r| r.ack),
        limits: [0, 1, 2, 3].map(|index| median(&|r| r.limits[index])),
    };
    println!();
    print_round("median", &medians);
    Ok(())
}

fn print_round(label: &str, round: &Round) {
    println!("{label}:");
    println!("                                          tasks/s   Redis µs/task   tasks/call");
    let line = |name: &str, rate: &Rate| {
        println!(
            "  {name:<36} {:>10.0}   {:>13.2}   {:>10.1}",
            rate.tasks_per_second, rate.redis_us_per_task, rate.tasks_per_call
        );
        if std::env::var_os("DELAYQ_BENCH_PROFILE").is_some() {
            let inner: f64 = rate.profile.iter().map(|(_, us)| us).sum();
            let parts: Vec<String> = rate
                .profile
                .iter()
                .map(|(command, us)| format!("{command} {us:.2}"))
                .collect();
            println!(
                "      Redis µs/task: {}; Lua and call overhead {:.2}",
                parts.join(", "),
                rate.redis_us_per_task - inner
            );
        }
    };
    line(
        &format!("schedule, 1 at a time, {CALLERS} callers"),
        &round.schedule_single,
    );
    line(
        &format!("schedule_many x{BATCH}, {PARTITIONS} partitions"),
        &round.schedule_many_64,
    );
    line(
        &format!("schedule_many x{BATCH}, 1 partition"),
        &round.schedule_many_1,
    );
    line(&format!("claim_due x{CLAIM_BATCH}"), &round.claim);
    line(
        &format!("claim_due x{CLAIM_BATCH} + ack each"),
        &round.claim_ack,
    );
    println!("  acks alone                           {:>10.0}", round.ack);
    println!(
        "  memory per pending task              {:>10.1} B ({:.1} B beyond the {PAYLOAD_BYTES}-byte payload)",
        round.bytes_per_task,
        round.bytes_per_task - PAYLOAD_BYTES as f64
    );
    println!("  physical limit (redis-benchmark -n 200000, 50 clients, a fresh server):");
    for ((label, _), ops) in LIMITS.iter().zip(round.limits) {
        println!("    {label:<34} {ops:>10.0} ops/s");
    }
    println!(
        "  ratios: schedule_many (1 partition) / ZADD -P 16 = {:.2}; claim+ack / ZADD -P 16 = {:.2}",
        round.schedule_many_1.tasks_per_second / round.limits[1].max(1.0),
        round.claim_ack.tasks_per_second / round.limits[1].max(1.0)
    );
}

async fn run_round(config: &Config) -> Result<Round, Failure> {
    let server = tokio::task::spawn_blocking(RedisServer::start).await?;
    let store = RedisStore::connect(RedisStoreOptions {
        key_prefix: "bench".to_owned(),
        ..RedisStoreOptions::standalone(server.url())
    })
    .await?;
    let payload = Bytes::from(vec![b'x'; PAYLOAD_BYTES]);
    let mut round = Round::default();

    let single = QueueName::new("single")?;
    store.register_queue(&single, PARTITIONS).await?;
    let stats = ScriptTime::start(&server)?;
    let per_second = schedule_single(&store, &single, config.schedule_tasks, &payload).await?;
    round.schedule_single = stats.rate(&server, per_second, config.schedule_tasks)?;

    let many = QueueName::new("many")?;
    store.register_queue(&many, PARTITIONS).await?;
    let items = (0..config.schedule_tasks).map(|n| {
        let id = task_id(n);
        let partition = Partition::new(many.clone(), partition_of(&id, PARTITIONS));
        (partition, new_task(id, T0 + n, &payload))
    });
    let items = items.collect();
    let stats = ScriptTime::start(&server)?;
    let per_second = schedule_batches(&store, items).await?;
    round.schedule_many_64 = stats.rate(&server, per_second, config.schedule_tasks)?;

    // One partition: filled with schedule_many (measured), then claimed from.
    let claim = QueueName::new("claim")?;
    store.register_queue(&claim, 1).await?;
    let partition = Partition::new(claim, 0);
    let items = (0..config.due_tasks)
        .map(|n| (partition.clone(), new_task(task_id(n), T0 + n, &payload)))
        .collect();
    let before = settled_memory(&server).await;
    let stats = ScriptTime::start(&server)?;
    let per_second = schedule_batches(&store, items).await?;
    round.schedule_many_1 = stats.rate(&server, per_second, config.due_tasks)?;
    let after = settled_memory(&server).await;
    round.bytes_per_task = after.saturating_sub(before) as f64 / config.due_tasks as f64;

    let now = T0 + config.due_tasks;
    let lease = now + 3_600_000;
    let half = config.due_tasks / 2;
    let stats = ScriptTime::start(&server)?;
    let started = Instant::now();
    let mut claimed = 0u64;
    while claimed < half {
        let batch = store
            .claim_due(&partition, now, CLAIM_BATCH, lease, "bench")
            .await?;
        if batch.tasks.is_empty() {
            break;
        }
        claimed += batch.tasks.len() as u64;
    }
    round.claim = stats.rate(&server, rate(claimed, started.elapsed()), claimed)?;

    let stats = ScriptTime::start(&server)?;
    let started = Instant::now();
    let mut acking = Duration::ZERO;
    let mut completed = 0u64;
    loop {
        let batch = store
            .claim_due(&partition, now, CLAIM_BATCH, lease, "bench")
            .await?;
        if batch.tasks.is_empty() {
            break;
        }
        let ack_started = Instant::now();
        try_join_all(batch.tasks.iter().map(|task| store.ack(&task.token))).await?;
        acking += ack_started.elapsed();
        completed += batch.tasks.len() as u64;
    }
    round.claim_ack = stats.rate(&server, rate(completed, started.elapsed()), completed)?;
    round.ack = rate(completed, acking);
    drop(store);
    drop(server);
    round.limits = tokio::task::spawn_blocking(physical_limits).await??;
    Ok(round)
}

/// `count` schedules, one at a time, from [`CALLERS`] concurrent callers.
async fn schedule_single(
    store: &RedisStore,
    queue: &QueueName,
    count: u64,
    payload: &Bytes,
) -> Result<f64, Failure> {
    let store = Arc::new(store.clone());
    let started = Instant::now();
    let callers = (0..CALLERS as u64).map(|caller| {
        let store = Arc::clone(&store);
        let queue = queue.clone();
        let payload = payload.clone();
        tokio::spawn(async move {
            let mut n = caller;
            while n < count {
                let id = task_id(n);
                let partition = Partition::new(queue.clone(), partition_of(&id, PARTITIONS));
                store
                    .schedule(
                        &partition,
                        new_task(id, T0 + n, &payload),
                        ScheduleMode::Upsert,
                    )
                    .await?;
                n += CALLERS as u64;
            }
            Ok::<(), delayq_storage::StorageError>(())
        })
    });
    for result in try_join_all(callers).await? {
        result?;
    }
    Ok(rate(count, started.elapsed()))
}

/// Schedules `items` with `schedule_many` calls of [`BATCH`] items, one after the other.
async fn schedule_batches(
    store: &RedisStore,
    items: Vec<(Partition, NewTask)>,
) -> Result<f64, Failure> {
    let count = items.len() as u64;
    let mut items = items.into_iter();
    let started = Instant::now();
    loop {
        let batch: Vec<_> = items.by_ref().take(BATCH).collect();
        if batch.is_empty() {
            break;
        }
        for result in store.schedule_many(batch, ScheduleMode::Upsert).await? {
            result?;
        }
    }
    Ok(rate(count, started.elapsed()))
}

fn task_id(n: u64) -> TaskId {
    TaskId::new(format!("task-{n:07}")).expect("a valid id")
}

fn new_task(id: TaskId, due_ms: u64, payload: &Bytes) -> NewTask {
    NewTask {
        id,
        due_ms,
        payload: payload.clone(),
        traceparent: None,
    }
}

/// The 1-minute load average (other work on the machine moves every figure).
fn load_average() -> String {
    std::fs::read_to_string("/proc/loadavg")
        .ok()
        .and_then(|text| text.split_whitespace().next().map(str::to_owned))
        .unwrap_or_else(|| "?".to_owned())
}

fn rate(count: u64, elapsed: Duration) -> f64 {
    count as f64 / elapsed.as_secs_f64().max(1e-9)
}

/// `used_memory` once it stops moving: a dict that just grew is rehashed incrementally,
/// and until that ends both of its tables are allocated.
async fn settled_memory(server: &RedisServer) -> u64 {
    let mut last = tokio::task::block_in_place(|| server.used_memory());
    for _ in 0..50 {
        tokio::time::sleep(Duration::from_millis(200)).await;
        let now = tokio::task::block_in_place(|| server.used_memory());
        if now == last {
            break;
        }
        last = now;
    }
    last
}

/// Redis's time in EVALSHA (our scripts, the commands they call included) over a phase.
struct ScriptTime;

impl ScriptTime {
    fn start(server: &RedisServer) -> Result<Self, Failure> {
        server.command(&["CONFIG", "RESETSTAT"])?;
        Ok(ScriptTime)
    }

    fn rate(
        self,
        server: &RedisServer,
        tasks_per_second: f64,
        tasks: u64,
    ) -> Result<Rate, Failure> {
        let info = match server.command(&["INFO", "commandstats"])? {
            redis::Value::BulkString(bytes) => String::from_utf8_lossy(&bytes).into_owned(),
            redis::Value::VerbatimString { text, .. } => text,
            other => format!("{other:?}"),
        };
        // cmdstat_evalsha:calls=200,usec=1643163,usec_per_call=8215.82,...
        let stats: Vec<(String, f64, f64)> = info
            .lines()
            .filter_map(|line| {
                let (name, rest) = line.strip_prefix("cmdstat_")?.split_once(':')?;
                let field = |key: &str| {
                    rest.split(',')
                        .find_map(|pair| pair.strip_prefix(key))
                        .and_then(|value| value.parse::<f64>().ok())
                };
                Some((name.to_owned(), field("calls=")?, field("usec=")?))
            })
            .collect();
        // Script calls: FCALL (Redis Functions) or EVALSHA (Redis 6, Functions off).
        let (calls, usec) = stats
            .iter()
            .filter(|(name, _, _)| matches!(name.as_str(), "evalsha" | "fcall"))
            .fold((0.0, 0.0), |(calls, usec), (_, more_calls, more_usec)| {
                (calls + more_calls, usec + more_usec)
            });
        let per_task = |usec: f64| usec / tasks.max(1) as f64;
        let mut profile: Vec<(String, f64)> = stats
            .iter()
            .filter(|(name, _, _)| {
                !matches!(
                    name.as_str(),
                    "evalsha" | "fcall" | "info" | "config|resetstat"
                )
            })
            .map(|(name, _, usec)| (name.clone(), per_task(*usec)))
            .filter(|(_, us)| *us >= 0.01)
            .collect();
        profile.sort_by(|a, b| b.1.total_cmp(&a.1));
        Ok(Rate {
            tasks_per_second,
            redis_us_per_task: per_task(usec),
            tasks_per_call: tasks as f64 / calls.max(1.0),
            profile,
        })
    }
}

/// `redis-benchmark` against a fresh server: what this machine's Redis does raw, now.
fn physical_limits() -> Result<[f64; 4], std::io::Error> {
    let server = RedisServer::start();
    let port = server.port().to_string();
    let mut limits = [0.0; 4];
    for (limit, (_, arguments)) in limits.iter_mut().zip(LIMITS) {
        let output = Command::new("redis-benchmark")
            .args(["-p", &port, "-n", "200000", "--csv"])
            .args(arguments)
            .output()?;
        // --csv: a header line, then "name","requests per second",...
        *limit = String::from_utf8_lossy(&output.stdout)
            .lines()
            .filter_map(|line| line.split(',').nth(1))
            .filter_map(|field| field.trim_matches('"').parse::<f64>().ok())
            .next_back()
            .unwrap_or(0.0);
    }
    Ok(limits)
}
