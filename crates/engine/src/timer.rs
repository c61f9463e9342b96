//! The due timer: one time-ordered set of `(due, partition)` entries for the whole node.
//!
//! # Why a set of `(due, partition)` and not a wheel of task ids
//! The claim script decides which tasks fire (it checks `due <= now` atomically), so the timer
//! only has to know *when* a partition next has something due. Entries are deduplicated per
//! `(due, partition)`, so a burst of 100,000 tasks due at one instant costs one entry per
//! partition, and a stale entry (a task cancelled or moved later after it was prefetched) costs
//! one claim round trip that returns nothing. A `BTreeSet` gives the earliest entry in
//! O(log n), range-pops the due ones, and evicts the latest ones when the set is full — which
//! tokio-util's `DelayQueue` (keys reused after expiry, no eviction of the latest) does not.
//! Eviction loses nothing: the earliest due of each partition comes back with every claim
//! (`next_due_ms`) and every pull.

use std::collections::BTreeSet;

use delayq_storage::Partition;
use parking_lot::Mutex;
use tokio::sync::Notify;

/// Time-ordered `(due_ms, partition)` entries, bounded in size: the node's one timer.
///
/// ```
/// use delayq_engine::timer::DueTimer;
/// use delayq_storage::{Partition, QueueName};
///
/// let timer = DueTimer::new(100_000);
/// let partition = Partition::new(QueueName::new("orders").unwrap(), 3);
/// timer.insert(1_000, partition.clone());
/// timer.insert(1_000, partition.clone()); // deduplicated
/// assert_eq!(timer.next_due(), Some(1_000));
/// assert_eq!(timer.pop_due(999), vec![]);
/// assert_eq!(timer.pop_due(1_000), vec![partition]);
/// ```
#[derive(Debug)]
pub struct DueTimer {
    entries: Mutex<BTreeSet<(u64, Partition)>>,
    earlier: Notify,
    capacity: usize,
}

impl DueTimer {
    /// A timer holding at most `capacity` entries (at least 1).
    pub fn new(capacity: usize) -> Self {
        DueTimer {
            entries: Mutex::new(BTreeSet::new()),
            earlier: Notify::new(),
            capacity: capacity.max(1),
        }
    }

    /// Adds an entry; wakes the timer loop when it is now the earliest.
    pub fn insert(&self, due_ms: u64, partition: Partition) {
        let mut entries = self.entries.lock();
        let is_earliest = entries.first().is_none_or(|(first, _)| due_ms < *first);
        entries.insert((due_ms, partition));
        while entries.len() > self.capacity {
            entries.pop_last();
        }
        drop(entries);
        if is_earliest {
            self.earlier.notify_one();
        }
    }

    /// The earliest due time held.
    pub fn next_due(&self) -> Option<u64> {
        self.entries.lock().first().map(|(due, _)| *due)
    }

    /// Removes the entries due at or before `now_ms` and returns their partitions, each once,
    /// earliest first.
    pub fn pop_due(&self, now_ms: u64) -> Vec<Partition> {
        let mut entries = self.entries.lock();
        let mut partitions: Vec<Partition> = Vec::new();
        while let Some((due, _)) = entries.first() {
            if *due > now_ms {
                break;
            }
            if let Some((_, partition)) = entries.pop_first() {
                if !partitions.contains(&partition) {
                    partitions.push(partition);
                }
            }
        }
        partitions
    }

    /// Drops every entry of partitions for which `keep` is false (ownership moved away).
    pub fn retain(&self, keep: impl Fn(&Partition) -> bool) {
        self.entries.lock().retain(|(_, partition)| keep(partition));
    }

    /// How many entries are held.
    pub fn len(&self) -> usize {
        self.entries.lock().len()
    }

    /// Whether the timer holds no entry.
    pub fn is_empty(&self) -> bool {
        self.entries.lock().is_empty()
    }

    /// Resolves when an entry earlier than all others was inserted since the last call.
    pub async fn earlier_entry(&self) {
        self.earlier.notified().await;
    }
}

#[cfg(test)]
mod tests {
    use delayq_storage::QueueName;

    use super::*;

    fn partition(index: u32) -> Partition {
        Partition::new(QueueName::new("q").expect("valid name"), index)
    }

    #[test]
    fn pops_due_partitions_once_in_due_order() {
        let timer = DueTimer::new(100);
        timer.insert(30, partition(1));
        timer.insert(10, partition(2));
        timer.insert(20, partition(1));
        timer.insert(10, partition(2));
        timer.insert(99, partition(3));
        assert_eq!(timer.len(), 4);
        assert_eq!(timer.next_due(), Some(10));
        assert_eq!(timer.pop_due(30), vec![partition(2), partition(1)]);
        assert_eq!(timer.next_due(), Some(99));
    }

    #[test]
    fn full_timer_evicts_the_latest_entries() {
        let timer = DueTimer::new(2);
        timer.insert(30, partition(1));
        timer.insert(20, partition(2));
        timer.insert(10, partition(3));
        assert_eq!(timer.len(), 2);
        assert_eq!(timer.pop_due(u64::MAX), vec![partition(3), partition(2)]);
    }

    #[test]
    fn retain_drops_partitions_that_moved() {
        let timer = DueTimer::new(10);
        timer.insert(1, partition(1));
        timer.insert(2, partition(2));
        timer.retain(|p| p.index == 2);
        assert_eq!(timer.pop_due(u64::MAX), vec![partition(2)]);
    }

    #[tokio::test]
    async fn inserting_an_earlier_entry_wakes_the_loop() {
        let timer = DueTimer::new(10);
        timer.insert(50, partition(1));
        timer.earlier_entry().await; // the first insert was the earliest
        timer.insert(60, partition(1));
        timer.insert(40, partition(1));
        tokio::time::timeout(std::time::Duration::from_secs(5), timer.earlier_entry())
            .await
            .expect("woken by the earlier entry");
    }
}
