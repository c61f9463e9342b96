//! End-to-end, guarantee 11 (pause) through the binary: 3 `delayq node` processes, tasks
//! falling due while the queue is paused fire nothing (also after a node restarts), `stats`
//! shows the queue paused, schedules go on, and resume fires the backlog within a second.
//! `delayq queue delete`: refused while the queue holds tasks (exit 1, naming the counts),
//! `--force` removes them, the node stops serving the queue within about a pull period, and
//! `stats` no longer lists it.

mod common;

use std::time::{Duration, Instant};

use common::{now_ms, wait_until, Env, FireLog, NodeProcess};

#[test]
fn a_paused_queue_fires_nothing_on_any_node_and_resume_fires_its_backlog_at_once() {
    let env = Env::start("queue_defaults:\n  partitions: 8\n");
    let fires = FireLog::default();
    let mut nodes = env.start_nodes(3, &fires);
    env.json(&["schedule", "orders", "warm-up", "--in", "0s"]);
    wait_until(
        Duration::from_secs(20),
        "the warm-up fired",
        || fires.len() == 1,
        String::new,
    );

    let paused = env.json(&["queue", "pause", "orders"]);
    assert_eq!(
        paused,
        serde_json::json!({"queue": "orders", "paused": true})
    );
    let paused_at = now_ms();
    for index in 0..30 {
        let id = format!("o{index}");
        let delay = format!("{}ms", 100 + index * 50);
        env.json(&["schedule", "orders", &id, "--in", &delay]);
    }
    assert_eq!(env.json(&["stats", "--json"])["orders"]["paused"], true);
    // A node restarts while the queue is paused: it respects the pause too.
    let restarted = nodes.remove(0);
    restarted.crash();
    nodes.push(NodeProcess::spawn_into(
        "node-3",
        env.command(&["node"]),
        fires.clone(),
    ));
    std::thread::sleep(Duration::from_secs(3));
    let during: Vec<_> = fires
        .snapshot()
        .into_iter()
        .filter(|fire| fire.fired_ms > paused_at)
        .collect();
    assert!(during.is_empty(), "fired while paused: {during:?}");
    assert_eq!(env.stats("orders")["pending"], 30);

    let resumed = env.json(&["queue", "resume", "orders"]);
    assert_eq!(resumed["paused"], false);
    let started = Instant::now();
    wait_until(
        Duration::from_secs(10),
        "the backlog fired",
        || fires.distinct() == 31,
        || format!("{} fired", fires.distinct()),
    );
    assert!(
        started.elapsed() < Duration::from_millis(1_500),
        "backlog within a second of resume: {:?}",
        started.elapsed()
    );
    assert_eq!(env.json(&["stats", "--json"])["orders"]["paused"], false);
    let unknown = env.run(&["queue", "pause", "no-such-queue"]);
    assert_eq!(unknown.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&unknown.stderr).contains("no-such-queue"));
}

#[test]
fn a_rate_limit_of_200_per_second_holds_across_three_nodes_with_1000_due_at_once() {
    let env = Env::start("queues:\n  metered:\n    partitions: 16\n    rate_limit: 200/s\n");
    let fires = FireLog::default();
    let _nodes = env.start_nodes(3, &fires);
    let due = now_ms() + 1_000;
    let lines: String = (0..1000)
        .map(|index| format!("{{\"id\":\"m{index}\",\"due_ms\":{due}}}\n"))
        .collect();
    common::load_tasks(&env, "metered", &lines, 1000);
    wait_until(
        Duration::from_secs(30),
        "every task fired",
        || fires.distinct() == 1000,
        || format!("{} fired", fires.distinct()),
    );
    let snapshot = fires.snapshot();
    let mut per_second: std::collections::BTreeMap<u64, usize> = Default::default();
    for fire in &snapshot {
        *per_second.entry(fire.fired_ms / 1000).or_insert(0) += 1;
    }
    assert!(
        per_second.values().all(|&count| count <= 200),
        "at most 200 fires in each second of the cluster clock: {per_second:?}"
    );
    // Any sliding second holds at most the limit plus one window's burst.
    let mut times: Vec<u64> = snapshot.iter().map(|fire| fire.fired_ms).collect();
    times.sort_unstable();
    let most_in_a_second = (0..times.len())
        .map(|start| times[start..].partition_point(|&t| t < times[start] + 1_000))
        .max()
        .unwrap_or(0);
    assert!(
        most_in_a_second <= 400,
        "{most_in_a_second} in one sliding second"
    );
    let drain_ms = times[times.len() - 1] - times[0];
    // 1,000 at 200 per second: five windows, so 4 to 5 seconds from the first to the last.
    assert!(
        (3_500..=6_500).contains(&drain_ms),
        "drained in {drain_ms} ms: {per_second:?}"
    );
    eprintln!("rate 200/s, 1000 due at once: drained in {drain_ms} ms, per second {per_second:?}");
}

