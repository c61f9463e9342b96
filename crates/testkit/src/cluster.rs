//! A private Redis Cluster: three masters (optionally with replicas) on free ports, made with
//! `redis-cli --cluster create`, with helpers to find a key's master, kill a master and wait
//! for its replica to take over.

use std::process::Command;
use std::time::Duration;

use crate::process::{poll, port_pair, run, run_text, Readiness, RedisProcess};

/// How to start a cluster.
#[derive(Debug, Clone)]
pub struct ClusterOptions {
    /// Number of masters (at least 3, as Redis Cluster requires).
    pub masters: usize,
    /// Replicas per master.
    pub replicas_per_master: usize,
    /// `cluster-node-timeout`: how long before an unreachable master is failed over.
    pub node_timeout: Duration,
    /// Extra config lines for every node.
    pub extra_config: Vec<String>,
}

impl Default for ClusterOptions {
    fn default() -> Self {
        ClusterOptions {
            masters: 3,
            replicas_per_master: 0,
            node_timeout: Duration::from_millis(1500),
            extra_config: Vec::new(),
        }
    }
}

/// One node as `CLUSTER NODES` describes it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ClusterNode {
    /// Node id.
    pub id: String,
    /// Client port on 127.0.0.1.
    pub port: u16,
    /// Whether it is a master (else a replica).
    pub master: bool,
    /// For a replica, the id of its master.
    pub replica_of: Option<String>,
    /// Whether the cluster marks it failed (`fail` or `fail?`).
    pub failed: bool,
    /// Slot ranges it serves (inclusive).
    pub slots: Vec<(u16, u16)>,
}

/// A running Redis Cluster, killed and removed on drop.
#[derive(Debug)]
pub struct RedisCluster {
    nodes: Vec<RedisProcess>,
}

impl RedisCluster {
    /// Three masters with `replicas_per_master` replicas each, ready (`cluster_state:ok`, all
    /// 16384 slots served, replicas in sync).
    ///
    /// # Panics
    /// When `redis-server`/`redis-cli` are missing or the cluster does not form in time; the
    /// message carries the nodes' log tails.
    pub fn start(replicas_per_master: usize) -> Self {
        Self::start_with(ClusterOptions {
            replicas_per_master,
            ..ClusterOptions::default()
        })
    }

    /// A cluster shaped by `options`.
    ///
    /// # Panics
    /// As [`RedisCluster::start`].
    pub fn start_with(options: ClusterOptions) -> Self {
        assert!(
            options.masters >= 3,
            "Redis Cluster needs at least 3 masters"
        );
        if !crate::redis_server_installed() {
            panic!("{}", crate::INSTALL_HINT);
        }
        let total = options.masters * (1 + options.replicas_per_master);
        let mut config = format!(
            "cluster-enabled yes\ncluster-config-file nodes.conf\ncluster-node-timeout {}\n\
             appendonly no\nsave \"\"\ncluster-replica-validity-factor 0\n\
             cluster-allow-replica-migration no\nrepl-diskless-sync yes\nrepl-diskless-sync-delay 0\n",
            options.node_timeout.as_millis()
        );
        for line in &options.extra_config {
            config.push_str(line);
            config.push('\n');
        }
        let mut nodes = Vec::with_capacity(total);
        while nodes.len() < total {
            let port = port_pair();
            match RedisProcess::start("cluster-node", port, &config, false, Readiness::Ping) {
                Ok(node) => nodes.push(node),
                Err(error) if nodes.len() + 1 < total * 3 => {
                    eprintln!("cluster node on {port} did not start, trying another port: {error}");
                }
                Err(error) => panic!("cluster node did not start: {error}"),
            }
        }
        let cluster = RedisCluster { nodes };
        let mut create = Command::new("redis-cli");
        create.arg("--cluster").arg("create");
        for node in &cluster.nodes {
            create.arg(format!("127.0.0.1:{}", node.port()));
        }
        create
            .arg("--cluster-replicas")
            .arg(options.replicas_per_master.to_string())
            .arg("--cluster-yes");
        let output = create
            .output()
            .unwrap_or_else(|error| panic!("run redis-cli (package redis-tools): {error}"));
        if !output.status.success() {
            panic!(
                "redis-cli --cluster create failed: {}{}\n{}",
                String::from_utf8_lossy(&output.stdout),
                String::from_utf8_lossy(&output.stderr),
                cluster.logs()
            );
        }
        cluster.wait_until_ok(Duration::from_secs(30));
        cluster.wait_for_replicas(
            options.masters * options.replicas_per_master,
            Duration::from_secs(30),
        );
        cluster
    }

