//! The state of one queue partition and the operations on it.
//!
//! Every method runs under the partition's lock, so each one is atomic, like a Lua script
//! on the partition's hash slot in the Redis backend. Times that the store stamps itself
//! (`completed_ms`, `failed_ms`, the dedup age) come in as `now_ms` from the store's clock.

use std::collections::HashMap;

use bytes::Bytes;

use super::index::TimeIndex;
use crate::model::{
    ClaimBatch, ClaimedTask, DeadTask, FailAction, FailOutcome, LeaseToken, NewTask, Partition,
    PartitionStats, ScheduleMode, ScheduleOutcome, TaskId, TaskInfo, TaskState,
};

/// A live task: pending, in flight or dead.
#[derive(Debug)]
struct Record {
    /// Pending: when it is due; in flight: the due it was claimed for; dead: its last due.
    due_ms: u64,
    /// The due it was scheduled with: what dedup compares a re-sent schedule with, kept
    /// through retries and lease expiries.
    scheduled_due_ms: u64,
    attempt: u32,
    generation: u64,
    payload: Bytes,
    last_error: Option<String>,
    place: Place,
}

/// Where a live task is, with what that place needs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Place {
    Pending,
    Inflight { claim: u64, lease_deadline_ms: u64 },
    Dead { failed_ms: u64 },
}

/// What remains of a completed task: what dedup and `get` need, no payload.
#[derive(Debug)]
struct DoneRecord {
    scheduled_due_ms: u64,
    attempt: u32,
    generation: u64,
    completed_ms: u64,
}

/// Whether a token still holds its task's lease.
enum Lease {
    Held,
    /// The task was cancelled or scheduled again since the claim.
    Superseded,
    /// The lease ran out and the task was requeued, claimed again, or finished by another
    /// claimer.
    Stale,
}

/// A token that does not hold its lease: the error is built by the caller, who knows the
/// partition.
pub(super) struct StaleLease;

/// One partition: its live tasks, their time indexes, and the done records.
#[derive(Debug, Default)]
pub(super) struct PartitionState {
    tasks: HashMap<TaskId, Record>,
    due: TimeIndex,
    inflight: TimeIndex,
    dead: TimeIndex,
    done: HashMap<TaskId, DoneRecord>,
    done_order: TimeIndex,
    /// The source of generations and claim numbers: strictly increasing in the partition, so
    /// a generation is never reused for an id, not even after a cancel.
    sequence: u64,
}

impl PartitionState {
    fn next_sequence(&mut self) -> u64 {
        self.sequence += 1;
        self.sequence
    }

    /// Takes `id` out of the time index of its current place.
    fn unindex(&mut self, id: &TaskId, place: Place, due_ms: u64) {
        match place {
            Place::Pending => self.due.remove(due_ms, id),
            Place::Inflight {
                lease_deadline_ms, ..
            } => self.inflight.remove(lease_deadline_ms, id),
            Place::Dead { failed_ms } => self.dead.remove(failed_ms, id),
        };
    }

    /// Whether `(id, due)` completed less than `retention_ms` before `now_ms`.
    fn is_duplicate(&self, task: &NewTask, now_ms: u64, retention_ms: u64) -> bool {
        self.done.get(&task.id).is_some_and(|done| {
            done.scheduled_due_ms == task.due_ms
                && now_ms.saturating_sub(done.completed_ms) < retention_ms
        })
    }

    /// Schedules an already validated task.
    pub(super) fn schedule(
        &mut self,
        task: NewTask,
        mode: ScheduleMode,
        now_ms: u64,
        retention_ms: u64,
    ) -> ScheduleOutcome {
        // Dedup comes first: re-sending a schedule that already fired must not replace a
        // task that re-armed the id since.
        if self.is_duplicate(&task, now_ms, retention_ms) {
            return ScheduleOutcome::Duplicate;
        }
        let outcome = match self.tasks.get(&task.id) {
            Some(existing) if mode == ScheduleMode::IfAbsent => {
                return ScheduleOutcome::Kept {
                    due_ms: existing.due_ms,
                }
            }
            Some(existing) => {
                let (place, previous_due_ms) = (existing.place, existing.due_ms);
                self.unindex(&task.id, place, previous_due_ms);
                ScheduleOutcome::Replaced { previous_due_ms }
            }
            None => ScheduleOutcome::Created,
        };
        let generation = self.next_sequence();
        self.due.insert(task.due_ms, task.id.clone());
        self.tasks.insert(
            task.id,
            Record {
                due_ms: task.due_ms,
                scheduled_due_ms: task.due_ms,
                attempt: 1,
                generation,
                payload: task.payload,
                last_error: None,
                place: Place::Pending,
            },
        );
        outcome
    }

