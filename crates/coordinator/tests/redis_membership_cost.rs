//! Guarantee 12 and the cost model's membership bullet, measured on a real redis-server: a
//! heartbeat whose membership did not change costs the same number of Redis commands (and
//! bytes) with 5 members as with 50, reads no registry, and changes still reach every node
//! within their bounds at 50 members.

mod common;

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use common::{agree, config, sorted_ids, view, wait_for};
use delayq_coordinator::{Coordinator, RedisCoordinator, SystemClock};
use delayq_redis::{ConnectOptions, Topology};
use delayq_testkit::RedisServer;

/// Long enough for 50 members on a loaded 2-core machine to beat on time.
const PERIOD_MS: u64 = 200;
const TTL_MS: u64 = 1_000;
/// Scheduling slack on a loaded machine.
const SLACK: Duration = Duration::from_millis(700);

/// `INFO commandstats` and `INFO stats`: calls per command, and the total output bytes.
struct Counters {
    calls: BTreeMap<String, u64>,
    output_bytes: u64,
}

impl Counters {
    fn read(server: &RedisServer) -> Self {
        let info = |section: &str| -> String {
            let value = server.command(&["INFO", section]).expect("INFO");
            redis::from_redis_value(value).expect("INFO answers text")
        };
        let mut calls = BTreeMap::new();
        for line in info("commandstats").lines() {
            // cmdstat_evalsha:calls=12,usec=...
            let Some((name, rest)) = line
                .strip_prefix("cmdstat_")
                .and_then(|line| line.split_once(':'))
            else {
                continue;
            };
            let count = rest
                .split(',')
                .find_map(|field| field.strip_prefix("calls="))
                .and_then(|count| count.parse().ok())
                .unwrap_or(0);
            calls.insert(name.to_owned(), count);
        }
        let output_bytes = info("stats")
            .lines()
            .find_map(|line| line.strip_prefix("total_net_output_bytes:"))
            .and_then(|value| value.trim().parse().ok())
            .unwrap_or(0);
        Counters {
            calls,
            output_bytes,
        }
    }

    fn calls(&self, command: &str) -> u64 {
        self.calls.get(command).copied().unwrap_or(0)
    }
}

/// What one script call (a heartbeat) cost Redis on average, idle, over a few periods.
#[derive(Debug)]
struct PerBeat {
    members: usize,
    beats: u64,
    /// Commands (the script call itself and every command it ran), `INFO` left out.
    commands: f64,
    /// Registry reads (`HGETALL`).
    registry_reads: f64,
    /// Bytes Redis sent (replies; no announcement happens while idle).
    output_bytes: f64,
}

async fn join(server: &RedisServer, name: &str) -> Arc<dyn Coordinator> {
    RedisCoordinator::join(
        ConnectOptions::new(Topology::standalone(server.url())),
        config(name, PERIOD_MS, TTL_MS),
        Arc::new(SystemClock),
    )
    .await
    .expect("join")
}

/// `count` members on `server`, once they all agree.
async fn members(server: &RedisServer, count: usize) -> Vec<Arc<dyn Coordinator>> {
    let mut nodes = Vec::new();
    for i in 0..count {
        nodes.push(join(server, &format!("node-{i}")).await);
    }
    let all = sorted_ids(&nodes);
    wait_for(Duration::from_secs(10), || async { agree(&nodes, &all) })
        .await
        .expect("initial agreement");
    nodes
}

