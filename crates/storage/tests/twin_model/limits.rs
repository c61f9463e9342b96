//! The per-key limits checked from outside (issue 27): the runner's own account of which
//! tasks hold a slot of their flow key, kept from the answers of the operations (the real
//! store's, which the memory store's must equal), and the bounds every claim must keep.
//!
//! # The account
//! Following the rules of `src/flow.rs`, a claimed task of a key **holds** one of the key's
//! slots from its claim until its run ends: its handler reports (`ack`, or `fail` with any
//! outcome but a lost lease), or a sweep takes its lease out of flight. With FIFO order the
//! hold lasts through a retry's wait (a `fail` that retries, a sweep that requeues) until the
//! task is claimed again, cancelled or replaced by a new schedule. A run that was superseded
//! (its id scheduled again, or cancelled while it ran) keeps its hold until it ends.
//!
//! To know which runs a sweep ended (it answers only with the ids it put back, not with the
//! superseded or cancelled runs it dropped), the account keeps each partition's in-flight
//! index: one entry per id (its latest claim's lease), in `(deadline, id)` order, so a sweep
//! of `limit` takes the first `limit` entries whose deadline has passed. The ids a sweep puts
//! back must be among those, in that order; otherwise the account is out of step with the
//! stores, which is reported as well.
//!
//! # The bounds
//! - A claim of a keyed task that takes a new hold finds fewer holds of its key than the
//!   key's slots (`concurrency`, or 1 with FIFO order).
//! - With FIFO order, a claim of a keyed task finds no other task of its key holding: none in
//!   flight, none waiting for a retry (dead letters hold nothing).
//! - With a rate of `limit` per `period_ms`, the claims of one key at `now` and the claims of
//!   that key in the `period_ms - 1` ms before it are at most `limit` (a sliding period,
//!   counted by the claim's `now`).
//! - A new generation of an id is not claimed while an older run of the id holds its slot.

use std::collections::{BTreeMap, HashMap};

use delayq_storage::{flow_key_of, FlowLimits, HeldKey, Partition, QueueName, TaskId};

/// Where a held slot is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum HoldState {
    /// The run of this lease (an index into the runner's leases) holds it.
    Running { lease: usize },
    /// FIFO order: the task waits for a retry (or a requeue after a lost lease) and keeps
    /// its key's slot.
    AwaitingRetry,
}

/// A task's hold on a slot of its key.
#[derive(Clone, Debug)]
struct Hold {
    key: String,
    generation: u64,
    state: HoldState,
}

/// How a handler's report ended its run, as the store answered.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Report {
    /// `ack` completed it.
    Completed,
    /// `fail` scheduled a retry (or a requeue).
    Retrying,
    /// `fail` dead-lettered it.
    DeadLettered,
    /// `ack` or `fail` found it superseded (scheduled again or cancelled while it ran).
    Superseded,
    /// The token had lost its lease: nothing changed.
    Stale,
}

/// The account of one case on queues with flow keys, and the bounds it broke.
pub struct KeyLimits {
    limits: FlowLimits,
    /// The holds, by queue and id (an id holds at most one slot, as in the stores).
    holds: HashMap<(QueueName, TaskId), Hold>,
    /// Per partition, the in-flight index: id -> (lease deadline, lease).
    inflight: HashMap<Partition, BTreeMap<TaskId, (u64, usize)>>,
    /// Per queue and key, the `now` of each claim of the key (rate).
    fires: HashMap<(QueueName, String), Vec<u64>>,
    /// The bounds broken, and where the account lost step.
    pub violations: Vec<String>,
}

impl KeyLimits {
    /// An empty account for claims under `limits`.
    pub fn new(limits: FlowLimits) -> Self {
        KeyLimits {
            limits,
            holds: HashMap::new(),
            inflight: HashMap::new(),
            fires: HashMap::new(),
            violations: Vec::new(),
        }
    }

