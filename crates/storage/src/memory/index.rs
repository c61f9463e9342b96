//! An ordered index of task ids by a time (due, lease deadline, failure or completion time),
//! the in-memory counterpart of a Redis sorted set scored by milliseconds.

use std::collections::BTreeSet;
use std::ops::Bound;

use crate::model::TaskId;

/// `(time, id)` pairs in time order, ties broken by id like a Redis ZSET.
///
/// The id is stored as `Some(id)`; `None` sorts before every id and is only used as the
/// lower bound of range queries (`(t, None)` is "the first entry at time `t`"), which lets
/// a range start at a time without needing a smallest possible [`TaskId`].
#[derive(Debug, Default)]
pub(super) struct TimeIndex {
    entries: BTreeSet<(u64, Option<TaskId>)>,
}

impl TimeIndex {
    /// Adds `id` at `at`.
    pub(super) fn insert(&mut self, at: u64, id: TaskId) {
        self.entries.insert((at, Some(id)));
    }

    /// Removes `id` at `at`; returns whether it was there.
    pub(super) fn remove(&mut self, at: u64, id: &TaskId) -> bool {
        self.entries.remove(&(at, Some(id.clone())))
    }

    /// The number of entries.
    pub(super) fn len(&self) -> usize {
        self.entries.len()
    }

    /// The earliest time in the index.
    pub(super) fn first_at(&self) -> Option<u64> {
        self.entries.first().map(|(at, _)| *at)
    }

    /// The earliest entry.
    pub(super) fn first(&self) -> Option<(u64, TaskId)> {
        self.entries
            .iter()
            .find_map(|(at, id)| id.clone().map(|id| (*at, id)))
    }

    /// Removes and returns the earliest entry if its time satisfies `take`.
    pub(super) fn pop_first_if(&mut self, take: impl Fn(u64) -> bool) -> Option<(u64, TaskId)> {
        match self.entries.first() {
            Some((at, _)) if take(*at) => match self.entries.pop_first() {
                Some((at, Some(id))) => Some((at, id)),
                _ => None,
            },
            _ => None,
        }
    }

    /// The entries with `from <= time <= to`, in order.
    pub(super) fn range(&self, from: u64, to: u64) -> impl Iterator<Item = (u64, &TaskId)> {
        self.entries
            .range((Bound::Included((from, None)), Bound::Unbounded))
            .take_while(move |(at, _)| *at <= to)
            .filter_map(|(at, id)| id.as_ref().map(|id| (*at, id)))
    }

    /// All entries, in order.
    pub(super) fn iter(&self) -> impl Iterator<Item = (u64, &TaskId)> {
        self.range(0, u64::MAX)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn id(name: &str) -> TaskId {
        TaskId::new(name).expect("valid id")
    }

    #[test]
    fn orders_by_time_then_id_and_ranges_are_inclusive() {
        let mut index = TimeIndex::default();
        index.insert(20, id("b"));
        index.insert(10, id("z"));
        index.insert(20, id("a"));
        index.insert(30, id("c"));
        let all: Vec<_> = index.iter().map(|(at, id)| (at, id.as_str())).collect();
        assert_eq!(all, [(10, "z"), (20, "a"), (20, "b"), (30, "c")]);
        let window: Vec<_> = index.range(20, 20).map(|(_, id)| id.as_str()).collect();
        assert_eq!(window, ["a", "b"]);
        assert_eq!(index.first_at(), Some(10));
        assert_eq!(index.pop_first_if(|at| at < 10), None);
        assert_eq!(index.pop_first_if(|at| at <= 10), Some((10, id("z"))));
        assert!(index.remove(20, &id("a")));
        assert!(!index.remove(20, &id("a")));
        assert_eq!(index.len(), 2);
    }
}
