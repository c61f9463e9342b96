//! [`RecurringStore`] for [`MemoryStore`]: the schedules in one ordered map, the tick ledger
//! in each partition's state (so a tick is created under the partition's lock, atomically
//! with its ledger entry, as `schedule.lua` does in mode `tick`).

use async_trait::async_trait;

use super::MemoryStore;
use crate::error::{StorageError, StorageResult};
use crate::model::{validate_due, NewTask, Partition, TaskId};
use crate::recurring::{
    recurring_shard, RecurringStore, ShardLook, StoredSchedule, TickOutcome, RECURRING_SHARDS,
};

/// One stored schedule.
#[derive(Debug)]
pub(super) struct Schedule {
    record: String,
    /// The next tick, while the schedule is active.
    next_ms: Option<u64>,
    last_fired: Option<(u64, u64)>,
}

fn stored(name: &str, schedule: &Schedule) -> StoredSchedule {
    StoredSchedule {
        name: name.to_owned(),
        record: schedule.record.clone(),
        last_fired: schedule.last_fired,
    }
}

#[async_trait]
impl RecurringStore for MemoryStore {
    async fn recurring_get(&self, name: &str) -> StorageResult<Option<StoredSchedule>> {
        let schedules = self.inner.recurring.lock();
        Ok(schedules.get(name).map(|schedule| stored(name, schedule)))
    }

    async fn recurring_list(&self) -> StorageResult<Vec<StoredSchedule>> {
        let schedules = self.inner.recurring.lock();
        Ok(schedules
            .iter()
            .map(|(name, schedule)| stored(name, schedule))
            .collect())
    }

    async fn recurring_swap(
        &self,
        name: &str,
        expected: Option<&str>,
        new: Option<&str>,
        next_ms: Option<u64>,
    ) -> StorageResult<bool> {
        let mut schedules = self.inner.recurring.lock();
        let current = schedules.get(name).map(|schedule| schedule.record.as_str());
        if current != expected {
            return Ok(false);
        }
        match new {
            Some(record) => {
                let last_fired = schedules.get(name).and_then(|schedule| schedule.last_fired);
                schedules.insert(
                    name.to_owned(),
                    Schedule {
                        record: record.to_owned(),
                        next_ms,
                        last_fired,
                    },
                );
            }
            None => {
                schedules.remove(name);
            }
        }
        Ok(true)
    }

    async fn recurring_due(
        &self,
        shard: u32,
        until_ms: u64,
        limit: usize,
    ) -> StorageResult<ShardLook> {
        if shard >= RECURRING_SHARDS {
            return Err(StorageError::Backend {
                operation: "recurring_due",
                message: format!("no recurring shard {shard} (there are {RECURRING_SHARDS})"),
            });
        }
        let schedules = self.inner.recurring.lock();
        let mut in_shard: Vec<(u64, &String, &Schedule)> = Vec::new();
        let mut count = 0;
        for (name, schedule) in schedules.iter() {
            if recurring_shard(name) != shard {
                continue;
            }
            count += 1;
            if let Some(next_ms) = schedule.next_ms {
                in_shard.push((next_ms, name, schedule));
            }
        }
        // Earliest first; equal ticks by name, as a sorted set orders equal scores.
        in_shard.sort_by(|a, b| a.0.cmp(&b.0).then_with(|| a.1.cmp(b.1)));
        let limit = limit.max(1);
        let due: Vec<StoredSchedule> = in_shard
            .iter()
            .take_while(|(next_ms, _, _)| *next_ms <= until_ms)
            .take(limit)
            .map(|(_, name, schedule)| stored(name, schedule))
            .collect();
        let next_ms = in_shard
            .iter()
            .map(|(next_ms, _, _)| *next_ms)
            .find(|next_ms| *next_ms > until_ms);
        Ok(ShardLook {
            due,
            next_ms,
            schedules: count,
        })
    }

    async fn recurring_fired(&self, name: &str, tick_ms: u64, fired_ms: u64) -> StorageResult<()> {
        let mut schedules = self.inner.recurring.lock();
        if let Some(schedule) = schedules.get_mut(name) {
            if schedule.last_fired.is_none_or(|(tick, _)| tick <= tick_ms) {
                schedule.last_fired = Some((tick_ms, fired_ms));
            }
        }
        Ok(())
    }

    async fn create_tick(
        &self,
        partition: &Partition,
        task: NewTask,
    ) -> StorageResult<TickOutcome> {
        let max = self.inner.options.max_payload;
        if task.payload.len() > max {
            return Err(StorageError::PayloadTooLarge {
                id: task.id.to_string(),
                size: task.payload.len(),
                max,
            });
        }
        validate_due(task.due_ms)?;
        let state = self.partition(partition)?;
        let now_ms = self.now_ms();
        let retention_ms = self.inner.options.executed_retention_ms;
        let outcome = state.lock().create_tick(task, now_ms, retention_ms);
        Ok(outcome)
    }

    async fn forget_ticks(&self, partition: &Partition, ids: &[TaskId]) -> StorageResult<()> {
        if let Some(state) = self.existing(partition)? {
            state.lock().forget_ticks(ids);
        }
        Ok(())
    }
}