    /// Removes a live task.
    pub(super) fn cancel(&mut self, id: &TaskId) -> bool {
        match self.tasks.remove(id) {
            Some(record) => {
                self.unindex(id, record.place, record.due_ms);
                true
            }
            None => false,
        }
    }

    /// The task as `get` reports it; done records only within the retention.
    pub(super) fn get(&self, id: &TaskId, now_ms: u64, retention_ms: u64) -> Option<TaskInfo> {
        if let Some(record) = self.tasks.get(id) {
            let (state, state_since_ms) = match record.place {
                Place::Pending => (TaskState::Pending, None),
                Place::Inflight {
                    lease_deadline_ms, ..
                } => (TaskState::Inflight, Some(lease_deadline_ms)),
                Place::Dead { failed_ms } => (TaskState::Dead, Some(failed_ms)),
            };
            return Some(TaskInfo {
                id: id.clone(),
                state,
                due_ms: record.due_ms,
                attempt: record.attempt,
                generation: record.generation,
                payload: record.payload.clone(),
                last_error: record.last_error.clone(),
                state_since_ms,
            });
        }
        let done = self.done.get(id)?;
        (now_ms.saturating_sub(done.completed_ms) < retention_ms).then(|| TaskInfo {
            id: id.clone(),
            state: TaskState::Done,
            due_ms: done.scheduled_due_ms,
            attempt: done.attempt,
            generation: done.generation,
            payload: Bytes::new(),
            last_error: None,
            state_since_ms: Some(done.completed_ms),
        })
    }

    /// Moves up to `limit` due tasks to in-flight.
    pub(super) fn claim_due(
        &mut self,
        partition: &Partition,
        now_ms: u64,
        limit: usize,
        lease_deadline_ms: u64,
    ) -> ClaimBatch {
        let mut tasks = Vec::with_capacity(limit.min(self.due.len()));
        while tasks.len() < limit {
            let Some((due_ms, id)) = self.due.pop_first_if(|due| due <= now_ms) else {
                break;
            };
            let claim = self.next_sequence();
            let Some(record) = self.tasks.get_mut(&id) else {
                // The index and the records change together under one lock; an entry
                // without a record cannot exist, but skipping it is the safe answer.
                continue;
            };
            record.place = Place::Inflight {
                claim,
                lease_deadline_ms,
            };
            self.inflight.insert(lease_deadline_ms, id.clone());
            tasks.push(ClaimedTask {
                token: LeaseToken {
                    partition: partition.clone(),
                    id: id.clone(),
                    generation: record.generation,
                    claim,
                },
                id,
                due_ms,
                attempt: record.attempt,
                generation: record.generation,
                payload: record.payload.clone(),
            });
        }
        ClaimBatch {
            tasks,
            next_due_ms: self.due.first_at(),
        }
    }

    /// The pending `(id, due)` pairs in `from_ms..=to_ms`.
    pub(super) fn peek_window(&self, from_ms: u64, to_ms: u64, limit: usize) -> Vec<(TaskId, u64)> {
        self.due
            .range(from_ms, to_ms)
            .take(limit)
            .map(|(due, id)| (id.clone(), due))
            .collect()
    }

    fn lease(&self, token: &LeaseToken) -> Lease {
        match self.tasks.get(&token.id) {
            Some(record) if record.generation != token.generation => Lease::Superseded,
            Some(record) => match record.place {
                Place::Inflight { claim, .. } if claim == token.claim => Lease::Held,
                _ => Lease::Stale,
            },
            // Gone: finished by whoever claimed it after this token's lease ran out (the
            // done record has the token's generation), or cancelled.
            None => match self.done.get(&token.id) {
                Some(done) if done.generation == token.generation => Lease::Stale,
                _ => Lease::Superseded,
            },
        }
    }

    /// Completes the task behind `token`: `Ok(true)` completed, `Ok(false)` superseded.
    pub(super) fn ack(&mut self, token: &LeaseToken, now_ms: u64) -> Result<bool, StaleLease> {
        match self.lease(token) {
            Lease::Stale => return Err(StaleLease),
            Lease::Superseded => return Ok(false),
            Lease::Held => {}
        }
        let Some(record) = self.tasks.remove(&token.id) else {
            return Err(StaleLease);
        };
        self.unindex(&token.id, record.place, record.due_ms);
        if let Some(previous) = self.done.remove(&token.id) {
            self.done_order.remove(previous.completed_ms, &token.id);
        }
        self.done_order.insert(now_ms, token.id.clone());
        self.done.insert(
            token.id.clone(),
            DoneRecord {
                scheduled_due_ms: record.scheduled_due_ms,
                attempt: record.attempt,
                generation: record.generation,
                completed_ms: now_ms,
            },
        );
        Ok(true)
    }

