//! Flow keys in a memory partition: the twin of the flow hash and sets of the Redis backend
//! (see [`crate::flow`] for the rules).
//!
//! - `running`: per key, the slots held: its tasks in flight, and with FIFO order those
//!   waiting for a retry or requeued after a lost lease (`waiting_holds`, by id, with the
//!   generation whose claim takes the slot over).
//! - `parked`: the held-back tasks, ordered by key, then by their pending time, then by id.
//! - `representatives`: per key, the one task waiting in the pending index for the key's
//!   rate.
//! - `fires`: the fire times of each key within its rate period, and the same by time for
//!   forgetting them.
//!
//! A slot is counted once per claim and given back once per end of that claim (ack, fail or
//! lease expiry of the very claim that took it), as in `flow.lua`; a claim of an id whose
//! older claim still runs (it was scheduled again) parks until that run ends.

use std::collections::{BTreeSet, HashMap};
use std::ops::Bound;
use std::sync::Arc;

use super::{PartitionState, Place};
use crate::flow::{FlowLimits, HeldKey};
use crate::model::TaskId;

/// What a claim does with a due task of a key.
enum Admission {
    /// It runs (holding a slot of its key): the key's slots held after it.
    Run(u32),
    /// It waits for a slot: parked until a release.
    Park,
    /// It waits in the pending index until this time (its key's rate).
    WaitUntil(u64),
}

/// The flow-key state of one partition.
#[derive(Debug, Default)]
pub(super) struct FlowState {
    running: HashMap<Arc<str>, u32>,
    waiting_holds: HashMap<TaskId, u64>,
    /// Whether the latest claim kept FIFO order (what a failed attempt's slot does).
    fifo: bool,
    parked: BTreeSet<(Arc<str>, u64, TaskId)>,
    parked_per_key: HashMap<Arc<str>, u64>,
    representatives: HashMap<Arc<str>, TaskId>,
    fires: BTreeSet<(Arc<str>, u64, u64)>,
    fires_by_time: BTreeSet<(u64, Arc<str>, u64)>,
    fire_sequence: u64,
}

impl FlowState {
    /// The parked entries of `key`, in order.
    fn parked_of<'a>(&'a self, key: &'a str) -> impl Iterator<Item = (u64, &'a TaskId)> + 'a {
        let start: Arc<str> = Arc::from(key);
        self.parked
            .range((Bound::Included((start, 0, min_id())), Bound::Unbounded))
            .take_while(move |(k, _, _)| &**k == key)
            .map(|(_, at, id)| (*at, id))
    }

    /// Forgets fires older than `since` (exclusive).
    fn forget_fires_before(&mut self, since: u64) {
        while let Some((at, _, _)) = self.fires_by_time.first() {
            if *at >= since {
                break;
            }
            if let Some((at, key, seq)) = self.fires_by_time.pop_first() {
                self.fires.remove(&(key, at, seq));
            }
        }
    }

    /// The fire times of `key` at or after `since`, oldest first.
    fn fires_since(&self, key: &Arc<str>, since: u64) -> Vec<u64> {
        self.fires
            .range((Bound::Included((key.clone(), since, 0)), Bound::Unbounded))
            .take_while(|(k, _, _)| k == key)
            .map(|(_, at, _)| *at)
            .collect()
    }
}

/// The smallest id, as a range bound.
fn min_id() -> TaskId {
    // An id is at least one byte and holds no NUL: "\u{1}" sorts before every id but NUL-led
    // ones, which cannot exist.
    TaskId::new("\u{1}").unwrap_or_else(|_| unreachable!("a one-byte id without NUL is valid"))
}

