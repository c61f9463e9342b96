//! End-to-end: the one-shot commands (`schedule`, `get`, `cancel`, `stats`, `nodes`) print
//! what DESIGN.md promises, and every error is one line on stderr naming the cause and the
//! value, with exit code 2 for usage errors and 1 for runtime errors.

mod common;

use std::process::Output;

use common::{delayq_command, parse_json, run_with_deadline, Env};
use serde_json::{json, Value};

/// Runs `delayq args...` in an empty directory (no cluster.yaml: the defaults).
fn run_bare(args: &[&str]) -> Output {
    let dir = tempfile::tempdir().expect("a temporary directory");
    let mut command = delayq_command(dir.path());
    command.args(args);
    run_with_deadline(command, None)
}

/// Asserts the exit code and that stderr ends with one `error: ` line containing every
/// needle, without a panic or a backtrace. (`delayq node` logs at `info`, so its stderr may
/// hold log lines before the error.)
fn assert_fails(output: &Output, code: i32, needles: &[&str]) -> String {
    let stderr = String::from_utf8_lossy(&output.stderr).into_owned();
    assert_eq!(
        output.status.code(),
        Some(code),
        "exit code; stderr: {stderr}"
    );
    let errors: Vec<&str> = stderr
        .lines()
        .filter(|line| line.starts_with("error: "))
        .collect();
    assert_eq!(errors.len(), 1, "one error line on stderr: {stderr:?}");
    assert_eq!(stderr.lines().last(), Some(errors[0]), "{stderr:?}");
    for needle in needles {
        assert!(
            errors[0].contains(needle),
            "the error names {needle:?}: {stderr:?}"
        );
    }
    assert!(
        !stderr.contains("panicked") && !stderr.contains("backtrace"),
        "{stderr:?}"
    );
    stderr
}

#[test]
fn usage_errors_exit_2_with_one_line_naming_the_value() {
    assert_fails(
        &run_bare(&["schedule", "q", "a", "--in", "1s", "--bogus"]),
        2,
        &["--bogus"],
    );
    assert_fails(
        &run_bare(&["schedule", "q", "a", "--in", "5parsecs"]),
        2,
        &["5parsecs", "--in"],
    );
    assert_fails(
        &run_bare(&["schedule", "q", "a", "--at", "tomorrow"]),
        2,
        &["tomorrow", "--at"],
    );
    assert_fails(
        &run_bare(&["schedule", "q", "a", "--in", "1s", "--at", "1700000000000"]),
        2,
        &["--at"],
    );
    assert_fails(&run_bare(&["schedule", "q", "a"]), 2, &["required"]);
    assert_fails(
        &run_bare(&["schedule", "bad queue!", "a", "--in", "1s"]),
        2,
        &["bad queue!"],
    );
    assert_fails(&run_bare(&["get", "q", ""]), 2, &["task id"]);
    assert_fails(&run_bare(&["frobnicate"]), 2, &["frobnicate"]);
    assert_fails(
        &run_bare(&["node", "--handler", "exec"]),
        2,
        &["--handler exec", "command"],
    );
    assert_fails(
        &run_bare(&["node", "--handler", "exec", "--", "/no/such/handler.sh"]),
        2,
        &["/no/such/handler.sh", "not found"],
    );
    assert_fails(&run_bare(&["node", "--handler", "http"]), 2, &["--url"]);
    assert_fails(
        &run_bare(&["node", "--handler", "http", "--url", "ftp://x"]),
        2,
        &["ftp://x"],
    );
    assert_fails(
        &run_bare(&["node", "--url", "http://localhost/"]),
        2,
        &["--url", "--handler http"],
    );
    assert_fails(
        &run_bare(&["demo", "--redis", "notaurl://x"]),
        2,
        &["redis.url", "notaurl://x"],
    );
}

#[test]
fn configuration_errors_exit_2_naming_the_file_or_key() {
    assert_fails(
        &run_bare(&["--config", "/no/such/dir/cluster.yaml", "stats"]),
        2,
        &["/no/such/dir/cluster.yaml"],
    );
    let dir = tempfile::tempdir().expect("a temporary directory");
    let config = dir.path().join("typo.yaml");
    std::fs::write(&config, "engine:\n  pul_period: 1s\n").expect("write the config");
    let config = config.to_str().expect("a UTF-8 path");
    assert_fails(
        &run_bare(&["--config", config, "stats"]),
        2,
        &["typo.yaml:2", "engine.pul_period"],
    );
    let bad_value = dir.path().join("bad.yaml");
    std::fs::write(&bad_value, "node:\n  heartbeat_ttl: soon\n").expect("write the config");
    assert_fails(
        &run_bare(&["--config", bad_value.to_str().expect("UTF-8"), "stats"]),
        2,
        &["node.heartbeat_ttl", "soon"],
    );
}

