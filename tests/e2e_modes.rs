//! End-to-end: `delayq schedule --mode` and `"mode"` in `--from` lines, for each mode, the
//! `kept` answer, dedup after a fire in every mode, and `--at` with an offset or in seconds.

mod common;

use std::time::Duration;

use common::{parse_json, Env};
use serde_json::{json, Value};

/// 2100-01-01T00:00:00Z and an hour either side: nothing fires during the test.
const LIVE: u64 = 4_102_444_800_000;
const EARLIER: u64 = LIVE - 3_600_000;
const LATER: u64 = LIVE + 3_600_000;

fn schedule(env: &Env, id: &str, due: u64, payload: &str, mode: Option<&str>) -> Value {
    let due = due.to_string();
    let mut args = vec!["schedule", "modes", id, "--at", &due, "--payload", payload];
    if let Some(mode) = mode {
        args.extend(["--mode", mode]);
    }
    args.push("--json");
    env.json(&args)
}

fn task(env: &Env, id: &str) -> Value {
    env.json(&["get", "modes", id, "--json"])
}

#[test]
fn each_mode_through_delayq_schedule() {
    let env = Env::start("");
    // (mode, new due, due after, payload after, kept)
    let cases = [
        (None, EARLIER, EARLIER, "second", false),
        (Some("replace"), LATER, LATER, "second", false),
        (Some("if_absent"), LATER, LIVE, "first", true),
        (Some("earlier"), EARLIER, EARLIER, "second", false),
        (Some("earlier"), LATER, LIVE, "first", true),
        (Some("later"), EARLIER, LIVE, "first", true),
        (Some("later"), LATER, LATER, "second", false),
    ];
    for (n, (mode, due, due_after, payload_after, kept)) in cases.into_iter().enumerate() {
        let id = format!("t-{n}");
        let created = schedule(&env, &id, LIVE, "first", mode);
        assert_eq!(
            created,
            json!({"queue": "modes", "id": id, "due_ms": LIVE, "replaced": false,
                   "duplicate": false, "kept": false}),
            "no live task: scheduled in every mode"
        );
        let answer = schedule(&env, &id, due, "second", mode);
        let what = format!("{mode:?} at {due}: {answer}");
        assert_eq!(
            answer,
            json!({"queue": "modes", "id": id, "due_ms": due_after, "replaced": !kept,
                   "duplicate": false, "kept": kept}),
            "{what}"
        );
        let task = task(&env, &id);
        assert_eq!(
            (task["due_ms"].clone(), task["payload"].clone()),
            (json!(due_after), json!(payload_after)),
            "{what}: {task}"
        );
    }
}

#[test]
fn from_lines_carry_their_mode_and_a_bad_mode_is_that_lines_error() {
    let env = Env::start("");
    let first: String = ["a", "b", "c", "d"]
        .iter()
        .map(|id| format!("{{\"id\":\"{id}\",\"due_ms\":{LIVE},\"payload\":\"first\"}}\n"))
        .collect();
    let output = env.run_with_stdin(&["schedule", "modes", "--from", "-"], first.as_bytes());
    assert!(output.status.success(), "{output:?}");

    let lines = format!(
        "{{\"id\":\"a\",\"due_ms\":{EARLIER},\"payload\":\"second\",\"mode\":\"earlier\"}}\n\
         {{\"id\":\"b\",\"due_ms\":{EARLIER},\"payload\":\"second\",\"mode\":\"later\"}}\n\
         {{\"id\":\"c\",\"due_ms\":{LATER},\"payload\":\"second\",\"mode\":\"if_absent\"}}\n\
         {{\"id\":\"d\",\"due_ms\":{LATER},\"payload\":\"second\",\"mode\":\"sooner\"}}\n\
         {{\"id\":\"d\",\"due_ms\":{LATER},\"payload\":\"second\"}}\n\
         {{\"id\":\"e\",\"due_ms\":{LATER},\"mode\":\"later\"}}\n"
    );
    let output = env.run_with_stdin(&["schedule", "modes", "--from", "-"], lines.as_bytes());
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert_eq!(output.status.code(), Some(1), "a line failed: {stderr}");
    assert_eq!(
        parse_json(&output.stdout),
        json!({"scheduled": 3, "replaced": 2, "duplicates": 0, "kept": 2, "failed": 1})
    );
    let errors: Vec<&str> = stderr
        .lines()
        .filter(|line| line.starts_with("error: line"))
        .collect();
    assert_eq!(errors.len(), 1, "{stderr}");
    assert!(
        errors[0].starts_with("error: line 4:") && errors[0].contains("\"sooner\""),
        "{stderr}"
    );
    for (id, due, payload) in [
        ("a", EARLIER, "second"),
        ("b", LIVE, "first"),
        ("c", LIVE, "first"),
        ("d", LATER, "second"),
        ("e", LATER, ""),
    ] {
        let task = task(&env, id);
        assert_eq!(
            (task["due_ms"].clone(), task["payload"].clone()),
            (json!(due), json!(payload)),
            "{id}: {task}"
        );
    }

    // --mode is the default of the lines that give none.
    let line = format!("{{\"id\":\"a\",\"due_ms\":{LATER},\"payload\":\"third\"}}\n");
    let output = env.run_with_stdin(
        &["schedule", "modes", "--from", "-", "--mode", "earlier"],
        line.as_bytes(),
    );
    assert!(output.status.success(), "{output:?}");
    assert_eq!(parse_json(&output.stdout)["kept"], 1);
    assert_eq!(task(&env, "a")["due_ms"], EARLIER);
}

#[test]
fn every_mode_reports_a_fired_schedule_as_duplicate() {
    let env = Env::start("");
    let node = env.spawn_node("n1", &[]);
    let due = (common::now_ms() + 300).to_string();
    schedule(&env, "fired", due.parse().expect("a number"), "x", None);
    env.wait_for_every_fire(&node.fires, "modes", 1, Duration::from_secs(20));
    for mode in ["replace", "if_absent", "earlier", "later"] {
        let answer = env.json(&[
            "schedule", "modes", "fired", "--at", &due, "--mode", mode, "--json",
        ]);
        assert_eq!(answer["duplicate"], true, "{mode}: {answer}");
        assert_eq!(answer["kept"], false, "{mode}: {answer}");
    }
    std::thread::sleep(Duration::from_millis(500));
    assert_eq!(node.fires.len(), 1, "nothing fired twice");
    assert_eq!(env.stats("modes")["pending"], 0);
}

#[test]
fn at_takes_an_offset_and_refuses_seconds_with_exit_2() {
    let env = Env::start("");
    let answer = env.json(&[
        "schedule",
        "modes",
        "berlin",
        "--at",
        "2100-01-01T02:00:00+02:00",
        "--json",
    ]);
    assert_eq!(answer["due_ms"], LIVE, "{answer}");

    let output = env.run(&["schedule", "modes", "s", "--at", "1700000000"]);
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert_eq!(output.status.code(), Some(2), "{stderr}");
    assert!(
        stderr.contains("1700000000")
            && stderr.contains("looks like seconds since the epoch")
            && stderr.contains("1700000000000")
            && stderr.contains("RFC 3339"),
        "{stderr}"
    );
    let output = env.run(&["schedule", "modes", "s", "--in", "1s", "--mode", "sooner"]);
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert_eq!(output.status.code(), Some(2), "{stderr}");
    assert!(
        stderr.contains("sooner") && stderr.contains("if_absent"),
        "{stderr}"
    );
    assert_eq!(
        env.run(&["get", "modes", "s"]).status.code(),
        Some(1),
        "nothing was stored"
    );
}
