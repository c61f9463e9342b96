//! The state of one queue partition and the operations on it.
//!
//! Every method runs under the partition's lock, so each one is atomic, like a Lua script
//! on the partition's hash slot in the Redis backend. Times that the store stamps itself
//! (`completed_ms`, `failed_ms`, the dedup age) come in as `now_ms` from the store's clock.

use std::collections::HashMap;

use bytes::Bytes;

mod admin;
mod flow;
mod lease;
mod receipt;

pub(super) use self::lease::StaleLease;
pub(super) use self::receipt::ClaimRequest;
use self::receipt::Receipt;
use super::index::TimeIndex;
use crate::model::{
    Cancel, ClaimBatch, ClaimedTask, LeaseToken, LookReport, LookRequest, NewTask, Partition,
    ScheduleMode, ScheduleOutcome, TaskId, TaskInfo, TaskState,
};
use crate::recurring::TickOutcome;
use crate::TraceParent;

/// How many held-back tasks one claim parks beyond its limit, at most.
pub(crate) const PARK_BUDGET: usize = 1024;

/// A live task: pending, in flight or dead.
#[derive(Debug)]
struct Record {
    /// The due of the current attempt: what a claim reports. A task put back by
    /// `requeue_expired` keeps it and waits in the pending index at the requeue time.
    due_ms: u64,
    /// The due it was scheduled with: what dedup compares a re-sent schedule with, kept
    /// through retries and lease expiries.
    scheduled_due_ms: u64,
    attempt: u32,
    /// 0 marks a task cancelled while its handler ran (as in the Redis backend): its running
    /// attempt is the last.
    generation: u64,
    payload: Bytes,
    last_error: Option<String>,
    place: Place,
    /// The trace context it was scheduled with.
    traceparent: Option<TraceParent>,
}

/// Where a live task is, with what that place needs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Place {
    /// In the pending index at `at_ms`.
    Pending {
        at_ms: u64,
    },
    Inflight {
        claim: u64,
        lease_deadline_ms: u64,
    },
    Dead {
        failed_ms: u64,
    },
}

/// What remains of a completed task: what dedup and `get` need, no payload.
#[derive(Debug)]
struct DoneRecord {
    /// The due that fired (of the last attempt).
    due_ms: u64,
    /// The due it was scheduled with, for dedup.
    scheduled_due_ms: u64,
    attempt: u32,
    generation: u64,
    completed_ms: u64,
}

/// The lease of a claim whose task was scheduled again while its handler ran: it stays in
/// the in-flight index (the handler is still running) until that handler acks or fails, its
/// lease runs out, the new schedule is claimed, or the id is cancelled.
#[derive(Debug, Clone, Copy)]
struct Superseded {
    claim: u64,
    lease_deadline_ms: u64,
}

/// One partition: its live tasks, their time indexes, and the done records.
#[derive(Debug, Default)]
pub(super) struct PartitionState {
    tasks: HashMap<TaskId, Record>,
    due: TimeIndex,
    /// Leases of in-flight records and of superseded claims.
    inflight: TimeIndex,
    superseded: HashMap<TaskId, Superseded>,
    dead: TimeIndex,
    done: HashMap<TaskId, DoneRecord>,
    done_order: TimeIndex,
    /// The source of generations and claim numbers: strictly increasing in the partition, so
    /// a generation is never reused for an id, not even after a cancel.
    sequence: u64,
    /// The latest claim, for `recover_claim`.
    receipt: Option<Receipt>,
    /// The tick ledger: ids of recurring ticks created and not yet forgotten.
    ticks: HashMap<TaskId, u64>,
    /// Holds, parked tasks and fires of flow keys.
    flow: flow::FlowState,
}

impl Record {
    /// When the task is due now: its place in the pending index, else its attempt's due.
    fn current_due_ms(&self) -> u64 {
        match self.place {
            Place::Pending { at_ms } => at_ms,
            _ => self.due_ms,
        }
    }
}

impl PartitionState {
    fn next_sequence(&mut self) -> u64 {
        self.sequence += 1;
        self.sequence
    }

    /// Takes `id` out of the time index of its current place.
    fn unindex(&mut self, id: &TaskId, place: Place) {
        match place {
            Place::Pending { at_ms } => {
                self.due.remove(at_ms, id);
                // A parked task leaves its key's set; a key's representative passes its
                // turn on.
                self.unpark_removed(id, at_ms);
                true
            }
            Place::Inflight {
                lease_deadline_ms, ..
            } => self.inflight.remove(lease_deadline_ms, id),
            Place::Dead { failed_ms } => self.dead.remove(failed_ms, id),
        };
    }

    /// Forgets the superseded claim of `id`, if any.
    fn drop_superseded(&mut self, id: &TaskId) {
        if let Some(old) = self.superseded.remove(id) {
            self.inflight.remove(old.lease_deadline_ms, id);
        }
    }

