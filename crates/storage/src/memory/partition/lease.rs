//! The lease operations on a partition: ack, fail, renew, and requeueing lapsed leases.

use super::{DoneRecord, PartitionState, Place};
use crate::model::{FailAction, FailOutcome, LeaseToken, TaskId};

/// Whether a token still holds its task's lease.
enum Lease {
    Held,
    /// The task was cancelled or scheduled again since the claim.
    Superseded,
    /// The lease ran out and the task was requeued, claimed again, or finished by another
    /// claimer.
    Stale,
    /// The token holds the lease, but the task was cancelled while its handler ran: this
    /// attempt is its last.
    Cancelled,
}

/// A token that does not hold its lease: the error is built by the caller, who knows the
/// partition.
pub(in crate::memory) struct StaleLease;

impl PartitionState {
    fn lease(&self, token: &LeaseToken) -> Lease {
        match self.tasks.get(&token.id) {
            Some(record) if record.generation == 0 => match record.place {
                Place::Inflight { claim, .. } if claim == token.claim => Lease::Cancelled,
                _ => Lease::Stale,
            },
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

    /// Whether `token` holds its lease; a superseded token's claim leaves the in-flight
    /// index, and then (its run being over) its flow key's slot comes back.
    fn check(&mut self, token: &LeaseToken) -> Lease {
        let lease = self.lease(token);
        if let Lease::Superseded = lease {
            if self
                .superseded
                .get(&token.id)
                .is_some_and(|old| old.claim == token.claim)
            {
                self.drop_superseded(&token.id);
                self.release(&token.id);
            }
        }
        lease
    }

    /// Ends a task cancelled while its handler ran: it is forgotten, no done record.
    fn forget_cancelled(&mut self, id: &crate::model::TaskId) {
        if let Some(record) = self.tasks.remove(id) {
            self.unindex(id, record.place);
        }
    }

    /// Completes the task behind `token`: `Ok(true)` completed, `Ok(false)` superseded.
    /// With a retention of 0 no done record is kept.
    pub(in crate::memory) fn ack(
        &mut self,
        token: &LeaseToken,
        now_ms: u64,
        retention_ms: u64,
    ) -> Result<bool, StaleLease> {
        match self.check(token) {
            Lease::Stale => return Err(StaleLease),
            Lease::Superseded => return Ok(false),
            Lease::Cancelled => {
                self.forget_cancelled(&token.id);
                self.release(&token.id);
                return Ok(false);
            }
            Lease::Held => {}
        }
        self.release(&token.id);
        let Some(record) = self.tasks.remove(&token.id) else {
            return Err(StaleLease);
        };
        self.unindex(&token.id, record.place);
        self.drop_done(&token.id);
        if retention_ms == 0 {
            return Ok(true);
        }
        self.done_order.insert(now_ms, token.id.clone());
        self.done.insert(
            token.id.clone(),
            DoneRecord {
                due_ms: record.due_ms,
                scheduled_due_ms: record.scheduled_due_ms,
                attempt: record.attempt,
                generation: record.generation,
                completed_ms: now_ms,
            },
        );
        Ok(true)
    }

    /// Records a failed attempt of the task behind `token` (`action` validated by the caller).
    pub(in crate::memory) fn fail(
        &mut self,
        token: &LeaseToken,
        error: &str,
        action: FailAction,
        now_ms: u64,
    ) -> Result<FailOutcome, StaleLease> {
        match self.check(token) {
            Lease::Stale => return Err(StaleLease),
            Lease::Superseded => return Ok(FailOutcome::Superseded),
            Lease::Cancelled => {
                self.forget_cancelled(&token.id);
                self.release(&token.id);
                return Ok(FailOutcome::Superseded);
            }
            Lease::Held => {}
        }
        let Some(record) = self.tasks.get_mut(&token.id) else {
            return Err(StaleLease);
        };
        let place = record.place;
        record.last_error = Some(error.to_owned());
        let outcome = match action {
            FailAction::RetryAt(retry_ms) | FailAction::RequeueAt(retry_ms) => {
                if matches!(action, FailAction::RetryAt(_)) {
                    record.attempt = record.attempt.saturating_add(1);
                }
                record.due_ms = retry_ms;
                record.place = Place::Pending { at_ms: retry_ms };
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
        self.unindex(&token.id, place);
        match outcome {
            FailOutcome::Retrying { .. } => self.release_for_retry(&token.id, token.generation),
            _ => self.release(&token.id),
        }
        Ok(outcome)
    }

    /// Moves the lease deadline of the task behind `token`.
    pub(in crate::memory) fn renew(
        &mut self,
        token: &LeaseToken,
        lease_deadline_ms: u64,
    ) -> Result<(), StaleLease> {
        if !matches!(self.lease(token), Lease::Held | Lease::Cancelled) {
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

    /// Takes up to `limit` leases that ran out before `now_ms` out of flight: their tasks
    /// go back to pending, due at `now_ms`, same attempt. A superseded claim's lease is only
    /// dropped (its id is pending already) and not returned, but counts toward `limit`; a task
    /// cancelled while it ran is forgotten.
    pub(in crate::memory) fn requeue_expired(&mut self, now_ms: u64, limit: usize) -> Vec<TaskId> {
        let mut requeued = Vec::new();
        for _ in 0..limit {
            let Some((deadline, id)) = self.inflight.pop_first_if(|at| at < now_ms) else {
                break;
            };
            if self
                .superseded
                .get(&id)
                .is_some_and(|old| old.lease_deadline_ms == deadline)
            {
                self.superseded.remove(&id);
                // The old run of a rescheduled id is over, and so is its slot.
                self.release(&id);
                continue;
            }
            if self
                .tasks
                .get(&id)
                .is_some_and(|record| record.generation == 0)
            {
                // Cancelled while it ran: its last attempt is over.
                self.tasks.remove(&id);
                self.release(&id);
            } else if let Some(record) = self.tasks.get_mut(&id) {
                record.place = Place::Pending { at_ms: now_ms };
                let generation = record.generation;
                self.due.insert(now_ms, id.clone());
                self.release_for_retry(&id, generation);
                requeued.push(id);
            }
        }
        requeued
    }
}
