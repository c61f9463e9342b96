//! The history-checked soak (issue 17, item 13; guarantees 1–9 from outside).
//!
//! Five `delayq node` processes (`--handler http`, posting every fire to a recorder in this
//! process) serve the API that producers schedule, replace, cancel and resend through, while
//! a fault schedule applies `kill -9`, SIGSTOP/SIGCONT, proxy blackholes and resets between
//! each node and Redis, and Redis restarts from its append-only file (`appendfsync always`);
//! or, with `DELAYQ_SOAK_SENTINEL=1`, runs on a Sentinel set with `SENTINEL FAILOVER`s instead
//! of the proxies and restarts. Every operation is recorded with its answer and every fire
//! with harness-side times; when the load ends and the queues settled, the checker
//! (`common/soak/checker.rs`, a pure function with its own tests) verifies the history
//! offline: nothing lost, nothing early, nothing after `cancelled: true`, a replaced task at
//! its last due only, repeats only where a fault hit the node running them.
//!
//! Parameters (environment):
//! - `DELAYQ_SOAK_SECS` (default 30): seconds of load and faults;
//! - `DELAYQ_SOAK_NODES` (default 5), `DELAYQ_SOAK_PRODUCERS` (default 3),
//!   `DELAYQ_SOAK_RATE` (operations per second over all producers, default 30),
//!   `DELAYQ_SOAK_SEED` (default 17);
//! - `DELAYQ_SOAK_SENTINEL=1`: the Sentinel variant;
//! - `DELAYQ_SOAK_AOF_KEYS=N` (one server): fills Redis with N junk keys once the faults
//!   begin (a stall, recorded as a fault), so every restart loads them (slow restarts);
//! - `DELAYQ_SOAK_FAULTS` (default every kind of the topology): a comma-separated subset of
//!   `kill`, `stop`, `blackhole`, `reset`, `restart`, `failover`, to study one kind;
//! - `DELAYQ_SOAK_OUT`: where `history.json`, `report.md` and the nodes' logs (`nodes/`) go
//!   (default a fresh directory under the target's tmp dir, printed);
//! - `DELAYQ_SOAK_RECHECK=<history.json>`: `recheck_a_saved_history` checks that file again.
//!
//! A long run: `DELAYQ_SOAK_SECS=1800 cargo test --release --test e2e_soak -- --nocapture`.

mod common;
#[path = "common/soak/mod.rs"]
mod soak;

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use rand::SeedableRng;

use soak::checker::{check, Rules};
use soak::cluster::{SoakCluster, LEASE_MS, TTL_MS};
use soak::history::{Clock, History, Recording, RunParams};
use soak::producers::{self, Plan, Shared};
use soak::report::{render, Machine};

/// The longest the recorder holds a fire before it answers 200.
const HOLD_MAX_MS: u64 = 300;
const QUEUES: [&str; 2] = ["soak-a", "soak-b"];

fn parameter(name: &str, default: u64) -> u64 {
    match std::env::var(name) {
        Ok(value) => value
            .parse()
            .unwrap_or_else(|_| panic!("{name}={value:?} is not a whole number")),
        Err(_) => default,
    }
}

fn params() -> RunParams {
    RunParams {
        secs: parameter("DELAYQ_SOAK_SECS", 30),
        nodes: parameter("DELAYQ_SOAK_NODES", 5) as usize,
        producers: parameter("DELAYQ_SOAK_PRODUCERS", 3) as usize,
        rate: parameter("DELAYQ_SOAK_RATE", 30),
        sentinel: parameter("DELAYQ_SOAK_SENTINEL", 0) == 1,
        seed: parameter("DELAYQ_SOAK_SEED", 17),
        hold_max_ms: HOLD_MAX_MS,
        lease_ms: LEASE_MS,
        ttl_ms: TTL_MS,
    }
}

/// The command line that reproduces this run.
fn command_line(params: &RunParams) -> String {
    format!(
        "DELAYQ_SOAK_SECS={} DELAYQ_SOAK_NODES={} DELAYQ_SOAK_PRODUCERS={} DELAYQ_SOAK_RATE={} DELAYQ_SOAK_SEED={}{} cargo test {}--test e2e_soak -- --nocapture",
        params.secs,
        params.nodes,
        params.producers,
        params.rate,
        params.seed,
        if params.sentinel { " DELAYQ_SOAK_SENTINEL=1" } else { "" },
        if cfg!(debug_assertions) { "" } else { "--release " }
    )
}

fn out_dir(params: &RunParams) -> std::path::PathBuf {
    let dir = match std::env::var("DELAYQ_SOAK_OUT") {
        Ok(dir) => std::path::PathBuf::from(dir),
        Err(_) => std::path::Path::new(env!("CARGO_TARGET_TMPDIR")).join(format!(
            "soak-{}s-{}-{}",
            params.secs,
            if params.sentinel {
                "sentinel"
            } else {
                "single"
            },
            std::process::id()
        )),
    };
    std::fs::create_dir_all(&dir).expect("create the soak's output directory");
    dir
}

/// Samples the load average every 5 s until `stop`.
fn sample_load(stop: Arc<AtomicBool>) -> (std::thread::JoinHandle<()>, Arc<Mutex<Vec<f64>>>) {
    let samples = Arc::new(Mutex::new(Vec::new()));
    let into = samples.clone();
    let thread = std::thread::spawn(move || {
        while !stop.load(Ordering::SeqCst) {
            if let Some(load) = Machine::sample() {
                into.lock().expect("load samples").push(load);
            }
            for _ in 0..50 {
                if stop.load(Ordering::SeqCst) {
                    break;
                }
                std::thread::sleep(Duration::from_millis(100));
            }
        }
    });
    (thread, samples)
}