#[test]
fn unreachable_redis_is_a_runtime_error_naming_the_address() {
    let port = delayq_testkit::free_port();
    let dir = tempfile::tempdir().expect("a temporary directory");
    let config = dir.path().join("cluster.yaml");
    std::fs::write(
        &config,
        format!("redis:\n  url: redis://127.0.0.1:{port}/0\nnode:\n  start_timeout: 1s\n"),
    )
    .expect("write the config");
    let config = config.to_str().expect("a UTF-8 path");
    let address = format!("127.0.0.1:{port}");
    for args in [
        vec!["stats"],
        vec!["schedule", "q", "a", "--in", "1s"],
        vec!["node"],
    ] {
        let mut all = vec!["--config", config];
        all.extend(args);
        assert_fails(&run_bare(&all), 1, &[&address]);
    }
}

#[test]
fn schedule_get_cancel_print_the_documented_json() {
    let env = Env::start("");
    let first = env.json(&["schedule", "orders", "o-1", "--in", "1h", "--payload", "hi"]);
    let keys: Vec<&String> = first.as_object().expect("an object").keys().collect();
    assert_eq!(
        keys,
        ["due_ms", "duplicate", "id", "kept", "queue", "replaced"],
        "{first}"
    );
    assert_eq!(first["kept"], false);
    assert_eq!(first["queue"], "orders");
    assert_eq!(first["id"], "o-1");
    assert_eq!(first["replaced"], false);
    assert_eq!(first["duplicate"], false);
    let again = env.json(&["schedule", "orders", "o-1", "--at", "2100-01-01T00:00:00Z"]);
    assert_eq!(again["replaced"], true, "{again}");
    assert_eq!(again["due_ms"], 4_102_444_800_000u64);

    let task = env.json(&["get", "orders", "o-1"]);
    assert_eq!(task["state"], "pending", "{task}");
    assert_eq!(task["queue"], "orders");
    assert_eq!(task["due_ms"], 4_102_444_800_000u64);
    assert_eq!(task["attempt"], 1, "{task}");
    assert_eq!(
        task["payload"], "",
        "the replacement has no payload: {task}"
    );
    assert!(task.get("generation").is_some() && task.get("last_error").is_some());

    let stats = env.json(&["stats", "--json"]);
    assert_eq!(
        stats["orders"],
        json!({"pending": 1, "due_now": 0, "inflight": 0, "dead": 0, "done": 0, "held_back": 0, "paused": false})
    );
    let table = env.run(&["stats"]);
    let table = String::from_utf8_lossy(&table.stdout);
    assert!(
        table.starts_with("QUEUE") && table.contains("orders"),
        "{table}"
    );

    assert_eq!(
        env.json(&["cancel", "orders", "o-1"]),
        json!({"cancelled": true})
    );
    assert_eq!(
        env.json(&["cancel", "orders", "o-1"]),
        json!({"cancelled": false})
    );
    assert_fails(
        &env.run(&["get", "orders", "o-1"]),
        1,
        &["not found", "o-1"],
    );
    assert_fails(&env.run(&["get", "never-used", "x"]), 1, &["not found"]);
    assert_eq!(env.json(&["nodes", "--json"]), json!([]));
}

#[test]
fn schedule_from_reports_bad_lines_by_number_and_loads_the_rest() {
    let env = Env::start("");
    let lines = [
        r#"{"id":"a","delay_ms":3600000}"#,
        r#"{"id":"b","delay_ms":"#,
        r#"{"id":"c"}"#,
        "",
        r#"{"id":"d","due_ms":4102444800000,"payload":"x"}"#,
    ]
    .join("\n");
    let output = env.run_with_stdin(&["schedule", "bulk", "--from", "-"], lines.as_bytes());
    let summary: Value = parse_json(&output.stdout);
    assert_eq!(
        summary,
        json!({"scheduled": 2, "replaced": 0, "duplicates": 0, "kept": 0, "failed": 2})
    );
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert_eq!(output.status.code(), Some(1), "some lines failed: {stderr}");
    assert!(stderr.contains("line 2: invalid JSON"), "{stderr}");
    assert!(stderr.contains("line 3: missing"), "{stderr}");
    assert!(
        !stderr.contains("line 4"),
        "a blank line is skipped: {stderr}"
    );
    assert_eq!(env.json(&["get", "bulk", "d"])["payload"], "x");
    assert_eq!(env.stats("bulk")["pending"], 2);

    // A file works like stdin; a missing file is a usage error.
    let file = env.dir.path().join("tasks.jsonl");
    std::fs::write(&file, "{\"id\":\"e\",\"delay_ms\":3600000}\n").expect("write the file");
    let summary = env.json(&["schedule", "bulk", "--from", file.to_str().expect("UTF-8")]);
    assert_eq!(summary["scheduled"], 1);
    assert_fails(
        &env.run(&["schedule", "bulk", "--from", "/no/such/tasks.jsonl"]),
        2,
        &["/no/such/tasks.jsonl"],
    );
}

