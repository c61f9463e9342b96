//! The twin as a model (issue 17, item 14): random sequences of store operations run against
//! a real store (Redis, and PostgreSQL since issue 25) and the memory store side by side; every
//! answer and the final state must be the same. On a difference, proptest shrinks the sequence to a minimal one, and the test
//! fails with that sequence's transcript (each operation, resolved, with both answers).
//!
//! # What a case is
//! A universe ([`ops::Universe`]: one or two queues of one to four partitions, dedup on or
//! off, a claim byte budget that bites or not) and up to `DELAYQ_MODEL_OPS` operations over
//! five ids, with dues in 10 ms slots around a logical `now` so that ties, replaces, keeps and
//! dedup happen often: `schedule` in every mode (`replace`, `if_absent`, `earlier`, `later`),
//! `schedule_many`, `cancel`, `get`, `claim_due`, `recover_claim`, `ack`, `fail` (retry, dead
//! letter, an invalid retry time), `renew`, moving `now` on so leases expire,
//! `requeue_expired`, `look` (with pruning), `peek_window`, `retry_dead`, `purge_dead`,
//! `prune_done`, `stats`, `list_dead`, `peek_dead`, `set_paused` and `register_queue`; with
//! payloads up to one byte over `max_payload` and due times beyond the year 9999. Leases are
//! kept after use, so stale and superseded tokens come up too. After the last operation the
//! whole state is read from both: `queues`, `paused_queues`, and per partition `stats`, the
//! pending tasks, `list_dead` and `peek_dead`, and `get` of every id.
//!
//! `recover_claim` is compared only within 500 ms of wall time after the partition's latest
//! claim: the Redis backend's receipt expires `max(lease, 1 s)` after the claim on Redis
//! `TIME`, the memory backend's only with the next claim (with a 1.1 s pause before each
//! `recover_claim`, the model shrinks that to schedule, claim, recover).
//!
//! Left out: recurring schedules (their own conformance cases), rate tokens and global slots
//! (engine controls with their own cases), `delete_queue`, the end of the executed retention
//! (real time on both; only 0 and 1 h are drawn), partitions outside a queue's count (the
//! caller routes; only the memory backend checks), and concurrency (each operation runs
//! alone; the conformance suite's `races` cases cover that).
//!
//! # With flow keys (issue 27)
//! `redis_and_memory_keep_per_key_limits_alike` runs the same operations on queues registered
//! with flow keys, over [`ops::FLOW_IDS`] (ids of three keys and some without one), with
//! per-key limits drawn per case (a concurrency of 1 to 3 or none, maybe a rate of 1 or 2 per
//! 20 or 50 ms of the logical clock, maybe FIFO order) set on both stores. Besides every
//! answer, [`limits`] checks each claim against the limits from its own account of the holds,
//! the held keys are compared with that account, and the case ends with a drain
//! (`twins::drain`) after which nothing may be pending, held back or in flight.
//! `DELAYQ_MODEL_FLOW_CASES` (default 60) sizes that run.
//!
//! # Time
//! Every due, `now` and lease deadline is an argument, the same for both stores, counted
//! from [`ops::BASE`] (2023), which is in the past of Redis `TIME`, so the Redis backend's
//! `min(now, TIME)` guards never decide. What the stores stamp themselves (completions,
//! failures, pauses) and the dedup age are real time on both (Redis `TIME`, the memory
//! store's system clock): see [`normal`] for how the stamps are compared.
//!
//! # Running it
//! Each case gets a fresh key prefix (`model-<case>`) on one private `redis-server` (on
//! PostgreSQL: one schema on one private `postgres`, its tables emptied before each case) and a
//! fresh memory store. `DELAYQ_MODEL_CASES` (default 200) and `DELAYQ_MODEL_OPS` (default 40)
//! size the run; the seed is random and printed, and `DELAYQ_MODEL_SEED=<n>` replays a run
//! (the same cases, and the same shrinking unless timing decides, as for `recover_claim`); `DELAYQ_MODEL_TRACE=1` prints every case's
//! transcript.
//!
//! # No regressions file
//! Failure persistence is off: a proptest regressions file stores seeds of the strategy's
//! random stream, which replay something else as soon as the strategy changes, and it is
//! unreadable in review. A divergence this test finds is fixed with a named case in the
//! conformance suite (`tests/conformance`), which runs against every backend for good; the
//! printed seed replays the run meanwhile.

