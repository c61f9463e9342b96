//! Queue controls in Redis: the pause flag, and the cluster-wide limits (`rate_limit`: one
//! counter per rate window, `rate_take.lua`; `global_concurrency`: slots held per node under
//! a lease, `global_slots.lua`; both under the queue's `{<queue>#limits}` tag).
//!
//! A paused queue has `<prefix>:{cluster}:paused` `HASH queue -> paused since` (what `stats`
//! lists) and, in every partition, `<prefix>:{<queue>:<p>}:paused`, which `claim_due.lua`
//! checks in the same script that would claim: so once `set_paused` returned, no claim of
//! the queue takes anything, whatever a node knows or was told. Pausing writes the queue's
//! entry first and the partitions' flags after; resuming removes the flags first and the
//! entry last, so `stats` never shows a queue as running while a partition still refuses
//! claims. Every write is idempotent, so the whole operation is retried like a read. On a
//! Redis Cluster each flag goes to its own partition's master (one command per partition,
//! sent concurrently).

use futures::future::try_join_all;

use crate::error::{StorageError, StorageResult};
use crate::model::{Partition, QueueName};

use delayq_redis::ScriptCall;

use super::connection::RedisStore;
use super::error_map::{map_error, unexpected_reply};
use super::keys::{paused_key, LimitKeys};
use super::reply::number;
use super::scripts::SCRIPTS;

impl RedisStore {
    pub(crate) async fn pause(
        &self,
        queue: &QueueName,
        partitions: u32,
        paused: bool,
    ) -> StorageResult<()> {
        const OPERATION: &str = "set_paused";
        let registry = paused_key(&self.prefix);
        let flags: Vec<String> = (0..partitions)
            .map(|index| self.keys(&Partition::new(queue.clone(), index)).paused)
            .collect();
        let since = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|elapsed| elapsed.as_millis() as u64)
            .unwrap_or(0);
        self.read_on(&self.producer, OPERATION, &registry, |connection| {
            let registry = registry.clone();
            let flags = flags.clone();
            async move {
                let flag_commands = flags.iter().map(|flag| {
                    let mut command = redis::cmd(if paused { "SET" } else { "DEL" });
                    command.arg(flag);
                    if paused {
                        command.arg(since);
                    }
                    let connection = connection.clone();
                    async move { connection.query::<redis::Value>(OPERATION, &command).await }
                });
                if paused {
                    let mut entry = redis::cmd("HSETNX");
                    entry.arg(&registry).arg(queue.as_str()).arg(since);
                    connection.query::<redis::Value>(OPERATION, &entry).await?;
                    try_join_all(flag_commands).await?;
                } else {
                    try_join_all(flag_commands).await?;
                    let mut entry = redis::cmd("HDEL");
                    entry.arg(&registry).arg(queue.as_str());
                    connection.query::<redis::Value>(OPERATION, &entry).await?;
                }
                Ok(())
            }
        })
        .await
    }

    pub(crate) async fn paused(&self) -> StorageResult<Vec<(QueueName, u64)>> {
        const OPERATION: &str = "paused_queues";
        let registry = paused_key(&self.prefix);
        let entries: Vec<(String, String)> = self
            .read(OPERATION, &registry, |connection| {
                let mut command = redis::cmd("HGETALL");
                command.arg(&registry);
                async move { connection.query(OPERATION, &command).await }
            })
            .await?;
        let mut paused = Vec::with_capacity(entries.len());
        for (name, since) in entries {
            let queue = QueueName::new(&name).map_err(|_| StorageError::CorruptRecord {
                key: registry.clone(),
                field: name.clone(),
                reason: "not a queue name".to_owned(),
            })?;
            paused.push((queue, since.parse().unwrap_or(0)));
        }
        paused.sort();
        Ok(paused)
    }
}

impl RedisStore {
    /// `rate_take.lua` on the window's counter (kept for two periods).
    pub(crate) async fn rate_tokens(
        &self,
        queue: &QueueName,
        window_start_ms: u64,
        period_ms: u64,
        limit: u64,
        wanted: u64,
    ) -> StorageResult<u64> {
        const OPERATION: &str = "take_rate_tokens";
        let keys = LimitKeys::new(&self.prefix, queue.as_str());
        let counter = keys.rate_window(window_start_ms);
        let call = ScriptCall::new(&SCRIPTS.rate_take)
            .key(&counter)
            .arg(limit)
            .arg(wanted)
            .arg(period_ms.saturating_mul(2).max(1_000));
        let reply = self
            .invoke(&call)
            .await
            .map_err(|error| map_error(OPERATION, &counter, error))?;
        number(&reply).ok_or_else(|| unexpected_reply(OPERATION, format!("{reply:?}")))
    }

    /// `global_slots.lua`, acquire (with `wanted` 0: renew) or release.
    pub(crate) async fn global_slots(
        &self,
        queue: &QueueName,
        node: &str,
        acquire: Option<(u64, u64, u64)>,
        release: u64,
    ) -> StorageResult<u64> {
        const OPERATION: &str = "global_slots";
        let keys = LimitKeys::new(&self.prefix, queue.as_str());
        let mut call = ScriptCall::new(&SCRIPTS.global_slots)
            .key(&keys.holders)
            .key(&keys.leases)
            .arg(node);
        call = match acquire {
            Some((limit, wanted, lease_ms)) => {
                call.arg("acquire").arg(limit).arg(wanted).arg(lease_ms)
            }
            None => call.arg("release").arg(release),
        };
        let reply = self
            .invoke(&call)
            .await
            .map_err(|error| map_error(OPERATION, &keys.holders, error))?;
        number(&reply).ok_or_else(|| unexpected_reply(OPERATION, format!("{reply:?}")))
    }
}
