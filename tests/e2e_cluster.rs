//! End-to-end: several `delayq node` processes share the work of one queue; every task fires
//! exactly once and never early, also when a node is stopped with SIGTERM under load.

mod common;

use std::time::{Duration, Instant};

use common::{
    by_id, lateness_summary, load_tasks, task_lines, wait_until, Env, FireLog, NodeProcess,
};

const QUEUES: &str = "\
queue_defaults:
  partitions: 16
";

/// Checks that every id `t0..t{count}` of `queue` fired exactly once, none early.
fn assert_each_fired_once_on_time(fires: &FireLog, queue: &str, count: usize) {
    let fires = fires.snapshot();
    let grouped = by_id(&fires);
    assert_eq!(grouped.len(), count, "distinct tasks fired");
    for (id, times) in &grouped {
        assert_eq!(
            times.len(),
            1,
            "task {id} fired {} times: {times:?}",
            times.len()
        );
        let fire = &times[0];
        assert_eq!(fire.queue, queue);
        assert!(
            fire.fired_ms >= fire.due_ms,
            "task {id} fired {} ms early: {fire:?}",
            fire.due_ms - fire.fired_ms
        );
        assert_eq!(fire.attempt, 1, "task {id} needed a retry: {fire:?}");
    }
    eprintln!("{}", lateness_summary(&fires));
}

#[test]
fn three_nodes_fire_every_task_exactly_once_and_never_early() {
    let env = Env::start(QUEUES);
    let fires = FireLog::default();
    let nodes = env.start_nodes(3, &fires);
    let count = 3000;
    load_tasks(&env, "e2e", &task_lines(count, 300..3000, 7), count as u64);

    env.wait_for_every_fire(&fires, "e2e", count, Duration::from_secs(30));
    assert_each_fired_once_on_time(&fires, "e2e", count);

    let per_node: Vec<usize> = {
        let snapshot = fires.snapshot();
        let ids: Vec<String> = nodes.iter().map(NodeProcess::node_id).collect();
        ids.iter()
            .map(|id| snapshot.iter().filter(|fire| &fire.node == id).count())
            .collect()
    };
    eprintln!("fires per node: {per_node:?}");
    assert!(
        per_node.iter().all(|&fired| fired > 0),
        "every node takes a share: {per_node:?}"
    );
}

#[test]
fn sigterm_under_load_loses_and_doubles_nothing_and_exits_zero_within_the_grace() {
    let env = Env::start(QUEUES);
    let fires = FireLog::default();
    let mut nodes = env.start_nodes(3, &fires);
    let count = 3000;
    load_tasks(&env, "e2e", &task_lines(count, 300..6000, 11), count as u64);

    // Stop a node while tasks are firing.
    wait_until(
        Duration::from_secs(30),
        "a quarter of the tasks to fire",
        || fires.distinct() >= count / 4,
        || format!("{} of {count} fired", fires.distinct()),
    );
    let mut stopped = nodes.remove(0);
    let sent = Instant::now();
    stopped.terminate();
    let status = stopped.wait_exit(Duration::from_secs(10));
    let took = sent.elapsed();
    let stderr = stopped.stderr_text();
    let status = status.unwrap_or_else(|| panic!("node did not exit after SIGTERM: {stderr}"));
    assert_eq!(
        status.code(),
        Some(0),
        "exit status after SIGTERM: {stderr}"
    );
    // shutdown_grace is 3 s in BASE_CONFIG; leaving the cluster takes a round trip more.
    assert!(
        took < Duration::from_secs(5),
        "the node took {took:?} to stop: {stderr}"
    );
    assert!(
        !stderr.contains("panicked"),
        "the stopped node panicked: {stderr}"
    );
    env.wait_for_members(2);

    env.wait_for_every_fire(&fires, "e2e", count, Duration::from_secs(30));
    assert_each_fired_once_on_time(&fires, "e2e", count);
}