mod limits;
mod normal;
mod ops;
mod twins;

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Mutex, PoisonError};
use std::time::{Instant, SystemTime, UNIX_EPOCH};

use std::future::Future;
use std::pin::Pin;

use delayq_storage::{
    MemoryStore, PostgresStore, PostgresStoreOptions, RedisStore, RedisStoreOptions, StoreOptions,
    TaskStore,
};
use delayq_testkit::{PostgresServer, RedisServer};
use proptest::strategy::{BoxedStrategy, Strategy};
use proptest::test_runner::{Config, RngAlgorithm, TestCaseError, TestError, TestRng, TestRunner};

use crate::ops::{Op, Universe, BASE, MAX_PAYLOAD};
use crate::twins::{Step, Twins};

/// Cases run by default: 7 to 14 s on 2 shared cores.
const DEFAULT_CASES: u32 = 200;

/// The most operations of a case by default.
const DEFAULT_OPS: usize = 40;

/// An environment variable as a number, or `default` when unset.
fn env_number<T: std::str::FromStr>(name: &str, default: T) -> T {
    match std::env::var(name) {
        Ok(text) => text
            .trim()
            .parse()
            .unwrap_or_else(|_| panic!("{name}={text:?} is not a number")),
        Err(_) => default,
    }
}

/// How often each outcome came up over the run (shrinking included).
type Coverage = Mutex<BTreeMap<String, usize>>;

/// The transcript of a case: each operation with its answer, or both answers where they
/// differ.
struct Transcript<'a> {
    lines: String,
    coverage: &'a Coverage,
    /// The real backend's name.
    real: &'static str,
}

impl Transcript<'_> {
    /// Adds `step`; a difference ends the case with the transcript so far.
    fn check(&mut self, label: &str, step: Step) -> Result<(), String> {
        if step.real == step.memory {
            let mut coverage = self.coverage.lock().unwrap_or_else(PoisonError::into_inner);
            for outcome in step.real.coverage() {
                *coverage.entry(outcome).or_default() += 1;
            }
            let answer = readable(&format!("{:?}", step.real));
            let _ = writeln!(self.lines, "{label} {} -> {answer}", step.what);
            return Ok(());
        }
        let _ = writeln!(
            self.lines,
            "{label} {}\n    {:<7} {}\n    memory: {}\n    ^^^ the stores differ",
            step.what,
            format!("{}:", self.real),
            readable(&format!("{:?}", step.real)),
            readable(&format!("{:?}", step.memory)),
        );
        Err(std::mem::take(&mut self.lines))
    }
}

/// `text` with every logical time (a number from `BASE` to `BASE + 10^9`) written `T+n`.
fn readable(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let mut digits = String::new();
    let flush = |digits: &mut String, out: &mut String| {
        match digits.parse::<u64>().ok().and_then(|n| n.checked_sub(BASE)) {
            Some(offset) if offset < 1_000_000_000 => {
                let _ = write!(out, "T+{offset}");
            }
            _ => out.push_str(digits),
        }
        digits.clear();
    };
    for c in text.chars() {
        if c.is_ascii_digit() {
            digits.push(c);
        } else {
            flush(&mut digits, &mut out);
            out.push(c);
        }
    }
    flush(&mut digits, &mut out);
    out
}

/// A real store being made.
type MadeReal = Pin<Box<dyn Future<Output = Result<Box<dyn TaskStore>, String>>>>;

/// A fresh, empty real store for one case (its number) with these options.
type MakeReal = dyn Fn(usize, StoreOptions) -> Pin<Box<dyn Future<Output = Result<Box<dyn TaskStore>, String>>>>
    + Sync;