impl PartitionState {
    /// Whether a due task (its record's `generation`) may run now under `limits`; counts its
    /// slot and its fire when it may.
    fn admit(
        &mut self,
        id: &TaskId,
        key: &str,
        generation: u64,
        now_ms: u64,
        limits: &FlowLimits,
    ) -> Admission {
        if self.superseded.contains_key(id) {
            // An older claim of this id still runs (it was scheduled again): this one waits.
            return Admission::Park;
        }
        let flow = &mut self.flow;
        flow.fifo = limits.fifo;
        let holding = limits.fifo && flow.waiting_holds.get(id) == Some(&generation);
        let key: Arc<str> = match flow.running.get_key_value(key) {
            Some((key, _)) => key.clone(),
            None => Arc::from(key),
        };
        let held = flow.running.get(&key).copied().unwrap_or(0);
        if !holding && limits.slots().is_some_and(|slots| held >= slots) {
            return Admission::Park;
        }
        if let Some(rate) = limits.rate {
            let since = now_ms.saturating_sub(rate.period_ms.saturating_sub(1));
            let fires = flow.fires_since(&key, since);
            if fires.len() >= rate.limit as usize {
                // Free again when enough of the period's fires have left it.
                let free_at = fires[fires.len() - rate.limit as usize] + rate.period_ms;
                return match flow.representatives.get(&key) {
                    Some(other) if other != id => Admission::Park,
                    _ => {
                        flow.representatives.insert(key, id.clone());
                        Admission::WaitUntil(free_at)
                    }
                };
            }
            flow.fire_sequence += 1;
            let seq = flow.fire_sequence;
            flow.fires.insert((key.clone(), now_ms, seq));
            flow.fires_by_time.insert((now_ms, key.clone(), seq));
            if flow.representatives.get(&key) == Some(id) {
                flow.representatives.remove(&key);
            }
        }
        if holding {
            // Its slot, held while it waited, is now that of a task in flight.
            flow.waiting_holds.remove(id);
            return Admission::Run(held);
        }
        flow.running.insert(key, held + 1);
        Admission::Run(held + 1)
    }

    /// Decides what a claim does with the due task `id` of flow key `key`, pending at
    /// `at_ms` (already out of the pending index): `Some(slots held)` when it runs;
    /// otherwise it was parked or put back to wait for its key's rate.
    pub(super) fn admit_due(
        &mut self,
        id: &TaskId,
        key: &str,
        at_ms: u64,
        now_ms: u64,
        limits: &FlowLimits,
    ) -> Option<u32> {
        let generation = self.tasks.get(id).map(|record| record.generation)?;
        if let Some(rate) = limits.rate {
            self.flow
                .forget_fires_before(now_ms.saturating_sub(rate.period_ms.saturating_sub(1)));
        }
        match self.admit(id, key, generation, now_ms, limits) {
            Admission::Run(held) => Some(held),
            Admission::Park => {
                if self.flow.representatives.get(key) == Some(id) {
                    self.flow.representatives.remove(key);
                }
                self.park(id, key, at_ms);
                None
            }
            Admission::WaitUntil(free_at) => {
                if let Some(record) = self.tasks.get_mut(id) {
                    record.place = Place::Pending { at_ms: free_at };
                }
                self.due.insert(free_at, id.clone());
                None
            }
        }
    }

    /// Parks `id` (out of the pending index already) behind its key.
    fn park(&mut self, id: &TaskId, key: &str, at_ms: u64) {
        let key: Arc<str> = Arc::from(key);
        *self.flow.parked_per_key.entry(key.clone()).or_insert(0) += 1;
        self.flow.parked.insert((key, at_ms, id.clone()));
        if let Some(record) = self.tasks.get_mut(id) {
            record.place = Place::Pending { at_ms };
        }
    }

    /// Takes `id`, pending at `at_ms`, out of the parked set if it is there (a cancel, a new
    /// schedule, a delete); a key's representative that leaves passes the turn on.
    pub(super) fn unpark_removed(&mut self, id: &TaskId, at_ms: u64) {
        let Some(key) = id.flow_key() else {
            return;
        };
        let key: Arc<str> = Arc::from(key);
        if self.flow.parked.remove(&(key.clone(), at_ms, id.clone())) {
            self.count_unparked(&key);
        }
        if self.flow.representatives.get(&key) == Some(id) {
            self.flow.representatives.remove(&key);
            self.unpark_next(&key, 1);
        }
    }

    fn count_unparked(&mut self, key: &Arc<str>) {
        if let Some(count) = self.flow.parked_per_key.get_mut(key) {
            *count -= 1;
            if *count == 0 {
                self.flow.parked_per_key.remove(key);
            }
        }
    }

    /// Takes up to `count` of `key`'s earliest parked tasks out of the parked set, with the
    /// times they were parked with.
    fn take_parked(&mut self, key: &str, count: u32) -> Vec<(u64, TaskId)> {
        let next: Vec<(u64, TaskId)> = self
            .flow
            .parked_of(key)
            .take(count as usize)
            .map(|(at, id)| (at, id.clone()))
            .collect();
        let key: Arc<str> = Arc::from(key);
        for (at, id) in &next {
            self.flow.parked.remove(&(key.clone(), *at, id.clone()));
            self.count_unparked(&key);
        }
        next
    }

