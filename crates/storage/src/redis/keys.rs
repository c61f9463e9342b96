//! Redis key names (DESIGN.md, "Storage layout in Redis").
//!
//! Every key of a partition carries the hash tag `{<queue>:<index>}`, so each script touches
//! one Redis Cluster slot. Queue names cannot contain `{`, `}` or `:` (see `QueueName`), which
//! keeps the tag unambiguous. Scripts receive these names through `KEYS`; none is built in Lua.

use crate::model::Partition;

/// The keys of one partition: the five of DESIGN.md and the claim receipt.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct PartitionKeys {
    /// `ZSET id -> due_ms`: pending tasks.
    pub due: String,
    /// `HASH id -> record`.
    pub tasks: String,
    /// `ZSET id -> lease_deadline_ms`: claimed tasks.
    pub inflight: String,
    /// `ZSET id -> completed_ms`: the executed-set for dedup.
    pub done: String,
    /// `ZSET id -> failed_ms`: dead letters.
    pub dead: String,
    /// `STRING`: the receipt of the partition's latest claim, kept for one lease, so that a
    /// claim whose reply was lost can be recovered (`recover_claim.lua`).
    pub receipt: String,
    /// `ZSET tick id -> tick ms`: the tick ledger of recurring schedules (see
    /// [`RecurringStore`](crate::RecurringStore)).
    pub ticks: String,
    /// `STRING`: exists while the queue is paused; `claim_due.lua` then claims nothing.
    pub paused: String,
    /// `HASH id -> traceparent`: the trace context of the tasks scheduled with one (absent
    /// while none is), dropped when the task completes, is cancelled or purged.
    pub traces: String,
    /// `HASH`: the holds, representatives and parked times of flow keys (`flow.lua`).
    pub flow: String,
    /// `ZSET` (lexicographic): the tasks held back by their flow key's limits.
    pub parked: String,
    /// `ZSET` (lexicographic): the fires of each flow key within its rate period.
    pub fires: String,
    /// `ZSET key -> latest fire`: to forget the fires of idle keys.
    pub fire_times: String,
}

impl PartitionKeys {
    /// The keys of `partition` under `prefix`.
    pub(crate) fn new(prefix: &str, partition: &Partition) -> Self {
        let base = format!("{prefix}:{{{}:{}}}:", partition.queue, partition.index);
        PartitionKeys {
            due: format!("{base}due"),
            tasks: format!("{base}tasks"),
            inflight: format!("{base}inflight"),
            done: format!("{base}done"),
            dead: format!("{base}dead"),
            receipt: format!("{base}claim"),
            ticks: format!("{base}ticks"),
            paused: format!("{base}paused"),
            traces: format!("{base}traces"),
            flow: format!("{base}flow"),
            parked: format!("{base}parked"),
            fires: format!("{base}fires"),
            fire_times: format!("{base}fire_times"),
        }
    }
}

/// The keys of one recurring shard. The tag `{recurring#<shard>}` cannot be a partition's:
/// queue names have no `#`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct RecurringKeys {
    /// `HASH name -> record`.
    pub schedules: String,
    /// `ZSET name -> next tick ms` of the active schedules.
    pub next: String,
    /// `HASH name -> '<tick_ms>:<fired_ms>'` of the latest fired tick.
    pub fired: String,
}

impl RecurringKeys {
    /// The keys of `shard` under `prefix`.
    pub(crate) fn new(prefix: &str, shard: u32) -> Self {
        let base = format!("{prefix}:{{recurring#{shard}}}:");
        RecurringKeys {
            schedules: format!("{base}schedules"),
            next: format!("{base}next"),
            fired: format!("{base}fired"),
        }
    }
}

/// `<prefix>:{cluster}:queues`: `HASH queue -> partition count`, in the coordinator's slot,
/// so every key delayq writes carries a hash tag.
pub(crate) fn registry_key(prefix: &str) -> String {
    format!("{prefix}:{{cluster}}:queues")
}

/// `STRING` counter, bumped by every change of the queue registry (a queue registered or
/// deleted), so that readers re-read the registry only when it changed.
pub(crate) fn registry_version_key(prefix: &str) -> String {
    format!("{prefix}:{{cluster}}:queues_version")
}

/// The keys of a queue's cluster-wide limits, tagged `{<queue>#limits}` (no partition's tag:
/// queue names have no `#`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct LimitKeys {
    /// `HASH node -> global slots held`.
    pub holders: String,
    /// `ZSET node -> lease deadline ms` of the holders.
    pub leases: String,
    base: String,
}

impl LimitKeys {
    /// The limit keys of `queue` under `prefix`.
    pub(crate) fn new(prefix: &str, queue: &str) -> Self {
        let base = format!("{prefix}:{{{queue}#limits}}:");
        LimitKeys {
            holders: format!("{base}slots"),
            leases: format!("{base}slot_leases"),
            base,
        }
    }

    /// `STRING`: the fire tokens taken in the rate window starting at `window_start_ms`.
    pub(crate) fn rate_window(&self, window_start_ms: u64) -> String {
        format!("{}rate:{window_start_ms}", self.base)
    }
}

/// `<prefix>:{cluster}:paused`: `HASH queue -> paused since (ms)`, the paused queues as
/// `stats` lists them (each partition carries its own flag for the claims).
pub(crate) fn paused_key(prefix: &str) -> String {
    format!("{prefix}:{{cluster}}:paused")
}

/// `<prefix>:queues`: where releases before the `{cluster}` slot kept the registry; read once
/// per process and merged into [`registry_key`], so an upgrade loses no queue.
pub(crate) fn legacy_registry_key(prefix: &str) -> String {
    format!("{prefix}:queues")
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::QueueName;

    #[test]
    fn keys_follow_the_design_layout() {
        let queue = QueueName::new("order-timeout").expect("valid");
        let keys = PartitionKeys::new("delayq", &Partition::new(queue, 7));
        assert_eq!(keys.due, "delayq:{order-timeout:7}:due");
        assert_eq!(keys.tasks, "delayq:{order-timeout:7}:tasks");
        assert_eq!(keys.inflight, "delayq:{order-timeout:7}:inflight");
        assert_eq!(keys.done, "delayq:{order-timeout:7}:done");
        assert_eq!(keys.dead, "delayq:{order-timeout:7}:dead");
        assert_eq!(keys.receipt, "delayq:{order-timeout:7}:claim");
        assert_eq!(keys.ticks, "delayq:{order-timeout:7}:ticks");
        assert_eq!(keys.paused, "delayq:{order-timeout:7}:paused");
        assert_eq!(paused_key("delayq"), "delayq:{cluster}:paused");
        let limits = LimitKeys::new("delayq", "order-timeout");
        assert_eq!(limits.holders, "delayq:{order-timeout#limits}:slots");
        assert_eq!(limits.leases, "delayq:{order-timeout#limits}:slot_leases");
        assert_eq!(
            limits.rate_window(5),
            "delayq:{order-timeout#limits}:rate:5"
        );
        let recurring = RecurringKeys::new("delayq", 3);
        assert_eq!(recurring.schedules, "delayq:{recurring#3}:schedules");
        assert_eq!(recurring.next, "delayq:{recurring#3}:next");
        assert_eq!(recurring.fired, "delayq:{recurring#3}:fired");
        assert_eq!(registry_key("delayq"), "delayq:{cluster}:queues");
        assert_eq!(legacy_registry_key("delayq"), "delayq:queues");
    }
}