/// Measures an idle membership of `count` members for a few periods.
async fn measure(count: usize) -> PerBeat {
    let server = RedisServer::start();
    let nodes = members(&server, count).await;
    // Let the joins' announcements and re-reads settle.
    tokio::time::sleep(Duration::from_millis(3 * PERIOD_MS)).await;
    let epoch = view(nodes[0].as_ref()).epoch;
    let before = Counters::read(&server);
    tokio::time::sleep(Duration::from_millis(10 * PERIOD_MS)).await;
    let after = Counters::read(&server);
    assert!(
        nodes.iter().all(|node| view(node.as_ref()).epoch == epoch),
        "the membership changed while idle"
    );
    let delta = |command: &str| after.calls(command) - before.calls(command);
    let beats = delta("evalsha") + delta("eval");
    let commands: u64 = after
        .calls
        .keys()
        .filter(|command| command.as_str() != "info")
        .map(|command| delta(command))
        .sum();
    for node in &nodes {
        node.leave().await.expect("leave");
    }
    let measured = PerBeat {
        members: count,
        beats,
        commands: commands as f64 / beats as f64,
        registry_reads: delta("hgetall") as f64 / beats as f64,
        output_bytes: (after.output_bytes - before.output_bytes) as f64 / beats as f64,
    };
    assert!(
        measured.beats as usize >= measured.members * 5,
        "too few heartbeats in 10 periods: {measured:?}"
    );
    measured
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_idle_heartbeat_costs_the_same_with_5_and_50_members() {
    let small = measure(5).await;
    let large = measure(50).await;
    eprintln!("{small:?}\n{large:?}");
    assert!(
        large.commands <= small.commands * 1.2 + 0.5,
        "commands per heartbeat grow with the members: {small:?} vs {large:?}"
    );
    assert!(
        large.output_bytes <= small.output_bytes * 1.2 + 16.0,
        "bytes per heartbeat grow with the members: {small:?} vs {large:?}"
    );
    // An unchanged membership is not read again.
    assert!(
        large.registry_reads < 0.05 && small.registry_reads < 0.05,
        "idle heartbeats read the registry: {small:?} vs {large:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn changes_reach_all_50_members_within_their_bounds() {
    let server = RedisServer::start();
    let mut nodes = members(&server, 50).await;
    let before = view(nodes[0].as_ref()).epoch;

    // A death: seen by every survivor within one TTL and one period, with one bump.
    let crashed = nodes.remove(17);
    crashed.crash();
    let survivors = sorted_ids(&nodes);
    let bound = Duration::from_millis(TTL_MS + PERIOD_MS) + SLACK;
    let took = wait_for(bound, || async { agree(&nodes, &survivors) })
        .await
        .unwrap_or_else(|| panic!("the death was not seen by all within {bound:?}"));
    assert_eq!(
        view(nodes[0].as_ref()).epoch,
        before + 1,
        "death seen after {took:?}"
    );

    // A join: seen by every member within one period (the announcement, or the next
    // heartbeat's epoch), and read about once per node.
    tokio::time::sleep(Duration::from_millis(2 * PERIOD_MS)).await;
    let reads_before = Counters::read(&server).calls("hgetall");
    nodes.push(join(&server, "late").await);
    let all = sorted_ids(&nodes);
    let bound = Duration::from_millis(PERIOD_MS) + SLACK;
    wait_for(bound, || async { agree(&nodes, &all) })
        .await
        .unwrap_or_else(|| panic!("the join was not seen by all within {bound:?}"));
    tokio::time::sleep(Duration::from_millis(2 * PERIOD_MS)).await;
    let reads = Counters::read(&server).calls("hgetall") - reads_before;
    eprintln!(
        "registry reads for one join seen by {} nodes: {reads}",
        nodes.len()
    );
    // Once per node, a few twice (a heartbeat sent before the announcement was read).
    assert!(
        reads as usize <= nodes.len() * 3 / 2,
        "{reads} registry reads for one change among {} nodes",
        nodes.len()
    );

    // A leave: seen at once.
    let leaving = nodes.remove(3);
    leaving.leave().await.expect("leave");
    let rest = sorted_ids(&nodes);
    wait_for(bound, || async { agree(&nodes, &rest) })
        .await
        .unwrap_or_else(|| panic!("the leave was not seen by all within {bound:?}"));
    assert_eq!(view(nodes[0].as_ref()).epoch, before + 3);
    for node in &nodes {
        node.leave().await.expect("leave");
    }
}