/// Waits until every due is past, the queues have nothing pending or in flight, and no fire
/// came for a lease and a second after that.
fn settle(cluster: &SoakCluster, recording: &Recording, clock: Clock) {
    let queues: Vec<String> = QUEUES.iter().map(|q| (*q).to_owned()).collect();
    let last_due = recording.latest_due();
    while clock.now().wall_ms < last_due + 500 {
        std::thread::sleep(Duration::from_millis(100));
    }
    let deadline = Instant::now() + Duration::from_secs(120);
    loop {
        let quiet_from = recording.fire_count();
        match cluster.settled(&queues) {
            Ok(()) => {
                std::thread::sleep(Duration::from_millis(LEASE_MS + 1_000));
                if recording.fire_count() == quiet_from && cluster.settled(&queues).is_ok() {
                    break;
                }
            }
            Err(state) => assert!(
                Instant::now() < deadline,
                "the queues did not settle within 120 s: {state}\n{}",
                cluster.stderr()
            ),
        }
        std::thread::sleep(Duration::from_millis(300));
    }
    assert_eq!(
        cluster.dead(&queues),
        0,
        "no task may be dead-lettered by faults (max_attempts 25)"
    );
}

fn run(params: RunParams, out: &std::path::Path) -> History {
    let _ = rustls::crypto::ring::default_provider().install_default();
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("a runtime for the recorder and the producers");
    let clock = Clock::start();
    let recording = Recording::default();
    let recorder = soak::recorder::start(&runtime, recording.clone(), clock, HOLD_MAX_MS);
    let mut cluster = SoakCluster::start(
        params.nodes,
        params.sentinel,
        &recorder.url,
        recording.clone(),
        clock,
        out.join("nodes"),
    );
    let stop = Arc::new(AtomicBool::new(false));
    let shared = Shared {
        targets: cluster.targets.clone(),
        recording: recording.clone(),
        clock,
        next_index: Arc::new(AtomicU64::new(0)),
        stop: stop.clone(),
    };
    let plan = Plan {
        producers: params.producers,
        rate: params.rate,
        queues: QUEUES.iter().map(|q| (*q).to_owned()).collect(),
        seed: params.seed,
        min_delay_ms: 150,
        max_delay_ms: 5_000,
        request_timeout: Duration::from_secs(2),
    };
    let started = clock.now();
    let until = Instant::now() + Duration::from_secs(params.secs);
    let producers: Vec<_> = (0..params.producers)
        .map(|number| runtime.spawn(producers::run(number as u32, plan.clone(), shared.clone())))
        .collect();
    let mut rng = rand::rngs::StdRng::seed_from_u64(params.seed);
    let kinds = soak::faults::kinds(params.sentinel, std::env::var("DELAYQ_SOAK_FAULTS").ok());
    soak::faults::run(&mut cluster, &kinds, until, &mut rng, &recording, clock);
    while Instant::now() < until {
        std::thread::sleep(Duration::from_millis(50));
    }
    stop.store(true, Ordering::SeqCst);
    for producer in producers {
        runtime
            .block_on(producer)
            .expect("a producer ended without panicking");
    }
    let load_ended = clock.now();
    eprintln!(
        "soak: load ended after {} ops, {} fires; settling",
        recording.op_count(),
        recording.fire_count()
    );
    settle(&cluster, &recording, clock);
    let ended = clock.now();
    let history = recording.finish(params, started, load_ended, ended);
    drop(cluster);
    runtime.shutdown_timeout(Duration::from_secs(1));
    history
}

fn check_and_report(history: &History, machine: &Machine, out: &std::path::Path, name: &str) {
    let rules = Rules::for_history(history);
    let verdict = check(history, &rules);
    let report = render(history, &verdict, machine, &command_line(&history.params));
    std::fs::write(out.join(name), &report).expect("write the report");
    eprintln!("{report}\nsoak: history and {name} in {}", out.display());
    assert!(
        verdict.violations.is_empty(),
        "the history breaks {} rule(s); see the report above ({})",
        verdict.violations.len(),
        out.join(name).display()
    );
    assert!(
        verdict.counts.fired_groups > 0 && !history.faults.is_empty(),
        "the soak fired nothing or applied no fault"
    );
}

#[test]
fn a_history_of_operations_and_fires_under_faults_keeps_guarantees_1_to_9() {
    let params = params();
    let out = out_dir(&params);
    let mut machine = Machine::read();
    let stop = Arc::new(AtomicBool::new(false));
    let (sampler, samples) = sample_load(stop.clone());
    let history = run(params, &out);
    stop.store(true, Ordering::SeqCst);
    let _ = sampler.join();
    machine.load = samples.lock().expect("load samples").clone();
    let json = serde_json::to_vec(&history).expect("the history as JSON");
    std::fs::write(out.join("history.json"), json).expect("write history.json");
    check_and_report(&history, &machine, &out, "report.md");
}

#[test]
fn recheck_a_saved_history() {
    let Ok(path) = std::env::var("DELAYQ_SOAK_RECHECK") else {
        return;
    };
    let bytes = std::fs::read(&path).unwrap_or_else(|error| panic!("read {path}: {error}"));
    let history: History =
        serde_json::from_slice(&bytes).unwrap_or_else(|error| panic!("{path}: {error}"));
    let out = std::path::Path::new(&path)
        .parent()
        .unwrap_or(std::path::Path::new("."))
        .to_path_buf();
    check_and_report(&history, &Machine::read(), &out, "report-recheck.md");
}