#[test]
fn global_concurrency_of_5_bounds_slow_exec_handlers_on_three_nodes() {
    let env = Env::start(
        "queues:\n  bounded:\n    partitions: 8\n    concurrency: 10\n    global_concurrency: 5\n",
    );
    let spans = env.dir.path().join("spans");
    std::fs::create_dir_all(&spans).expect("spans dir");
    // Each run writes its own start and end times (ns since the epoch) into one file.
    let script = format!(
        "s=$(date +%s%N); sleep 0.4; echo \"$s $(date +%s%N)\" > {}/$DELAYQ_ID",
        spans.display()
    );
    let _nodes: Vec<NodeProcess> = (0..3)
        .map(|index| {
            NodeProcess::spawn(
                &format!("node-{index}"),
                env.command(&["node", "--handler", "exec", "--", "sh", "-c", &script]),
            )
        })
        .collect();
    env.wait_for_members(3);
    let due = now_ms() + 500;
    let lines: String = (0..30)
        .map(|index| format!("{{\"id\":\"b{index}\",\"due_ms\":{due}}}\n"))
        .collect();
    common::load_tasks(&env, "bounded", &lines, 30);
    wait_until(
        Duration::from_secs(60),
        "every handler ran",
        || std::fs::read_dir(&spans).map_or(0, |dir| dir.count()) == 30,
        String::new,
    );
    let mut events: Vec<(u128, i32)> = Vec::new();
    for entry in std::fs::read_dir(&spans).expect("spans") {
        let text = std::fs::read_to_string(entry.expect("entry").path()).expect("span");
        let mut parts = text
            .split_whitespace()
            .map(|part| part.parse::<u128>().unwrap_or(0));
        let (start, end) = (parts.next().unwrap_or(0), parts.next().unwrap_or(0));
        events.push((start, 1));
        events.push((end, -1));
    }
    events.sort();
    let (mut running, mut most) = (0, 0);
    for (_, change) in events {
        running += change;
        most = most.max(running);
    }
    assert!(most <= 5, "{most} handlers ran at once");
    assert!(most >= 3, "the bound is used: {most}");
}

#[test]
fn queue_delete_refuses_a_queue_with_tasks_and_with_force_removes_it_from_every_node() {
    let env = Env::start("queue_defaults:\n  partitions: 4\n");
    let fires = FireLog::default();
    let node = NodeProcess::spawn_into("node-0", env.command(&["node"]), fires.clone());
    env.wait_for_members(1);
    env.json(&["schedule", "orders", "warm-up", "--in", "0s"]);
    wait_until(
        Duration::from_secs(20),
        "the warm-up fired",
        || fires.len() == 1,
        String::new,
    );
    env.json(&["schedule", "orders", "later", "--in", "1h"]);
    env.json(&["schedule", "orders", "later-2", "--in", "2h"]);
    env.json(&["schedule", "orders-eu", "kept", "--in", "1h"]);

    let refused = env.run(&["queue", "delete", "orders"]);
    let stderr = String::from_utf8_lossy(&refused.stderr).into_owned();
    assert_eq!(refused.status.code(), Some(1), "{stderr}");
    for needle in ["\"orders\"", "2 pending", "0 in-flight", "0 dead", "force"] {
        assert!(
            stderr.contains(needle),
            "the refusal names {needle:?}: {stderr}"
        );
    }
    assert_eq!(env.stats("orders")["pending"], 2, "nothing was deleted");

    let deleted = env.json(&["queue", "delete", "orders", "--force"]);
    assert_eq!(
        deleted,
        serde_json::json!({"queue": "orders", "deleted": true, "tasks": 2})
    );
    let after_delete = Instant::now();
    node.wait_for_stderr("no longer served", Duration::from_secs(5));
    // pull_period is 200 ms; the CLI's own start-up and a loaded machine get the rest.
    assert!(
        after_delete.elapsed() < Duration::from_secs(2),
        "the node dropped the queue after {:?}",
        after_delete.elapsed()
    );
    let stats = env.json(&["stats", "--json"]);
    assert!(
        stats.get("orders").is_none(),
        "stats still lists it: {stats}"
    );
    assert_eq!(
        stats["orders-eu"]["pending"], 1,
        "the other queue is untouched"
    );
    let nodes = env.json(&["nodes", "--json"]);
    assert!(
        nodes[0]["partitions_by_queue"].get("orders").is_none(),
        "{nodes}"
    );

    let unknown = env.run(&["queue", "delete", "orders"]);
    assert_eq!(unknown.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&unknown.stderr).contains("unknown queue \"orders\""));

    // An empty queue goes without --force.
    env.json(&["cancel", "orders-eu", "kept"]);
    assert_eq!(
        env.json(&["queue", "delete", "orders-eu"]),
        serde_json::json!({"queue": "orders-eu", "deleted": true, "tasks": 0})
    );

    // A later schedule creates the queue afresh, and the node serves it again.
    env.json(&["schedule", "orders", "after", "--in", "0s"]);
    wait_until(
        Duration::from_secs(20),
        "the re-created queue fired",
        || fires.snapshot().iter().any(|fire| fire.id == "after"),
        || format!("{:?}", fires.snapshot()),
    );
    assert!(
        !fires
            .snapshot()
            .iter()
            .any(|fire| fire.id.starts_with("later")),
        "a deleted task fired"
    );
}
