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
    let mut nodes: Vec<NodeProcess> = (0..3)
        .map(|index| {
            NodeProcess::spawn_into(
                &format!("node-{index}"),
                env.command(&["node"]),
                fires.clone(),
            )
        })
        .collect();
    env.wait_for_members(3);
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
