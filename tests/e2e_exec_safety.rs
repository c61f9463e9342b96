//! End-to-end: `delayq node --handler exec` cleans up after itself. The command does not
//! see the node's Redis credentials, the whole process group of a command that outlives
//! its timeout is killed, the command dies with a node killed by SIGKILL, and a command
//! flooding its stderr neither blocks nor swells the node.

mod common;

use std::path::Path;
use std::time::Duration;

use common::{wait_until, Env, NodeProcess};
use serde_json::Value;

const QUEUES: &str = "\
queue_defaults:
  partitions: 4
  max_attempts: 1
  timeout: 1s
";

/// The pids of the processes whose command line contains `marker` (a unique argument of
/// the test's commands), from /proc, except `node` (whose own arguments name the command).
fn processes_with(marker: &str, node: u32) -> Vec<u32> {
    let Ok(entries) = std::fs::read_dir("/proc") else {
        return Vec::new();
    };
    entries
        .filter_map(Result::ok)
        .filter_map(|entry| entry.file_name().to_str()?.parse::<u32>().ok())
        .filter(|&pid| pid != node)
        .filter(|pid| {
            std::fs::read(format!("/proc/{pid}/cmdline"))
                .map(|cmdline| String::from_utf8_lossy(&cmdline).contains(marker))
                .unwrap_or(false)
        })
        .collect()
}

/// Kills what a failed test left behind (only the processes carrying our marker; the node
/// is gone by then).
struct KillLeftovers(&'static str);

impl Drop for KillLeftovers {
    fn drop(&mut self) {
        for pid in processes_with(self.0, std::process::id()) {
            let _ = std::process::Command::new("kill")
                .args(["-KILL", &pid.to_string()])
                .status();
        }
    }
}

fn dead_task(env: &Env, queue: &str, id: &str) -> Value {
    wait_until(
        Duration::from_secs(30),
        &format!("{queue}/{id} to be dead"),
        || env.json(&["get", queue, id])["state"] == "dead",
        || env.json(&["get", queue, id]).to_string(),
    );
    env.json(&["get", queue, id])
}

#[test]
fn the_command_does_not_inherit_the_nodes_redis_credentials() {
    let env = Env::start(QUEUES);
    let password = "redis-password-5e1c";
    env.redis()
        .command(&["CONFIG", "SET", "requirepass", password])
        .expect("CONFIG SET requirepass");
    let url = format!("redis://:{password}@127.0.0.1:{}/0", env.redis().port());
    // The file points at the authenticated URL too, for the `delayq` commands of the test.
    let yaml = std::fs::read_to_string(&env.config).expect("read cluster.yaml");
    std::fs::write(&env.config, yaml.replace(&env.redis().url(), &url)).expect("write");

    let out = env.dir.path().join("env.txt");
    let mut command = env.command(&[
        "node",
        "--handler",
        "exec",
        "--",
        "/bin/sh",
        "-c",
        "env > \"$E2E_OUT\"",
    ]);
    command
        .env("DELAYQ_REDIS_URL", &url)
        .env("DELAYQ_HTTP_TOKEN", "http-token-secret-77aa")
        .env("E2E_OUT", &out);
    let _node = NodeProcess::spawn("exec-env", command);
    env.wait_for_members(1);
    env.json(&["schedule", "envq", "e1", "--in", "0ms"]);
    wait_until(
        Duration::from_secs(30),
        "envq/e1 to be done",
        || env.json(&["get", "envq", "e1"])["state"] == "done",
        || env.json(&["get", "envq", "e1"]).to_string(),
    );
    let seen = std::fs::read_to_string(&out).expect("the command wrote its environment");
    assert!(
        seen.contains("DELAYQ_ID=e1") && seen.contains("DELAYQ_QUEUE=envq"),
        "the task's variables are there: {seen}"
    );
    assert!(seen.contains("E2E_OUT="), "other variables stay: {seen}");
    for secret in [
        password,
        "http-token-secret-77aa",
        "DELAYQ_REDIS_URL",
        "DELAYQ_HTTP_TOKEN",
    ] {
        assert!(!seen.contains(secret), "the command saw {secret:?}: {seen}");
    }
}

#[test]
fn the_whole_process_group_is_killed_at_the_timeout() {
    const MARKER: &str = "987.654";
    let _cleanup = KillLeftovers(MARKER);
    let env = Env::start(QUEUES);
    let script = format!("sleep {MARKER} & sleep {MARKER}");
    let node = env.spawn_node(
        "exec-group",
        &["--handler", "exec", "--", "/bin/sh", "-c", &script],
    );
    env.wait_for_members(1);
    let node_pid = node.pid();
    env.json(&["schedule", "groupq", "g1", "--in", "0ms"]);
    wait_until(
        Duration::from_secs(30),
        "both sleeps to run",
        || processes_with(MARKER, node_pid).len() >= 2,
        || format!("{:?}", processes_with(MARKER, node_pid)),
    );
    let dead = dead_task(&env, "groupq", "g1");
    assert!(
        dead["last_error"]
            .as_str()
            .unwrap_or_default()
            .contains("timed out"),
        "{dead}"
    );
    // The background sleep and the foreground one went with the shell.
    wait_until(
        Duration::from_secs(5),
        "no process of the command's group to survive",
        || processes_with(MARKER, node_pid).is_empty(),
        || format!("still running: {:?}", processes_with(MARKER, node_pid)),
    );
}

#[test]
fn the_command_dies_with_a_node_killed_by_sigkill() {
    const MARKER: &str = "876.543";
    let _cleanup = KillLeftovers(MARKER);
    let env = Env::start(QUEUES.replace("timeout: 1s", "timeout: 1h").as_str());
    let node = env.spawn_node("exec-orphan", &["--handler", "exec", "--", "sleep", MARKER]);
    env.wait_for_members(1);
    let node_pid = node.pid();
    env.json(&["schedule", "orphanq", "o1", "--in", "0ms"]);
    wait_until(
        Duration::from_secs(30),
        "the command to run",
        || !processes_with(MARKER, node_pid).is_empty(),
        || env.json(&["get", "orphanq", "o1"]).to_string(),
    );
    // SIGKILL by pid: `NodeProcess::crash` would also wait for the end of the node's
    // stdout, which a surviving command holds open.
    let killed = std::process::Command::new("kill")
        .args(["-KILL", &node_pid.to_string()])
        .status()
        .expect("run kill");
    assert!(killed.success());
    wait_until(
        Duration::from_secs(5),
        "the command to die with its node",
        || processes_with(MARKER, node_pid).is_empty(),
        || format!("still running: {:?}", processes_with(MARKER, node_pid)),
    );
}

/// The node's peak resident memory, from /proc.
fn peak_rss_kib(pid: u32) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
    status
        .lines()
        .find_map(|line| line.strip_prefix("VmHWM:"))
        .and_then(|value| value.split_whitespace().next()?.parse().ok())
        .unwrap_or(0)
}

