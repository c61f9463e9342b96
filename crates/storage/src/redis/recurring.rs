//! [`RecurringStore`] for [`RedisStore`]: the shards of recurring schedules
//! (`<prefix>:{recurring#<shard>}:schedules|next|fired`) and the tick ledger of each
//! partition (`<prefix>:{<queue>:<p>}:ticks`).
//!
//! Every call touches one slot: the shard's three keys share their tag, and a tick is created
//! by `schedule.lua` in mode `tick`, with the ledger among the partition's keys. Writes go on
//! the producers' connection and, with `wait_replicas`, return once the replicas confirmed
//! them. Listing reads the 16 shards in parallel. Every call goes on the producers'
//! connection, so the driver never queues in front of the claims of the firing one.

use async_trait::async_trait;
use delayq_redis::ScriptCall;
use futures::future::try_join_all;
use redis::Value;

use crate::error::{StorageError, StorageResult};
use crate::model::{NewTask, Partition, ScheduleOutcome, TaskId};
use crate::recurring::{
    recurring_shard, RecurringStore, ShardLook, StoredSchedule, TickOutcome, RECURRING_SHARDS,
};

use super::connection::RedisStore;
use super::error_map::{map_error, unexpected_reply};
use super::keys::RecurringKeys;
use super::replication::Writer;
use super::reply::{array, expect_array, number, text};
use super::scripts::SCRIPTS;

/// The pairs of an `HGETALL` reply: field and value.
type HashPairs = Vec<(String, String)>;

impl RedisStore {
    fn recurring_keys(&self, shard: u32) -> RecurringKeys {
        RecurringKeys::new(&self.prefix, shard)
    }

    async fn shard_entries(&self, shard: u32) -> StorageResult<Vec<StoredSchedule>> {
        const OPERATION: &str = "recurring_list";
        let keys = self.recurring_keys(shard);
        let (records, fired): (HashPairs, HashPairs) = self
            .read_on(&self.producer, OPERATION, &keys.schedules, |connection| {
                let mut records = redis::cmd("HGETALL");
                records.arg(&keys.schedules);
                let mut fired = redis::cmd("HGETALL");
                fired.arg(&keys.fired);
                async move {
                    let records = connection.query(OPERATION, &records).await?;
                    let fired = connection.query(OPERATION, &fired).await?;
                    Ok((records, fired))
                }
            })
            .await?;
        let fired: std::collections::HashMap<String, String> = fired.into_iter().collect();
        Ok(records
            .into_iter()
            .map(|(name, record)| {
                let last_fired = fired.get(&name).and_then(|text| parse_fired(text));
                StoredSchedule {
                    name,
                    record,
                    last_fired,
                }
            })
            .collect())
    }
}

/// `'<tick_ms>:<fired_ms>'` as numbers.
fn parse_fired(text: &str) -> Option<(u64, u64)> {
    let (tick, fired) = text.split_once(':')?;
    Some((tick.parse().ok()?, fired.parse().ok()?))
}

#[async_trait]
impl RecurringStore for RedisStore {
    async fn recurring_get(&self, name: &str) -> StorageResult<Option<StoredSchedule>> {
        const OPERATION: &str = "recurring_get";
        let keys = self.recurring_keys(recurring_shard(name));
        let (record, fired): (Option<String>, Option<String>) = self
            .read_on(&self.producer, OPERATION, &keys.schedules, |connection| {
                let mut record = redis::cmd("HGET");
                record.arg(&keys.schedules).arg(name);
                let mut fired = redis::cmd("HGET");
                fired.arg(&keys.fired).arg(name);
                async move {
                    let record = connection.query(OPERATION, &record).await?;
                    let fired = connection.query(OPERATION, &fired).await?;
                    Ok((record, fired))
                }
            })
            .await?;
        Ok(record.map(|record| StoredSchedule {
            name: name.to_owned(),
            record,
            last_fired: fired.as_deref().and_then(parse_fired),
        }))
    }

    async fn recurring_list(&self) -> StorageResult<Vec<StoredSchedule>> {
        let shards = try_join_all((0..RECURRING_SHARDS).map(|shard| self.shard_entries(shard)));
        let mut all: Vec<StoredSchedule> = shards.await?.into_iter().flatten().collect();
        all.sort_by(|a, b| a.name.cmp(&b.name));
        Ok(all)
    }

    async fn recurring_swap(
        &self,
        name: &str,
        expected: Option<&str>,
        new: Option<&str>,
        next_ms: Option<u64>,
    ) -> StorageResult<bool> {
        const OPERATION: &str = "recurring_swap";
        let keys = self.recurring_keys(recurring_shard(name));
        let next = next_ms.map(|ms| ms.to_string()).unwrap_or_default();
        let call = ScriptCall::new(&SCRIPTS.recurring_swap)
            .key(&keys.schedules)
            .key(&keys.next)
            .key(&keys.fired)
            .arg(name)
            .arg(if expected.is_some() { "1" } else { "0" })
            .arg(expected.unwrap_or_default())
            .arg(if new.is_some() { "1" } else { "0" })
            .arg(new.unwrap_or_default())
            .arg(next.as_str());
        let reply = self
            .invoke_on(&self.producer, &call)
            .await
            .map_err(|error| map_error(OPERATION, &keys.schedules, error))?;
        let swapped = match number(&reply) {
            Some(1) => true,
            Some(0) => false,
            _ => return Err(unexpected_reply(OPERATION, format!("{reply:?}"))),
        };
        if swapped {
            self.confirm_key(Writer::Producer, &keys.schedules, OPERATION)
                .await?;
        }
        Ok(swapped)
    }

