//! End-to-end, issue 9: the `delayq` binary on a Redis Cluster named by `redis.cluster` in
//! cluster.yaml (every command, `DELAYQ_REDIS_CLUSTER`, `delayq bench` with its per-master
//! figures and key clean-up), and on a TLS-only server as a prefix-limited ACL user (a wrong
//! password is one clear line, without the password, within `node.start_timeout`).

mod common;

use std::path::PathBuf;
use std::process::{Command, Output};
use std::time::{Duration, Instant};

use common::{
    assert_success, by_id, delayq_command, lateness_summary, parse_json, run_with_deadline,
    task_lines, wait_until, FireLog, NodeProcess, BASE_CONFIG,
};
use delayq_testkit::{RedisCluster, TlsRedis};
use serde_json::Value;

/// A cluster.yaml in a temporary directory, and `delayq --config <it>` commands.
struct Setup {
    dir: tempfile::TempDir,
    config: PathBuf,
}

impl Setup {
    /// `redis_yaml` (the lines under `redis:`), then [`BASE_CONFIG`] and `rest`.
    fn new(redis_yaml: &str, rest: &str) -> Self {
        let dir = tempfile::tempdir().expect("a temporary directory");
        let config = dir.path().join("cluster.yaml");
        let yaml = format!("redis:\n{redis_yaml}  response_timeout: 600ms\n{BASE_CONFIG}{rest}");
        std::fs::write(&config, yaml).expect("write cluster.yaml");
        Setup { dir, config }
    }

    fn command(&self, args: &[&str]) -> Command {
        let mut command = delayq_command(self.dir.path());
        command
            .env_remove("DELAYQ_REDIS_CLUSTER")
            .env_remove("DELAYQ_REDIS_SENTINEL")
            .env_remove("DELAYQ_REDIS_SENTINEL_MASTER")
            .arg("--config")
            .arg(&self.config)
            .args(args);
        command
    }

    fn run(&self, args: &[&str]) -> Output {
        run_with_deadline(self.command(args), None)
    }

    fn json(&self, args: &[&str]) -> Value {
        let output = self.run(args);
        assert_success(&output, args);
        parse_json(&output.stdout)
    }

    fn node(&self, label: &str, args: &[&str], fires: &FireLog) -> NodeProcess {
        let mut command = self.command(&["node"]);
        command.args(args);
        NodeProcess::spawn_into(label, command, fires.clone())
    }

    fn load(&self, queue: &str, lines: &str, expected: u64) {
        let args = ["schedule", queue, "--from", "-"];
        let output = run_with_deadline(self.command(&args), Some(lines.as_bytes()));
        assert_success(&output, &args);
        let summary = parse_json(&output.stdout);
        assert_eq!(summary["scheduled"], expected, "{summary}");
        assert_eq!(summary["failed"], 0, "{summary}");
    }

    /// Waits until `queue` has nothing pending or in flight and `done` completed.
    fn wait_settled(&self, queue: &str, done: u64) {
        wait_until(
            Duration::from_secs(30),
            "the queue to settle",
            || {
                let stats = self.json(&["stats", "--json"]);
                stats[queue]["pending"] == 0
                    && stats[queue]["inflight"] == 0
                    && stats[queue]["done"].as_u64().unwrap_or(0) >= done
            },
            || self.json(&["stats", "--json"]).to_string(),
        );
    }
}