    /// Moves up to `count` of `key`'s earliest parked tasks back to the pending index, at
    /// the times they were parked with.
    fn unpark_next(&mut self, key: &str, count: u32) {
        for (at, id) in self.take_parked(key, count) {
            self.due.insert(at, id);
        }
    }

    /// After a claim of a task of `key` that left it `held` slots: when the key has free
    /// slots and parked tasks (its limit was raised, or its rate allows another fire), as
    /// many of them are taken out of the parked set, for the claim to put back to pending
    /// once it is done (as Redis adds them after its removal by rank: the next claim sees
    /// them).
    pub(super) fn unpark_spare(
        &mut self,
        key: &str,
        held: u32,
        limits: &FlowLimits,
    ) -> Vec<(u64, TaskId)> {
        if !self.flow.parked_per_key.contains_key(key)
            || self.flow.representatives.contains_key(key)
        {
            return Vec::new();
        }
        let spare = limits.slots().map_or(1, |slots| slots.saturating_sub(held));
        if spare == 0 {
            return Vec::new();
        }
        self.take_parked(key, spare)
    }

    /// Gives back the slot of `id`'s key (one end of one claim, or of a FIFO hold), and
    /// lets the key's next parked task go back to pending (unless the key waits for its
    /// rate: then its representative leads).
    pub(super) fn release(&mut self, id: &TaskId) {
        let Some(key) = id.flow_key() else {
            return;
        };
        if let Some(running) = self.flow.running.get_mut(key) {
            *running = running.saturating_sub(1);
            if *running == 0 {
                self.flow.running.remove(key);
            }
        }
        if !self.flow.representatives.contains_key(key) {
            let key = key.to_owned();
            self.unpark_next(&key, 1);
        }
    }

    /// An attempt of `id` (of `generation`) ended, waiting for its retry or requeued: with
    /// FIFO order its slot stays held (so that its next claim takes no other), otherwise it
    /// is given back.
    pub(super) fn release_for_retry(&mut self, id: &TaskId, generation: u64) {
        if id.flow_key().is_none() {
            return;
        }
        if self.flow.fifo {
            self.flow.waiting_holds.insert(id.clone(), generation);
        } else {
            self.release(id);
        }
    }

    /// A pending task leaves (cancelled, or replaced by a new schedule): a FIFO slot it
    /// holds while waiting is given back.
    pub(super) fn release_waiting(&mut self, id: &TaskId) {
        if self.flow.waiting_holds.remove(id).is_some() {
            self.release(id);
        }
    }

    /// The number of parked tasks.
    pub(super) fn parked_count(&self) -> u64 {
        self.flow.parked.len() as u64
    }

    /// Keys holding tasks back, the most waiting first.
    pub(in crate::memory) fn held_keys(&self, limit: usize) -> Vec<HeldKey> {
        let mut keys: Vec<HeldKey> = self
            .flow
            .parked_per_key
            .iter()
            .map(|(key, waiting)| HeldKey {
                key: key.to_string(),
                running: u64::from(self.flow.running.get(key).copied().unwrap_or(0)),
                waiting: *waiting,
                // The first parked entry: the earliest pending time (its due, or the time of
                // its retry), read without a scan of the key's tasks.
                oldest_due_ms: self.flow.parked_of(key).next().map_or(0, |(at, _)| at),
            })
            .collect();
        keys.sort_by(|a, b| b.waiting.cmp(&a.waiting).then_with(|| a.key.cmp(&b.key)));
        keys.truncate(limit);
        keys
    }

    /// The look's repair: a key with parked tasks, no hold and no representative would wait
    /// for a release that never comes (a limit lowered, a hold ended by a path without a
    /// release): its next task goes back to pending.
    pub(super) fn repair_stuck_keys(&mut self) {
        let stuck: Vec<Arc<str>> = self
            .flow
            .parked_per_key
            .keys()
            .filter(|key| {
                !self.flow.running.contains_key(*key)
                    && !self.flow.representatives.contains_key(*key)
            })
            .take(16)
            .cloned()
            .collect();
        for key in stuck {
            self.unpark_next(&key, 1);
        }
    }
}