    async fn recurring_due(
        &self,
        shard: u32,
        until_ms: u64,
        limit: usize,
    ) -> StorageResult<ShardLook> {
        const OPERATION: &str = "recurring_due";
        if shard >= RECURRING_SHARDS {
            return Err(StorageError::Backend {
                operation: OPERATION,
                message: format!("no recurring shard {shard} (there are {RECURRING_SHARDS})"),
            });
        }
        let keys = self.recurring_keys(shard);
        let call = ScriptCall::new(&SCRIPTS.recurring_due)
            .key(&keys.schedules)
            .key(&keys.next)
            .key(&keys.fired)
            .arg(until_ms)
            .arg(limit.max(1));
        let reply = self
            .invoke_on(&self.producer, &call)
            .await
            .map_err(|error| map_error(OPERATION, &keys.schedules, error))?;
        parse_look(OPERATION, reply)
    }

    async fn recurring_fired(&self, name: &str, tick_ms: u64, fired_ms: u64) -> StorageResult<()> {
        const OPERATION: &str = "recurring_fired";
        let keys = self.recurring_keys(recurring_shard(name));
        let call = ScriptCall::new(&SCRIPTS.recurring_fired)
            .key(&keys.schedules)
            .key(&keys.fired)
            .arg(name)
            .arg(tick_ms)
            .arg(fired_ms);
        self.invoke_on(&self.producer, &call)
            .await
            .map_err(|error| map_error(OPERATION, &keys.schedules, error))?;
        Ok(())
    }

    async fn create_tick(
        &self,
        partition: &Partition,
        task: NewTask,
    ) -> StorageResult<TickOutcome> {
        const OPERATION: &str = "create_tick";
        self.validate(&task)?;
        let keys = self.keys(partition);
        let call = super::schedule::schedule_call(
            &[(&keys, vec![&task])],
            "tick",
            self.options.executed_retention_ms,
        );
        let reply = self
            .invoke_on(&self.producer, &call)
            .await
            .map_err(|error| map_error(OPERATION, &keys.tasks, error))?;
        let verdict = expect_array(OPERATION, reply)?
            .into_iter()
            .next()
            .and_then(text)
            .ok_or_else(|| unexpected_reply(OPERATION, "no verdict"))?;
        let outcome = if verdict == "T" {
            TickOutcome::AlreadyCreated
        } else {
            match super::schedule::parse_verdict(OPERATION, &keys.tasks, &task.id, &verdict)? {
                ScheduleOutcome::Created | ScheduleOutcome::Replaced { .. } => TickOutcome::Created,
                ScheduleOutcome::Kept { due_ms } => TickOutcome::Kept { due_ms },
                ScheduleOutcome::Duplicate => TickOutcome::Duplicate,
            }
        };
        self.confirm(Writer::Producer, partition, OPERATION).await?;
        Ok(outcome)
    }

    async fn forget_ticks(&self, partition: &Partition, ids: &[TaskId]) -> StorageResult<()> {
        const OPERATION: &str = "forget_ticks";
        if ids.is_empty() {
            return Ok(());
        }
        let keys = self.keys(partition);
        // ZREM is idempotent: retried as a read.
        self.read_on(&self.producer, OPERATION, &keys.ticks, |connection| {
            let mut command = redis::cmd("ZREM");
            command.arg(&keys.ticks);
            for id in ids {
                command.arg(id.as_str());
            }
            async move { connection.query::<u64>(OPERATION, &command).await }
        })
        .await?;
        Ok(())
    }
}

/// Reads `recurring_due.lua`'s reply: `{next or '', count, (name, record, fired or '')...}`.
fn parse_look(operation: &'static str, reply: Value) -> StorageResult<ShardLook> {
    let items = array(reply).ok_or_else(|| unexpected_reply(operation, "expected an array"))?;
    if items.len() < 2 || (items.len() - 2) % 3 != 0 {
        return Err(unexpected_reply(operation, "not {next, count, triples}"));
    }
    let mut items = items.into_iter();
    let next_ms = items.next().and_then(|value| number(&value));
    let schedules = items
        .next()
        .and_then(|value| number(&value))
        .ok_or_else(|| unexpected_reply(operation, "no schedule count"))?;
    let mut due = Vec::new();
    while let (Some(name), Some(record), Some(fired)) = (items.next(), items.next(), items.next()) {
        let (Some(name), Some(record)) = (text(name), text(record)) else {
            return Err(unexpected_reply(operation, "a name or record is not text"));
        };
        let last_fired = text(fired).as_deref().and_then(parse_fired);
        due.push(StoredSchedule {
            name,
            record,
            last_fired,
        });
    }
    Ok(ShardLook {
        due,
        next_ms,
        schedules,
    })
}