    /// Forgets the done record of `id`, if any.
    fn drop_done(&mut self, id: &TaskId) {
        if let Some(done) = self.done.remove(id) {
            self.done_order.remove(done.completed_ms, id);
        }
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
        // A live task wins over the executed-set: dedup only guards an id that is not live,
        // and re-arming an id (another due) forgets its done record.
        let outcome = match self.tasks.get(&task.id) {
            // Cancelled while its handler runs: a new life, as for an unknown id.
            Some(existing) if existing.generation == 0 => {
                if let Place::Inflight {
                    claim,
                    lease_deadline_ms,
                } = existing.place
                {
                    let old = Superseded {
                        claim,
                        lease_deadline_ms,
                    };
                    self.superseded.insert(task.id.clone(), old);
                }
                ScheduleOutcome::Created
            }
            Some(existing) if mode == ScheduleMode::IfAbsent => {
                return ScheduleOutcome::Kept {
                    due_ms: existing.current_due_ms(),
                }
            }
            // In flight for this very due: a resend of the fire that is running.
            Some(existing)
                if matches!(existing.place, Place::Inflight { .. })
                    && retention_ms > 0
                    && existing.scheduled_due_ms == task.due_ms =>
            {
                return ScheduleOutcome::Duplicate
            }
            // Waiting for a retry, or dead, for this very due: that fire happened, and a
            // resend must not reset the attempts, the backoff or the generation.
            Some(existing)
                if retention_ms > 0
                    && existing.scheduled_due_ms == task.due_ms
                    && match existing.place {
                        Place::Dead { .. } => true,
                        Place::Pending { .. } => existing.attempt > 1,
                        Place::Inflight { .. } => false,
                    } =>
            {
                return ScheduleOutcome::Duplicate
            }
            // Earlier / later: the live due wins unless the new one beats it (see
            // ScheduleMode); a dead letter is replaced in every mode but if-absent.
            Some(existing)
                if match existing.place {
                    Place::Pending { at_ms } => mode.keeps_pending(at_ms, task.due_ms),
                    Place::Inflight { .. } => mode.keeps_inflight(existing.due_ms, task.due_ms),
                    Place::Dead { .. } => false,
                } =>
            {
                return ScheduleOutcome::Kept {
                    due_ms: existing.current_due_ms(),
                }
            }
            Some(existing) => {
                let (place, previous_due_ms) = (existing.place, existing.current_due_ms());
                if let Place::Inflight {
                    claim,
                    lease_deadline_ms,
                } = place
                {
                    // The handler still runs: its lease stays in flight until it reports.
                    let old = Superseded {
                        claim,
                        lease_deadline_ms,
                    };
                    self.superseded.insert(task.id.clone(), old);
                } else {
                    self.unindex(&task.id, place);
                    // A task waiting for its retry (FIFO) holds its key's slot: a new
                    // schedule is a new task.
                    self.release_waiting(&task.id);
                }
                ScheduleOutcome::Replaced { previous_due_ms }
            }
            None if self.is_duplicate(&task, now_ms, retention_ms) => {
                return ScheduleOutcome::Duplicate
            }
            None => {
                self.drop_done(&task.id);
                ScheduleOutcome::Created
            }
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
                place: Place::Pending { at_ms: task.due_ms },
                traceparent: task.traceparent,
            },
        );
        outcome
    }

    /// Creates a recurring tick's task unless the ledger has its id (then nothing changes).
    pub(super) fn create_tick(
        &mut self,
        task: NewTask,
        now_ms: u64,
        retention_ms: u64,
    ) -> TickOutcome {
        if self.ticks.contains_key(&task.id) {
            return TickOutcome::AlreadyCreated;
        }
        self.ticks.insert(task.id.clone(), task.due_ms);
        match self.schedule(task, ScheduleMode::IfAbsent, now_ms, retention_ms) {
            ScheduleOutcome::Created | ScheduleOutcome::Replaced { .. } => TickOutcome::Created,
            ScheduleOutcome::Kept { due_ms } => TickOutcome::Kept { due_ms },
            ScheduleOutcome::Duplicate => TickOutcome::Duplicate,
        }
    }

    /// Removes ids from the tick ledger.
    pub(super) fn forget_ticks(&mut self, ids: &[TaskId]) {
        for id in ids {
            self.ticks.remove(id);
        }
    }

    /// Cancels a task: removes a pending or dead one; marks one in flight (generation 0) so
    /// that its running attempt is the last.
    pub(super) fn cancel(&mut self, id: &TaskId) -> Cancel {
        let Some(record) = self.tasks.get_mut(id) else {
            return Cancel::NotFound;
        };
        if let Place::Inflight { .. } = record.place {
            // As cancel.lua: the running attempt is the last, and its trace goes now.
            record.generation = 0;
            record.traceparent = None;
            return Cancel::InFlight;
        }
        let place = record.place;
        self.tasks.remove(id);
        self.unindex(id, place);
        // A FIFO task waiting for its retry gives its key's slot back (an older run of the
        // id in flight keeps its own until it ends).
        self.release_waiting(id);
        if self.superseded.contains_key(id) {
            self.drop_superseded(id);
            self.release(id);
        }
        Cancel::Cancelled
    }

    /// The task as `get` reports it; done records only within the retention.
    pub(super) fn get(&self, id: &TaskId, now_ms: u64, retention_ms: u64) -> Option<TaskInfo> {
        if let Some(record) = self.tasks.get(id) {
            let (state, state_since_ms) = match record.place {
                Place::Pending { .. } => (TaskState::Pending, None),
                Place::Inflight {
                    lease_deadline_ms, ..
                } => (TaskState::Inflight, Some(lease_deadline_ms)),
                Place::Dead { failed_ms } => (TaskState::Dead, Some(failed_ms)),
            };
            return Some(TaskInfo {
                id: id.clone(),
                state,
                due_ms: record.current_due_ms(),
                attempt: record.attempt,
                generation: record.generation,
                payload: record.payload.clone(),
                last_error: record.last_error.clone(),
                state_since_ms,
                traceparent: record.traceparent.clone(),
            });
        }
        let done = self.done.get(id)?;
        (now_ms.saturating_sub(done.completed_ms) < retention_ms).then(|| TaskInfo {
            id: id.clone(),
            state: TaskState::Done,
            due_ms: done.due_ms,
            attempt: done.attempt,
            generation: done.generation,
            payload: Bytes::new(),
            last_error: None,
            state_since_ms: Some(done.completed_ms),
            traceparent: None,
        })
    }

    /// Moves up to `request.limit` due tasks to in-flight, at most `request.max_bytes` of
    /// payload (but at least one task), and keeps the claim's receipt.
    pub(super) fn claim_due(
        &mut self,
        partition: &Partition,
        request: &ClaimRequest<'_>,
    ) -> ClaimBatch {
        let mut tasks = Vec::with_capacity(request.limit.min(self.due.len()));
        let mut bytes = 0usize;
        // Held-back tasks of blocked keys are looked at up to PARK_BUDGET per claim beyond
        // the limit: a claim behind a hot key parks them and goes on with the other keys.
        let mut budget = request.limit.saturating_add(PARK_BUDGET);
        let mut unparked = Vec::new();
        while tasks.len() < request.limit && budget > 0 {
            budget -= 1;
            let within_budget = |record: Option<&Record>| {
                tasks.is_empty()
                    || record.is_none_or(|record| bytes + record.payload.len() <= request.max_bytes)
            };
            let next = self.due.first();
            let Some((due, id)) = next.filter(|(due, _)| *due <= request.now_ms) else {
                break;
            };
            if !within_budget(self.tasks.get(&id)) {
                break;
            }
            self.due.remove(due, &id);
            let key = request
                .flow
                .as_ref()
                .and_then(|limits| Some((id.flow_key()?, limits)));
            if let Some((key, limits)) = key {
                let Some(held) = self.admit_due(&id, key, due, request.now_ms, limits) else {
                    continue;
                };
                unparked.extend(self.unpark_spare(key, held, limits));
            }
            // The new claim's lease replaces a superseded claim's entry, as in Redis, where
            // both are the id's one member of the in-flight set.
            self.drop_superseded(&id);
            let claim = self.next_sequence();
            let Some(record) = self.tasks.get_mut(&id) else {
                // The index and the records change together under one lock; an entry
                // without a record cannot exist, but skipping it is the safe answer.
                continue;
            };
            record.place = Place::Inflight {
                claim,
                lease_deadline_ms: request.lease_deadline_ms,
            };
            bytes += record.payload.len();
            self.inflight.insert(request.lease_deadline_ms, id.clone());
            tasks.push(ClaimedTask {
                token: LeaseToken {
                    partition: partition.clone(),
                    id: id.clone(),
                    generation: record.generation,
                    claim,
                },
                id,
                due_ms: record.due_ms,
                attempt: record.attempt,
                generation: record.generation,
                payload: record.payload.clone(),
                traceparent: record.traceparent.clone(),
            });
        }
        for (at, id) in unparked {
            self.due.insert(at, id);
        }
        if !tasks.is_empty() {
            self.receipt = Some(Receipt::of(request, &tasks));
        }
        ClaimBatch {
            tasks,
            next_due_ms: self.due.first_at(),
            dead_lettered: Vec::new(),
            paused: false,
            held_back: if request.flow.is_some() {
                self.parked_count()
            } else {
                0
            },
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

    /// The twin of `look.lua`: sweep, prune, window, and when to look again.
    pub(super) fn look(&mut self, request: &LookRequest) -> LookReport {
        let requeued = self.requeue_expired(request.now_ms, request.requeue_limit);
        self.repair_stuck_keys();
        let pruned = match request.prune_before_ms {
            Some(before) => self.prune_done(before, request.prune_limit),
            None => 0,
        };
        let limit = request.window_limit.max(1);
        let window = self.peek_window(0, request.window_end_ms, limit);
        let next_due_after_window_ms = if window.len() < limit {
            self.due
                .range(request.window_end_ms.saturating_add(1), u64::MAX)
                .next()
                .map(|(due, _)| due)
        } else {
            None
        };
        LookReport {
            requeued,
            pruned,
            window,
            next_due_after_window_ms,
            earliest_lease_deadline_ms: self.inflight.first_at(),
        }
    }
}