#[test]
fn a_command_flooding_its_stderr_neither_blocks_nor_swells_the_node() {
    let env = Env::start(QUEUES.replace("timeout: 1s", "timeout: 20s").as_str());
    let script = Path::new(env.dir.path()).join("flood.sh");
    // 32 MiB on stderr, then a last line and a failure.
    std::fs::write(
        &script,
        "head -c 33554432 /dev/zero | tr '\\0' 'x' >&2\necho 'the last words' >&2\nexit 4\n",
    )
    .expect("write the script");
    let script = script.to_str().expect("a UTF-8 path").to_owned();
    let node = env.spawn_node(
        "exec-flood",
        &["--handler", "exec", "--", "/bin/sh", &script],
    );
    env.wait_for_members(1);
    let before = peak_rss_kib(node.pid());
    env.json(&["schedule", "floodq", "f1", "--in", "0ms"]);
    let dead = dead_task(&env, "floodq", "f1");
    let last_error = dead["last_error"].as_str().unwrap_or_default();
    assert!(
        last_error.contains("exit status 4") && last_error.contains("the last words"),
        "the status and the end of stderr: {dead}"
    );
    assert!(last_error.len() < 1024, "{} bytes", last_error.len());
    let growth_kib = peak_rss_kib(node.pid()).saturating_sub(before);
    assert!(
        growth_kib < 16 * 1024,
        "the node's peak memory grew by {growth_kib} KiB for 32 MiB of stderr"
    );
}
