//! End-to-end on PostgreSQL (`backend: postgres`), through the binary: the schema commands
//! (`migrate`, `migrate --check`, a read-only command on an unmigrated database), the
//! everyday commands, several nodes sharing a queue with one killed (SIGKILL) and one
//! stopped (SIGTERM) under load, and `delayq demo --postgres`.

mod common;

use std::time::Duration;

use common::{
    assert_success, by_id, http_call, load_tasks, logged_http_url, parse_json, task_lines, Env,
    FireLog, NodeProcess,
};
use serde_json::json;

const QUEUES: &str = "\
queue_defaults:
  partitions: 16
";

fn stderr(output: &std::process::Output) -> String {
    String::from_utf8_lossy(&output.stderr).into_owned()
}

#[test]
fn migrate_check_and_read_only_commands_on_an_unmigrated_database() {
    let env = Env::start_postgres(QUEUES);
    // Read-only commands neither create the schema nor pretend it is empty.
    for args in [
        &["get", "e2e", "t1"][..],
        &["stats"][..],
        &["nodes"][..],
        &["pending", "e2e"][..],
    ] {
        let output = env.run(args);
        assert_eq!(
            output.status.code(),
            Some(1),
            "{args:?}: {}",
            stderr(&output)
        );
        let message = stderr(&output);
        assert!(
            message.contains("no delayq tables") && message.contains("delayq migrate"),
            "{args:?} says what to do: {message}"
        );
    }
    let output = env.run(&["migrate", "--check"]);
    assert_eq!(output.status.code(), Some(1), "{}", stderr(&output));
    assert!(
        String::from_utf8_lossy(&output.stdout).contains("pending"),
        "{output:?}"
    );
    // Still nothing: --check applied nothing.
    assert_eq!(env.run(&["stats"]).status.code(), Some(1));

    let applied = env.json(&["migrate", "--json"]);
    assert_eq!(applied["current"], true, "{applied}");
    assert!(
        applied["applied_now"]
            .as_array()
            .is_some_and(|versions| !versions.is_empty()),
        "{applied}"
    );
    let again = env.json(&["migrate", "--json"]);
    assert_eq!(again["applied_now"], serde_json::json!([]), "{again}");
    let check = env.run(&["migrate", "--check"]);
    assert_success(&check, &["migrate", "--check"]);
    assert!(String::from_utf8_lossy(&check.stdout).contains("current"));
    // Now the read-only commands read an empty cluster.
    let nodes = env.json(&["nodes", "--json"]);
    assert_eq!(nodes, serde_json::json!([]));
    let missing = env.run(&["get", "e2e", "t1"]);
    assert_eq!(missing.status.code(), Some(1));
    assert!(
        stderr(&missing).contains("not found"),
        "{}",
        stderr(&missing)
    );
}

#[test]
fn migrate_on_the_redis_backend_is_a_usage_error() {
    let env = Env::start(QUEUES);
    let output = env.run(&["migrate"]);
    assert_eq!(output.status.code(), Some(2), "{}", stderr(&output));
    assert!(stderr(&output).contains("PostgreSQL backend"));
}

#[test]
fn the_everyday_commands_work_on_postgres() {
    let env = Env::start_postgres(QUEUES);
    // A writing command creates the schema itself.
    let scheduled = env.json(&[
        "schedule",
        "e2e",
        "order-1",
        "--in",
        "1h",
        "--payload",
        "{\"order\":1}",
    ]);
    assert_eq!(scheduled["replaced"], false, "{scheduled}");
    let task = env.json(&["get", "e2e", "order-1", "--json"]);
    assert_eq!(task["state"], "pending", "{task}");
    let stats = env.stats("e2e");
    assert_eq!(stats["pending"], 1, "{stats:?}");
    let pending = env.json(&["pending", "e2e", "--json"]);
    assert_eq!(pending.as_array().map(Vec::len), Some(1), "{pending}");
    let paused = env.json(&["queue", "pause", "e2e"]);
    assert_eq!(paused["paused"], true);
    let resumed = env.json(&["queue", "resume", "e2e"]);
    assert_eq!(resumed["paused"], false);
    let cancelled = env.json(&["cancel", "e2e", "order-1"]);
    assert_eq!(cancelled["cancelled"], true, "{cancelled}");
    let again = env.json(&["cancel", "e2e", "order-1"]);
    assert_eq!(again["cancelled"], false, "{again}");
    let set = env.run(&[
        "recurring",
        "set",
        "nightly",
        "--queue",
        "reports",
        "--cron",
        "0 9 * * *",
    ]);
    assert_success(&set, &["recurring", "set"]);
    let listed = env.json(&["recurring", "list", "--json"]);
    assert!(listed.to_string().contains("nightly"), "{listed}");
}

