//! A private Sentinel setup: a master, its replicas and three sentinels (quorum 2, a short
//! `down-after-milliseconds`), with helpers to kill the master or ask for a planned failover
//! and wait for the new master.

use std::collections::HashMap;
use std::time::Duration;

use crate::process::{poll, run_as, Readiness, RedisProcess};

/// How to start a Sentinel setup.
#[derive(Debug, Clone)]
pub struct SentinelOptions {
    /// The monitored master's name.
    pub master_name: String,
    /// Replicas of the master.
    pub replicas: usize,
    /// Sentinels.
    pub sentinels: usize,
    /// Sentinels that must agree the master is down.
    pub quorum: usize,
    /// `sentinel down-after-milliseconds`.
    pub down_after: Duration,
    /// `sentinel failover-timeout`.
    pub failover_timeout: Duration,
    /// `requirepass` (and `masterauth`) of the master and replicas; the sentinels get it as
    /// `sentinel auth-pass`.
    pub data_password: Option<String>,
    /// `requirepass` of the sentinels (and `sentinel sentinel-pass` between them).
    pub sentinel_password: Option<String>,
}

impl Default for SentinelOptions {
    fn default() -> Self {
        SentinelOptions {
            master_name: "mymaster".to_owned(),
            replicas: 2,
            sentinels: 3,
            quorum: 2,
            down_after: Duration::from_millis(1000),
            failover_timeout: Duration::from_millis(5000),
            data_password: None,
            sentinel_password: None,
        }
    }
}

/// A running master + replicas + sentinels, killed and removed on drop.
#[derive(Debug)]
pub struct SentinelSet {
    data: Vec<RedisProcess>,
    sentinels: Vec<RedisProcess>,
    master_name: String,
    data_password: Option<String>,
    sentinel_password: Option<String>,
}

impl SentinelSet {
    /// A master, two replicas and three sentinels that all know each other.
    ///
    /// # Panics
    /// When a process does not start or the sentinels do not see the whole set in time; the
    /// message carries the log tails.
    pub fn start() -> Self {
        Self::start_with(SentinelOptions::default())
    }

    /// A setup shaped by `options`.
    ///
    /// # Panics
    /// As [`SentinelSet::start`].
    pub fn start_with(options: SentinelOptions) -> Self {
        if !crate::redis_server_installed() {
            panic!("{}", crate::INSTALL_HINT);
        }
        let mut data_config =
            "appendonly no\nsave \"\"\nrepl-diskless-sync yes\nrepl-diskless-sync-delay 0\n"
                .to_owned();
        if let Some(password) = &options.data_password {
            data_config.push_str(&format!("requirepass {password}\nmasterauth {password}\n"));
        }
        let data_config = data_config.as_str();
        let master = start_retrying("sentinel-master", data_config, false);
        let mut data = vec![master];
        for _ in 0..options.replicas {
            let config = format!("{data_config}replicaof 127.0.0.1 {}\n", data[0].port());
            data.push(start_retrying("sentinel-replica", &config, false));
        }
        let mut sentinel_config = format!(
            "sentinel monitor {name} 127.0.0.1 {port} {quorum}\n\
             sentinel down-after-milliseconds {name} {down}\n\
             sentinel failover-timeout {name} {failover}\n\
             sentinel parallel-syncs {name} 2\n",
            name = options.master_name,
            port = data[0].port(),
            quorum = options.quorum,
            down = options.down_after.as_millis(),
            failover = options.failover_timeout.as_millis(),
        );
        if let Some(password) = &options.data_password {
            sentinel_config.push_str(&format!(
                "sentinel auth-pass {} {password}\n",
                options.master_name
            ));
        }
        if let Some(password) = &options.sentinel_password {
            sentinel_config.push_str(&format!(
                "requirepass {password}\nsentinel sentinel-pass {password}\n"
            ));
        }
        let sentinels = (0..options.sentinels)
            .map(|_| start_retrying("sentinel", &sentinel_config, true))
            .collect();
        let set = SentinelSet {
            data,
            sentinels,
            master_name: options.master_name,
            data_password: options.data_password,
            sentinel_password: options.sentinel_password,
        };
        set.wait_until_complete(options.replicas, options.sentinels, Duration::from_secs(20));
        set
    }

