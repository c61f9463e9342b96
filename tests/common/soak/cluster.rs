//! The soak's cluster: Redis (one server with an append-only file, `appendfsync always`, or
//! a Sentinel set), a fault proxy per node slot in front of the one server, and a `delayq
//! node` per slot that serves the API on a free port and posts its fires to the recorder.
//! A slot outlives its processes: a killed node is replaced by a new process (a new node
//! id) with the slot's config and proxy.

use std::path::PathBuf;
use std::process::Command;
use std::time::{Duration, Instant};

use delayq_testkit::{RedisOptions, RedisServer, SentinelSet};
use serde_json::Value;

use super::history::{Clock, NodeLife, Recording};
use super::producers::Targets;
use crate::common::fault_proxy::FaultProxy;
use crate::common::{
    assert_success, delayq_command, logged_http_url, parse_json, run_with_deadline, NodeProcess,
};

/// The nodes' heartbeat TTL and lease (the checker's windows follow them).
pub const TTL_MS: u64 = 1_000;
/// See [`TTL_MS`].
pub const LEASE_MS: u64 = 2_000;

/// The periods of every soak node: faults are noticed within a second or two.
const NODE_CONFIG: &str = "\
node:
  heartbeat_period: 200ms
  heartbeat_ttl: 1s
  start_timeout: 10s
engine:
  pull_period: 200ms
  prefetch_window: 2s
  lease: 2s
  shutdown_grace: 3s
  executed_retention: 24h
queue_defaults:
  partitions: 16
  max_attempts: 25
  timeout: 10s
  backoff: { initial: 100ms, max: 1s }
";

/// Where the data lives.
pub enum Store {
    /// One server with AOF; each slot reaches it through its own proxy.
    Single(RedisServer),
    /// A master, two replicas, three sentinels; writes wait for both replicas.
    Sentinel(SentinelSet),
}

/// One node slot.
pub struct Slot {
    /// The proxy in front of the one server (none with Sentinel).
    pub proxy: Option<FaultProxy>,
    /// The slot's cluster.yaml.
    pub config: PathBuf,
    /// The running process.
    pub node: Option<NodeProcess>,
    /// Its node id.
    pub node_id: String,
}

/// The whole setup.
pub struct SoakCluster {
    /// Configs and the nodes' working directory.
    pub dir: tempfile::TempDir,
    /// Redis.
    pub store: Store,
    /// A cluster.yaml that reaches Redis without a proxy (for `stats` and `nodes`).
    pub direct_config: PathBuf,
    /// The node slots.
    pub slots: Vec<Slot>,
    recorder_url: String,
    /// The API URL of each slot, for the producers.
    pub targets: Targets,
    recording: Recording,
    clock: Clock,
    spawned: usize,
    logs: PathBuf,
}

impl SoakCluster {
    /// Starts Redis, the proxies and `nodes` nodes, and waits until all are members. Each
    /// node's stderr goes to a file in `logs` when its process ends.
    pub fn start(
        nodes: usize,
        sentinel: bool,
        recorder_url: &str,
        recording: Recording,
        clock: Clock,
        logs: PathBuf,
    ) -> Self {
        std::fs::create_dir_all(&logs).expect("create the node log directory");
        let dir = tempfile::tempdir().expect("a temporary directory");
        let prefix = format!("soak{}", std::process::id());
        let store = if sentinel {
            Store::Sentinel(SentinelSet::start())
        } else {
            Store::Single(RedisServer::start_with(RedisOptions {
                aof: true,
                // `DELAYQ_SOAK_AOF_KEYS` fills it with `DEBUG POPULATE`.
                extra_args: vec![("enable-debug-command".to_owned(), "local".to_owned())],
            }))
        };
        let redis_yaml = |url: Option<&str>| -> String {
            let topology = match (&store, url) {
                (Store::Single(_), Some(url)) => format!("  url: {url}\n"),
                (Store::Single(redis), None) => format!("  url: {}\n", redis.url()),
                (Store::Sentinel(set), _) => format!(
                    "  sentinel: {{ urls: [{}], master: {} }}\n  wait_replicas: 2\n  wait_timeout: 300ms\n",
                    set.sentinel_urls().join(", "),
                    set.master_name()
                ),
            };
            format!("redis:\n{topology}  key_prefix: {prefix}\n  response_timeout: 600ms\n{NODE_CONFIG}")
        };
        let direct_config = dir.path().join("direct.yaml");
        std::fs::write(&direct_config, redis_yaml(None)).expect("write direct.yaml");
        let mut slots = Vec::new();
        for slot in 0..nodes {
            let proxy = match &store {
                Store::Single(redis) => Some(FaultProxy::start(redis.port())),
                Store::Sentinel(_) => None,
            };
            let config = dir.path().join(format!("slot{slot}.yaml"));
            let url = proxy.as_ref().map(FaultProxy::url);
            std::fs::write(&config, redis_yaml(url.as_deref())).expect("write a slot's config");
            slots.push(Slot {
                proxy,
                config,
                node: None,
                node_id: String::new(),
            });
        }
        let mut cluster = SoakCluster {
            dir,
            store,
            direct_config,
            slots,
            recorder_url: recorder_url.to_owned(),
            targets: Targets::new(nodes),
            recording,
            clock,
            spawned: 0,
            logs,
        };
        for slot in 0..nodes {
            cluster.spawn(slot);
        }
        cluster.wait_for_members(nodes, Duration::from_secs(60));
        cluster
    }