    /// Records a failed attempt of the task behind `token` (`action` validated by the caller).
    pub(super) fn fail(
        &mut self,
        token: &LeaseToken,
        error: &str,
        action: FailAction,
        now_ms: u64,
    ) -> Result<FailOutcome, StaleLease> {
        match self.lease(token) {
            Lease::Stale => return Err(StaleLease),
            Lease::Superseded => return Ok(FailOutcome::Superseded),
            Lease::Held => {}
        }
        let Some(record) = self.tasks.get_mut(&token.id) else {
            return Err(StaleLease);
        };
        let (place, due_ms) = (record.place, record.due_ms);
        record.last_error = Some(error.to_owned());
        let outcome = match action {
            FailAction::RetryAt(retry_ms) => {
                record.attempt = record.attempt.saturating_add(1);
                record.due_ms = retry_ms;
                record.place = Place::Pending;
                let attempt = record.attempt;
                self.due.insert(retry_ms, token.id.clone());
                FailOutcome::Retrying {
                    attempt,
                    due_ms: retry_ms,
                }
            }
            FailAction::DeadLetter => {
                record.place = Place::Dead { failed_ms: now_ms };
                self.dead.insert(now_ms, token.id.clone());
                FailOutcome::DeadLettered
            }
        };
        self.unindex(&token.id, place, due_ms);
        Ok(outcome)
    }

    /// Moves the lease deadline of the task behind `token`.
    pub(super) fn renew(
        &mut self,
        token: &LeaseToken,
        lease_deadline_ms: u64,
    ) -> Result<(), StaleLease> {
        if !matches!(self.lease(token), Lease::Held) {
            return Err(StaleLease);
        }
        let Some(record) = self.tasks.get_mut(&token.id) else {
            return Err(StaleLease);
        };
        let Place::Inflight {
            claim,
            lease_deadline_ms: old_deadline,
        } = record.place
        else {
            return Err(StaleLease);
        };
        record.place = Place::Inflight {
            claim,
            lease_deadline_ms,
        };
        self.inflight.remove(old_deadline, &token.id);
        self.inflight.insert(lease_deadline_ms, token.id.clone());
        Ok(())
    }

    /// Puts up to `limit` in-flight tasks whose lease ran out before `now_ms` back to
    /// pending, at their due (which is not later than now: they were claimed), same attempt.
    pub(super) fn requeue_expired(&mut self, now_ms: u64, limit: usize) -> Vec<TaskId> {
        let mut requeued = Vec::new();
        while requeued.len() < limit {
            let Some((_, id)) = self.inflight.pop_first_if(|deadline| deadline < now_ms) else {
                break;
            };
            if let Some(record) = self.tasks.get_mut(&id) {
                record.place = Place::Pending;
                self.due.insert(record.due_ms, id.clone());
                requeued.push(id);
            }
        }
        requeued
    }

    /// Forgets up to `limit` done records completed before `older_than_ms`.
    pub(super) fn prune_done(&mut self, older_than_ms: u64, limit: usize) -> u64 {
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
    pub(super) fn stats(&self, now_ms: u64) -> PartitionStats {
        PartitionStats {
            pending: self.due.len() as u64,
            due_now: self.due.range(0, now_ms).count() as u64,
            inflight: self.inflight.len() as u64,
            dead: self.dead.len() as u64,
            done: self.done.len() as u64,
        }
    }

    /// Up to `limit` dead letters, oldest first.
    pub(super) fn list_dead(&self, limit: usize) -> Vec<DeadTask> {
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

    /// Makes a dead letter pending at `due_ms` (validated) with attempt 1.
    pub(super) fn retry_dead(&mut self, id: &TaskId, due_ms: u64) -> bool {
        let Some(record) = self.tasks.get_mut(id) else {
            return false;
        };
        let Place::Dead { failed_ms } = record.place else {
            return false;
        };
        record.place = Place::Pending;
        record.attempt = 1;
        record.due_ms = due_ms;
        self.dead.remove(failed_ms, id);
        self.due.insert(due_ms, id.clone());
        true
    }

    /// Deletes one dead letter, or all of them.
    pub(super) fn purge_dead(&mut self, id: Option<&TaskId>) -> u64 {
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