/// Runs one case: a fresh real store and a fresh memory store, the operations, the final
/// state.
async fn run_case(
    real: (&'static str, &MakeReal),
    case: usize,
    universe: &Universe,
    ops: &[Op],
    coverage: &Coverage,
) -> Result<(), String> {
    let options = StoreOptions {
        max_payload: MAX_PAYLOAD,
        executed_retention_ms: universe.retention_ms,
        max_claim_bytes: universe.max_claim_bytes,
    };
    let (name, make) = real;
    let store = make(case, options).await?;
    let mut twins = Twins::new(name, store, MemoryStore::new(options), universe);
    let mut transcript = Transcript {
        lines: String::new(),
        coverage,
        real: name,
    };
    let _ = writeln!(transcript.lines, "{universe:?}");
    for step in twins.setup().await {
        transcript.check("  setup", step)?;
    }
    for (n, op) in ops.iter().enumerate() {
        twins.begin();
        let step = twins.apply(n, op).await;
        transcript.check(&format!("#{n:<3}"), step)?;
    }
    twins.begin();
    for step in twins.final_state().await {
        transcript.check("  final", step)?;
    }
    if universe.flow.is_some() {
        for step in twins.drain_start().await {
            transcript.check("  drain", step)?;
        }
        let mut finished = false;
        for _ in 0..twins::ROUNDS {
            let (steps, idle) = twins.drain_round().await;
            for step in steps {
                transcript.check("  drain", step)?;
            }
            if idle {
                finished = true;
                break;
            }
        }
        for step in twins.drained(finished).await {
            transcript.check("  after", step)?;
        }
    }
    let violations = twins.violations();
    if std::env::var_os("DELAYQ_MODEL_TRACE").is_some() {
        eprintln!("case {case}:\n{}", transcript.lines);
    }
    if violations.is_empty() {
        Ok(())
    } else {
        Err(format!("{}{}\n", transcript.lines, violations.join("\n")))
    }
}

/// Deletes each operation in turn while the case still fails (then with the new failure's
/// transcript). Proptest's shrinking stops deleting operations once it has begun shrinking
/// their arguments, so its minimal sequence can keep one that an argument shrink made
/// redundant; after this pass every operation left is needed.
fn drop_needless(
    run: impl Fn(&[Op]) -> Result<(), String>,
    mut ops: Vec<Op>,
    mut transcript: String,
) -> (Vec<Op>, String) {
    let mut n = 0;
    while n < ops.len() {
        let mut fewer = ops.clone();
        fewer.remove(n);
        match run(&fewer) {
            Err(fails_still) => (ops, transcript) = (fewer, fails_still),
            Ok(()) => n += 1,
        }
    }
    (ops, transcript)
}

#[test]
fn redis_and_memory_answer_every_operation_sequence_alike() {
    let server = RedisServer::start();
    let make = redis_maker(server.url());
    run_model("redis", &make, Cases::plain(DEFAULT_CASES), || server.log());
}

/// Cases run on queues with flow keys by default: a few seconds on 2 shared cores.
const DEFAULT_FLOW_CASES: u32 = 60;

/// A fresh Redis store per case, on `url`.
fn redis_maker(url: String) -> impl Fn(usize, StoreOptions) -> MadeReal + Sync {
    move |case: usize, options: StoreOptions| {
        let url = url.clone();
        Box::pin(async move {
            let store = RedisStore::connect(RedisStoreOptions {
                key_prefix: format!("model-{case}"),
                store: options,
                ..RedisStoreOptions::standalone(&url)
            })
            .await
            .map_err(|error| format!("connect to {url}: {error}"))?;
            Ok(Box::new(store) as Box<dyn TaskStore>)
        }) as MadeReal
    }
}

/// The model on queues with flow keys (issue 27): ids of a few flow keys and some without,
/// per-key limits drawn per case, both stores compared as above, every claim checked against
/// the limits, and the model drained at the end of each case with no task left behind
/// (`limits`, `twins::drain`). `DELAYQ_MODEL_FLOW_CASES` (default 60) sizes the run.
#[test]
fn redis_and_memory_keep_per_key_limits_alike() {
    let server = RedisServer::start();
    let make = redis_maker(server.url());
    run_model("redis", &make, Cases::flow(DEFAULT_FLOW_CASES), || {
        server.log()
    });
}

/// Cases run on PostgreSQL by default: each operation is a transaction, slower than a script.
const DEFAULT_POSTGRES_CASES: u32 = 60;

#[test]
fn postgres_and_memory_answer_every_operation_sequence_alike() {
    let server = PostgresServer::start();
    let url = server.url();
    let make = move |_case: usize, options: StoreOptions| {
        let url = url.clone();
        Box::pin(async move {
            let mut settings = PostgresStoreOptions::new(&url);
            settings.postgres.schema = "model".to_owned();
            settings.store = options;
            let store = PostgresStore::connect(settings)
                .await
                .map_err(|error| format!("connect to postgres: {error}"))?;
            // One schema for the run, emptied for each case (faster than a schema each).
            store
                .database()
                .run("empty the model schema", |client| {
                    Box::pin(async move {
                        client
                            .batch_execute(
                                "TRUNCATE model.queues, model.partitions, model.tasks, \
                                 model.superseded, model.done, model.ticks, model.paused, \
                                 model.rate_windows, model.global_slots, model.recurring",
                            )
                            .await
                    })
                })
                .await
                .map_err(|error| format!("empty the schema: {error}"))?;
            Ok(Box::new(store) as Box<dyn TaskStore>)
        }) as Pin<Box<dyn Future<Output = Result<Box<dyn TaskStore>, String>>>>
    };
    run_model(
        "postgres",
        &make,
        Cases::plain(DEFAULT_POSTGRES_CASES),
        || server.log_tail(40),
    );
}

/// Which cases a run draws, and how many by default.
struct Cases {
    /// The cases' strategy, given the most operations of a case.
    strategy: fn(usize) -> BoxedStrategy<(Universe, Vec<Op>)>,
    /// The environment variable that sets the number of cases.
    variable: &'static str,
    default: u32,
}

impl Cases {
    /// Cases without flow keys ([`ops::case`]), `DELAYQ_MODEL_CASES` of them.
    fn plain(default: u32) -> Self {
        Cases {
            strategy: |max_ops| ops::case(max_ops).boxed(),
            variable: "DELAYQ_MODEL_CASES",
            default,
        }
    }

    /// Cases on queues with flow keys ([`ops::flow_case`]), `DELAYQ_MODEL_FLOW_CASES` of them.
    fn flow(default: u32) -> Self {
        Cases {
            strategy: |max_ops| ops::flow_case(max_ops).boxed(),
            variable: "DELAYQ_MODEL_FLOW_CASES",
            default,
        }
    }
}

/// Runs the model against `real` (made fresh per case by `make`), `drawn.default` cases
/// unless its variable says otherwise; `log` is the server's log for a failure.
fn run_model(real: &'static str, make: &MakeReal, drawn: Cases, log: impl Fn() -> String) {
    let cases = env_number(drawn.variable, drawn.default);
    let max_ops = env_number("DELAYQ_MODEL_OPS", DEFAULT_OPS);
    let seed = env_number("DELAYQ_MODEL_SEED", {
        let nanos = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map(|elapsed| elapsed.as_nanos() as u64)
            .unwrap_or(0);
        nanos ^ u64::from(std::process::id()).rotate_left(32)
    });
    eprintln!(
        "twin model ({real}): {cases} cases of up to {max_ops} operations, seed {seed} \
         (DELAYQ_MODEL_SEED={seed} replays this run)"
    );
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("a tokio runtime");
    let config = Config {
        cases,
        failure_persistence: None,
        max_shrink_iters: 4_096,
        ..Config::default()
    };
    let seed_bytes: Vec<u8> = seed.to_le_bytes().repeat(4);
    let mut runner = TestRunner::new_with_rng(
        config,
        TestRng::from_seed(RngAlgorithm::ChaCha, &seed_bytes),
    );
    let runs = AtomicUsize::new(0);
    let coverage = Coverage::default();
    let run = |universe: &Universe, ops: &[Op]| {
        let case = runs.fetch_add(1, Ordering::Relaxed);
        runtime.block_on(run_case((real, make), case, universe, ops, &coverage))
    };
    let started = Instant::now();
    let outcome = runner.run(&(drawn.strategy)(max_ops), |(universe, ops)| {
        run(&universe, &ops).map_err(TestCaseError::fail)
    });
    match outcome {
        Ok(()) => {
            let runs = runs.load(Ordering::Relaxed);
            let coverage = coverage
                .into_inner()
                .unwrap_or_else(PoisonError::into_inner);
            let seen: Vec<String> = coverage
                .iter()
                .map(|(outcome, count)| format!("  {count:>6}  {outcome}"))
                .collect();
            eprintln!(
                "twin model ({real}): {cases} cases agreed ({runs} runs) in {:.1?}; outcomes seen:\n{}",
                started.elapsed(),
                seen.join("\n")
            );
        }
        Err(TestError::Fail(transcript, (universe, ops))) => {
            let (ops, transcript) = drop_needless(
                |fewer| run(&universe, fewer),
                ops,
                transcript.message().to_owned(),
            );
            panic!(
                "the {real} and memory stores differ or break a bound (seed {seed}; {} runs, shrinking included, \
                 in {:.1?}). Minimal sequence, {} operations:\n{transcript}\n\
                 as drawn: {universe:?}\n{ops:?}\n{real} server log:\n{}",
                runs.load(Ordering::Relaxed),
                started.elapsed(),
                ops.len(),
                log()
            )
        }
        Err(TestError::Abort(why)) => panic!("twin model ({real}) aborted (seed {seed}): {why}"),
    }
}