    /// Starts a node process in `slot` and waits until it runs and logged its API URL.
    pub fn spawn(&mut self, slot: usize) {
        let mut command = delayq_command(self.dir.path());
        command
            .arg("--config")
            .arg(&self.slots[slot].config)
            .args(["node", "--listen", "127.0.0.1:0", "--handler", "http"])
            .arg("--url")
            .arg(&self.recorder_url)
            .env("DELAYQ_NODE_NAME", format!("soak-{slot}"));
        let node = NodeProcess::spawn(&format!("slot{slot}-{}", self.spawned), command);
        self.spawned += 1;
        let deadline = Instant::now() + Duration::from_secs(30);
        let url = loop {
            if let Some(url) = logged_http_url(&node.stderr_text()) {
                break url;
            }
            assert!(
                Instant::now() < deadline,
                "node in slot {slot} logged no URL: {}",
                node.stderr_text()
            );
            std::thread::sleep(Duration::from_millis(20));
        };
        let id = node.node_id();
        self.recording.node(NodeLife {
            slot,
            node: id.clone(),
            started: self.clock.now(),
        });
        self.slots[slot].node_id = id;
        self.slots[slot].node = Some(node);
        self.targets.set(slot, Some(url));
    }

    /// SIGKILLs the node in `slot`; returns its id.
    pub fn crash(&mut self, slot: usize) -> String {
        self.targets.set(slot, None);
        if let Some(node) = self.slots[slot].node.take() {
            self.save_log(&node);
            node.crash();
        }
        self.slots[slot].node_id.clone()
    }

    fn save_log(&self, node: &NodeProcess) {
        let id = node.node_id();
        let path = self
            .logs
            .join(format!("{}-{}.log", node.label, &id[..id.len().min(8)]));
        let _ = std::fs::write(path, node.stderr_text());
    }

    /// Sends `signal` (`-STOP`, `-CONT`) to the node in `slot`.
    pub fn signal(&self, slot: usize, signal: &str) {
        let node = self.slots[slot].node.as_ref().expect("a node in the slot");
        let status = Command::new("kill")
            .args([signal, &node.pid().to_string()])
            .status()
            .expect("run kill");
        assert!(status.success(), "kill {signal} {} failed", node.pid());
    }

    /// `delayq --config direct.yaml args...` as JSON.
    pub fn json(&self, args: &[&str]) -> Value {
        let mut command = delayq_command(self.dir.path());
        command.arg("--config").arg(&self.direct_config).args(args);
        let output = run_with_deadline(command, None);
        assert_success(&output, args);
        parse_json(&output.stdout)
    }

    /// Waits until `delayq nodes` lists `count` live nodes.
    pub fn wait_for_members(&self, count: usize, timeout: Duration) {
        let deadline = Instant::now() + timeout;
        loop {
            let nodes = self.json(&["nodes", "--json"]);
            if nodes.as_array().map_or(0, Vec::len) == count {
                return;
            }
            assert!(
                Instant::now() < deadline,
                "expected {count} live nodes: {nodes}\n{}",
                self.stderr()
            );
            std::thread::sleep(Duration::from_millis(200));
        }
    }

    /// Whether `queues` have nothing pending or in flight.
    pub fn settled(&self, queues: &[String]) -> Result<(), String> {
        let stats = self.json(&["stats", "--json"]);
        for queue in queues {
            let pending = stats[queue]["pending"].as_u64().unwrap_or(0);
            let inflight = stats[queue]["inflight"].as_u64().unwrap_or(0);
            if pending + inflight > 0 {
                return Err(format!("{queue}: {}", stats[queue]));
            }
        }
        Ok(())
    }

    /// Dead letters over `queues` (they would be a task the cluster gave up on).
    pub fn dead(&self, queues: &[String]) -> u64 {
        let stats = self.json(&["stats", "--json"]);
        queues
            .iter()
            .map(|queue| stats[queue]["dead"].as_u64().unwrap_or(0))
            .sum()
    }

    /// Every node's stderr, for failure messages.
    pub fn stderr(&self) -> String {
        self.slots
            .iter()
            .filter_map(|slot| slot.node.as_ref())
            .map(|node| {
                let text = node.stderr_text();
                let tail: Vec<&str> = text.lines().rev().take(30).collect();
                let tail: Vec<&str> = tail.into_iter().rev().collect();
                format!("--- {}\n{}\n", node.label, tail.join("\n"))
            })
            .collect()
    }
}

impl Drop for SoakCluster {
    fn drop(&mut self) {
        for slot in &self.slots {
            if let Some(node) = &slot.node {
                self.save_log(node);
            }
        }
    }
}