    /// The flow key the claims limit for `id`, if any.
    fn key_of<'a>(&self, id: &'a TaskId) -> Option<&'a str> {
        flow_key_of(id.as_str()).filter(|_| !self.limits.is_unlimited())
    }

    /// The ids of `queue` holding a slot of `key`, sorted.
    fn holders(&self, queue: &QueueName, key: &str) -> Vec<String> {
        let mut holders: Vec<String> = self
            .holds
            .iter()
            .filter(|((q, _), hold)| q == queue && hold.key == key)
            .map(|((_, id), hold)| format!("{id} ({:?})", hold.state))
            .collect();
        holders.sort();
        holders
    }

    /// A claim (operation `op`, at `now_ms`) handed out `id` of `generation` under `lease`
    /// (the runner's lease index), with a lease until `deadline_ms`.
    #[allow(clippy::too_many_arguments)]
    pub fn claimed(
        &mut self,
        op: &str,
        partition: &Partition,
        id: &TaskId,
        generation: u64,
        lease: usize,
        deadline_ms: u64,
        now_ms: u64,
    ) {
        self.inflight
            .entry(partition.clone())
            .or_default()
            .insert(id.clone(), (deadline_ms, lease));
        let Some(key) = self.key_of(id) else {
            return;
        };
        let queue = &partition.queue;
        let slot = (queue.clone(), id.clone());
        match self.holds.get(&slot) {
            Some(hold)
                if hold.generation == generation && hold.state == HoldState::AwaitingRetry =>
            {
                // FIFO: the retry takes the slot its task kept.
            }
            Some(hold) => {
                let message = if hold.generation == generation {
                    format!("{op}: {partition} {id} claimed while its own earlier run still holds a slot of key {key}")
                } else {
                    format!(
                        "{op}: {partition} {id} (generation {generation}) claimed while an older run \
                         of it (generation {}) holds a slot of key {key}",
                        hold.generation
                    )
                };
                self.violations.push(message);
            }
            None => {
                let holders = self.holders(queue, key);
                if self.limits.fifo && !holders.is_empty() {
                    self.violations.push(format!(
                        "{op}: FIFO broken: {partition} {id} of key {key} claimed while other \
                         tasks of the key hold it: {}",
                        holders.join(", ")
                    ));
                } else if let Some(slots) = self.limits.slots() {
                    if holders.len() >= slots as usize {
                        self.violations.push(format!(
                            "{op}: concurrency broken: {partition} {id} of key {key} claimed while \
                             {} tasks of the key hold its {slots} slots: {}",
                            holders.len(),
                            holders.join(", ")
                        ));
                    }
                }
            }
        }
        self.holds.insert(
            slot,
            Hold {
                key: key.to_owned(),
                generation,
                state: HoldState::Running { lease },
            },
        );
        if let Some(rate) = self.limits.rate {
            let fires = self
                .fires
                .entry((queue.clone(), key.to_owned()))
                .or_default();
            fires.retain(|&at| at + rate.period_ms > now_ms);
            if fires.len() >= rate.limit as usize {
                self.violations.push(format!(
                    "{op}: rate broken: {partition} {id} of key {key} claimed at {now_ms} after \
                     {} claims of the key within {} ms (at {fires:?}), limit {}",
                    fires.len(),
                    rate.period_ms,
                    rate.limit
                ));
            }
            fires.push(now_ms);
        }
    }

    /// Ends the hold of the run of `lease` on `id`, if it still has one: with FIFO order and
    /// `retry`, the hold waits for the retry instead.
    fn end_run(&mut self, queue: &QueueName, id: &TaskId, lease: usize, retry: bool) {
        let slot = (queue.clone(), id.clone());
        let Some(hold) = self.holds.get_mut(&slot) else {
            return;
        };
        if hold.state != (HoldState::Running { lease }) {
            return;
        }
        if retry && self.limits.fifo {
            hold.state = HoldState::AwaitingRetry;
        } else {
            self.holds.remove(&slot);
        }
    }

    /// The handler of `lease` (on `id` in `partition`) reported, as the store answered.
    pub fn reported(&mut self, partition: &Partition, id: &TaskId, lease: usize, report: Report) {
        if report == Report::Stale {
            return;
        }
        if let Some(index) = self.inflight.get_mut(partition) {
            if index.get(id).is_some_and(|&(_, held)| held == lease) {
                index.remove(id);
            }
        }
        self.end_run(&partition.queue, id, lease, report == Report::Retrying);
    }

    /// The lease `lease` of `id` was renewed until `deadline_ms`.
    pub fn renewed(&mut self, partition: &Partition, id: &TaskId, lease: usize, deadline_ms: u64) {
        if let Some(entry) = self
            .inflight
            .get_mut(partition)
            .and_then(|index| index.get_mut(id))
        {
            if entry.1 == lease {
                entry.0 = deadline_ms;
            }
        }
    }

    /// A sweep of `partition` at `now_ms` (up to `limit` leases) put `requeued` back.
    pub fn swept(
        &mut self,
        op: &str,
        partition: &Partition,
        now_ms: u64,
        limit: usize,
        requeued: &[TaskId],
    ) {
        let index = self.inflight.entry(partition.clone()).or_default();
        let mut lapsed: Vec<(u64, TaskId, usize)> = index
            .iter()
            .filter(|(_, &(deadline, _))| deadline < now_ms)
            .map(|(id, &(deadline, lease))| (deadline, id.clone(), lease))
            .collect();
        lapsed.sort();
        lapsed.truncate(limit);
        for (_, id, _) in &lapsed {
            index.remove(id);
        }
        let expected: Vec<&TaskId> = lapsed.iter().map(|(_, id, _)| id).collect();
        let mut rest = expected.iter();
        if !requeued
            .iter()
            .all(|id| rest.by_ref().any(|candidate| *candidate == id))
        {
            self.violations.push(format!(
                "{op}: the account lost step: the sweep of {partition} put back {requeued:?}, \
                 expected some of {expected:?} in that order"
            ));
        }
        for (_, id, lease) in lapsed {
            let retry = requeued.contains(&id);
            self.end_run(&partition.queue, &id, lease, retry);
        }
    }

    /// `cancel` removed `id` (pending or dead), with any in-flight entry of an older run:
    /// the stores give that run's slot back then (its handler's later report finds no entry
    /// and gives back nothing), so the account ends its hold too.
    pub fn cancelled(&mut self, partition: &Partition, id: &TaskId) {
        let dropped = self
            .inflight
            .get_mut(partition)
            .and_then(|index| index.remove(id));
        self.end_waiting(&partition.queue, id);
        if let Some((_, lease)) = dropped {
            let slot = (partition.queue.clone(), id.clone());
            if self
                .holds
                .get(&slot)
                .is_some_and(|hold| hold.state == HoldState::Running { lease })
            {
                self.holds.remove(&slot);
            }
        }
    }

    /// A new schedule replaced `id`: a task waiting for its retry gives its slot back (a
    /// running one keeps it until it ends).
    pub fn replaced(&mut self, partition: &Partition, id: &TaskId) {
        self.end_waiting(&partition.queue, id);
    }

    fn end_waiting(&mut self, queue: &QueueName, id: &TaskId) {
        let slot = (queue.clone(), id.clone());
        if self
            .holds
            .get(&slot)
            .is_some_and(|hold| hold.state == HoldState::AwaitingRetry)
        {
            self.holds.remove(&slot);
        }
    }

    /// Checks what a store lists as `partition`'s held keys against the account: each key's
    /// holds (`running`). `when` says where in the case.
    pub fn compare_held(&mut self, when: &str, partition: &Partition, held: &[HeldKey]) {
        for key in held {
            let holders = self.holders(&partition.queue, &key.key);
            if holders.len() as u64 != key.running {
                self.violations.push(format!(
                    "{when}: {partition} lists key {} with {} holds, the account has {}: {}",
                    key.key,
                    key.running,
                    holders.len(),
                    holders.join(", ")
                ));
            }
        }
    }

    /// The holds still in the account, described.
    pub fn remaining(&self) -> Vec<String> {
        let mut left: Vec<String> = self
            .holds
            .iter()
            .map(|((queue, id), hold)| {
                format!("{queue} {id} holds key {} ({:?})", hold.key, hold.state)
            })
            .collect();
        left.sort();
        left
    }
}
