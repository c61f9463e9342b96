//! The Redis masters behind a run, one by one: each master's share of the work
//! (`INFO commandstats` script calls, `INFO cpu`) for the report, and the removal of a run's
//! keys master by master (`SCAN` on each master of a cluster: one connection's `SCAN` sees one
//! master only).
//!
//! On a cluster the masters come from `CLUSTER SLOTS`; a command reaches a given master by
//! being routed to a slot it serves (a hash tag whose slot falls in its ranges). On one server
//! or a Sentinel-watched master there is one master.

use std::collections::BTreeMap;

use delayq_redis::redis::{self, Value};
use delayq_redis::{ConnectOptions, RedisConnection, TopologyKind};
use futures::stream::{self, StreamExt, TryStreamExt};
use serde::Serialize;

use crate::cli::harness::BoxError;

/// Slots of a Redis Cluster.
const SLOTS: u16 = 16_384;

/// Keys deleted at once while removing a run's keys.
const DELETE_CONCURRENCY: usize = 64;

/// One master and a key routed to it.
#[derive(Clone, Debug)]
struct Master {
    /// `host:port` (or the topology's description on one server).
    address: String,
    /// A key in a slot this master serves.
    route: String,
}

/// The masters of a topology, reachable one by one.
pub(crate) struct Masters {
    redis: RedisConnection,
    masters: Vec<Master>,
}

/// One master's counters at a moment.
#[derive(Clone, Debug)]
pub(crate) struct MasterSample {
    address: String,
    script_calls: u64,
    cpu_us: u64,
}

/// What one master did between two samples.
#[derive(Clone, Debug, Serialize)]
pub(crate) struct MasterWork {
    /// `host:port` of the master.
    pub(crate) address: String,
    /// `EVALSHA`/`EVAL`/`FCALL` calls it answered.
    pub(crate) script_calls: u64,
    /// Its share of all masters' script calls, in percent.
    pub(crate) share_pct: f64,
    /// Its CPU time (`used_cpu_user` + `used_cpu_sys`), ms.
    pub(crate) cpu_ms: f64,
    /// Its CPU time per task of the scenario, µs.
    pub(crate) cpu_us_per_task: f64,
}

impl Masters {
    /// Connects with `options` and finds the masters.
    pub(crate) async fn discover(options: ConnectOptions) -> Result<Masters, BoxError> {
        let redis = RedisConnection::connect(options).await?;
        let masters = match redis.kind() {
            TopologyKind::Cluster => cluster_masters(&redis).await?,
            TopologyKind::Standalone | TopologyKind::Sentinel => vec![Master {
                address: redis
                    .master_address()
                    .unwrap_or_else(|| redis.describe().to_owned()),
                route: "delayq-bench".to_owned(),
            }],
        };
        Ok(Masters { redis, masters })
    }

    /// How many masters there are.
    pub(crate) fn len(&self) -> usize {
        self.masters.len()
    }

    /// Every master's script calls and CPU time so far.
    pub(crate) async fn sample(&self) -> Result<Vec<MasterSample>, BoxError> {
        let mut samples = Vec::with_capacity(self.masters.len());
        for master in &self.masters {
            let info = |section: &str| {
                let mut command = redis::cmd("INFO");
                command.arg(section);
                command
            };
            let commands: String = self
                .redis
                .query_at_slot_of("INFO commandstats", &master.route, &info("commandstats"))
                .await?;
            let cpu: String = self
                .redis
                .query_at_slot_of("INFO cpu", &master.route, &info("cpu"))
                .await?;
            samples.push(MasterSample {
                address: master.address.clone(),
                script_calls: ["evalsha", "eval", "fcall"]
                    .iter()
                    .map(|command| calls_of(&commands, command))
                    .sum(),
                cpu_us: cpu_us(&cpu),
            });
        }
        Ok(samples)
    }

    /// Deletes every key under `prefix:` on every master; returns how many.
    pub(crate) async fn delete_prefix(&self, prefix: &str) -> Result<u64, BoxError> {
        let pattern = format!("{prefix}:*");
        let mut deleted = 0;
        for master in &self.masters {
            let mut cursor = 0u64;
            loop {
                let mut scan = redis::cmd("SCAN");
                scan.arg(cursor)
                    .arg("MATCH")
                    .arg(&pattern)
                    .arg("COUNT")
                    .arg(1_000);
                let (next, keys): (u64, Vec<String>) = self
                    .redis
                    .query_at_slot_of("SCAN", &master.route, &scan)
                    .await?;
                let counts: Vec<u64> = stream::iter(keys)
                    .map(|key| async move {
                        let mut delete = redis::cmd("DEL");
                        delete.arg(&key);
                        self.redis.query::<u64>("DEL", &delete).await
                    })
                    .buffer_unordered(DELETE_CONCURRENCY)
                    .try_collect()
                    .await?;
                deleted += counts.iter().sum::<u64>();
                if next == 0 {
                    break;
                }
                cursor = next;
            }
        }
        Ok(deleted)
    }
}

/// Each master's work from `before` to `after`, for `tasks` tasks.
pub(crate) fn work(before: &[MasterSample], after: &[MasterSample], tasks: u64) -> Vec<MasterWork> {
    let deltas: Vec<(String, u64, u64)> = after
        .iter()
        .map(|later| {
            let earlier = before.iter().find(|sample| sample.address == later.address);
            let calls =
                later.script_calls - earlier.map_or(0, |s| s.script_calls.min(later.script_calls));
            let cpu = later.cpu_us - earlier.map_or(0, |s| s.cpu_us.min(later.cpu_us));
            (later.address.clone(), calls, cpu)
        })
        .collect();
    let total: u64 = deltas.iter().map(|(_, calls, _)| calls).sum();
    deltas
        .into_iter()
        .map(|(address, calls, cpu)| MasterWork {
            address,
            script_calls: calls,
            share_pct: round1(calls as f64 * 100.0 / total.max(1) as f64),
            cpu_ms: round1(cpu as f64 / 1_000.0),
            cpu_us_per_task: round1(cpu as f64 / tasks.max(1) as f64),
        })
        .collect()
}