#[test]
fn schedule_from_bounds_each_line_and_refuses_an_endless_one() {
    // Lines are read at most max_payload + 64 KiB at a time (1 MiB + 64 KiB by default).
    let env = Env::start("");
    let long = format!(
        r#"{{"id":"long","delay_ms":3600000,"payload":"{}"}}"#,
        "x".repeat(1_200 * 1024)
    );
    let lines = [
        r#"{"id":"a","delay_ms":3600000}"#,
        long.as_str(),
        r#"[{"id":"b","delay_ms":3600000}]"#,
        r#"{"id":"c","delay_ms":3600000}"#,
    ]
    .join("\n");
    let output = env.run_with_stdin(&["schedule", "bounded", "--from", "-"], lines.as_bytes());
    let stderr = String::from_utf8_lossy(&output.stderr);
    let summary: Value = parse_json(&output.stdout);
    assert_eq!(summary["scheduled"], 2, "{stderr}");
    assert_eq!(summary["failed"], 2, "{stderr}");
    assert!(stderr.contains("line 2: the line is"), "{stderr}");
    assert!(stderr.contains("line 3: a JSON array"), "{stderr}");
    assert!(stderr.contains("JSON lines"), "{stderr}");

    // /dev/zero has no line end: the load stops with an error instead of growing.
    let started = std::time::Instant::now();
    let output = env.run(&["schedule", "bounded", "--from", "/dev/zero"]);
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert_eq!(output.status.code(), Some(1), "{stderr}");
    assert!(stderr.contains("not JSON lines"), "{stderr}");
    assert!(
        started.elapsed() < std::time::Duration::from_secs(30),
        "took {:?}",
        started.elapsed()
    );
}

#[test]
fn help_shows_examples_and_exits_0() {
    let output = run_bare(&["--help"]);
    assert!(output.status.success());
    let help = String::from_utf8_lossy(&output.stdout);
    assert!(
        help.contains("Examples:") && help.contains("delayq schedule"),
        "{help}"
    );
    let output = run_bare(&[]);
    assert_eq!(output.status.code(), Some(2), "no command is a usage error");
    assert!(String::from_utf8_lossy(&output.stderr).contains("Usage: delayq"));
    let output = run_bare(&["node", "--help"]);
    let help = String::from_utf8_lossy(&output.stdout);
    assert!(help.contains("DELAYQ_ATTEMPT"), "{help}");
}

#[test]
fn bench_streaming_schedules_at_the_asked_rate_and_reports_every_fire() {
    let env = Env::start("");
    let args = [
        "bench",
        "--scenario",
        "streaming",
        "--rate",
        "400",
        "--duration",
        "2s",
        "--min-delay",
        "100ms",
        "--spread",
        "1s",
        "--nodes",
        "2",
        "--json",
    ];
    let report = env.json(&args);
    let streaming = &report["streaming"];
    assert!(
        report["precision"].is_null() && report["burst"].is_null(),
        "{report}"
    );
    assert_eq!(streaming["rate"], 400, "{report}");
    assert_eq!(streaming["scheduled"], 800, "{report}");
    assert_eq!(streaming["failed"], 0, "{report}");
    assert_eq!(streaming["deliveries"], 800, "{report}");
    assert_eq!(streaming["early"], 0, "{report}");
    let during = streaming["lateness_ms"]["count"].as_u64().unwrap_or(0);
    let after = streaming["lateness_after_stream_ms"]["count"]
        .as_u64()
        .unwrap_or(0);
    assert_eq!(during + after, 800, "{report}");
    // Paced, not sent in one go: the calls took about the stream's 2 s.
    let achieved = streaming["achieved_per_s"].as_f64().unwrap_or(0.0);
    assert!((200.0..=420.0).contains(&achieved), "{report}");
    let seconds = streaming["by_second"].as_array().map_or(0, Vec::len);
    assert!(seconds >= 2, "{report}");
    // The diagnostics beside the stream: the runtime's tick delay and Redis's PING times.
    assert!(
        streaming["tick_lag_us"]["count"].as_u64() > Some(0),
        "{report}"
    );
    assert!(streaming["ping_us"]["count"].as_u64() > Some(0), "{report}");
    assert!(streaming["pass"].is_boolean(), "{report}");
}
