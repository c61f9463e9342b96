//! [`RecurringStore`]: where recurring schedules keep their state, and the tick ledger that
//! makes creating a tick's task idempotent.
//!
//! # What lives where
//! A schedule is named; its name picks one of [`RECURRING_SHARDS`] shards
//! ([`recurring_shard`]). A shard is one Redis Cluster slot holding, per schedule, an opaque
//! *record* (the engine's JSON of the spec and the tick state) and, for an active schedule,
//! its next tick time in a sorted set, so that the node driving the shard finds the schedules
//! due with one call ([`RecurringStore::recurring_due`]). The store does not read records: it
//! swaps them whole, compare-and-set on the previous text ([`RecurringStore::recurring_swap`]),
//! which is all the atomicity the engine needs to advance a schedule from one node while
//! others upsert, pause or delete it.
//!
//! A tick's task lives in its queue's partition like any task. Next to it, the partition keeps
//! a *tick ledger*: the ids of tick tasks created and not yet forgotten.
//! [`RecurringStore::create_tick`] adds the task and its ledger entry atomically and does
//! nothing when the ledger already has the tick, whatever happened to the task since (fired,
//! acked, pruned from the executed-set, cancelled): so a node that repeats the creation of a
//! tick after another died half-way never fires it twice. The engine forgets a ledger entry
//! ([`RecurringStore::forget_ticks`]) only once the schedule's state has moved past the tick,
//! when nothing can create it again.

use async_trait::async_trait;

use crate::error::StorageResult;
use crate::hash::stable_hash;
use crate::model::{NewTask, Partition, TaskId};

/// How many shards the recurring schedules are spread over (each one Redis Cluster slot).
///
/// Fixed: a schedule's shard is part of where its state is stored.
pub const RECURRING_SHARDS: u32 = 16;

/// The shard of the schedule `name`: `stable_hash(name) % RECURRING_SHARDS`.
pub fn recurring_shard(name: &str) -> u32 {
    (stable_hash(name.as_bytes()) % u64::from(RECURRING_SHARDS)) as u32
}

/// A schedule as stored: its record and what the engine learnt of its latest fire.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct StoredSchedule {
    /// The schedule's name.
    pub name: String,
    /// The record, exactly as last swapped in (the engine's format).
    pub record: String,
    /// The latest tick whose task was handed to a handler, and when (cluster clock), as
    /// reported by [`RecurringStore::recurring_fired`].
    pub last_fired: Option<(u64, u64)>,
}

/// One look at a shard by the node that drives it.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ShardLook {
    /// The active schedules whose next tick is at or before the look's `until_ms`, earliest
    /// first, with their records.
    pub due: Vec<StoredSchedule>,
    /// The earliest next tick of an active schedule of the shard after those returned
    /// (`None`: no other active schedule).
    pub next_ms: Option<u64>,
    /// How many schedules the shard holds, active or paused.
    pub schedules: u64,
}

/// What [`RecurringStore::create_tick`] did.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum TickOutcome {
    /// The tick's task was created (and the tick entered the ledger).
    Created,
    /// The ledger already had the tick: it was created before, nothing changed.
    AlreadyCreated,
    /// A live task with the tick's id existed (not made by this ledger, e.g. scheduled by
    /// hand); it was kept and the tick entered the ledger.
    Kept {
        /// The due of the task that was kept.
        due_ms: u64,
    },
    /// The same id and due fired within the executed retention (not through this ledger);
    /// nothing was scheduled, and the tick entered the ledger.
    Duplicate,
}

/// The store operations of recurring schedules; every backend implements them beside
/// [`TaskStore`](crate::TaskStore) (which requires this trait).
#[async_trait]
pub trait RecurringStore: Send + Sync + 'static {
    /// The schedule `name`, if it exists.
    async fn recurring_get(&self, name: &str) -> StorageResult<Option<StoredSchedule>>;

    /// Every schedule of every shard, sorted by name.
    async fn recurring_list(&self) -> StorageResult<Vec<StoredSchedule>>;

    /// Replaces the record of `name` if it is still `expected` (`None`: the schedule must not
    /// exist), atomically with its next tick: `next_ms` `Some` makes the schedule active with
    /// that next tick, `None` takes it out of the due set (paused, finished). `new` `None`
    /// deletes the schedule (and what was learnt of its fires). Returns whether it swapped;
    /// `false` changes nothing (someone else wrote first: read again).
    async fn recurring_swap(
        &self,
        name: &str,
        expected: Option<&str>,
        new: Option<&str>,
        next_ms: Option<u64>,
    ) -> StorageResult<bool>;

    /// The active schedules of `shard` due at or before `until_ms` (at most `limit`, earliest
    /// first), the earliest next tick after them, and the shard's schedule count: one call.
    async fn recurring_due(
        &self,
        shard: u32,
        until_ms: u64,
        limit: usize,
    ) -> StorageResult<ShardLook>;

    /// [`recurring_due`](Self::recurring_due) of each of `shards`, in their order: the
    /// driver's look at every shard it owns. The default asks shard by shard; a backend may
    /// answer in fewer calls (the PostgreSQL backend reads every shard's summary in one
    /// statement and the due schedules only of shards that have some).
    async fn recurring_due_many(
        &self,
        shards: &[u32],
        until_ms: u64,
        limit: usize,
    ) -> StorageResult<Vec<ShardLook>> {
        let mut looks = Vec::with_capacity(shards.len());
        for &shard in shards {
            looks.push(self.recurring_due(shard, until_ms, limit).await?);
        }
        Ok(looks)
    }

    /// Records that the tick `tick_ms` of `name` was handed to a handler at `fired_ms`, if the
    /// schedule exists (a task id that merely looks like a tick changes nothing).
    async fn recurring_fired(&self, name: &str, tick_ms: u64, fired_ms: u64) -> StorageResult<()>;

    /// Creates a tick's task in `partition` unless the partition's tick ledger has its id:
    /// atomically, the task (if-absent, with dedup) and the ledger entry. Repeating it is a
    /// no-op ([`TickOutcome::AlreadyCreated`]) until [`forget_ticks`](Self::forget_ticks).
    /// Fails with `PayloadTooLarge` or `InvalidDue` before anything is written.
    async fn create_tick(&self, partition: &Partition, task: NewTask)
        -> StorageResult<TickOutcome>;

    /// Removes tick ids from the ledger of `partition` (the schedule moved past them).
    async fn forget_ticks(&self, partition: &Partition, ids: &[TaskId]) -> StorageResult<()>;
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn shards_are_pinned() {
        // If these change, every schedule's state is looked for in the wrong shard: don't.
        let shards: Vec<u32> = ["nightly-report", "sweep", "a"]
            .iter()
            .map(|name| recurring_shard(name))
            .collect();
        assert_eq!(shards, [11, 14, 15]);
    }
}
