//! End-to-end, guarantee 11 (pause) through the binary: 3 `delayq node` processes, tasks
//! falling due while the queue is paused fire nothing (also after a node restarts), `stats`
//! shows the queue paused, schedules go on, and resume fires the backlog within a second.

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