#[test]
fn every_command_and_the_bench_run_on_a_redis_cluster_named_in_the_config() {
    let cluster = RedisCluster::start(0);
    let prefix = format!("e2etopo{}", std::process::id());
    let seeds = cluster.seed_urls();
    let setup = Setup::new(
        &format!(
            "  cluster: [{}]\n  key_prefix: {prefix}\n",
            seeds.join(", ")
        ),
        "queues:\n  failing:\n    partitions: 4\n    max_attempts: 1\n",
    );
    let fires = FireLog::default();
    let _a = setup.node("a", &["--queue", "orders"], &fires);
    let _b = setup.node("b", &["--queue", "orders"], &fires);
    let _c = setup.node(
        "c",
        &["--queue", "failing", "--handler", "exec", "--", "false"],
        &FireLog::default(),
    );
    wait_until(
        Duration::from_secs(30),
        "three live nodes owning every partition",
        || {
            let nodes = setup.json(&["nodes", "--json"]);
            let owned: u64 = nodes.as_array().map_or(0, |nodes| {
                nodes.iter().filter_map(|n| n["partitions"].as_u64()).sum()
            });
            nodes.as_array().map_or(0, Vec::len) == 3 && owned == 64 + 4
        },
        || setup.json(&["nodes", "--json"]).to_string(),
    );

    let one = setup.json(&["schedule", "orders", "one", "--in", "1s"]);
    assert_eq!(one["replaced"], false, "{one}");
    setup.load("orders", &task_lines(300, 500..2_500, 9), 300);
    let far = setup.json(&[
        "schedule",
        "orders",
        "far",
        "--in",
        "1h",
        "--payload",
        "hello",
    ]);
    let task = setup.json(&["get", "orders", "far", "--json"]);
    assert_eq!(task["state"], "pending", "{task}");
    assert_eq!(task["payload"], "hello", "{task}");
    assert_eq!(task["due_ms"], far["due_ms"], "{task}");
    let pending = setup.json(&["pending", "orders", "--limit", "400", "--json"]);
    let listed = pending.as_array().expect("an array");
    assert!(
        listed.iter().any(|task| task["id"] == "far"),
        "far is pending: {pending}"
    );
    assert_eq!(setup.json(&["cancel", "orders", "far"])["cancelled"], true);
    let gone = setup.run(&["get", "orders", "far"]);
    assert_eq!(gone.status.code(), Some(1), "{gone:?}");
    setup.json(&["schedule", "failing", "doomed", "--in", "100ms"]);

    wait_until(
        Duration::from_secs(60),
        "301 tasks to fire",
        || fires.distinct() == 301,
        || format!("{} fired", fires.distinct()),
    );
    setup.wait_settled("orders", 301);
    let snapshot = fires.snapshot();
    let repeated: Vec<_> = by_id(&snapshot)
        .into_iter()
        .filter(|(_, runs)| runs.len() > 1)
        .collect();
    assert!(repeated.is_empty(), "fired twice: {repeated:?}");
    assert!(
        snapshot.iter().all(|fire| fire.fired_ms >= fire.due_ms),
        "a task fired early"
    );
    eprintln!("cluster: {}", lateness_summary(&snapshot));
    assert_eq!(
        setup.json(&["get", "orders", "one", "--json"])["state"],
        "done"
    );

    wait_until(
        Duration::from_secs(30),
        "the failing task to be dead-lettered",
        || {
            setup
                .json(&["dead", "failing", "--json"])
                .as_array()
                .map_or(0, Vec::len)
                == 1
        },
        || setup.json(&["dead", "failing", "--json"]).to_string(),
    );
    assert_eq!(setup.json(&["purge", "failing", "--all"])["purged"], 1);
    let stats = setup.json(&["stats", "--json"]);
    assert_eq!(stats["failing"]["dead"], 0, "{stats}");

    // The environment names the cluster just as well (the file has no topology then).
    let bare = Setup::new(&format!("  key_prefix: {prefix}\n"), "");
    let mut command = bare.command(&["stats", "--json"]);
    command.env("DELAYQ_REDIS_CLUSTER", seeds.join(","));
    let output = run_with_deadline(command, None);
    assert_success(&output, &["stats", "--json"]);
    assert_eq!(parse_json(&output.stdout)["orders"]["done"], 301);

    // The bench runs on the cluster, reports each master's share, and removes its keys.
    let args = [
        "bench",
        "--scenario",
        "burst",
        "--burst",
        "3000",
        "--nodes",
        "2",
        "--json",
    ];
    let report = setup.json(&args);
    assert_eq!(report["topology"], "cluster", "{report}");
    assert_eq!(report["masters"], 3, "{report}");
    assert_eq!(report["burst"]["deliveries"], 3000, "{report}");
    let masters = report["burst"]["redis_masters"]
        .as_array()
        .expect("masters");
    assert_eq!(masters.len(), 3, "{report}");
    for master in masters {
        let share = master["share_pct"].as_f64().unwrap_or(0.0);
        assert!((20.0..=45.0).contains(&share), "uneven: {report}");
    }
    let bench_prefix = report["key_prefix"].as_str().expect("key_prefix");
    assert!(
        bench_prefix.starts_with(&format!("{prefix}:bench-")),
        "{report}"
    );
    for port in cluster.masters() {
        let left: Vec<String> = delayq_redis::redis::from_redis_value(
            cluster
                .command(port, &["KEYS", &format!("{bench_prefix}:*")])
                .expect("KEYS"),
        )
        .expect("key names");
        assert!(left.is_empty(), "master {port} kept {left:?}");
    }
}

