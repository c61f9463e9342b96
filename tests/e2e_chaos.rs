//! End-to-end chaos: five `delayq node` processes fire a load of tasks while, every two
//! seconds, a random one is killed with SIGKILL and restarted. Every task must fire, none
//! early; a task may fire twice only when the node that fired it first was killed before it
//! could ack (it was in flight at the kill).
//!
//! Parameters (environment): `DELAYQ_CHAOS_ROUNDS` (kills, default 8), `DELAYQ_CHAOS_TASKS`
//! (default 20000), `DELAYQ_CHAOS_SEED` (default 42). The tasks are spread over the rounds,
//! so a long run is e.g. `DELAYQ_CHAOS_ROUNDS=300 DELAYQ_CHAOS_TASKS=300000 cargo test
//! --release --test e2e_chaos -- --nocapture`.

mod common;

use std::collections::HashMap;
use std::time::{Duration, Instant};

use common::{by_id, lateness_summary, load_tasks, now_ms, task_lines, Env, FireLog, NodeProcess};
use rand::{Rng, SeedableRng};

const NODES: usize = 5;
const KILL_PERIOD: Duration = Duration::from_secs(2);
/// How far apart the test's clock and the cluster clock (Redis on this machine) may be.
const CLOCK_SLACK_MS: u64 = 250;
/// The latest a first fire may precede the kill of its node and still count as "in flight
/// at the kill": the log handler acks within milliseconds, so this is generous.
const IN_FLIGHT_WINDOW_MS: u64 = 5_000;

fn parameter(name: &str, default: u64) -> u64 {
    match std::env::var(name) {
        Ok(value) => value
            .parse()
            .unwrap_or_else(|_| panic!("{name}={value:?} is not a whole number")),
        Err(_) => default,
    }
}

#[test]
fn sigkill_of_a_random_node_every_two_seconds_loses_no_task() {
    let rounds = parameter("DELAYQ_CHAOS_ROUNDS", 8);
    let count = parameter("DELAYQ_CHAOS_TASKS", 20_000) as usize;
    let seed = parameter("DELAYQ_CHAOS_SEED", 42);
    let span_ms = rounds * KILL_PERIOD.as_millis() as u64;

    let env = Env::start("queue_defaults:\n  partitions: 32\n");
    let fires = FireLog::default();
    let spawn = |slot: usize, generation: usize| {
        NodeProcess::spawn_into(
            &format!("slot{slot}-gen{generation}"),
            env.command(&["node"]),
            fires.clone(),
        )
    };
    let mut slots: Vec<Option<NodeProcess>> = (0..NODES).map(|slot| Some(spawn(slot, 0))).collect();
    env.wait_for_members(NODES);
    load_tasks(
        &env,
        "chaos",
        &task_lines(count, 500..span_ms + 500, seed),
        count as u64,
    );

    let mut rng = rand::rngs::StdRng::seed_from_u64(seed);
    let mut kills: HashMap<String, u64> = HashMap::new();
    let started = Instant::now();
    for round in 1..=rounds {
        // The kill schedule itself: one kill every KILL_PERIOD.
        let next = KILL_PERIOD * round as u32;
        if let Some(wait) = next.checked_sub(started.elapsed()) {
            std::thread::sleep(wait);
        }
        let slot = rng.random_range(0..NODES);
        let victim = slots[slot].take().expect("every slot holds a node");
        let id = victim.node_id();
        kills.insert(id, now_ms());
        victim.crash();
        slots[slot] = Some(spawn(slot, round as usize));
    }

    env.wait_for_every_fire(&fires, "chaos", count, Duration::from_secs(60));

    let fires = fires.snapshot();
    let grouped = by_id(&fires);
    assert_eq!(grouped.len(), count, "distinct tasks fired");
    let mut duplicates = 0;
    for (id, mut times) in grouped {
        for fire in &times {
            assert!(
                fire.fired_ms >= fire.due_ms,
                "task {id} fired {} ms early: {fire:?}",
                fire.due_ms - fire.fired_ms
            );
        }
        times.sort_by_key(|fire| fire.fired_ms);
        // Every fire but the last must have been cut short by its node's death.
        for earlier in &times[..times.len() - 1] {
            duplicates += 1;
            let killed_at = kills.get(&earlier.node).copied().unwrap_or_else(|| {
                panic!("task {id} fired again although its node was not killed: {times:?}")
            });
            assert!(
                killed_at + CLOCK_SLACK_MS >= earlier.fired_ms
                    && killed_at <= earlier.fired_ms + IN_FLIGHT_WINDOW_MS,
                "task {id} fired twice, but its first fire at {} was not in flight at the kill of its node at {killed_at}: {times:?}",
                earlier.fired_ms
            );
        }
    }
    eprintln!(
        "chaos: {count} tasks, {rounds} kills, {duplicates} duplicate fires (tasks in flight at a kill), seed {seed}; {}",
        lateness_summary(&fires)
    );
}
