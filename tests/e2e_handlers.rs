//! End-to-end: the `exec` and `http` handlers of `delayq node`: a failing attempt is retried,
//! a task that always fails ends in `dead` (seen with `delayq get`), and what the handler gets
//! (environment and stdin, or the POSTed JSON) is what was scheduled.

mod common;

use std::io::{BufReader, Write};
use std::net::TcpListener;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use common::{read_http_body, wait_until, Env};
use serde_json::Value;

const RETRYING_QUEUES: &str = "\
queue_defaults:
  partitions: 4
  max_attempts: 2
  backoff: { initial: 100ms, max: 200ms }
  timeout: 5s
";

/// Fails the first attempt of queue `flaky`, then records what it got; always fails in
/// queue `doomed`.
const SCRIPT: &str = r#"
payload=$(cat)
case "$DELAYQ_QUEUE" in
  flaky)
    if [ "$DELAYQ_ATTEMPT" = "1" ]; then
      echo "first attempt fails on purpose" >&2
      exit 1
    fi
    echo "$DELAYQ_QUEUE $DELAYQ_ID $DELAYQ_ATTEMPT $DELAYQ_DUE_MS $payload" >> "$E2E_OUT"
    ;;
  doomed)
    echo "always broken: $DELAYQ_ID" >&2
    exit 3
    ;;
esac
"#;

fn task_state(env: &Env, queue: &str, id: &str) -> Value {
    env.json(&["get", queue, id])
}

#[test]
fn exec_retries_a_failed_attempt_and_dead_letters_a_task_that_always_fails() {
    let env = Env::start(RETRYING_QUEUES);
    let script = env.dir.path().join("handler.sh");
    std::fs::write(&script, SCRIPT).expect("write the handler script");
    let out = env.dir.path().join("handled.txt");
    let mut command = env.command(&["node", "--handler", "exec", "--", "/bin/sh"]);
    command.arg(&script).env("E2E_OUT", &out);
    let _node = common::NodeProcess::spawn("exec", command);
    env.wait_for_members(1);

    let scheduled = env.json(&[
        "schedule",
        "flaky",
        "f1",
        "--in",
        "200ms",
        "--payload",
        "hello",
    ]);
    let due_ms = scheduled["due_ms"].as_u64().expect("due_ms");
    env.json(&["schedule", "doomed", "d1", "--in", "200ms"]);

    wait_until(
        Duration::from_secs(20),
        "flaky/f1 to be done",
        || task_state(&env, "flaky", "f1")["state"] == "done",
        || task_state(&env, "flaky", "f1").to_string(),
    );
    let handled = std::fs::read_to_string(&out).expect("the script recorded the task");
    let fields: Vec<&str> = handled.split_whitespace().collect();
    assert_eq!(fields.len(), 5, "one run recorded: {handled:?}");
    assert_eq!(fields[..3], ["flaky", "f1", "2"], "{handled:?}");
    // The retry is due after the backoff, so its due time is later than the first one.
    let retry_due: u64 = fields[3].parse().expect("DELAYQ_DUE_MS is a number");
    assert!(retry_due >= due_ms, "{retry_due} < {due_ms}");
    assert_eq!(fields[4], "hello", "the payload came on stdin");

    wait_until(
        Duration::from_secs(20),
        "doomed/d1 to be dead",
        || task_state(&env, "doomed", "d1")["state"] == "dead",
        || task_state(&env, "doomed", "d1").to_string(),
    );
    let dead = task_state(&env, "doomed", "d1");
    assert_eq!(dead["attempt"], 2, "{dead}");
    let last_error = dead["last_error"].as_str().unwrap_or_default();
    assert!(
        last_error.contains("exit status 3") && last_error.contains("always broken: d1"),
        "last_error names the status and the stderr: {dead}"
    );
    let stats = env.stats("doomed");
    assert_eq!(stats["dead"], 1, "{stats:?}");
}

/// A one-thread HTTP server that answers 503 to the first request and 200 to the others,
/// and keeps every request body.
fn serve_http(listener: TcpListener, bodies: Arc<Mutex<Vec<Value>>>) {
    std::thread::spawn(move || {
        for (index, stream) in listener.incoming().enumerate() {
            let Ok(mut stream) = stream else { return };
            let mut reader = BufReader::new(stream.try_clone().expect("clone the stream"));
            let Some(body) = read_http_body(&mut reader) else {
                continue;
            };
            if let Ok(json) = serde_json::from_slice(&body) {
                bodies.lock().expect("bodies lock").push(json);
            }
            let (status, answer) = if index == 0 {
                ("503 Service Unavailable", "busy")
            } else {
                ("200 OK", "ok")
            };
            let _ = write!(
                stream,
                "HTTP/1.1 {status}\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{answer}",
                answer.len()
            );
        }
    });
}

#[test]
fn http_posts_the_task_as_json_and_retries_a_non_2xx_answer() {
    let env = Env::start(RETRYING_QUEUES);
    let listener = TcpListener::bind("127.0.0.1:0").expect("bind a local port");
    let url = format!(
        "http://{}/tasks",
        listener.local_addr().expect("local address")
    );
    let bodies = Arc::new(Mutex::new(Vec::new()));
    serve_http(listener, bodies.clone());
    let _node = env.spawn_node("http", &["--handler", "http", "--url", &url]);
    env.wait_for_members(1);

    env.json(&[
        "schedule",
        "hooks",
        "h1",
        "--in",
        "100ms",
        "--payload",
        "{\"order\":42}",
    ]);
    wait_until(
        Duration::from_secs(20),
        "hooks/h1 to be done",
        || task_state(&env, "hooks", "h1")["state"] == "done",
        || {
            format!(
                "{} after posts {:?}",
                task_state(&env, "hooks", "h1"),
                bodies.lock()
            )
        },
    );
    let bodies = bodies.lock().expect("bodies lock").clone();
    assert_eq!(
        bodies.len(),
        2,
        "one refused post, one accepted: {bodies:?}"
    );
    for (attempt, body) in (1..).zip(&bodies) {
        assert_eq!(body["queue"], "hooks");
        assert_eq!(body["id"], "h1");
        assert_eq!(body["attempt"], attempt);
        assert_eq!(body["payload"], "{\"order\":42}");
        assert!(
            body["fired_ms"].as_u64() >= body["due_ms"].as_u64(),
            "{body}"
        );
    }
}

#[test]
fn a_second_signal_during_the_graceful_shutdown_exits_at_once_with_130() {
    let env = Env::start("");
    let mut node = env.spawn_node("stuck", &["--handler", "exec", "--", "sleep", "60"]);
    env.wait_for_members(1);
    env.json(&["schedule", "slow", "s1", "--in", "0ms"]);
    wait_until(
        Duration::from_secs(20),
        "the task to be in flight",
        || env.stats("slow")["inflight"] == 1,
        || format!("{:?}", env.stats("slow")),
    );
    node.terminate();
    // The handler sleeps far past shutdown_grace (3 s): the node is draining.
    node.wait_for_stderr("shutting down", Duration::from_secs(10));
    node.terminate();
    let status = node.wait_exit(Duration::from_secs(2));
    let stderr = node.stderr_text();
    let status = status.unwrap_or_else(|| panic!("no exit after the second signal: {stderr}"));
    assert_eq!(status.code(), Some(130), "{stderr}");
    assert!(
        stderr.contains("error: SIGTERM during the graceful shutdown"),
        "{stderr}"
    );
}
