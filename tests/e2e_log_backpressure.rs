//! End-to-end: `delayq node --handler log` whose stdout nobody reads. Once the 64 KiB pipe
//! is full, its attempts fail (and are retried) but the node keeps heartbeating (another
//! node never declares it dead) and a SIGTERM still shuts it down.

mod common;

use std::io::{BufRead, BufReader};
use std::process::{Child, ChildStdout, Command, ExitStatus, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use common::{load_tasks, node_id_in_log, now_ms, task_lines, wait_until, Env};
use serde_json::Value;

/// Short handler timeout and quick retries, so attempts on the stalled stdout fail within a
/// second and come back often.
const QUEUES: &str = "\
queue_defaults:
  partitions: 8
  concurrency: 64
  max_attempts: 1000
  backoff: { initial: 100ms, max: 500ms }
  timeout: 1s
";

/// Each line of the log handler is about 130 bytes: 3000 of them are six times the 64 KiB
/// of a Linux pipe.
const TASKS: usize = 3000;

/// A `delayq node` whose stdout is a pipe that this test holds and never reads. Its stderr
/// is collected. Dropping it kills the process.
struct UnreadNode {
    child: Child,
    _stdout: ChildStdout,
    stderr: Arc<Mutex<String>>,
}

impl UnreadNode {
    fn spawn(mut command: Command) -> Self {
        command
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        let mut child = command.spawn().expect("spawn delayq node");
        let stdout = child.stdout.take().expect("stdout is piped");
        let pipe = child.stderr.take().expect("stderr is piped");
        let stderr = Arc::new(Mutex::new(String::new()));
        let collected = stderr.clone();
        std::thread::spawn(move || {
            for line in BufReader::new(pipe).lines() {
                let Ok(line) = line else { break };
                let mut text = collected.lock().expect("stderr lock");
                text.push_str(&line);
                text.push('\n');
            }
        });
        let node = UnreadNode {
            child,
            _stdout: stdout,
            stderr,
        };
        wait_until(
            Duration::from_secs(30),
            "the unread node to start",
            || node.stderr_text().contains("delayq node running"),
            || node.stderr_text(),
        );
        node
    }

    fn stderr_text(&self) -> String {
        self.stderr.lock().expect("stderr lock").clone()
    }

    fn node_id(&self) -> String {
        node_id_in_log(&self.stderr_text())
    }

    fn terminate(&self) {
        let status = Command::new("kill")
            .args(["-TERM", &self.child.id().to_string()])
            .status()
            .expect("run kill");
        assert!(status.success(), "kill -TERM failed");
    }

    fn wait_exit(&mut self, timeout: Duration) -> Option<ExitStatus> {
        let deadline = Instant::now() + timeout;
        while Instant::now() < deadline {
            if let Ok(Some(status)) = self.child.try_wait() {
                return Some(status);
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        None
    }
}

impl Drop for UnreadNode {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// The entry of `node` in `delayq nodes --json`, if it is a live member.
fn member(nodes: &Value, node: &str) -> Option<Value> {
    nodes
        .as_array()?
        .iter()
        .find(|entry| entry["id"] == node)
        .cloned()
}

#[test]
fn a_node_whose_stdout_nobody_reads_stays_a_member_and_stops_on_sigterm() {
    let env = Env::start(QUEUES);
    let mut stalled = UnreadNode::spawn(env.command(&["node"]));
    let stalled_id = stalled.node_id();
    env.wait_for_members(1);

    load_tasks(&env, "flood", &task_lines(TASKS, 0..200, 7), TASKS as u64);
    // The pipe is full after about 500 lines; from then on every attempt fails. Before the
    // fix the first blocked write froze the whole runtime instead, and nothing came here.
    wait_until(
        Duration::from_secs(60),
        "attempts of the stalled node to fail (its runtime must not block on stdout)",
        || stalled.stderr_text().contains("handler failed; will retry"),
        || {
            format!(
                "stats {:?}; stderr tail: {}",
                env.stats("flood"),
                tail(&stalled.stderr_text())
            )
        },
    );
    let done_when_stalled = env.stats("flood")["done"];
    assert!(
        done_when_stalled < TASKS as u64,
        "the pipe cannot hold {TASKS} lines: {done_when_stalled} done"
    );

    // A second, healthy node: it would remove the stalled one as soon as its heartbeat key
    // expired (heartbeat_ttl is 1s). Watch for five TTLs.
    let healthy = env.spawn_node("healthy", &[]);
    env.wait_for_members(2);
    let watch_until = Instant::now() + Duration::from_secs(5);
    let mut polls = 0;
    while Instant::now() < watch_until {
        let nodes = env.json(&["nodes", "--json"]);
        let entry = member(&nodes, &stalled_id).unwrap_or_else(|| {
            panic!(
                "the stalled node left the membership: {nodes}; its stderr: {}",
                tail(&stalled.stderr_text())
            )
        });
        let age_ms = now_ms().saturating_sub(entry["last_heartbeat_ms"].as_u64().unwrap_or(0));
        assert!(
            age_ms < 2000,
            "the stalled node's last heartbeat is {age_ms} ms old: {entry}"
        );
        assert_eq!(nodes.as_array().map_or(0, Vec::len), 2, "{nodes}");
        polls += 1;
        std::thread::sleep(Duration::from_millis(250));
    }
    assert!(polls >= 5, "only {polls} polls of `delayq nodes` in 5s");
    // Still stalled all along: attempts keep failing on its side.
    let failures = stalled.stderr_text().matches("handler failed").count();
    assert!(failures > 0, "{}", tail(&stalled.stderr_text()));

    stalled.terminate();
    // Drain: blocked handlers time out (1s) within shutdown_grace (3s); then it leaves.
    let status = stalled.wait_exit(Duration::from_secs(15));
    let stderr = stalled.stderr_text();
    let status = status.unwrap_or_else(|| {
        panic!(
            "no exit within 15s of SIGTERM with a full stdout: {}",
            tail(&stderr)
        )
    });
    assert!(status.success(), "{status}: {}", tail(&stderr));
    assert!(stderr.contains("node stopped"), "{}", tail(&stderr));
    drop(healthy);
}

/// The last lines of a long log, for failure messages.
fn tail(text: &str) -> String {
    let lines: Vec<&str> = text.lines().collect();
    lines[lines.len().saturating_sub(15)..].join("\n")
}
