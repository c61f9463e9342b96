//! The fault schedule: one fault at a time, each kind in turn (a shuffled round of every
//! kind the topology has, again and again), on a random node slot, with a random
//! duration, and a pause between faults. Each fault is recorded with its interval and the
//! node id it hit once it healed.
//!
//! With one Redis server: `kill -9` (and a new process in the slot), SIGSTOP/SIGCONT, a
//! proxy blackhole, proxy resets, a Redis restart from its append-only file. With Sentinel
//! (the nodes reach the sentinels and the data nodes directly, so there is no proxy and no
//! single server to restart): `kill -9`, SIGSTOP/SIGCONT and `SENTINEL FAILOVER`.

use std::time::{Duration, Instant};

use rand::rngs::StdRng;
use rand::seq::SliceRandom;
use rand::Rng;

use delayq_testkit::SentinelSet;

use super::cluster::{SoakCluster, Store};
use super::history::{Clock, Fault, FaultKind, Recording};

/// The fault kinds of a topology, or those of `only` (a comma-separated subset of `kill`,
/// `stop`, `blackhole`, `reset`, `restart`, `failover`).
pub fn kinds(sentinel: bool, only: Option<String>) -> Vec<FaultKind> {
    let all = if sentinel {
        vec![FaultKind::Kill, FaultKind::Stop, FaultKind::Failover]
    } else {
        vec![
            FaultKind::Kill,
            FaultKind::Stop,
            FaultKind::Blackhole,
            FaultKind::Reset,
            FaultKind::RedisRestart,
        ]
    };
    let Some(only) = only else { return all };
    let chosen: Vec<FaultKind> = only
        .split(',')
        .map(|name| match name.trim() {
            "kill" => FaultKind::Kill,
            "stop" => FaultKind::Stop,
            "blackhole" => FaultKind::Blackhole,
            "reset" => FaultKind::Reset,
            "restart" => FaultKind::RedisRestart,
            "failover" => FaultKind::Failover,
            other => panic!("DELAYQ_SOAK_FAULTS: unknown fault kind {other:?}"),
        })
        .collect();
    for kind in &chosen {
        assert!(
            all.contains(kind),
            "DELAYQ_SOAK_FAULTS: {} is not a fault of this topology",
            kind.name()
        );
    }
    chosen
}

fn ms(rng: &mut StdRng, range: std::ops::RangeInclusive<u64>) -> Duration {
    Duration::from_millis(rng.random_range(range))
}

/// Applies faults until `until`; the last one ends (heals) before it returns.
pub fn run(
    cluster: &mut SoakCluster,
    kinds: &[FaultKind],
    until: Instant,
    rng: &mut StdRng,
    recording: &Recording,
    clock: Clock,
) {
    let mut round: Vec<FaultKind> = Vec::new();
    // A calm start, so the first operations meet a healthy cluster.
    std::thread::sleep(Duration::from_secs(2).min(until.saturating_duration_since(Instant::now())));
    slow_restarts(cluster, recording, clock);
    while Instant::now() + Duration::from_secs(4) < until {
        if round.is_empty() {
            round = kinds.to_vec();
            round.shuffle(rng);
        }
        let kind = round.pop().expect("a kind");
        let slot = rng.random_range(0..cluster.slots.len());
        if let (FaultKind::Failover, Store::Sentinel(set)) = (kind, &cluster.store) {
            // The previous failover's demoted master must have resynced first.
            set.wait_for_replicas_online(2, Duration::from_secs(60));
        }
        let start = clock.now();
        let node = match kind {
            FaultKind::Kill => {
                let id = cluster.crash(slot);
                std::thread::sleep(ms(rng, 200..=1_500));
                cluster.spawn(slot);
                Some(id)
            }
            FaultKind::Stop => {
                cluster.signal(slot, "-STOP");
                std::thread::sleep(ms(rng, 1_200..=3_500));
                cluster.signal(slot, "-CONT");
                Some(cluster.slots[slot].node_id.clone())
            }
            FaultKind::Blackhole | FaultKind::Reset => {
                let proxy = cluster.slots[slot].proxy.as_ref().expect("a proxy");
                let hold = if kind == FaultKind::Blackhole {
                    proxy.blackhole();
                    ms(rng, 1_200..=3_500)
                } else {
                    proxy.reset();
                    ms(rng, 200..=1_000)
                };
                std::thread::sleep(hold);
                proxy.pass();
                Some(cluster.slots[slot].node_id.clone())
            }
            FaultKind::RedisRestart => {
                let down = ms(rng, 0..=1_000);
                if let Store::Single(redis) = &mut cluster.store {
                    redis.stop();
                    std::thread::sleep(down);
                    redis.restart();
                }
                None
            }
            FaultKind::Failover => {
                if let Store::Sentinel(set) = &cluster.store {
                    failover(set);
                }
                None
            }
            // Not in a schedule's kinds: once, at the start (`slow_restarts`).
            FaultKind::Stall => None,
        };
        let end = clock.now();
        recording.fault(Fault {
            kind,
            slot: node.as_ref().map(|_| slot),
            node,
            start,
            end,
        });
        std::thread::sleep(ms(rng, 500..=2_000));
    }
}

/// With `DELAYQ_SOAK_AOF_KEYS=N` (one server only): fills Redis with N junk keys (`DEBUG
/// POPULATE`, which stalls it for a second or two while the load runs: recorded as a fault)
/// and rewrites the AOF, so that every restart then loads them and answers `LOADING` for a
/// while (1.5 M keys: 1–3 s on the 2-core machine), as a big production instance does.
fn slow_restarts(cluster: &SoakCluster, recording: &Recording, clock: Clock) {
    let keys: u64 = match std::env::var("DELAYQ_SOAK_AOF_KEYS") {
        Ok(value) => value
            .parse()
            .unwrap_or_else(|_| panic!("DELAYQ_SOAK_AOF_KEYS={value:?} is not a whole number")),
        Err(_) => 0,
    };
    let Store::Single(redis) = &cluster.store else {
        return;
    };
    if keys == 0 {
        return;
    }
    let start = clock.now();
    redis
        .command(&["DEBUG", "POPULATE", &keys.to_string(), "soak-junk"])
        .expect("DEBUG POPULATE");
    recording.fault(Fault {
        kind: FaultKind::Stall,
        node: None,
        slot: None,
        start,
        end: clock.now(),
    });
    redis.command(&["BGREWRITEAOF"]).expect("BGREWRITEAOF");
    // The rewrite runs in a child; it is done well within this for a few million keys.
    std::thread::sleep(Duration::from_secs(5));
}

/// A planned failover, asked again (up to three times) when the sentinels abort one (on the
/// loaded 2-core machine a promotion can outlast their 5 s failover timeout); they refuse a
/// new one of the same master for twice that timeout, so each retry waits 11 s and for both
/// replicas to be online.
fn failover(set: &SentinelSet) {
    let mut errors = Vec::new();
    for _ in 0..3 {
        match set.try_failover(Duration::from_secs(20)) {
            Ok(_) => return,
            Err(error) => errors.push(error),
        }
        std::thread::sleep(Duration::from_secs(11));
        set.wait_for_replicas_online(2, Duration::from_secs(60));
    }
    panic!(
        "three failovers did not complete: {errors:?}\n{}",
        set.logs()
    );
}