    /// The master's name the sentinels monitor.
    pub fn master_name(&self) -> &str {
        &self.master_name
    }

    /// `redis://127.0.0.1:<port>` of every running sentinel.
    pub fn sentinel_urls(&self) -> Vec<String> {
        self.sentinels
            .iter()
            .filter(|sentinel| sentinel.is_running())
            .map(|sentinel| format!("redis://127.0.0.1:{}", sentinel.port()))
            .collect()
    }

    /// The ports of the master and replicas (as started; roles change with failovers).
    pub fn data_ports(&self) -> Vec<u16> {
        self.data.iter().map(RedisProcess::port).collect()
    }

    /// The master's port according to the first sentinel that answers.
    ///
    /// # Panics
    /// When no sentinel answers.
    pub fn master_port(&self) -> u16 {
        self.sentinel_ports()
            .into_iter()
            .find_map(|port| self.master_port_by(port))
            .unwrap_or_else(|| panic!("no sentinel names the master\n{}", self.logs()))
    }

    /// `master` or `slave` (the first field of `ROLE`) of the data node at `port`.
    pub fn role(&self, port: u16) -> Option<String> {
        let reply: Vec<redis::Value> =
            redis::from_redis_value(self.on_data(port, &["ROLE"]).ok()?).ok()?;
        redis::from_redis_value(reply.first()?.clone()).ok()
    }

    /// Runs `args` on the data node or sentinel at `port` (logged in as needed).
    pub fn command(&self, port: u16, args: &[&str]) -> redis::RedisResult<redis::Value> {
        if self.sentinel_ports().contains(&port) {
            self.on_sentinel(port, args)
        } else {
            self.on_data(port, args)
        }
    }

    fn on_data(&self, port: u16, args: &[&str]) -> redis::RedisResult<redis::Value> {
        run_as(port, self.data_password.as_deref(), args)
    }

    fn on_sentinel(&self, port: u16, args: &[&str]) -> redis::RedisResult<redis::Value> {
        run_as(port, self.sentinel_password.as_deref(), args)
    }

    /// SIGKILLs the current master; returns its port.
    pub fn kill_master(&mut self) -> u16 {
        let port = self.master_port();
        if let Some(node) = self.data.iter_mut().find(|node| node.port() == port) {
            node.kill();
        }
        port
    }

    /// Asks a sentinel for a planned failover (`SENTINEL FAILOVER`) and waits until a new
    /// master is in charge and the old one serves as its replica. Returns the new master's
    /// port.
    ///
    /// # Panics
    /// When the failover does not complete within 20 seconds.
    pub fn failover(&self) -> u16 {
        self.try_failover(Duration::from_secs(20))
            .unwrap_or_else(|error| panic!("{error}\n{}", self.logs()))
    }

    /// [`SentinelSet::failover`] that reports a failover that did not complete within
    /// `limit` (no sentinel took the request, the promotion timed out and the sentinels
    /// aborted, the old master was not demoted) instead of panicking, so that a caller can
    /// wait and ask again (the sentinels refuse a new failover of the same master for twice
    /// the failover timeout).
    pub fn try_failover(&self, limit: Duration) -> Result<u16, String> {
        let old = self.master_port();
        let asked = self.sentinel_ports().into_iter().any(|port| {
            self.on_sentinel(port, &["SENTINEL", "FAILOVER", &self.master_name])
                .is_ok()
        });
        if !asked {
            return Err("no sentinel accepted SENTINEL FAILOVER".to_owned());
        }
        let new = poll(limit, || self.agreed_new_master(old))
            .ok_or_else(|| format!("no new master within {limit:?}"))?;
        poll(limit, || {
            (self.role(old).as_deref() == Some("slave")).then_some(())
        })
        .ok_or_else(|| format!("old master {old} was not demoted within {limit:?}"))?;
        Ok(new)
    }