/// The masters of a cluster from `CLUSTER SLOTS`, each with a key routed to it.
async fn cluster_masters(redis: &RedisConnection) -> Result<Vec<Master>, BoxError> {
    let reply: Vec<Vec<Value>> = redis
        .query("CLUSTER SLOTS", &redis::cmd("CLUSTER").arg("SLOTS").clone())
        .await?;
    let mut ranges: BTreeMap<String, Vec<(u16, u16)>> = BTreeMap::new();
    for range in reply {
        let (Some(start), Some(end), Some(Value::Array(master))) =
            (range.first(), range.get(1), range.get(2))
        else {
            return Err("CLUSTER SLOTS: an unexpected reply".into());
        };
        let start: u16 = redis::from_redis_value_ref(start)?;
        let end: u16 = redis::from_redis_value_ref(end)?;
        let host: String = master
            .first()
            .map(redis::from_redis_value_ref)
            .transpose()?
            .unwrap_or_default();
        let port: u16 = master
            .get(1)
            .map(redis::from_redis_value_ref)
            .transpose()?
            .unwrap_or_default();
        ranges
            .entry(format!("{host}:{port}"))
            .or_default()
            .push((start, end));
    }
    ranges
        .into_iter()
        .map(|(address, ranges)| {
            let route = (0..u32::from(SLOTS) * 8)
                .map(|n| format!("{{delayq-bench-{n}}}"))
                .find(|key| {
                    let slot = slot_of(key);
                    ranges
                        .iter()
                        .any(|&(low, high)| (low..=high).contains(&slot))
                })
                .ok_or_else(|| format!("no key found for the slots of master {address}"))?;
            Ok(Master { address, route })
        })
        .collect()
}

/// The Redis Cluster slot of `key` (CRC16 of its hash tag, or of the whole key).
fn slot_of(key: &str) -> u16 {
    let bytes = key.as_bytes();
    let tag = bytes
        .iter()
        .position(|&b| b == b'{')
        .and_then(|open| {
            let rest = &bytes[open + 1..];
            rest.iter()
                .position(|&b| b == b'}')
                .filter(|&close| close > 0)
                .map(|close| &rest[..close])
        })
        .unwrap_or(bytes);
    crc16::State::<crc16::XMODEM>::calculate(tag) % SLOTS
}

/// `calls=` of `cmdstat_<command>` in `INFO commandstats` (0 when absent).
fn calls_of(info: &str, command: &str) -> u64 {
    let prefix = format!("cmdstat_{command}:calls=");
    info.lines()
        .find_map(|line| line.strip_prefix(&prefix))
        .and_then(|rest| rest.split(',').next())
        .and_then(|calls| calls.trim().parse().ok())
        .unwrap_or(0)
}

/// `used_cpu_user` + `used_cpu_sys` of `INFO cpu`, in µs.
fn cpu_us(info: &str) -> u64 {
    let seconds: f64 = ["used_cpu_user:", "used_cpu_sys:"]
        .iter()
        .filter_map(|field| {
            info.lines()
                .find_map(|line| line.strip_prefix(field))
                .and_then(|value| value.trim().parse::<f64>().ok())
        })
        .sum();
    (seconds * 1_000_000.0).round() as u64
}

fn round1(value: f64) -> f64 {
    (value * 10.0).round() / 10.0
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn slots_follow_redis_cluster_hash_tags() {
        // Values of `CLUSTER KEYSLOT`.
        assert_eq!(slot_of("foo"), 12182);
        assert_eq!(slot_of("{user1000}.following"), slot_of("user1000"));
        assert_eq!(slot_of("delayq:{cluster}:nodes"), slot_of("cluster"));
        assert_eq!(
            slot_of("{}x"),
            slot_of("{}x"),
            "an empty tag hashes the whole key"
        );
        assert_ne!(slot_of("{}a"), slot_of("{}b"));
    }

    #[test]
    fn counters_are_read_from_info() {
        let commands = "# Commandstats\r\ncmdstat_evalsha:calls=120,usec=900,usec_per_call=7.5\r\n\
                        cmdstat_eval:calls=3,usec=9\r\ncmdstat_get:calls=7,usec=1\r\n";
        assert_eq!(calls_of(commands, "evalsha"), 120);
        assert_eq!(calls_of(commands, "eval"), 3);
        assert_eq!(calls_of(commands, "fcall"), 0);
        let cpu = "# CPU\r\nused_cpu_sys:1.500000\r\nused_cpu_user:0.250000\r\n";
        assert_eq!(cpu_us(cpu), 1_750_000);
    }

    #[test]
    fn work_is_the_difference_with_shares() {
        let sample = |address: &str, calls, cpu| MasterSample {
            address: address.to_owned(),
            script_calls: calls,
            cpu_us: cpu,
        };
        let before = [sample("a", 10, 1_000), sample("b", 0, 0)];
        let after = [sample("a", 40, 2_000_000), sample("b", 90, 3_000_000)];
        let work = work(&before, &after, 1_000);
        assert_eq!(work[0].script_calls, 30);
        assert_eq!(work[0].share_pct, 25.0);
        assert_eq!(work[1].share_pct, 75.0);
        assert_eq!(work[1].cpu_ms, 3_000.0);
        assert_eq!(work[1].cpu_us_per_task, 3_000.0);
    }
}
