//! Which prunes of done records can find something.
//!
//! # Why
//! A full look prunes its partition's done records older than the retention. During a burst
//! nothing is that old, yet every look sent the prune, and its plan, made while `done` looked
//! empty, walked the partition's records: 4–24 ms a look, ~500 looks in a burst of 100,000
//! (BENCHMARKS.md, "Update 2026-12-07"; the burst's rate did not move without them).
//!
//! # How
//! A prune that removed every record older than its cutoff reports the partition's *floor*:
//! the earliest completion left, or the database clock when none is left. It ran with the
//! partition's row locked, and every completion is written under that lock with the database
//! clock at that moment, so no record of the partition is completed before the floor, now or
//! later. A prune whose cutoff is not past the floor would delete nothing and is not sent.
//!
//! The floors are this store's own (per node), learnt from its own prunes: a partition it
//! never pruned is pruned, and a floor only says what cannot exist, so another node's prunes
//! never make it wrong. A wall-clock step back of the database could complete a record
//! before the floor; it is then pruned once the cutoff passes the floor, later by the step.

use std::collections::HashMap;

use parking_lot::Mutex;

use crate::model::Partition;

/// Per partition, a time before which no done record is completed (see the module docs).
#[derive(Debug, Default)]
pub(super) struct PruneFloors {
    floors: Mutex<HashMap<Partition, u64>>,
}

impl PruneFloors {
    /// Whether a prune of `partition`'s records completed before `before_ms` may find one.
    pub(super) fn may_prune(&self, partition: &Partition, before_ms: u64) -> bool {
        self.floors
            .lock()
            .get(partition)
            .is_none_or(|floor| before_ms > *floor)
    }

    /// Records what a prune that removed everything before its cutoff reported.
    pub(super) fn set(&self, partition: &Partition, floor_ms: u64) {
        self.floors.lock().insert(partition.clone(), floor_ms);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::QueueName;

    fn partition(index: u32) -> Partition {
        Partition::new(QueueName::new("q").expect("queue name"), index)
    }

    #[test]
    fn a_partition_never_pruned_is_pruned() {
        assert!(PruneFloors::default().may_prune(&partition(0), 1));
    }

    #[test]
    fn a_prune_not_past_the_floor_is_not_sent() {
        let floors = PruneFloors::default();
        floors.set(&partition(0), 1_000);
        assert!(!floors.may_prune(&partition(0), 999));
        assert!(!floors.may_prune(&partition(0), 1_000));
        assert!(floors.may_prune(&partition(0), 1_001));
        assert!(
            floors.may_prune(&partition(1), 999),
            "floors are per partition"
        );
    }
}