#[test]
fn nodes_share_a_queue_and_take_over_from_a_killed_and_a_stopped_node() {
    let env = Env::start_postgres(QUEUES);
    let fires = FireLog::default();
    let mut nodes = env.start_nodes(3, &fires);
    let count = 1500;
    load_tasks(&env, "e2e", &task_lines(count, 300..4000, 11), count as u64);
    // Mid-burst: one node crashes, another leaves gracefully.
    common::wait_until(
        Duration::from_secs(20),
        "the burst started",
        || fires.distinct() > 100,
        || format!("{} fired", fires.distinct()),
    );
    let crashed: NodeProcess = nodes.remove(0);
    crashed.crash();
    let leaving = nodes.remove(0);
    leaving.terminate();
    env.wait_for_every_fire(&fires, "e2e", count, Duration::from_secs(60));
    let grouped = by_id(&fires.snapshot());
    assert_eq!(grouped.len(), count, "every task fired");
    let early: Vec<_> = grouped
        .values()
        .flatten()
        .filter(|fire| fire.fired_ms < fire.due_ms)
        .collect();
    assert!(early.is_empty(), "fired early: {early:?}");
    // Twice only what the crashed node was running (at most its queue concurrency).
    let twice = grouped.values().filter(|times| times.len() > 1).count();
    assert!(twice <= 64, "{twice} tasks fired more than once");
    let mut leaving = leaving;
    assert!(
        leaving
            .wait_exit(Duration::from_secs(20))
            .is_some_and(|status| status.success()),
        "the stopped node exits 0"
    );
    let live = env.json(&["nodes", "--json"]);
    assert_eq!(live.as_array().map(Vec::len), Some(1), "{live}");
}

#[test]
fn the_demo_runs_on_postgres_and_drops_its_schema() {
    let mut env = Env::start_postgres(QUEUES);
    let url = env.postgres().url();
    let mut command = common::delayq_command(env.dir.path());
    command.args(["demo", "--postgres", &url, "--json", "--tasks", "100"]);
    let output = common::run_with_deadline(command, None);
    assert_success(&output, &["demo", "--postgres"]);
    let summary = parse_json(&output.stdout);
    assert_eq!(summary["lost"], 0, "{summary}");
    let schemas = env
        .postgres()
        .psql("SELECT count(*) FROM pg_namespace WHERE nspname LIKE 'delayq_demo_%'")
        .expect("psql");
    assert_eq!(schemas.trim(), "0", "the demo's schema is dropped");
}

#[test]
fn a_node_serves_the_api_dashboard_and_metrics_on_postgres() {
    let env = Env::start_postgres("http:\n  listen: 127.0.0.1:0\n");
    let node = env.spawn_node("web", &[]);
    let url = logged_http_url(&node.stderr_text()).expect("the node logged its URL");
    for index in 0..5 {
        let (status, body) = http_call(
            "PUT",
            &format!("{url}/v1/queues/ticks/tasks/t{index}"),
            None,
            Some(json!({"in": "0s", "payload": "{}"})),
        );
        assert_eq!(status, 200, "{body}");
    }
    common::wait_until(
        Duration::from_secs(30),
        "5 fires",
        || node.fires.distinct() == 5,
        || format!("{}", node.fires.len()),
    );
    let (status, over_http) = http_call(
        "GET",
        &format!("{url}/v1/queues/ticks/tasks/t0"),
        None,
        None,
    );
    assert_eq!(status, 200, "{over_http}");
    assert_eq!(over_http, env.json(&["get", "ticks", "t0"]));
    let (status, nodes) = http_call("GET", &format!("{url}/v1/nodes"), None, None);
    assert_eq!(status, 200);
    assert_eq!(nodes.as_array().map(Vec::len), Some(1), "{nodes}");
    let scrape = || {
        http_call("GET", &format!("{url}/metrics"), None, None)
            .1
            .as_str()
            .unwrap_or_default()
            .to_owned()
    };
    common::wait_until(
        Duration::from_secs(10),
        "the fires in /metrics",
        || scrape().contains("delayq_tasks_fired_total{queue=\"ticks\"} 5"),
        scrape,
    );
    let (status, page) = http_call("GET", &format!("{url}/"), None, None);
    assert_eq!(status, 200);
    assert!(page
        .as_str()
        .is_some_and(|html| html.contains("<title>delayq</title>")));
    let (status, ready) = http_call("GET", &format!("{url}/readyz"), None, None);
    assert_eq!(status, 200, "{ready}");
}