    /// Waits until every running sentinel names a master other than `old` that answers
    /// `ROLE` as master. Returns its port.
    ///
    /// # Panics
    /// When that does not happen within `limit`.
    pub fn wait_for_new_master(&self, old: u16, limit: Duration) -> u16 {
        let found = poll(limit, || self.agreed_new_master(old));
        found.unwrap_or_else(|| panic!("no new master within {limit:?}\n{}", self.logs()))
    }

    /// The master every running sentinel names, when it is not `old` and answers `ROLE` as
    /// master.
    fn agreed_new_master(&self, old: u16) -> Option<u16> {
        let named: Vec<u16> = self
            .sentinel_ports()
            .into_iter()
            .map(|port| self.master_port_by(port))
            .collect::<Option<_>>()?;
        let first = *named.first()?;
        let agreed = first != old && named.iter().all(|&port| port == first);
        (agreed && self.role(first).as_deref() == Some("master")).then_some(first)
    }

    /// Waits until the current master counts `replicas` replicas online (`INFO
    /// replication`): after a failover the demoted master resyncs as a replica, and a
    /// failover asked before that may find no replica to promote.
    ///
    /// # Panics
    /// When that does not happen within `limit`.
    pub fn wait_for_replicas_online(&self, replicas: usize, limit: Duration) {
        let online = poll(limit, || {
            let master = self
                .sentinel_ports()
                .into_iter()
                .find_map(|port| self.master_port_by(port))?;
            let info: String =
                redis::from_redis_value(self.on_data(master, &["INFO", "replication"]).ok()?)
                    .ok()?;
            (info.matches("state=online").count() >= replicas).then_some(())
        });
        if online.is_none() {
            panic!(
                "the master did not have {replicas} replicas online within {limit:?}\n{}",
                self.logs()
            );
        }
    }

    /// The log tails of every process.
    pub fn logs(&self) -> String {
        self.data
            .iter()
            .chain(&self.sentinels)
            .map(|process| process.log_tail(15))
            .collect()
    }

    fn sentinel_ports(&self) -> Vec<u16> {
        self.sentinels
            .iter()
            .filter(|sentinel| sentinel.is_running())
            .map(RedisProcess::port)
            .collect()
    }

    fn master_port_by(&self, sentinel: u16) -> Option<u16> {
        let reply = self
            .on_sentinel(
                sentinel,
                &["SENTINEL", "GET-MASTER-ADDR-BY-NAME", &self.master_name],
            )
            .ok()?;
        let (_host, port): (String, u16) = redis::from_redis_value(reply).ok()?;
        Some(port)
    }

    fn wait_until_complete(&self, replicas: usize, sentinels: usize, limit: Duration) {
        let master = self.data[0].port();
        let complete = poll(limit, || {
            let replication: String =
                redis::from_redis_value(self.on_data(master, &["INFO", "replication"]).ok()?)
                    .ok()?;
            let online = replication.matches("state=online").count();
            if online < replicas {
                return None;
            }
            for port in self.sentinel_ports() {
                let reply = self
                    .on_sentinel(port, &["SENTINEL", "MASTER", &self.master_name])
                    .ok()?;
                let state: HashMap<String, String> = redis::from_redis_value(reply).ok()?;
                let known_replicas: usize = state.get("num-slaves")?.parse().ok()?;
                let others: usize = state.get("num-other-sentinels")?.parse().ok()?;
                if known_replicas < replicas || others + 1 < sentinels {
                    return None;
                }
            }
            Some(())
        });
        if complete.is_none() {
            panic!(
                "sentinel set not complete within {limit:?}\n{}",
                self.logs()
            );
        }
    }
}

/// Starts a process on a free port, trying other ports if one was taken meanwhile.
fn start_retrying(role: &'static str, config: &str, sentinel: bool) -> RedisProcess {
    let mut last = String::new();
    for _ in 0..5 {
        match RedisProcess::start(role, crate::free_port(), config, sentinel, Readiness::Ping) {
            Ok(process) => return process,
            Err(error) => last = error,
        }
    }
    panic!("{role} did not start: {last}");
}