#[test]
fn tls_acl_user_fires_everything_and_a_wrong_password_is_one_clear_line() {
    let prefix = format!("e2etls{}", std::process::id());
    // Exactly the documented ACL rule (the testkit's DELAYQ_COMMANDS).
    let server = TlsRedis::start(&prefix);
    let files = server.files();
    let tls = format!(
        "  tls: {{ ca_file: {}, cert_file: {}, key_file: {} }}\n  key_prefix: {prefix}\n",
        files.ca_file.display(),
        files.client_cert.display(),
        files.client_key.display()
    );
    let setup = Setup::new(&format!("  url: {}\n{tls}", server.user_url()), "");
    let fires = FireLog::default();
    let _node = setup.node("tls", &[], &fires);
    setup.load("orders", &task_lines(200, 300..1_500, 4), 200);
    setup.json(&["schedule", "orders", "single", "--in", "200ms"]);
    wait_until(
        Duration::from_secs(60),
        "every task to fire over TLS",
        || fires.distinct() == 201,
        || format!("{} fired", fires.distinct()),
    );
    // Nothing delayq sent was refused by the ACL rule (`ACL LOG` lists every denial).
    std::thread::sleep(Duration::from_millis(500));
    let denials = server.admin_command(&["ACL", "LOG"]).expect("ACL LOG");
    assert_eq!(
        denials,
        delayq_redis::redis::Value::Array(vec![]),
        "{denials:?}"
    );
    setup.wait_settled("orders", 201);
    assert!(fires.snapshot().iter().all(|f| f.fired_ms >= f.due_ms));

    // The bench runs as the limited user too: its keys sit under the configured prefix.
    let args = [
        "bench",
        "--scenario",
        "burst",
        "--burst",
        "500",
        "--nodes",
        "1",
        "--json",
    ];
    let report = setup.json(&args);
    assert_eq!(report["burst"]["deliveries"], 500, "{report}");
    let bench_prefix = report["key_prefix"].as_str().expect("key_prefix");
    let left: Vec<String> = delayq_redis::redis::from_redis_value(
        server
            .admin_command(&["KEYS", &format!("{bench_prefix}:*")])
            .expect("KEYS"),
    )
    .expect("key names");
    // SCAN is not in the user's rule: the store's clean-up removed every task; what stays is
    // the registry, the epoch and the claim receipts (which expire after one lease).
    let data: Vec<&String> = left
        .iter()
        .filter(|key| !key.ends_with(":claim") && !key.contains(":{cluster}:"))
        .collect();
    assert!(data.is_empty(), "task data left: {data:?}");

    let secret = "not-the-Pa55word";
    let wrong = Setup::new(
        &format!("  url: {}\n{tls}", server.url_as("delayq", secret)),
        "",
    );
    let started = Instant::now();
    let command = wrong.command(&["node"]);
    let output = run_with_deadline(command, None);
    let took = started.elapsed();
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(!output.status.success(), "{stderr}");
    assert!(
        took < Duration::from_secs(5),
        "start_timeout is 5s, took {took:?}"
    );
    // `delayq node` logs at info (the configuration it loaded); the failure itself is one
    // line, the last one, with no warnings or retries before it.
    let errors: Vec<&str> = stderr
        .lines()
        .filter(|l| l.starts_with("error: "))
        .collect();
    assert_eq!(errors.len(), 1, "one error line: {stderr}");
    assert_eq!(stderr.lines().last(), Some(errors[0]), "{stderr}");
    assert!(
        !stderr.contains(" WARN ") && !stderr.contains(" ERROR "),
        "{stderr}"
    );
    assert!(!stderr.contains(secret), "{stderr}");
    let line = errors[0].to_lowercase();
    assert!(
        line.contains("refused the login") && line.contains("delayq:***@"),
        "{stderr}"
    );
}