    /// Every node's URL (`redis://127.0.0.1:<port>`), usable as seeds.
    pub fn seed_urls(&self) -> Vec<String> {
        self.nodes
            .iter()
            .filter(|node| node.is_running())
            .map(|node| format!("redis://127.0.0.1:{}", node.port()))
            .collect()
    }

    /// Every node's port, running or not.
    pub fn ports(&self) -> Vec<u16> {
        self.nodes.iter().map(RedisProcess::port).collect()
    }

    /// The nodes as a running node sees them.
    ///
    /// # Panics
    /// When no node answers.
    pub fn nodes(&self) -> Vec<ClusterNode> {
        let text = self
            .live_ports()
            .into_iter()
            .find_map(|port| run_text(port, &["CLUSTER", "NODES"]).ok())
            .unwrap_or_else(|| panic!("no cluster node answers CLUSTER NODES\n{}", self.logs()));
        parse_nodes(&text)
    }

    /// The ports of the masters serving slots (not failed).
    pub fn masters(&self) -> Vec<u16> {
        self.nodes()
            .into_iter()
            .filter(|node| node.master && !node.failed && !node.slots.is_empty())
            .map(|node| node.port)
            .collect()
    }

    /// The ports of the live replicas of the master at `port`.
    pub fn replicas_of(&self, port: u16) -> Vec<u16> {
        let nodes = self.nodes();
        let Some(master) = nodes.iter().find(|node| node.port == port) else {
            return Vec::new();
        };
        nodes
            .iter()
            .filter(|node| !node.failed && node.replica_of.as_deref() == Some(master.id.as_str()))
            .map(|node| node.port)
            .collect()
    }

    /// The hash slot of `key` (`CLUSTER KEYSLOT`).
    pub fn keyslot(&self, key: &str) -> u16 {
        self.live_ports()
            .into_iter()
            .find_map(|port| {
                redis::from_redis_value(run(port, &["CLUSTER", "KEYSLOT", key]).ok()?).ok()
            })
            .unwrap_or_else(|| panic!("no cluster node answers CLUSTER KEYSLOT\n{}", self.logs()))
    }

    /// The port of the master serving `key`'s slot.
    ///
    /// # Panics
    /// When no live master serves it.
    pub fn master_of(&self, key: &str) -> u16 {
        let slot = self.keyslot(key);
        self.owner_of_slot(slot)
            .unwrap_or_else(|| panic!("no live master serves slot {slot}\n{}", self.logs()))
    }

    /// Runs `args` on the node at `port`.
    pub fn command(&self, port: u16, args: &[&str]) -> redis::RedisResult<redis::Value> {
        run(port, args)
    }

    /// `INFO <section>` of the node at `port`.
    pub fn info(&self, port: u16, section: &str) -> String {
        run_text(port, &["INFO", section]).unwrap_or_default()
    }

    /// SIGKILLs the master serving `key`'s slot; returns its port.
    pub fn kill_master_of(&mut self, key: &str) -> u16 {
        let port = self.master_of(key);
        self.kill(port);
        port
    }

    /// SIGKILLs the node at `port`.
    pub fn kill(&mut self, port: u16) {
        if let Some(node) = self.nodes.iter_mut().find(|node| node.port() == port) {
            node.kill();
        }
    }

    /// Waits until a live master serves the slot of `key` again after its master at
    /// `killed` died, and every live node reports `cluster_state:ok`. Returns the new
    /// master's port.
    ///
    /// # Panics
    /// When that does not happen within `limit`.
    pub fn wait_for_failover(&self, key: &str, killed: u16, limit: Duration) -> u16 {
        let slot = self.keyslot(key);
        let moved = poll(limit, || {
            let owner = self.owner_of_slot(slot)?;
            (owner != killed && self.all_ok()).then_some(owner)
        });
        moved.unwrap_or_else(|| {
            panic!(
                "no failover of slot {slot} away from port {killed} within {limit:?}: {:?}\n{}",
                self.nodes(),
                self.logs()
            )
        })
    }

    /// Waits until every live node reports `cluster_state:ok` with all slots served, knows
    /// every node, and every replica is in sync.
    ///
    /// # Panics
    /// When that does not happen within `limit`.
    pub fn wait_until_ok(&self, limit: Duration) {
        let total = self.nodes.len();
        let ready = poll(limit, || {
            for port in self.live_ports() {
                let info = run_text(port, &["CLUSTER", "INFO"]).ok()?;
                let ok = info.contains("cluster_state:ok")
                    && info.contains("cluster_slots_ok:16384")
                    && info.contains(&format!("cluster_known_nodes:{total}"));
                if !ok {
                    return None;
                }
                let replication = self.info(port, "replication");
                if replication.contains("role:slave")
                    && !replication.contains("master_link_status:up")
                {
                    return None;
                }
            }
            Some(())
        });
        if ready.is_none() {
            panic!("cluster not ready within {limit:?}\n{}", self.logs());
        }
    }

