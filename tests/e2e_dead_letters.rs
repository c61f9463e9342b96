//! End-to-end: `delayq pending`, `delayq dead`, `delayq retry` and `delayq purge` against a
//! real redis-server and a real node, with their JSON and exit codes.

mod common;
mod e2e_http_support;

use std::time::Duration;

use common::{http_call, wait_for_dead, Env};
use e2e_http_support::Serve;
use serde_json::json;

fn exit_code(env: &Env, args: &[&str]) -> (Option<i32>, String) {
    let output = env.run(args);
    (
        output.status.code(),
        String::from_utf8_lossy(&output.stderr).into_owned(),
    )
}

#[test]
fn dead_letters_are_listed_retried_and_purged_from_the_cli() {
    let env = Env::start("queue_defaults:\n  max_attempts: 1\n");
    let mut node = env.spawn_node(
        "failing",
        &[
            "--queue",
            "jobs",
            "--handler",
            "exec",
            "--",
            "sh",
            "-c",
            "echo card declined >&2; exit 3",
        ],
    );
    for id in ["fail-a", "fail-b", "fail-c"] {
        env.json(&["schedule", "jobs", id, "--in", "0s", "--payload", "p"]);
    }
    let dead = wait_for_dead(&env, "jobs", 3);
    let first = &dead[0];
    assert_eq!(first["queue"], "jobs");
    assert_eq!(first["attempt"], 1);
    assert_eq!(first["payload"], "p");
    let error = first["last_error"].as_str().unwrap_or_default();
    assert!(
        error.contains("exit status 3") && error.contains("card declined"),
        "{first}"
    );
    node.terminate();
    assert!(node
        .wait_exit(Duration::from_secs(20))
        .is_some_and(|s| s.success()));

    let table = String::from_utf8_lossy(&env.run(&["dead", "jobs"]).stdout).into_owned();
    assert!(
        table.starts_with("ID") && table.contains("LAST_ERROR") && table.contains("fail-b"),
        "{table}"
    );
    assert_eq!(
        env.json(&["dead", "jobs", "--json", "--limit", "1"])
            .as_array()
            .map(Vec::len),
        Some(1)
    );

    // Nothing pending yet; a task an hour ahead is listed with its due time.
    assert_eq!(env.json(&["pending", "jobs", "--json"]), json!([]));
    env.json(&["schedule", "jobs", "later", "--in", "1h"]);

    // Retry one: pending again with attempt 1, listed first (due now).
    assert_eq!(
        env.json(&["retry", "jobs", "fail-a"]),
        json!({"retried": 1})
    );
    let task = env.json(&["get", "jobs", "fail-a"]);
    assert_eq!(
        (task["state"].clone(), task["attempt"].clone()),
        (json!("pending"), json!(1)),
        "{task}"
    );
    let pending = env.json(&["pending", "jobs", "--json"]);
    let ids: Vec<&str> = pending
        .as_array()
        .expect("a list")
        .iter()
        .filter_map(|t| t["id"].as_str())
        .collect();
    assert_eq!(ids, ["fail-a", "later"], "{pending}");
    // The HTTP API answers with the very objects the CLI prints.
    let serve = Serve::start(&env, &["--listen", "127.0.0.1:0"], &[]);
    for (cli, path) in [
        (["pending", "jobs", "--json"], "/v1/queues/jobs/pending"),
        (["dead", "jobs", "--json"], "/v1/queues/jobs/dead"),
    ] {
        let (status, over_http) = http_call("GET", &format!("{}{path}", serve.url), None, None);
        assert_eq!(status, 200, "{path}: {over_http}");
        assert_eq!(over_http, env.json(&cli), "{path}");
    }
    drop(serve);
    let table = String::from_utf8_lossy(&env.run(&["pending", "jobs"]).stdout).into_owned();
    assert!(
        table.starts_with("ID") && table.contains("DUE_IN") && table.contains("later"),
        "{table}"
    );

    // Purge one, then the rest; both lists end empty.
    assert_eq!(env.json(&["purge", "jobs", "fail-b"]), json!({"purged": 1}));
    assert_eq!(env.json(&["purge", "jobs", "--all"]), json!({"purged": 1}));
    assert_eq!(env.json(&["dead", "jobs", "--json"]), json!([]));
    assert_eq!(env.json(&["retry", "jobs", "--all"]), json!({"retried": 0}));

    // Exit codes: 1 for a dead letter that does not exist, 2 for usage errors.
    let (code, stderr) = exit_code(&env, &["retry", "jobs", "fail-b"]);
    assert_eq!(code, Some(1), "{stderr}");
    assert!(stderr.contains("no dead letter \"fail-b\""), "{stderr}");
    assert_eq!(exit_code(&env, &["purge", "jobs", "nope"]).0, Some(1));
    for args in [
        vec!["retry", "jobs"],
        vec!["purge", "jobs", "x", "--all"],
        vec!["dead", "bad queue!"],
        vec!["pending", "jobs", "--limit", "0"],
        vec!["pending", "jobs", "--limit", "5000"],
    ] {
        let (code, stderr) = exit_code(&env, &args);
        assert_eq!(code, Some(2), "{args:?}: {stderr}");
        assert!(stderr.starts_with("error: "), "{args:?}: {stderr}");
    }
}
