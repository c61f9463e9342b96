//! Upkeep and inspection of a partition: the executed-set, counts and dead letters.

use super::{PartitionState, Place};
use crate::model::{DeadTask, PartitionStats, TaskId};

impl PartitionState {
    /// Forgets up to `limit` done records completed before `older_than_ms`.
    pub(in crate::memory) fn prune_done(&mut self, older_than_ms: u64, limit: usize) -> u64 {
        let mut pruned = 0;
        while (pruned as usize) < limit {
            let Some((_, id)) = self.done_order.pop_first_if(|at| at < older_than_ms) else {
                break;
            };
            self.done.remove(&id);
            pruned += 1;
        }
        pruned
    }

    /// The partition's counts.
    pub(in crate::memory) fn stats(&self, now_ms: u64) -> PartitionStats {
        let held_back = self.parked_count();
        PartitionStats {
            pending: self.due.len() as u64 + held_back,
            due_now: self.due.range(0, now_ms).count() as u64 + held_back,
            inflight: self.inflight.len() as u64,
            dead: self.dead.len() as u64,
            done: self.done.len() as u64,
            held_back,
        }
    }

    /// Up to `limit` dead letters, oldest first.
    pub(in crate::memory) fn list_dead(&self, limit: usize) -> Vec<DeadTask> {
        self.dead
            .iter()
            .take(limit)
            .filter_map(|(failed_ms, id)| {
                self.tasks.get(id).map(|record| DeadTask {
                    id: id.clone(),
                    due_ms: record.due_ms,
                    attempt: record.attempt,
                    failed_ms,
                    last_error: record.last_error.clone(),
                    payload: record.payload.clone(),
                })
            })
            .collect()
    }

    /// The `(id, failed_ms)` of up to `limit` dead letters, oldest first (the twin of
    /// `ZRANGE dead 0 limit-1 WITHSCORES`).
    pub(in crate::memory) fn peek_dead(&self, limit: usize) -> Vec<(TaskId, u64)> {
        self.dead
            .iter()
            .take(limit)
            .map(|(failed_ms, id)| (id.clone(), failed_ms))
            .collect()
    }

    /// Makes a dead letter pending at `due_ms` (validated) with attempt 1.
    pub(in crate::memory) fn retry_dead(&mut self, id: &TaskId, due_ms: u64) -> bool {
        let Some(record) = self.tasks.get_mut(id) else {
            return false;
        };
        let Place::Dead { failed_ms } = record.place else {
            return false;
        };
        record.place = Place::Pending { at_ms: due_ms };
        record.attempt = 1;
        record.due_ms = due_ms;
        self.dead.remove(failed_ms, id);
        self.due.insert(due_ms, id.clone());
        true
    }

    /// Deletes one dead letter, or all of them.
    pub(in crate::memory) fn purge_dead(&mut self, id: Option<&TaskId>) -> u64 {
        let ids: Vec<TaskId> = match id {
            Some(id) => match self.tasks.get(id) {
                Some(record) if matches!(record.place, Place::Dead { .. }) => vec![id.clone()],
                _ => Vec::new(),
            },
            None => self.dead.iter().map(|(_, id)| id.clone()).collect(),
        };
        for id in &ids {
            self.cancel(id);
        }
        ids.len() as u64
    }
}