    /// Waits until every live node sees `replicas` replicas attached to live masters, each
    /// of them in sync (`master_link_status:up`).
    ///
    /// # Panics
    /// When that does not happen within `limit`.
    pub fn wait_for_replicas(&self, replicas: usize, limit: Duration) {
        let ready = poll(limit, || {
            for port in self.live_ports() {
                let nodes = parse_nodes(&run_text(port, &["CLUSTER", "NODES"]).ok()?);
                let attached = nodes
                    .iter()
                    .filter(|node| !node.master && !node.failed && node.replica_of.is_some())
                    .count();
                if attached != replicas {
                    return None;
                }
                let replication = self.info(port, "replication");
                if replication.contains("role:slave")
                    && !replication.contains("master_link_status:up")
                {
                    return None;
                }
            }
            Some(())
        });
        if ready.is_none() {
            panic!(
                "cluster replicas not attached within {limit:?}: {:?}\n{}",
                self.nodes(),
                self.logs()
            );
        }
    }

    /// The log tails of every node.
    pub fn logs(&self) -> String {
        self.nodes.iter().map(|node| node.log_tail(15)).collect()
    }

    fn live_ports(&self) -> Vec<u16> {
        self.nodes
            .iter()
            .filter(|node| node.is_running())
            .map(RedisProcess::port)
            .collect()
    }

    fn all_ok(&self) -> bool {
        self.live_ports().into_iter().all(|port| {
            run_text(port, &["CLUSTER", "INFO"]).is_ok_and(|info| info.contains("cluster_state:ok"))
        })
    }

    fn owner_of_slot(&self, slot: u16) -> Option<u16> {
        let live = self.live_ports();
        // Ask every live node: right after a failover they may disagree for a moment.
        let mut owners = live.iter().filter_map(|&port| {
            let nodes = parse_nodes(&run_text(port, &["CLUSTER", "NODES"]).ok()?);
            nodes
                .into_iter()
                .find(|node| {
                    node.master
                        && !node.failed
                        && node
                            .slots
                            .iter()
                            .any(|&(low, high)| (low..=high).contains(&slot))
                })
                .map(|node| node.port)
        });
        let first = owners.next()?;
        (owners.all(|owner| owner == first) && live.contains(&first)).then_some(first)
    }
}

/// Parses `CLUSTER NODES`.
fn parse_nodes(text: &str) -> Vec<ClusterNode> {
    text.lines()
        .filter_map(|line| {
            let fields: Vec<&str> = line.split_whitespace().collect();
            let address = fields.get(1)?;
            let port = address
                .split('@')
                .next()?
                .rsplit(':')
                .next()?
                .parse()
                .ok()?;
            let flags = fields.get(2)?;
            let slots = fields
                .iter()
                .skip(8)
                .filter(|range| !range.starts_with('['))
                .filter_map(|range| match range.split_once('-') {
                    Some((low, high)) => Some((low.parse().ok()?, high.parse().ok()?)),
                    None => range.parse().ok().map(|slot| (slot, slot)),
                })
                .collect();
            Some(ClusterNode {
                id: fields.first()?.to_string(),
                port,
                master: flags.contains("master"),
                replica_of: fields
                    .get(3)
                    .filter(|id| **id != "-")
                    .map(|id| id.to_string()),
                failed: flags.contains("fail"),
                slots,
            })
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cluster_nodes_lines_are_parsed() {
        let text = "a1 127.0.0.1:20001@30001 myself,master - 0 0 1 connected 0-5460\n\
                    b2 127.0.0.1:20002@30002 slave a1 0 1 1 connected\n\
                    c3 127.0.0.1:20003@30003 master,fail - 0 1 3 disconnected 5461 5462-10922\n";
        let nodes = parse_nodes(text);
        assert_eq!(nodes.len(), 3);
        assert_eq!(nodes[0].slots, vec![(0, 5460)]);
        assert!(nodes[0].master && !nodes[1].master);
        assert!(nodes[2].failed);
        assert_eq!(nodes[1].replica_of.as_deref(), Some("a1"));
        assert_eq!(nodes[0].replica_of, None);
        assert_eq!(nodes[2].slots, vec![(5461, 5461), (5462, 10922)]);
    }
}
